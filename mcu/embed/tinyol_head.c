/* tinyol_head.c - tinyol.h over TinyOL's one-layer head (tol_learner.h): the
 * learner configuration from the export, predict / learn / anomaly with their
 * results. The protocol firmware's mcu/app/learner_head.c calls the same
 * functions (tinyol_learner_config, tinyol_head_*). */
#include "tinyol.h"

#include <string.h>

#include "backbone.h"

#ifndef TOL_REPLAY_POLICY /* exports before --replay-policy: reservoir */
#define TOL_REPLAY_POLICY TOL_REPLAY_RESERVOIR
#endif
#ifndef TOL_REHEARSE /* exports before the head's idle rehearsal: off */
#define TOL_REHEARSE 0u
#endif
#ifndef TOL_REPLAY_CODEC /* replay at 32, 8 or 7 bits: no codec */
#define TOL_REPLAY_CODEC NULL
#endif
extern const tol_replay_codec_t tol_replay_codec; /* head_init.c of a 4-bit export */
_Static_assert(TOL_REPLAY_POLICY <= 2, "replay policy: 0 reservoir, 1 class-balanced, 2 AR1");
_Static_assert(TOL_REHEARSE <= 255u, "rehearsal steps per idle period: 0..255");

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
    cfg->settings.rehearse = (uint8_t)TOL_REHEARSE;
    cfg->replay_codec = TOL_REPLAY_CODEC;
}

/* ---- the learner calls with their results ----------------------------------------- */

static void tinyol_counters_(const tol_learner_t *L, tinyol_result_t *r)
{
    r->samples_seen = L->samples_seen;
    r->updates = L->updates;
    r->n_active = L->head.n_active;
}

tol_status_t tinyol_head_predict(tol_learner_t *L, const int8_t *latent, tinyol_result_t *r)
{
    memset(r, 0, sizeof(*r));
    r->prediction = -1;
    TOL_TRY(tol_learner_predict(L, latent, &r->prediction, &r->probability));
    tinyol_counters_(L, r);
    return TOL_OK;
}

tol_status_t tinyol_head_learn(tol_learner_t *L, const int8_t *latent, uint16_t label, tinyol_result_t *r)
{
    const tol_head_t *h = &L->head;
    /* the scores of the last predict (on this latent) are the softmax probabilities */
    r->label_probability = label < h->rows && h->active[label] ? h->z[label] : 0.0f;
    const uint32_t seen = L->samples_seen;
    const uint16_t active = h->n_active;
    const tol_status_t st = tol_learner_learn(L, latent, label);
    r->learned = L->samples_seen != seen;
    r->new_class = h->n_active > active;
    tinyol_counters_(L, r);
    return st;
}

tol_status_t tinyol_head_anomaly(tol_learner_t *L, const int8_t *latent, const int8_t *target, bool learn,
                                 tinyol_result_t *r)
{
    memset(r, 0, sizeof(*r));
    const uint32_t updates = L->updates;
    uint8_t flag = 0u;
    r->threshold = tol_anomaly_threshold(&L->anomaly); /* the one this score meets */
    const tol_status_t st = learn ? tol_learner_anomaly(L, latent, target, &r->probability, &flag)
                                  : tol_learner_score(L, latent, target, &r->probability, &flag);
    r->anomaly = flag != 0u;
    r->prediction = flag;
    r->learned = L->updates != updates;
    tinyol_counters_(L, r);
    return st;
}

/* ---- the library API over backbone + head (tinyol.h) ------------------------------ */

tol_status_t tinyol_init(tinyol_t *t, uint8_t *mem, size_t mem_bytes)
{
    TOL_CHECK(t != NULL && mem != NULL, TOL_ERR_ARG);
    memset(t, 0, sizeof(*t));
    tol_learner_config_t cfg;
    tinyol_learner_config(&cfg);
    return tol_learner_init(&t->learner, mem, mem_bytes, &cfg);
}

tol_status_t tinyol_predict(tinyol_t *t, const int8_t *input, int32_t *label, float *confidence)
{
    TOL_CHECK(t != NULL && input != NULL && label != NULL, TOL_ERR_ARG);
    TOL_CHECK(TOL_HEAD_MODE == 0, TOL_ERR_UNSUPPORTED);
    t->has_latent = false;
    TOL_TRY(tol_backbone_invoke(input, t->latent));
    TOL_TRY(tinyol_head_predict(&t->learner, t->latent, &t->last));
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
    const tol_status_t st = tinyol_head_learn(&t->learner, t->latent, label, &t->last);
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
    TOL_TRY(tinyol_head_predict(&t->learner, t->latent, result));
    return tinyol_head_learn(&t->learner, t->latent, label, result);
}

tol_status_t tinyol_anomaly(tinyol_t *t, const int8_t *input, bool learn, float *score, bool *is_anomaly)
{
    TOL_CHECK(t != NULL && input != NULL, TOL_ERR_ARG);
    TOL_CHECK(TOL_HEAD_MODE == 1, TOL_ERR_UNSUPPORTED);
    t->has_latent = false;
    TOL_TRY(tol_backbone_invoke(input, t->latent));
    TOL_TRY(tinyol_head_anomaly(&t->learner, t->latent, input, learn, &t->last));
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
