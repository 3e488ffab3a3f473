/*
 * wire_head.c - model_wire.h for the one-layer head (linked with learner_head.c):
 * GET_HEAD / SET_HEAD payloads (docs/protocol.md) over tol_learner_head() and
 * tol_learner_set_head_row().
 */
#include <string.h>

#include "config.h"
#include "model_wire.h"
#include "tol_learner.h"
#include "tol_proto.h"

const uint8_t tol_model_wire_get_msg = (uint8_t)TOL_MSG_GET_HEAD;
const uint8_t tol_model_wire_set_msg = (uint8_t)TOL_MSG_SET_HEAD;

/* GET_HEAD: row:u16 offset:u16. Reply: row:u16 offset:u16 active:u8 0:u8 n:u16 bias:f32 w:f32[n] */
tol_status_t tol_model_wire_get(const uint8_t *req, uint16_t n, uint8_t *reply, uint16_t cap,
                                uint16_t *reply_len)
{
    TOL_CHECK(n == 4u, TOL_ERR_LENGTH);
    const tol_head_t *h = tol_learner_head(tol_model_head());
    uint16_t row = tol_get_u16(req);
    uint16_t offset = tol_get_u16(req + 2);
    TOL_CHECK(row < h->rows && offset <= h->dim, TOL_ERR_RANGE);
    uint16_t count = (uint16_t)(h->dim - offset);
    uint16_t room = (uint16_t)((cap - 12u) / 4u);
    if (count > room) count = room;
    tol_put_u16(reply, row);
    tol_put_u16(reply + 2, offset);
    reply[4] = h->active[row];
    reply[5] = 0u;
    tol_put_u16(reply + 6, count);
    uint32_t bits;
    memcpy(&bits, &h->b[row], sizeof(bits));
    tol_put_u32(reply + 8, bits);
    for (uint16_t i = 0; i < count; i++) {
        memcpy(&bits, &h->w[(uint32_t)row * h->dim + offset + i], sizeof(bits));
        tol_put_u32(reply + 12 + 4u * i, bits);
    }
    *reply_len = (uint16_t)(12u + 4u * count);
    return TOL_OK;
}

static float tol_head_get_f32(const uint8_t *p)
{
    uint32_t bits = tol_get_u32(p);
    float v;
    memcpy(&v, &bits, sizeof(v));
    return v;
}

/* SET_HEAD: row:u16 offset:u16 active:u8 flags:u8 n:u16 bias:f32 w:f32[n].
 * flags bit 0: staged, more slices follow (the fence goes up before the row changes and
 * stays up until a slice without it commits). Reply: row:u16 offset:u16 n:u16 n_active:u16 */
tol_status_t tol_model_wire_set(const uint8_t *req, uint16_t n, uint8_t *reply, uint16_t *reply_len,
                                bool *staged)
{
    TOL_CHECK(n >= 12u, TOL_ERR_LENGTH);
    uint16_t row = tol_get_u16(req);
    uint16_t offset = tol_get_u16(req + 2);
    uint16_t count = tol_get_u16(req + 6);
    TOL_CHECK(n == 12u + 4u * (uint32_t)count, TOL_ERR_LENGTH);
    TOL_CHECK(req[4] <= 1u && req[5] <= 1u, TOL_ERR_ARG);
    TOL_CHECK(count <= TOL_LATENT_DIM, TOL_ERR_RANGE);
    if (req[5] != 0u) *staged = true;
    float w[TOL_LATENT_DIM > 0 ? TOL_LATENT_DIM : 1];
    for (uint16_t i = 0; i < count; i++) w[i] = tol_head_get_f32(req + 12 + 4u * i);
    const float bias = tol_head_get_f32(req + 8);
    TOL_TRY(tol_learner_set_head_row(tol_model_head(), row, offset, w, count, bias, req[4]));
    if (req[5] == 0u) *staged = false; /* commit */
    tol_learner_stats_t ls;
    tol_learner_get_stats(tol_model_head(), &ls);
    tol_put_u16(reply, row);
    tol_put_u16(reply + 2, offset);
    tol_put_u16(reply + 4, count);
    tol_put_u16(reply + 6, ls.n_active);
    *reply_len = 8u;
    return TOL_OK;
}

uint16_t tol_model_wire_info(uint8_t *out, uint16_t cap)
{
    (void)out;
    (void)cap;
    return 0u;
}
