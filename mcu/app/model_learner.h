/*
 * model_learner.h - the learner behind the app's protocol glue (mcu/app/model.c):
 * learning and its state only, no wire format.
 *
 * model.c turns protocol payloads into calls of this small interface; two files
 * implement it and the builder links exactly one (mcu/platform/common/tinyol_build.py,
 * selection by file, no #ifdef):
 *   learner_head.c   TinyOL's one-layer head (tol_learner.h), configured by tinyol.h's
 *                    tinyol_learner_config: classifier or autoencoder.
 *   learner_stage.c  the adaptive stage (tol_stage.h) of a model exported with an early
 *                    `--split` (its directory has stage_init.c), configured by
 *                    tinyol_stage_config.
 * A sample is one call of the learner's core per call here (tol_*_predict_result,
 * tol_*_learn_result, tol_learner_anomaly_result): the core fills the tinyol_result_t.
 * Each owns its learner instance; model.c owns the memory block it runs in
 * (tol_learner_mem, TOL_MODEL_LEARNER_BYTES bytes, placed by TOL_LEARNER_REGION; the replay
 * buffer apart in tol_replay_mem when the plan puts it in another region, TOL_REPLAY_REGION) and
 * everything protocol-side: input decoding, timing, persistence records, the
 * push fence, auto-save, STATS; the pull/push payloads (GET/SET_HEAD, GET/SET_STAGE)
 * are the protocol layer's too (model_wire.h).
 */
#ifndef TOL_MODEL_LEARNER_H
#define TOL_MODEL_LEARNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "tinyol.h"
#include "tol_learner.h"
#include "tol_status.h"
#include "tol_store.h"

/* Bytes of the learner's memory block: config.h's budget, computed by the exporter's
 * memory model (host/tinyol/memory.py; each learner file _Static_asserts that it equals
 * its own size macro). Exports made before that budget line: the stage's or the head's size. */
#ifdef TOL_BUDGET_LEARNER_BYTES
#define TOL_MODEL_LEARNER_BYTES TOL_BUDGET_LEARNER_BYTES
#elif defined(TOL_STAGE_MEM_BYTES)
#define TOL_MODEL_LEARNER_BYTES TOL_STAGE_MEM_BYTES
#else
#define TOL_MODEL_LEARNER_BYTES TINYOL_MEM_BYTES
#endif
/* The replay buffer's bytes inside TOL_MODEL_LEARNER_BYTES (0 without a buffer): the part the
 * memory plan may place in another region than the rest (TOL_REPLAY_REGION, model.c). The head's
 * and the stage's buffer have the same size: latent_dim inputs, max_classes labels. */
#define TOL_MODEL_REPLAY_BYTES \
    TOL_LEARNER_REPLAY_BYTES(TOL_LATENT_DIM, TINYOL_OUTPUTS, TOL_REPLAY_CAPACITY, TOL_REPLAY_BITS)
/* An adaptive stage's trained parameters; exports before the lean stage train every one. */
#if defined(TOL_STAGE_PARAMS) && !defined(TOL_STAGE_TRAINED)
#define TOL_STAGE_TRAINED TOL_STAGE_PARAMS
#endif

/* Set up the learner in mem (caller-owned, 8-byte aligned, bytes long) from the export; its
 * replay buffer in replay_mem (replay_bytes = TOL_MODEL_REPLAY_BYTES, 8-byte aligned) when that
 * is not NULL, else inside mem (bytes = TOL_MODEL_LEARNER_BYTES then). */
tol_status_t tol_model_learner_init(uint8_t *mem, size_t bytes, uint8_t *replay_mem, size_t replay_bytes);

/* Every call that takes a sample says what happened in r (tinyol.h's tinyol_result_t:
 * the SAMPLE / PREDICT reply); latent: int8_t[TOL_LATENT_DIM]. */
/* Classifier: the prediction of a latent and its probability, counters. */
tol_status_t tol_model_learner_predict(const int8_t *latent, tinyol_result_t *r);
/* Classifier: learn the latent last predicted (queued; one step every n_new); r carries the
 * prediction on and gets the true label's probability, learned, new class, counters. */
tol_status_t tol_model_learner_learn(const int8_t *latent, uint16_t label, tinyol_result_t *r);
/* Autoencoder: score the input's reconstruction from its latent; learn = false only scores.
 * TOL_ERR_UNSUPPORTED for a learner without an autoencoder mode. */
tol_status_t tol_model_learner_anomaly(const int8_t *latent, const int8_t *input, bool learn,
                                       tinyol_result_t *r);
/* Put a latent into the replay buffer without training. */
tol_status_t tol_model_learner_replay_add(const int8_t *latent, uint16_t label);
/* Back to the exported parameters; drops a staged (uncommitted) push. */
void tol_model_learner_reset(void);

void tol_model_learner_get_stats(tol_learner_stats_t *st);
void tol_model_learner_get_settings(tol_learner_settings_t *s);
tol_status_t tol_model_learner_set_settings(const tol_learner_settings_t *s);

/* ---- persistence: the state as a byte stream in the flash store (docs/persistence.md) ---- */
/* Largest record (header + the largest state): the store's slot size. */
uint32_t tol_model_learner_record_max(void);
/* Bytes of a full state with the replay buffer (STATS' pages-per-save estimate). */
uint32_t tol_model_learner_state_bytes(void);
/* Write the state as a new record: tinyol_save_parts() (replay buffer unless no_replay, left
 * out when a slot is too small; momentum when in use). Out: *parts (TOL_LEARNER_STATE_* bits,
 * the same for the stage), *payload (bytes). */
tol_status_t tol_model_learner_save(tol_store_t *s, bool no_replay, uint8_t *parts, uint32_t *payload);
/* Replace the state with the newest record (out: *rec); TOL_ERR_NO_RECORD when there is none,
 * TOL_ERR_MODEL for a record of another learner (state unchanged or reset to the export),
 * TOL_ERR_RANGE for a damaged one (reset to the export). Drops a staged push when it loaded. */
tol_status_t tol_model_learner_load(tol_store_t *s, tol_store_record_t *rec);

/* Idle-time rehearsal (docs/adaptive.md, "Recipe"): one replay-only step while the idle
 * budget (SET key REHEARSE) lasts: TOL_OK when a step ran, else why not (nothing to do:
 * TOL_ERR_UNSUPPORTED). Both learners have it (tol_learner_rehearse, tol_stage_rehearse). */
tol_status_t tol_model_learner_rehearse(void);
/* Rehearsal steps run since the last learned sample (the SAMPLE/PREDICT reply's byte 3). */
uint8_t tol_model_learner_rehearsed(void);

#endif /* TOL_MODEL_LEARNER_H */
