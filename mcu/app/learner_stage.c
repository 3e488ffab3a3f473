/*
 * learner_stage.c - model_learner.h for the adaptive stage (tol_stage.h): the
 * learner of a model exported with an early `--split` (its directory has
 * stage_init.c; docs/adaptive.md), configured as a firmware embedding tinyol.h gets it
 * (tinyol_stage_config, mcu/embed/tinyol_stage.c). The backbone's int8 output feeds several
 * float32 layers trained by backprop; each sample is one call of the stage, which fills the
 * result itself (tol_stage_*_result). SAVE/LOAD move the whole stage (its
 * STG1 state); GET_STAGE / SET_STAGE its image (payloads in wire_stage.c).
 */
#include <string.h>

#include "model_learner.h"
#include "model_wire.h"
#include "tinyol.h"
#include "tol_persist.h"
#include "tol_stage.h"

/* tol_stage_bytes(), computed by the exporter's memory model (host/tinyol/memory.py) and
 * checked again by tol_stage_init */
_Static_assert(TOL_MODEL_LEARNER_BYTES == TOL_STAGE_MEM_BYTES,
               "config.h's learner budget (host/tinyol/memory.py) disagrees with TOL_STAGE_MEM_BYTES");
_Static_assert(TOL_STAGE_TRAINED <= TOL_STAGE_PARAMS, "trained parameters");

static tol_stage_t tol_stage;

tol_stage_t *tol_model_stage(void)
{
    return &tol_stage;
}

tol_status_t tol_model_learner_init(uint8_t *mem, size_t bytes, uint8_t *replay_mem, size_t replay_bytes)
{
    tol_stage_config_t cfg;
    tinyol_stage_config(&cfg); /* the same stage a firmware embedding tinyol.h gets */
    cfg.replay_mem = replay_mem; /* the replay buffer's own block, when the plan split it */
    cfg.replay_mem_bytes = replay_bytes;
    return tol_stage_init(&tol_stage, mem, bytes, &cfg);
}

tol_status_t tol_model_learner_predict(const int8_t *latent, tinyol_result_t *r)
{
    return tol_stage_predict_result(&tol_stage, latent, r);
}

tol_status_t tol_model_learner_learn(const int8_t *latent, uint16_t label, tinyol_result_t *r)
{
    return tol_stage_learn_result(&tol_stage, latent, label, r);
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
