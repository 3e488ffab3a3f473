/*
 * tol_persist.h - the learner's state in the flash store: save it as a new
 * record, load the newest one (docs/persistence.md). Portable: the flash
 * itself is behind tol_flash.h, implemented by the board (or by the user's
 * firmware when tinyol is embedded as a library, docs/embedding.md).
 */
#ifndef TOL_PERSIST_H
#define TOL_PERSIST_H

#include <stdbool.h>
#include <stdint.h>

#include "tol_learner.h"
#include "tol_status.h"
#include "tol_store.h"

/* Largest learner state of a configuration (tol_learner_state_*: header, W, b,
 * active, class counts, a full queue, momentum, a full replay buffer) plus the
 * record header: the store's slot size for tol_store_init(). */
#define TOL_PERSIST_RECORD_MAX(dim, n_outputs, replay_capacity, replay_bits, n_new)                \
    (TOL_STORE_HEADER_BYTES + TOL_LEARNER_STATE_HEADER +                                           \
     4u * 2u * ((uint32_t)(n_outputs) * (dim) + (n_outputs)) + 5u * (uint32_t)(n_outputs) +        \
     (4u * (dim) + 2u) * (uint32_t)(n_new) +                                                       \
     (uint32_t)(replay_capacity) * ((uint32_t)TOL_REPLAY_ROW_BYTES((dim), (replay_bits)) + 2u) +   \
     6u * (uint32_t)(n_outputs))

/* ---- any learner's state stream (tol_state.h) <-> a record: the head's below, the adaptive
 * stage's in mcu/app/learner_stage.c ---- */
/* Does the stream fit one slot of `s`? (A learner leaves its replay buffer out when not.) */
bool tol_persist_fits(const tol_store_t *s, const tol_state_t *st);
/* Write the stream (its header filled) as a new record of `s`; out: *payload its bytes. */
tol_status_t tol_persist_write(tol_store_t *s, const tol_state_t *st, uint32_t *payload);
/* Load, step 1: the newest record (out: *rec) and its first hdr_n bytes into hdr.
 * TOL_ERR_NO_RECORD when there is none, TOL_ERR_MODEL when it is shorter. */
tol_status_t tol_persist_read_header(tol_store_t *s, tol_store_record_t *rec, uint8_t *hdr, uint32_t hdr_n);
/* Load, step 2 (after the learner took the header): the rest of the record into the
 * stream's segments; TOL_ERR_MODEL when the record's size is not the stream's. */
tol_status_t tol_persist_read_body(tol_store_t *s, const tol_store_record_t *rec, const tol_state_t *st);

/*
 * Write the learner's state (parts: TOL_LEARNER_STATE_* bits) as a new record
 * of `s`. When it does not fit a slot, the replay buffer is left out (the head
 * still fits). Out: *parts_out the parts written, *payload_out their bytes.
 */
tol_status_t tol_persist_save(const tol_learner_t *L, tol_store_t *s, uint8_t parts, uint8_t *parts_out,
                              uint32_t *payload_out);

/*
 * Replace the learner's state with the newest record of `s` (out: *rec).
 * TOL_ERR_NO_RECORD when there is none; on a record that does not fit this
 * learner (TOL_ERR_MODEL) the learner is reset to its exported head.
 */
tol_status_t tol_persist_load(tol_learner_t *L, tol_store_t *s, tol_store_record_t *rec);

#endif /* TOL_PERSIST_H */
