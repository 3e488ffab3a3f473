/* tol_persist.c - learner state <-> flash store records (see tol_persist.h). */
#include "tol_persist.h"

tol_status_t tol_persist_save(const tol_learner_t *L, tol_store_t *s, uint8_t parts, uint8_t *parts_out,
                              uint32_t *payload_out)
{
    uint32_t total = tol_learner_state_bytes(L, parts);
    if (total > tol_store_capacity(s) && (parts & TOL_LEARNER_STATE_REPLAY)) {
        parts &= (uint8_t)~TOL_LEARNER_STATE_REPLAY; /* too big for a slot: the head still fits */
        total = tol_learner_state_bytes(L, parts);
    }
    TOL_TRY(tol_store_begin(s, total));
    uint8_t buf[64];
    for (uint32_t at = 0; at < total; at += sizeof(buf)) {
        uint32_t n = total - at < sizeof(buf) ? total - at : (uint32_t)sizeof(buf);
        tol_learner_state_read(L, parts, at, buf, n);
        TOL_TRY(tol_store_append(s, buf, n));
    }
    TOL_TRY(tol_store_commit(s));
    *parts_out = parts;
    *payload_out = total;
    return TOL_OK;
}

tol_status_t tol_persist_load(tol_learner_t *L, tol_store_t *s, tol_store_record_t *rec)
{
    TOL_TRY(tol_store_newest(s, rec));
    uint8_t buf[TOL_LEARNER_STATE_HEADER];
    TOL_CHECK(rec->payload_len >= sizeof(buf), TOL_ERR_MODEL);
    TOL_TRY(tol_store_read(s, rec, 0u, buf, sizeof(buf)));
    uint8_t parts = 0u;
    uint32_t total = 0u;
    TOL_TRY(tol_learner_state_begin(L, buf, sizeof(buf), &parts, &total));
    tol_status_t st = total == rec->payload_len ? TOL_OK : TOL_ERR_MODEL;
    for (uint32_t at = sizeof(buf); st == TOL_OK && at < total; at += sizeof(buf)) {
        uint32_t n = total - at < sizeof(buf) ? total - at : (uint32_t)sizeof(buf);
        st = tol_store_read(s, rec, at, buf, n);
        if (st == TOL_OK) st = tol_learner_state_write(L, parts, at, buf, n);
    }
    if (st != TOL_OK) {
        tol_learner_reset(L); /* half-applied: back to the exported head */
        return st;
    }
    return tol_learner_state_end(L, parts);
}
