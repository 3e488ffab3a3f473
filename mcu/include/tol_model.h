/*
 * tol_model.h - the app layer's model glue, handed to the protocol core
 * (tol_server_init(&app, &tol_model_glue)) as a tol_model_if_t.
 *
 * mcu/app/model.c implements it for a model directory from `tinyol export`
 * (backbone + learner memory, static), over the learner of mcu/app/model_learner.h
 * (learner_head.c: the one-layer head; learner_stage.c: an adaptive stage);
 * mcu/app/nomodel/nomodel.c for a firmware without a model (every model request:
 * TOL_ERR_UNSUPPORTED). The builder links exactly one of them.
 */
#ifndef TOL_MODEL_H
#define TOL_MODEL_H

#include <stdint.h>

#include "tol_server.h"
#include "tol_status.h"
#include "tol_store.h"

/* The callbacks below as the table tol_server_init() takes. */
extern const tol_model_if_t tol_model_glue;

/* Set up the backbone and learner (once, at boot). */
tol_status_t tol_model_init(void);

/*
 * Handle a model message (SAMPLE, PREDICT, EMBED, SET, GET, RESET, GET_HEAD/SET_HEAD or
 * GET_STAGE/SET_STAGE, REPLAY_ADD, SAVE, LOAD).
 * req[0..req_len): request payload (read only). reply[0..reply_cap): out;
 * *reply_len: bytes written. Layouts: docs/protocol.md.
 */
tol_status_t tol_model_handle(uint8_t type, const uint8_t *req, uint16_t req_len, uint8_t *reply,
                              uint16_t reply_cap, uint16_t *reply_len);

/* Append the learner's statistics to a STATS reply; returns bytes written (<= cap). */
uint16_t tol_model_stats(uint8_t *out, uint16_t cap);

/* INFO's adaptive-stage block (layers:u8 params:u32 bytes:u32 hash:u32); returns bytes
 * written, 0 for a model without a stage (weak default in tol_server.c). */
uint16_t tol_model_info_stage(uint8_t *out, uint16_t cap);

/* BENCH regions >= 2 (2 backbone, 3 head predict, 4 training step); *cycles out. */
tol_status_t tol_model_bench(uint8_t region, uint32_t *cycles);

/* Persistence status at boot (INFO, boot line); TOL_STORE_NONE without persistence. */
tol_store_status_t tol_model_store_status(void);

#endif /* TOL_MODEL_H */
