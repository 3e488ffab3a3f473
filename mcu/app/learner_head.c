/*
 * learner_head.c - model_learner.h for TinyOL's one-layer head (tol_learner.h):
 * the learner of a model exported with --split at its last layer (the default).
 * Persistence through tol_persist.h; pull/push through GET_HEAD / SET_HEAD.
 */
#include <string.h>

#include "model_learner.h"
#include "tinyol.h"
#include "tol_learner.h"
#include "tol_persist.h"
#include "tol_proto.h"

/* TINYOL_MEM_BYTES (tinyol.h) reserves only what the exported mode uses. */
_Static_assert(TOL_MODEL_LEARNER_BYTES == TINYOL_MEM_BYTES,
               "config.h's learner budget (host/tinyol/memory.py) disagrees with TOL_LEARNER_BYTES_EX");

static tol_learner_t tol_learner;

const uint8_t tol_model_learner_get_msg = (uint8_t)TOL_MSG_GET_HEAD;
const uint8_t tol_model_learner_set_msg = (uint8_t)TOL_MSG_SET_HEAD;

tol_status_t tol_model_learner_init(uint8_t *mem, size_t bytes)
{
    tol_learner_config_t cfg;
    tinyol_learner_config(&cfg); /* the same learner a firmware embedding tinyol.h gets */
    return tol_learner_init(&tol_learner, mem, bytes, &cfg);
}

tol_status_t tol_model_learner_predict(const int8_t *latent, int32_t *label, float *confidence)
{
    return tol_learner_predict(&tol_learner, latent, label, confidence);
}

float tol_model_learner_prob(uint16_t label)
{
    const tol_head_t *h = tol_learner_head(&tol_learner);
    return label < h->rows && h->active[label] ? h->z[label] : 0.0f;
}

tol_status_t tol_model_learner_learn(const int8_t *latent, uint16_t label)
{
    return tol_learner_learn(&tol_learner, latent, label);
}

tol_status_t tol_model_learner_anomaly(const int8_t *latent, const int8_t *input, bool learn, float *score,
                                       uint8_t *is_anomaly)
{
    return learn ? tol_learner_anomaly(&tol_learner, latent, input, score, is_anomaly)
                 : tol_learner_score(&tol_learner, latent, input, score, is_anomaly);
}

tol_status_t tol_model_learner_replay_add(const int8_t *latent, uint16_t label)
{
    return tol_learner_replay_add(&tol_learner, latent, label);
}

void tol_model_learner_reset(void)
{
    tol_learner_reset(&tol_learner);
}

void tol_model_learner_get_stats(tol_learner_stats_t *st)
{
    tol_learner_get_stats(&tol_learner, st);
}

void tol_model_learner_get_settings(tol_learner_settings_t *s)
{
    tol_learner_get_settings(&tol_learner, s);
}

tol_status_t tol_model_learner_set_settings(const tol_learner_settings_t *s)
{
    TOL_CHECK(s->rehearse == 0u, TOL_ERR_UNSUPPORTED); /* idle rehearsal: adaptive stages only */
    return tol_learner_set_settings(&tol_learner, s);
}

uint32_t tol_model_learner_record_max(void)
{
    return (uint32_t)TOL_PERSIST_RECORD_MAX(TOL_LATENT_DIM, TINYOL_OUTPUTS, TOL_REPLAY_CAPACITY, TOL_REPLAY_BITS,
                                            TOL_REPLAY_N_NEW);
}

uint32_t tol_model_learner_state_bytes(void)
{
    return tol_learner_state_bytes(&tol_learner, TOL_LEARNER_STATE_REPLAY);
}

tol_status_t tol_model_learner_save(tol_store_t *s, bool no_replay, uint8_t *parts, uint32_t *payload)
{
    tol_learner_settings_t set;
    tol_learner_get_settings(&tol_learner, &set);
    uint8_t want = (uint8_t)(no_replay ? 0u : TOL_LEARNER_STATE_REPLAY);
    if (set.momentum != 0.0f) want |= (uint8_t)TOL_LEARNER_STATE_MOMENTUM;
    return tol_persist_save(&tol_learner, s, want, parts, payload);
}

tol_status_t tol_model_learner_load(tol_store_t *s, tol_store_record_t *rec)
{
    return tol_persist_load(&tol_learner, s, rec);
}

/* GET_HEAD: row:u16 offset:u16. Reply: row:u16 offset:u16 active:u8 0:u8 n:u16 bias:f32 w:f32[n] */
tol_status_t tol_model_learner_get(const uint8_t *req, uint16_t n, uint8_t *reply, uint16_t cap,
                                   uint16_t *reply_len)
{
    TOL_CHECK(n == 4u, TOL_ERR_LENGTH);
    const tol_head_t *h = tol_learner_head(&tol_learner);
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
tol_status_t tol_model_learner_set(const uint8_t *req, uint16_t n, uint8_t *reply, uint16_t *reply_len,
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
    TOL_TRY(tol_learner_set_head_row(&tol_learner, row, offset, w, count, tol_head_get_f32(req + 8), req[4]));
    if (req[5] == 0u) *staged = false; /* commit */
    tol_learner_stats_t ls;
    tol_learner_get_stats(&tol_learner, &ls);
    tol_put_u16(reply, row);
    tol_put_u16(reply + 2, offset);
    tol_put_u16(reply + 4, count);
    tol_put_u16(reply + 6, ls.n_active);
    *reply_len = 8u;
    return TOL_OK;
}

tol_status_t tol_model_learner_rehearse(void)
{
    return TOL_ERR_UNSUPPORTED; /* the one-layer head has no idle rehearsal */
}

uint8_t tol_model_learner_rehearsed(void)
{
    return 0u;
}

uint16_t tol_model_learner_info(uint8_t *out, uint16_t cap)
{
    (void)out;
    (void)cap;
    return 0u;
}
