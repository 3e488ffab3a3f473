/*
 * tol_state.h - the SAVE/LOAD state stream, written once for both learners: the
 * head learner (tol_learner_state_*) and the adaptive stage (tol_stage_state_*)
 * each describe their state as a fixed header plus a list of segments
 * (tol_segs.h) and leave the rest here: the parts bits, the size, reading and
 * range-checked writing of any byte range, the queued samples and the replay
 * buffer as segments, the fields every header carries (counters, queue length, the replay buffer's
 * restore and the checks of a restored queue.
 * Each header keeps its own layout (docs/persistence.md): stored states load.
 */
#ifndef TOL_STATE_H
#define TOL_STATE_H

#include <stdint.h>

#include "tol_replay.h"
#include "tol_segs.h"
#include "tol_status.h"

/* A learner's state API: each learner X (tol_learner, tol_stage) offers the same three calls
 * over its own header (X_STATE_HEADER bytes, its layout in its header file):
 *   void X_state_stream(const X_t *, uint8_t parts, uint8_t *hdr, tol_state_t *s);
 *       the state as a stream for the given parts (an OR of TOL_STATE_*; the ones this learner
 *       cannot give are dropped): the header written into hdr (NULL when no header byte is
 *       read), the learner's arrays as segments. Its size: tol_state_bytes(s); save:
 *       tol_state_read(s, ...), which changes nothing. Valid until the learner changes.
 *   Restore, in three steps, so that a half-written state never becomes live:
 *   1. tol_status_t X_state_begin(X_t *, const uint8_t *header, uint32_t n, uint8_t *parts,
 *                                 uint32_t *total);
 *       header[0..n) (n >= X_STATE_HEADER) checked against this learner's configuration and
 *       applied. Out: *parts, *total (bytes of the whole state). TOL_ERR_MODEL if it belongs to
 *       another configuration, TOL_ERR_ARG if malformed; the learner is unchanged on error.
 *   2. tol_state_write() on X_state_stream(learner, parts, NULL, &s): the bytes past the
 *       header, in any order and chunking (TOL_ERR_RANGE past the end).
 *   3. tol_status_t X_state_end(X_t *, uint8_t parts);
 *       validate what step 2 wrote; on error the learner is reset to its exported parameters
 *       and TOL_ERR_RANGE returned. */

#define TOL_STATE_REPLAY 0x01u   /* parts: include the replay buffer */
#define TOL_STATE_MOMENTUM 0x02u /* parts: include the momentum buffers */
#define TOL_STATE_MAX_SEGS 12u

/* One state stream: hdr_n header bytes (hdr: filled by the learner, may be NULL when no
 * byte of it is read), then seg[0..k). Built on the stack per call; owns nothing. */
typedef struct {
    const uint8_t *hdr;
    uint32_t hdr_n;
    tol_seg_t seg[TOL_STATE_MAX_SEGS];
    uint32_t k;
} tol_state_t;

/* The parts a learner can give: replay only with a buffer, momentum only with its buffers. */
uint8_t tol_state_parts(uint8_t parts, uint16_t replay_capacity, int has_momentum);

/* Start a stream with its header (hdr may be NULL, see above). */
void tol_state_init(tol_state_t *s, const uint8_t *hdr, uint32_t hdr_n);
/* Append n bytes at p (the learner's array, not copied). */
void tol_state_add(tol_state_t *s, void *p, uint32_t n);
/* Append the queue: n_pending latents of dim floats, then their labels. */
void tol_state_add_queue(tol_state_t *s, float *queue, uint32_t dim, uint16_t n_pending, uint16_t *labels);
/* Append the replay buffer when parts has TOL_STATE_REPLAY: its filled rows in their stored
 * form, their labels, the per-class seen and fill counters. */
void tol_state_add_replay(tol_state_t *s, uint8_t parts, const tol_replay_t *rb);

/* Bytes of the whole stream. */
uint32_t tol_state_bytes(const tol_state_t *s);
/* Copy stream bytes [offset, offset + n) (inside the stream) to dst. */
void tol_state_read(const tol_state_t *s, uint32_t offset, uint8_t *dst, uint32_t n);
/* Copy src into stream bytes [offset, offset + n) past the header; TOL_ERR_RANGE outside. */
tol_status_t tol_state_write(const tol_state_t *s, uint32_t offset, const uint8_t *src, uint32_t n);

/* Where a learner's header keeps the fields every state header holds (byte offsets into the
 * header; each learner keeps its own layout, docs/persistence.md). */
typedef struct {
    uint8_t counters;  /* PRNG state, samples seen, updates, rejected steps: 4 x uint32 LE */
    uint8_t n_pending; /* queue length: uint16 LE */
    uint8_t replay;    /* replay fill: uint16 LE; replay seen and batches: uint32 LE at +4, +8 */
} tol_state_layout_t;

/* Save: write those fields into the header hdr (laid out by at); the replay buffer's only when
 * rb is not NULL (else they keep what hdr held: the learner zeroes its header first). */
void tol_state_put_core(uint8_t *hdr, const tol_state_layout_t *at, uint32_t prng, uint32_t seen,
                        uint32_t updates, uint32_t rejected, uint16_t n_pending, const tol_replay_t *rb);
/* Restore, step 1: the header's queue length below n_new, replay fill within the capacity, a
 * PRNG state not 0; TOL_ERR_ARG otherwise. */
tol_status_t tol_state_check_core(const uint8_t *hdr, const tol_state_layout_t *at, uint16_t n_new,
                                  uint16_t replay_capacity);
/* Restore, step 1, once every check passed: the counters and the queue length taken from the
 * header; the buffer rb (NULL when there is none) emptied, then, when parts has
 * TOL_STATE_REPLAY, its fill and counters taken (the rows follow in step 2). */
void tol_state_get_core(const uint8_t *hdr, const tol_state_layout_t *at, uint8_t parts, uint32_t *prng,
                        uint32_t *seen, uint32_t *updates, uint32_t *rejected, uint16_t *n_pending,
                        tol_replay_t *rb);
/* Restore, step 3: the queue's labels below n_labels and its latents finite; the replay
 * buffer consistent when parts has TOL_STATE_REPLAY. TOL_ERR_RANGE otherwise. */
tol_status_t tol_state_check_queue(const float *queue, uint32_t dim, uint16_t n_pending,
                                   const uint16_t *labels, uint16_t n_labels, uint8_t parts,
                                   const tol_replay_t *rb);

#endif /* TOL_STATE_H */
