/* tinyol_stage.c - tinyol.h over the adaptive stage (tol_stage.h) of a model exported with
 * an early --split (its config.h defines TOL_STAGE_LAYERS, its directory has stage_init.c):
 * the stage configuration from the export (tinyol_stage_config, which the protocol
 * firmware's mcu/app/learner_stage.c uses too) and the tinyol_stage_* calls over backbone +
 * stage. The learn result comes from the stage (tol_stage_*_result). For a model without a
 * stage this file compiles to nothing, so every build may list all of mcu/embed. */
#include "tinyol.h"

#if defined(TOL_STAGE_LAYERS)

#include <string.h>

#include "backbone.h"

_Static_assert(TOL_HEAD_MODE == 0, "an adaptive stage needs a classifier head");
_Static_assert(TOL_STAGE_LAYERS >= 1 && TOL_STAGE_LAYERS <= TOL_STAGE_MAX_LAYERS, "stage layers");

extern const tol_stage_layer_t tol_stage_layers[TOL_STAGE_LAYERS];
extern const float tol_stage_init_params[TOL_STAGE_PARAMS];

void tinyol_stage_config(tol_stage_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->layers = tol_stage_layers;
    cfg->n_layers = (uint8_t)TOL_STAGE_LAYERS;
    cfg->replay_bits = (uint8_t)TOL_REPLAY_BITS;
    cfg->replay_policy = (uint8_t)TOL_REPLAY_POLICY;
    cfg->no_momentum = (uint8_t)(TOL_MOMENTUM == 0.0f ? 1u : 0u); /* as the exporter's memory model */
    cfg->init_params = tol_stage_init_params;
    cfg->init_classes = (uint16_t)TOL_HEAD_INIT_CLASSES;
    cfg->replay_capacity = (uint16_t)TOL_REPLAY_CAPACITY;
    cfg->max_new = (uint16_t)TOL_REPLAY_N_NEW;
    cfg->latent_scale = TOL_LATENT_SCALE;
    cfg->latent_zero_point = TOL_LATENT_ZERO_POINT;
    cfg->seed = TOL_SEED;
    cfg->replay_codec = TOL_REPLAY_CODEC;
#if defined(TOL_STAGE_LR_SCALE)
    cfg->stage_lr_scale = TOL_STAGE_LR_SCALE;
#endif
    tinyol_settings(&cfg->settings);
}

tol_status_t tinyol_stage_init(tinyol_stage_t *t, uint8_t *mem, size_t mem_bytes)
{
    TOL_CHECK(t != NULL && mem != NULL, TOL_ERR_ARG);
    memset(t, 0, sizeof(*t));
    tol_stage_config_t cfg;
    tinyol_stage_config(&cfg);
    return tol_stage_init(&t->stage, mem, mem_bytes, &cfg);
}

tol_status_t tinyol_stage_predict(tinyol_stage_t *t, const int8_t *input, int32_t *label, float *confidence)
{
    TOL_CHECK(t != NULL && input != NULL && label != NULL, TOL_ERR_ARG);
    t->has_latent = false;
    TOL_TRY(tol_backbone_invoke(input, t->latent));
    TOL_TRY(tol_stage_predict_result(&t->stage, t->latent, &t->last));
    *label = t->last.prediction;
    if (confidence != NULL) *confidence = t->last.probability;
    t->has_latent = true;
    return TOL_OK;
}

tol_status_t tinyol_stage_learn(tinyol_stage_t *t, uint16_t label, tinyol_result_t *result)
{
    TOL_CHECK(t != NULL && t->has_latent, TOL_ERR_ARG);
    TOL_CHECK(label < (uint16_t)TOL_HEAD_MAX_CLASSES, TOL_ERR_LABEL);
    t->has_latent = false; /* each predicted sample is learned at most once */
    const tol_status_t st = tol_stage_learn_result(&t->stage, t->latent, label, &t->last);
    if (result != NULL) *result = t->last;
    return st;
}

tol_status_t tinyol_stage_learn_sample(tinyol_stage_t *t, const int8_t *input, uint16_t label,
                                       tinyol_result_t *result)
{
    TOL_CHECK(t != NULL && input != NULL, TOL_ERR_ARG);
    TOL_CHECK(label < (uint16_t)TOL_HEAD_MAX_CLASSES, TOL_ERR_LABEL);
    t->has_latent = false;
    TOL_TRY(tol_backbone_invoke(input, t->latent));
    if (result == NULL) return tol_stage_learn(&t->stage, t->latent, label);
    TOL_TRY(tol_stage_predict_result(&t->stage, t->latent, result));
    return tol_stage_learn_result(&t->stage, t->latent, label, result);
}

void tinyol_stage_reset(tinyol_stage_t *t)
{
    tol_stage_reset(&t->stage);
    t->has_latent = false;
}

void tinyol_stage_stats(const tinyol_stage_t *t, tol_learner_stats_t *st)
{
    tol_stage_get_stats(&t->stage, st);
}

#endif /* TOL_STAGE_LAYERS */
