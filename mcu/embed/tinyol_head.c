/* tinyol_head.c - tinyol.h over TinyOL's one-layer head (tol_learner.h): the
 * learner configuration from the export (tinyol_learner_config, which the protocol
 * firmware's mcu/app/learner_head.c uses too) and the tinyol_* calls over backbone +
 * head. The learn result comes from the learner (tol_learner_*_result). */
#include "tinyol.h"

#include <string.h>

#include "backbone.h"
#include "tol_cpu.h"

extern const float tol_head_init_weight[];
extern const float tol_head_init_bias[];

void tinyol_learner_config(tol_learner_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->head_kind = (uint8_t)TOL_HEAD_MODE;
    cfg->replay_bits = (uint8_t)TOL_REPLAY_BITS;
    cfg->replay_policy = (uint8_t)TOL_REPLAY_POLICY;
    cfg->latent_dim = (uint16_t)TOL_LATENT_DIM;
    cfg->n_outputs = (uint16_t)TINYOL_OUTPUTS;
    cfg->init_classes = (uint16_t)TOL_HEAD_INIT_CLASSES;
    cfg->replay_capacity = (uint16_t)TOL_REPLAY_CAPACITY;
    cfg->max_new = (uint16_t)TOL_REPLAY_N_NEW;
    cfg->max_old = (uint16_t)TINYOL_MAX_OLD;
    cfg->no_momentum = (uint8_t)!TOL_HAS_MOMENTUM;
    cfg->init_weight = tol_head_init_weight;
    cfg->init_bias = tol_head_init_bias;
    cfg->latent_scale = TOL_LATENT_SCALE;
    cfg->latent_zero_point = TOL_LATENT_ZERO_POINT;
    cfg->target_scale = TOL_INPUT_SCALE;
    cfg->target_zero_point = TOL_INPUT_ZERO_POINT;
    cfg->seed = TOL_SEED;
    cfg->replay_codec = TOL_REPLAY_CODEC;
    tinyol_settings(&cfg->settings);
}

/* ---- the library API over backbone + head (tinyol.h) ------------------------------ */

tol_status_t tinyol_init_split(tinyol_t *t, uint8_t *mem, size_t mem_bytes, uint8_t *replay_mem,
                               size_t replay_bytes)
{
    TOL_CHECK(t != NULL && mem != NULL, TOL_ERR_ARG);
    TOL_CHECK(replay_mem != NULL || replay_bytes == 0u, TOL_ERR_ARG);
    memset(t, 0, sizeof(*t));
    tol_cpu_selftest(); /* the core's instructions against the architecture: kernel paths (tol_cpu.h) */
    tol_learner_config_t cfg;
    tinyol_learner_config(&cfg);
    cfg.replay_mem = replay_mem; /* NULL: the buffer inside mem */
    cfg.replay_mem_bytes = replay_bytes;
    return tol_learner_init(&t->learner, mem, mem_bytes, &cfg);
}

tol_status_t tinyol_init(tinyol_t *t, uint8_t *mem, size_t mem_bytes)
{
    return tinyol_init_split(t, mem, mem_bytes, NULL, 0u);
}

tol_status_t tinyol_predict(tinyol_t *t, const int8_t *input, int32_t *label, float *confidence)
{
    TOL_CHECK(t != NULL && input != NULL && label != NULL, TOL_ERR_ARG);
    TOL_CHECK(TOL_HEAD_MODE == 0, TOL_ERR_UNSUPPORTED);
    t->has_latent = false;
    TOL_TRY(tol_backbone_invoke(input, t->latent));
    TOL_TRY(tol_learner_predict_result(&t->learner, t->latent, &t->last));
    *label = t->last.prediction;
    if (confidence != NULL) *confidence = t->last.probability;
    t->has_latent = true;
    return TOL_OK;
}

tol_status_t tinyol_learn(tinyol_t *t, uint16_t label, tinyol_result_t *result)
{
    TOL_CHECK(t != NULL && t->has_latent, TOL_ERR_ARG);
    TOL_CHECK(label < (uint16_t)TOL_HEAD_MAX_CLASSES, TOL_ERR_LABEL);
    t->has_latent = false; /* each predicted sample is learned at most once */
    const tol_status_t st = tol_learner_learn_result(&t->learner, t->latent, label, &t->last);
    if (result != NULL) *result = t->last;
    return st;
}

tol_status_t tinyol_learn_sample(tinyol_t *t, const int8_t *input, uint16_t label, tinyol_result_t *result)
{
    TOL_CHECK(t != NULL && input != NULL, TOL_ERR_ARG);
    TOL_CHECK(TOL_HEAD_MODE == 0, TOL_ERR_UNSUPPORTED);
    TOL_CHECK(label < (uint16_t)TOL_HEAD_MAX_CLASSES, TOL_ERR_LABEL);
    t->has_latent = false;
    TOL_TRY(tol_backbone_invoke(input, t->latent));
    if (result == NULL) return tol_learner_learn(&t->learner, t->latent, label);
    TOL_TRY(tol_learner_predict_result(&t->learner, t->latent, result));
    return tol_learner_learn_result(&t->learner, t->latent, label, result);
}

tol_status_t tinyol_anomaly(tinyol_t *t, const int8_t *input, bool learn, float *score, bool *is_anomaly)
{
    TOL_CHECK(t != NULL && input != NULL, TOL_ERR_ARG);
    TOL_CHECK(TOL_HEAD_MODE == 1, TOL_ERR_UNSUPPORTED);
    t->has_latent = false;
    TOL_TRY(tol_backbone_invoke(input, t->latent));
    TOL_TRY(tol_learner_anomaly_result(&t->learner, t->latent, input, learn, &t->last));
    if (score != NULL) *score = t->last.probability;
    if (is_anomaly != NULL) *is_anomaly = t->last.anomaly;
    return TOL_OK;
}

void tinyol_reset(tinyol_t *t)
{
    tol_learner_reset(&t->learner);
    t->has_latent = false;
}

void tinyol_stats(const tinyol_t *t, tol_learner_stats_t *st)
{
    tol_learner_get_stats(&t->learner, st);
}
