/*
 * model_learner.h - the learner behind the app's protocol glue (mcu/app/model.c).
 *
 * model.c turns protocol payloads into calls of this small interface; two files
 * implement it and the builder links exactly one (mcu/platform/common/tinyol_build.py,
 * selection by file, no #ifdef):
 *   learner_head.c   TinyOL's one-layer head (tol_learner.h): classifier or autoencoder;
 *                    GET_HEAD / SET_HEAD move it.
 *   learner_stage.c  the adaptive stage (tol_stage.h) of a model exported with an early
 *                    `--split` (its directory has stage_init.c); GET_STAGE / SET_STAGE.
 * Each owns its learner instance; model.c owns the memory block it runs in
 * (tol_learner_mem, TOL_MODEL_LEARNER_BYTES bytes, placed by TOL_LEARNER_REGION) and
 * everything protocol-side: input decoding, timing, persistence records, the
 * push fence, auto-save, STATS.
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

/* Set up the learner in mem (caller-owned, 8-byte aligned, bytes long) from the export. */
tol_status_t tol_model_learner_init(uint8_t *mem, size_t bytes);

/* Classifier: label of a latent (int8_t[TOL_LATENT_DIM]) and its softmax probability. */
tol_status_t tol_model_learner_predict(const int8_t *latent, int32_t *label, float *confidence);
/* Softmax probability of `label` from the last predict (0 for an inactive class). */
float tol_model_learner_prob(uint16_t label);
/* Classifier: learn a labelled latent (queued; one step every n_new). */
tol_status_t tol_model_learner_learn(const int8_t *latent, uint16_t label);
/* Autoencoder: score the input's reconstruction from its latent; learn = false only scores.
 * TOL_ERR_UNSUPPORTED for a learner without an autoencoder mode. */
tol_status_t tol_model_learner_anomaly(const int8_t *latent, const int8_t *input, bool learn, float *score,
                                       uint8_t *is_anomaly);
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
/* Write the state as a new record: replay buffer unless no_replay (left out when a slot is
 * too small), momentum when in use. Out: *parts (TOL_LEARNER_STATE_* bits, the same for
 * the stage), *payload (bytes). */
tol_status_t tol_model_learner_save(tol_store_t *s, bool no_replay, uint8_t *parts, uint32_t *payload);
/* Replace the state with the newest record (out: *rec); TOL_ERR_NO_RECORD when there is none,
 * TOL_ERR_MODEL for a record of another learner (state unchanged or reset to the export),
 * TOL_ERR_RANGE for a damaged one (reset to the export). Drops a staged push when it loaded. */
tol_status_t tol_model_learner_load(tol_store_t *s, tol_store_record_t *rec);

/* ---- pull / push: GET_HEAD + SET_HEAD (head) or GET_STAGE + SET_STAGE (stage) ---- */
/* The message types this learner answers (the other pair gets TOL_ERR_TYPE). */
extern const uint8_t tol_model_learner_get_msg;
extern const uint8_t tol_model_learner_set_msg;
/* One GET request: reply (cap bytes) with the next slice of the learned parameters. */
tol_status_t tol_model_learner_get(const uint8_t *req, uint16_t n, uint8_t *reply, uint16_t cap,
                                   uint16_t *reply_len);
/* One slice of a push. *staged (in: the fence as it is; out): true while a push is started
 * but not committed (model.c then refuses SAMPLE, PREDICT, SAVE with TOL_ERR_BUSY and skips
 * auto-save), false once the slice that completes it has committed. */
tol_status_t tol_model_learner_set(const uint8_t *req, uint16_t n, uint8_t *reply, uint16_t *reply_len,
                                   bool *staged);

/* Idle-time rehearsal (docs/adaptive.md, "Recipe"): one replay-only step while the idle
 * budget (SET key REHEARSE) lasts: TOL_OK when a step ran, else why not (nothing to do:
 * TOL_ERR_UNSUPPORTED). The head learner has none. */
tol_status_t tol_model_learner_rehearse(void);
/* Rehearsal steps run since the last learned sample (the SAMPLE/PREDICT reply's byte 3). */
uint8_t tol_model_learner_rehearsed(void);

/* INFO's adaptive-stage block (layers:u8 params:u32 bytes:u32 hash:u32); 0 bytes for the head. */
uint16_t tol_model_learner_info(uint8_t *out, uint16_t cap);

#endif /* TOL_MODEL_LEARNER_H */
