/* tinyol.c - the library API over backbone + learner (see tinyol.h). */
#include "tinyol.h"

#include <math.h>
#include <string.h>

#include "backbone.h"

#ifndef TOL_REPLAY_POLICY
#define TOL_REPLAY_POLICY TOL_REPLAY_RESERVOIR
#endif

_Static_assert(TOL_BACKBONE_INPUT_SIZE == TOL_INPUT_SIZE, "backbone.h and config.h disagree on the input");
_Static_assert(TOL_BACKBONE_LATENT_SIZE == TOL_LATENT_DIM, "backbone.h and config.h disagree on the latent");

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
    tol_learner_settings_default(&cfg->settings);
    cfg->settings.lr = TOL_LR;
    cfg->settings.momentum = TOL_MOMENTUM;
    cfg->settings.weight_decay = TOL_WEIGHT_DECAY;
    cfg->settings.n_new = (uint16_t)TOL_REPLAY_N_NEW;
    cfg->settings.n_old = (uint16_t)TOL_REPLAY_N_OLD;
    cfg->settings.mode = (uint8_t)(TOL_REPLAY_CAPACITY > 0 ? TOL_LEARN_REPLAY : TOL_LEARN_SGD);
}

tol_status_t tinyol_init(tinyol_t *t, uint8_t *mem, size_t mem_bytes)
{
    TOL_CHECK(t != NULL && mem != NULL, TOL_ERR_ARG);
    memset(t, 0, sizeof(*t));
    tol_learner_config_t cfg;
    tinyol_learner_config(&cfg);
    return tol_learner_init(&t->learner, mem, mem_bytes, &cfg);
}

tol_status_t tinyol_quantize(const float *x, int8_t *q)
{
    TOL_CHECK(x != NULL && q != NULL, TOL_ERR_ARG);
    for (size_t i = 0; i < TINYOL_INPUT_SIZE; i++) TOL_CHECK(isfinite(x[i]), TOL_ERR_NONFINITE);
    for (size_t i = 0; i < TINYOL_INPUT_SIZE; i++) {
        float v = roundf(x[i] / TOL_INPUT_SCALE) + (float)TOL_INPUT_ZERO_POINT; /* half away from zero */
        v = v < -128.0f ? -128.0f : (v > 127.0f ? 127.0f : v);
        q[i] = (int8_t)v;
    }
    return TOL_OK;
}

tol_status_t tinyol_predict(tinyol_t *t, const int8_t *input, int32_t *label, float *confidence)
{
    TOL_CHECK(t != NULL && input != NULL && label != NULL, TOL_ERR_ARG);
    TOL_CHECK(TOL_HEAD_MODE == 0, TOL_ERR_UNSUPPORTED);
    t->has_latent = false;
    TOL_TRY(tol_backbone_invoke(input, t->latent));
    float conf = 0.0f;
    TOL_TRY(tol_learner_predict(&t->learner, t->latent, label, &conf));
    if (confidence != NULL) *confidence = conf;
    t->has_latent = true;
    return TOL_OK;
}

tol_status_t tinyol_learn(tinyol_t *t, uint16_t label)
{
    TOL_CHECK(t != NULL && t->has_latent, TOL_ERR_ARG);
    TOL_CHECK(label < (uint16_t)TOL_HEAD_MAX_CLASSES, TOL_ERR_LABEL);
    t->has_latent = false; /* each predicted sample is learned at most once */
    return tol_learner_learn(&t->learner, t->latent, label);
}

tol_status_t tinyol_learn_sample(tinyol_t *t, const int8_t *input, uint16_t label)
{
    TOL_CHECK(t != NULL && input != NULL, TOL_ERR_ARG);
    TOL_CHECK(TOL_HEAD_MODE == 0, TOL_ERR_UNSUPPORTED);
    TOL_CHECK(label < (uint16_t)TOL_HEAD_MAX_CLASSES, TOL_ERR_LABEL);
    t->has_latent = false;
    TOL_TRY(tol_backbone_invoke(input, t->latent));
    return tol_learner_learn(&t->learner, t->latent, label);
}

tol_status_t tinyol_anomaly(tinyol_t *t, const int8_t *input, bool learn, float *score, bool *is_anomaly)
{
    TOL_CHECK(t != NULL && input != NULL, TOL_ERR_ARG);
    TOL_CHECK(TOL_HEAD_MODE == 1, TOL_ERR_UNSUPPORTED);
    t->has_latent = false;
    TOL_TRY(tol_backbone_invoke(input, t->latent));
    uint8_t flag = 0u;
    float s = 0.0f;
    TOL_TRY(learn ? tol_learner_anomaly(&t->learner, t->latent, input, &s, &flag)
                  : tol_learner_score(&t->learner, t->latent, input, &s, &flag));
    if (score != NULL) *score = s;
    if (is_anomaly != NULL) *is_anomaly = flag != 0u;
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
