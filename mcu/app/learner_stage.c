/*
 * learner_stage.c - model_learner.h for the adaptive stage (tol_stage.h): the
 * learner of a model exported with an early `--split` (its directory has
 * stage_init.c; docs/adaptive.md). The backbone's int8 output feeds several
 * float32 layers trained by backprop. SAVE/LOAD move the whole stage (its
 * STG1 state); GET_STAGE / SET_STAGE its image (payloads in wire_stage.c).
 */
#include <string.h>

#include "model_learner.h"
#include "model_wire.h"
#include "tinyol.h"
#include "tol_persist.h"
#include "tol_stage.h"

#ifndef TOL_REPLAY_POLICY /* exports before --replay-policy: reservoir */
#define TOL_REPLAY_POLICY TOL_REPLAY_RESERVOIR
#endif
_Static_assert(TOL_REPLAY_POLICY <= 2, "replay policy: 0 reservoir, 1 class-balanced, 2 AR1");
#ifndef TOL_REHEARSE /* exports before idle rehearsal: off */
#define TOL_REHEARSE 0u
#endif
_Static_assert(TOL_REHEARSE <= 255u, "rehearsal steps per idle period: 0..255");

_Static_assert(TOL_HEAD_MODE == 0, "an adaptive stage needs a classifier head");
_Static_assert(TOL_STAGE_LAYERS >= 1 && TOL_STAGE_LAYERS <= TOL_STAGE_MAX_LAYERS, "stage layers");
/* tol_stage_bytes(), computed by the exporter's memory model (host/tinyol/memory.py) and
 * checked again by tol_stage_init */
_Static_assert(TOL_MODEL_LEARNER_BYTES == TOL_STAGE_MEM_BYTES,
               "config.h's learner budget (host/tinyol/memory.py) disagrees with TOL_STAGE_MEM_BYTES");

_Static_assert(TOL_STAGE_TRAINED <= TOL_STAGE_PARAMS, "trained parameters");

extern const tol_stage_layer_t tol_stage_layers[TOL_STAGE_LAYERS];
extern const float tol_stage_init_params[TOL_STAGE_PARAMS];

static tol_stage_t tol_stage;

tol_stage_t *tol_model_stage(void)
{
    return &tol_stage;
}

tol_status_t tol_model_learner_init(uint8_t *mem, size_t bytes, uint8_t *replay_mem, size_t replay_bytes)
{
    tol_stage_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.replay_mem = replay_mem;
    cfg.replay_mem_bytes = replay_bytes;
    cfg.layers = tol_stage_layers;
    cfg.n_layers = (uint8_t)TOL_STAGE_LAYERS;
    cfg.replay_bits = (uint8_t)TOL_REPLAY_BITS;
    cfg.replay_policy = (uint8_t)TOL_REPLAY_POLICY;
    cfg.no_momentum = (uint8_t)(TOL_MOMENTUM == 0.0f ? 1u : 0u); /* as the exporter's memory model */
    cfg.init_params = tol_stage_init_params;
    cfg.init_classes = (uint16_t)TOL_HEAD_INIT_CLASSES;
    cfg.replay_capacity = (uint16_t)TOL_REPLAY_CAPACITY;
    cfg.max_new = (uint16_t)TOL_REPLAY_N_NEW;
    cfg.latent_scale = TOL_LATENT_SCALE;
    cfg.latent_zero_point = TOL_LATENT_ZERO_POINT;
    cfg.seed = TOL_SEED;
    tol_learner_settings_default(&cfg.settings);
    cfg.settings.lr = TOL_LR;
    cfg.settings.momentum = TOL_MOMENTUM;
    cfg.settings.weight_decay = TOL_WEIGHT_DECAY;
    cfg.settings.n_new = (uint16_t)TOL_REPLAY_N_NEW;
    cfg.settings.n_old = (uint16_t)TOL_REPLAY_N_OLD;
    cfg.settings.mode = (uint8_t)(TOL_REPLAY_CAPACITY > 0 ? TOL_LEARN_REPLAY : TOL_LEARN_SGD);
    cfg.settings.rehearse = (uint8_t)TOL_REHEARSE;
    return tol_stage_init(&tol_stage, mem, bytes, &cfg);
}

static void tol_model_stage_counters_(tinyol_result_t *r)
{
    r->samples_seen = tol_stage.samples_seen;
    r->updates = tol_stage.updates;
    r->n_active = tol_stage.n_active;
}

tol_status_t tol_model_learner_predict(const int8_t *latent, tinyol_result_t *r)
{
    memset(r, 0, sizeof(*r));
    r->prediction = -1;
    TOL_TRY(tol_stage_predict(&tol_stage, latent, &r->prediction, &r->probability));
    tol_model_stage_counters_(r);
    return TOL_OK;
}

tol_status_t tol_model_learner_learn(const int8_t *latent, uint16_t label, tinyol_result_t *r)
{
    /* the probabilities of the last predict (on this latent) */
    r->label_probability = label < tol_stage.rows && tol_stage.active[label] ? tol_stage.probs[label] : 0.0f;
    const uint32_t seen = tol_stage.samples_seen;
    const uint16_t active = tol_stage.n_active;
    const tol_status_t st = tol_stage_learn(&tol_stage, latent, label);
    r->learned = tol_stage.samples_seen != seen;
    r->new_class = tol_stage.n_active > active;
    tol_model_stage_counters_(r);
    return st;
}

tol_status_t tol_model_learner_anomaly(const int8_t *latent, const int8_t *input, bool learn,
                                       tinyol_result_t *r)
{
    (void)latent;
    (void)input;
    (void)learn;
    (void)r;
    return TOL_ERR_UNSUPPORTED; /* classifier stages only */
}

tol_status_t tol_model_learner_replay_add(const int8_t *latent, uint16_t label)
{
    return tol_stage_replay_add(&tol_stage, latent, label);
}

void tol_model_learner_reset(void)
{
    tol_stage_reset(&tol_stage); /* drops a staged image too */
}

void tol_model_learner_get_stats(tol_learner_stats_t *st)
{
    tol_stage_get_stats(&tol_stage, st);
}

void tol_model_learner_get_settings(tol_learner_settings_t *s)
{
    tol_stage_get_settings(&tol_stage, s);
}

tol_status_t tol_model_learner_set_settings(const tol_learner_settings_t *s)
{
    return tol_stage_set_settings(&tol_stage, s);
}

tol_status_t tol_model_learner_rehearse(void)
{
    return tol_stage_rehearse(&tol_stage);
}

uint8_t tol_model_learner_rehearsed(void)
{
    return tol_stage.rehearsed;
}

/* Largest stage state (header, params, active, counts, a full queue, momentum, a full
 * replay buffer) plus the record header: the store's slot size. */
uint32_t tol_model_learner_record_max(void)
{
    return TOL_STORE_HEADER_BYTES + TOL_STAGE_STATE_HEADER + 8u * (uint32_t)TOL_STAGE_TRAINED +
           5u * (uint32_t)TOL_HEAD_MAX_CLASSES + (4u * TOL_LATENT_DIM + 2u) * (uint32_t)TOL_REPLAY_N_NEW +
           (uint32_t)TOL_REPLAY_CAPACITY * ((uint32_t)TOL_REPLAY_ROW_BYTES(TOL_LATENT_DIM, TOL_REPLAY_BITS) + 2u) +
           6u * (uint32_t)TOL_HEAD_MAX_CLASSES;
}

uint32_t tol_model_learner_state_bytes(void)
{
    tol_state_t st;
    tol_stage_state_stream(&tol_stage, TOL_STATE_REPLAY, NULL, &st);
    return tol_state_bytes(&st);
}

tol_status_t tol_model_learner_save(tol_store_t *s, bool no_replay, uint8_t *parts_out, uint32_t *payload)
{
    tol_learner_settings_t set;
    tol_stage_get_settings(&tol_stage, &set);
    uint8_t parts = tinyol_save_parts(set.momentum, no_replay);
    uint8_t hdr[TOL_STAGE_STATE_HEADER];
    tol_state_t st;
    tol_stage_state_stream(&tol_stage, parts, hdr, &st);
    if (!tol_persist_fits(s, &st)) {
        parts &= (uint8_t)~TOL_STATE_REPLAY; /* too big for a slot: the stage still fits */
        tol_stage_state_stream(&tol_stage, parts, hdr, &st);
    }
    *parts_out = parts;
    return tol_persist_write(s, &st, payload);
}

tol_status_t tol_model_learner_load(tol_store_t *s, tol_store_record_t *rec)
{
    uint8_t hdr[TOL_STAGE_STATE_HEADER];
    uint8_t parts = 0u;
    uint32_t total = 0u;
    TOL_TRY(tol_persist_read_header(s, rec, hdr, sizeof(hdr)));
    TOL_TRY(tol_stage_state_begin(&tol_stage, hdr, sizeof(hdr), &parts, &total));
    tol_state_t st;
    tol_stage_state_stream(&tol_stage, parts, NULL, &st);
    const tol_status_t r = tol_persist_read_body(s, rec, &st);
    if (r != TOL_OK) {
        tol_stage_reset(&tol_stage); /* half-applied: back to the exported stage */
        return r;
    }
    TOL_TRY(tol_stage_state_end(&tol_stage, parts));
    tol_stage.push_fill = 0u; /* the loaded state replaces a staged image */
    return TOL_OK;
}
