/*
 * learner_head.c - model_learner.h for TinyOL's one-layer head (tol_learner.h):
 * the learner of a model exported with --split at its last layer (the default),
 * configured as any firmware embedding tinyol.h gets it (tinyol_learner_config). The
 * one layer between the protocol (model.c) and the learner: each sample is one call of
 * the learner, which fills the result itself (tol_learner_*_result).
 * Persistence through tol_persist.h; pull/push payloads in wire_head.c.
 */
#include "model_learner.h"
#include "model_wire.h"
#include "tinyol.h"
#include "tol_learner.h"
#include "tol_persist.h"

/* TINYOL_MEM_BYTES (tinyol.h) reserves only what the exported mode uses. */
_Static_assert(TOL_MODEL_LEARNER_BYTES == TINYOL_MEM_BYTES,
               "config.h's learner budget (host/tinyol/memory.py) disagrees with TOL_LEARNER_BYTES_EX");

static tol_learner_t tol_learner;

tol_learner_t *tol_model_head(void)
{
    return &tol_learner;
}

tol_status_t tol_model_learner_init(uint8_t *mem, size_t bytes, uint8_t *replay_mem, size_t replay_bytes)
{
    tol_learner_config_t cfg;
    tinyol_learner_config(&cfg); /* the same learner a firmware embedding tinyol.h gets */
    cfg.replay_mem = replay_mem;
    cfg.replay_mem_bytes = replay_bytes;
    return tol_learner_init(&tol_learner, mem, bytes, &cfg);
}

tol_status_t tol_model_learner_predict(const int8_t *latent, tinyol_result_t *r)
{
    return tol_learner_predict_result(&tol_learner, latent, r);
}

tol_status_t tol_model_learner_learn(const int8_t *latent, uint16_t label, tinyol_result_t *r)
{
    return tol_learner_learn_result(&tol_learner, latent, label, r);
}

tol_status_t tol_model_learner_anomaly(const int8_t *latent, const int8_t *input, bool learn,
                                       tinyol_result_t *r)
{
    return tol_learner_anomaly_result(&tol_learner, latent, input, learn, r);
}

tol_status_t tol_model_learner_replay_add(const int8_t *latent, uint16_t label)
{
    return tol_learner_replay_add(&tol_learner, latent, label);
}

void tol_model_learner_reset(void)
{
    tol_learner_reset(&tol_learner);
}

void tol_model_learner_get_stats(tol_learner_stats_t *st)
{
    tol_learner_get_stats(&tol_learner, st);
}

void tol_model_learner_get_settings(tol_learner_settings_t *s)
{
    tol_learner_get_settings(&tol_learner, s);
}

tol_status_t tol_model_learner_set_settings(const tol_learner_settings_t *s)
{
    return tol_learner_set_settings(&tol_learner, s);
}

uint32_t tol_model_learner_record_max(void)
{
    return (uint32_t)TINYOL_RECORD_MAX;
}

uint32_t tol_model_learner_state_bytes(void)
{
    tol_state_t st;
    tol_learner_state_stream(&tol_learner, TOL_STATE_REPLAY, NULL, &st);
    return tol_state_bytes(&st);
}

tol_status_t tol_model_learner_save(tol_store_t *s, bool no_replay, uint8_t *parts, uint32_t *payload)
{
    tol_learner_settings_t set;
    tol_learner_get_settings(&tol_learner, &set);
    return tol_persist_save(&tol_learner, s, tinyol_save_parts(set.momentum, no_replay), parts, payload);
}

tol_status_t tol_model_learner_load(tol_store_t *s, tol_store_record_t *rec)
{
    return tol_persist_load(&tol_learner, s, rec);
}

tol_status_t tol_model_learner_rehearse(void)
{
    return tol_learner_rehearse(&tol_learner);
}

uint8_t tol_model_learner_rehearsed(void)
{
    return tol_learner.rehearsed;
}
