/* tol_persist.c - learner state <-> flash store records (see tol_persist.h). */
#include "tol_persist.h"

#define TOL_PERSIST_CHUNK 64u

bool tol_persist_fits(const tol_store_t *s, const tol_state_t *st)
{
    return tol_state_bytes(st) <= tol_store_capacity(s);
}

tol_status_t tol_persist_write(tol_store_t *s, const tol_state_t *st, uint32_t *payload)
{
    const uint32_t total = tol_state_bytes(st);
    TOL_TRY(tol_store_begin(s, total));
    uint8_t buf[TOL_PERSIST_CHUNK];
    for (uint32_t at = 0; at < total; at += sizeof(buf)) {
        const uint32_t n = total - at < sizeof(buf) ? total - at : (uint32_t)sizeof(buf);
        tol_state_read(st, at, buf, n);
        TOL_TRY(tol_store_append(s, buf, n));
    }
    TOL_TRY(tol_store_commit(s));
    *payload = total;
    return TOL_OK;
}

tol_status_t tol_persist_read_header(tol_store_t *s, tol_store_record_t *rec, uint8_t *hdr, uint32_t hdr_n)
{
    TOL_TRY(tol_store_newest(s, rec));
    TOL_CHECK(rec->payload_len >= hdr_n, TOL_ERR_MODEL);
    return tol_store_read(s, rec, 0u, hdr, hdr_n);
}

tol_status_t tol_persist_read_body(tol_store_t *s, const tol_store_record_t *rec, const tol_state_t *st)
{
    const uint32_t total = tol_state_bytes(st);
    TOL_CHECK(total == rec->payload_len, TOL_ERR_MODEL);
    uint8_t buf[TOL_PERSIST_CHUNK];
    for (uint32_t at = st->hdr_n; at < total; at += sizeof(buf)) {
        const uint32_t n = total - at < sizeof(buf) ? total - at : (uint32_t)sizeof(buf);
        TOL_TRY(tol_store_read(s, rec, at, buf, n));
        TOL_TRY(tol_state_write(st, at, buf, n));
    }
    return TOL_OK;
}

tol_status_t tol_persist_save(const tol_learner_t *L, tol_store_t *s, uint8_t parts, uint8_t *parts_out,
                              uint32_t *payload_out)
{
    uint8_t hdr[TOL_LEARNER_STATE_HEADER];
    tol_state_t st;
    tol_learner_state_stream(L, parts, hdr, &st);
    if (!tol_persist_fits(s, &st)) {
        parts &= (uint8_t)~TOL_STATE_REPLAY; /* too big for a slot: the head still fits */
        tol_learner_state_stream(L, parts, hdr, &st);
    }
    *parts_out = parts;
    return tol_persist_write(s, &st, payload_out);
}

tol_status_t tol_persist_load(tol_learner_t *L, tol_store_t *s, tol_store_record_t *rec)
{
    uint8_t hdr[TOL_LEARNER_STATE_HEADER];
    uint8_t parts = 0u;
    uint32_t total = 0u;
    TOL_TRY(tol_persist_read_header(s, rec, hdr, sizeof(hdr)));
    TOL_TRY(tol_learner_state_begin(L, hdr, sizeof(hdr), &parts, &total));
    tol_state_t st;
    tol_learner_state_stream(L, parts, NULL, &st);
    const tol_status_t r = tol_persist_read_body(s, rec, &st);
    if (r != TOL_OK) {
        tol_learner_reset(L); /* half-applied: back to the exported head */
        return r;
    }
    return tol_learner_state_end(L, parts);
}
