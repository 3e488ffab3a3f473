/*
 * model_wire.h - the pull/push payloads of the protocol layer (docs/protocol.md):
 * GET_HEAD / SET_HEAD for the one-layer head, GET_STAGE / SET_STAGE for the adaptive
 * stage, and INFO's stage block. Two files implement it, linked with their learner
 * (mcu/platform/common/tinyol_build.py, selection by file):
 *   wire_head.c   with learner_head.c: rows of the head (tol_learner_set_head_row)
 *   wire_stage.c  with learner_stage.c: the stage image (tol_stage_image_read, push)
 * model.c dispatches the messages here; the learners know no payload.
 */
#ifndef TOL_MODEL_WIRE_H
#define TOL_MODEL_WIRE_H

#include <stdbool.h>
#include <stdint.h>

#include "tol_learner.h"
#include "tol_stage.h"
#include "tol_status.h"

/* The message types the linked learner answers (the other pair gets TOL_ERR_TYPE). */
extern const uint8_t tol_model_wire_get_msg;
extern const uint8_t tol_model_wire_set_msg;

/* One GET request: reply (cap bytes) with the next slice of the learned parameters. */
tol_status_t tol_model_wire_get(const uint8_t *req, uint16_t n, uint8_t *reply, uint16_t cap,
                                uint16_t *reply_len);
/* One slice of a push. *staged (in: the fence as it is; out): true while a push is started
 * but not committed (model.c then refuses SAMPLE, PREDICT, SAVE with TOL_ERR_BUSY and skips
 * auto-save), false once the slice that completes it has committed. */
tol_status_t tol_model_wire_set(const uint8_t *req, uint16_t n, uint8_t *reply, uint16_t *reply_len,
                                bool *staged);
/* INFO's adaptive-stage block (layers:u8 params:u32 bytes:u32 hash:u32); 0 bytes for the head. */
uint16_t tol_model_wire_info(uint8_t *out, uint16_t cap);

/* The learner instance its codec moves: learner_head.c defines the first, learner_stage.c
 * the second (only the linked one exists). */
tol_learner_t *tol_model_head(void);
tol_stage_t *tol_model_stage(void);

#endif /* TOL_MODEL_WIRE_H */
