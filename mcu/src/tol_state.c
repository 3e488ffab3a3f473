/* tol_state.c - the state stream both learners share; see tol_state.h. */
#include "tol_state.h"

#include <math.h>

uint8_t tol_state_parts(uint8_t parts, uint16_t replay_capacity, int has_momentum)
{
    if (replay_capacity == 0u) parts = (uint8_t)(parts & ~TOL_STATE_REPLAY);
    if (!has_momentum) parts = (uint8_t)(parts & ~TOL_STATE_MOMENTUM);
    return (uint8_t)(parts & (TOL_STATE_REPLAY | TOL_STATE_MOMENTUM));
}

void tol_state_init(tol_state_t *s, const uint8_t *hdr, uint32_t hdr_n)
{
    s->hdr = hdr;
    s->hdr_n = hdr_n;
    s->k = 0u;
}

void tol_state_add(tol_state_t *s, void *p, uint32_t n)
{
    if (s->k < TOL_STATE_MAX_SEGS) s->seg[s->k++] = (tol_seg_t){(uint8_t *)p, n};
}

void tol_state_add_queue(tol_state_t *s, float *queue, uint32_t dim, uint16_t n_pending, uint16_t *labels)
{
    tol_state_add(s, queue, 4u * dim * n_pending);
    tol_state_add(s, labels, 2u * n_pending);
}

void tol_state_add_replay(tol_state_t *s, uint8_t parts, const tol_replay_t *rb)
{
    if (!(parts & TOL_STATE_REPLAY)) return;
    tol_state_add(s, rb->rows, (uint32_t)rb->row_bytes * rb->fill);
    tol_state_add(s, rb->labels, 2u * rb->fill);
    tol_state_add(s, rb->class_seen, 4u * rb->n_classes);
    tol_state_add(s, rb->count, 2u * rb->n_classes);
}

uint32_t tol_state_bytes(const tol_state_t *s)
{
    return s->hdr_n + tol_segs_bytes(s->seg, s->k);
}

void tol_state_read(const tol_state_t *s, uint32_t offset, uint8_t *dst, uint32_t n)
{
    tol_segs_read(s->hdr, s->hdr_n, s->seg, s->k, offset, dst, n);
}

tol_status_t tol_state_write(const tol_state_t *s, uint32_t offset, const uint8_t *src, uint32_t n)
{
    const uint32_t total = tol_state_bytes(s);
    TOL_CHECK(offset >= s->hdr_n && offset <= total && n <= total - offset, TOL_ERR_RANGE);
    tol_segs_write(s->seg, s->k, s->hdr_n, offset, src, n);
    return TOL_OK;
}

void tol_state_put_core(uint8_t *hdr, const tol_state_layout_t *at, uint32_t prng, uint32_t seen,
                        uint32_t updates, uint32_t rejected, uint16_t n_pending, const tol_replay_t *rb)
{
    uint8_t *p = hdr + at->counters;
    tol_segs_put32(p, prng);
    tol_segs_put32(p + 4, seen);
    tol_segs_put32(p + 8, updates);
    tol_segs_put32(p + 12, rejected);
    tol_segs_put16(hdr + at->n_pending, n_pending);
    if (rb != NULL) {
        tol_segs_put16(hdr + at->replay, rb->fill);
        tol_segs_put32(hdr + at->replay + 4, rb->seen);
        tol_segs_put32(hdr + at->replay + 8, rb->batches);
    }
}

tol_status_t tol_state_check_core(const uint8_t *hdr, const tol_state_layout_t *at, uint16_t n_new,
                                  uint16_t replay_capacity)
{
    TOL_CHECK(tol_segs_get16(hdr + at->n_pending) < n_new, TOL_ERR_ARG);
    TOL_CHECK(tol_segs_get16(hdr + at->replay) <= replay_capacity, TOL_ERR_ARG);
    TOL_CHECK(tol_segs_get32(hdr + at->counters) != 0u, TOL_ERR_ARG);
    return TOL_OK;
}

void tol_state_get_core(const uint8_t *hdr, const tol_state_layout_t *at, uint8_t parts, uint32_t *prng,
                        uint32_t *seen, uint32_t *updates, uint32_t *rejected, uint16_t *n_pending,
                        tol_replay_t *rb)
{
    const uint8_t *p = hdr + at->counters;
    *prng = tol_segs_get32(p);
    *seen = tol_segs_get32(p + 4);
    *updates = tol_segs_get32(p + 8);
    *rejected = tol_segs_get32(p + 12);
    *n_pending = tol_segs_get16(hdr + at->n_pending);
    if (rb == NULL) return;
    tol_replay_clear(rb);
    if (parts & TOL_STATE_REPLAY) {
        rb->fill = tol_segs_get16(hdr + at->replay);
        rb->seen = tol_segs_get32(hdr + at->replay + 4);
        rb->batches = tol_segs_get32(hdr + at->replay + 8);
    }
}

tol_status_t tol_state_check_queue(const float *queue, uint32_t dim, uint16_t n_pending,
                                   const uint16_t *labels, uint16_t n_labels, uint8_t parts,
                                   const tol_replay_t *rb)
{
    for (uint16_t i = 0; i < n_pending; i++) {
        TOL_CHECK(labels[i] < n_labels, TOL_ERR_RANGE);
        const float *x = &queue[(size_t)i * dim];
        for (uint32_t j = 0; j < dim; j++) TOL_CHECK(isfinite(x[j]), TOL_ERR_RANGE);
    }
    if (parts & TOL_STATE_REPLAY) TOL_TRY(tol_replay_check(rb));
    return TOL_OK;
}
