/* tol_replay.c - latent replay buffer; see tol_replay.h. */
#include "tol_replay.h"

#include <math.h>
#include <string.h>

static int8_t tol_replay_quantize1_(float x, float scale, int32_t zero_point)
{
    float v = roundf(x / scale) + (float)zero_point;
    if (v < -128.0f) v = -128.0f;
    if (v > 127.0f) v = 127.0f;
    return (int8_t)v;
}

void tol_replay_quantize(const float *x, uint16_t n, float scale, int32_t zero_point,
                         int8_t *q)
{
    for (uint16_t i = 0; i < n; i++) q[i] = tol_replay_quantize1_(x[i], scale, zero_point);
}

int8_t tol_replay_requant7(int8_t q)
{
    const int32_t v = (int32_t)q;
    int32_t h = (v >= 0) ? (v + 1) / 2 : -((-v + 1) / 2);
    if (h > 63) h = 63;
    return (int8_t)h;
}

static void tol_replay_pack_group_(const int8_t *q7, uint16_t n, uint8_t *out)
{
    uint64_t word = 0u;
    for (uint16_t k = 0; k < n; k++) {
        word |= (uint64_t)((uint8_t)q7[k] & 0x7Fu) << (7u * k);
    }
    for (uint16_t b = 0; b < 7u; b++) out[b] = (uint8_t)(word >> (8u * b));
}

static void tol_replay_unpack_group_(const uint8_t *in, uint16_t n, int8_t *q7)
{
    uint64_t word = 0u;
    for (uint16_t b = 0; b < 7u; b++) word |= (uint64_t)in[b] << (8u * b);
    for (uint16_t k = 0; k < n; k++) {
        const int32_t v = (int32_t)((word >> (7u * k)) & 0x7Fu);
        q7[k] = (int8_t)(v >= 64 ? v - 128 : v);
    }
}

void tol_replay_pack7(const int8_t *q7, uint16_t n, uint8_t *out)
{
    for (uint16_t i = 0; i < n; i = (uint16_t)(i + 8u)) {
        const uint16_t m = (uint16_t)((n - i) < 8 ? (n - i) : 8);
        tol_replay_pack_group_(&q7[i], m, &out[(i / 8u) * 7u]);
    }
}

void tol_replay_unpack7(const uint8_t *in, uint16_t n, int8_t *q7)
{
    for (uint16_t i = 0; i < n; i = (uint16_t)(i + 8u)) {
        const uint16_t m = (uint16_t)((n - i) < 8 ? (n - i) : 8);
        tol_replay_unpack_group_(&in[(i / 8u) * 7u], m, &q7[i]);
    }
}

uint8_t tol_replay_code4(int8_t q, int8_t lo, uint8_t step)
{
    const int32_t v = (int32_t)q - (int32_t)lo;
    const int32_t k = (int32_t)step;
    int32_t c = (v >= 0) ? (2 * v + k) / (2 * k) : -((-2 * v + k) / (2 * k));
    if (c < 0) c = 0;
    if (c > 15) c = 15;
    return (uint8_t)c;
}

int8_t tol_replay_decode4(uint8_t code, int8_t lo, uint8_t step)
{
    int32_t v = (int32_t)lo + (int32_t)step * (int32_t)code;
    if (v > 127) v = 127;
    return (int8_t)v;
}

uint8_t tol_replay_pq_nearest(const int8_t *q, const int8_t *book, uint16_t sub)
{
    uint32_t best = UINT32_MAX;
    uint8_t arg = 0;
    for (uint32_t k = 0; k < TOL_REPLAY_PQ_CODEWORDS; k++) {
        const int8_t *c = &book[k * sub];
        uint32_t d = 0;
        for (uint16_t j = 0; j < sub; j++) {
            const int32_t e = (int32_t)q[j] - (int32_t)c[j];
            d += (uint32_t)(e * e);
        }
        if (d < best) {
            best = d;
            arg = (uint8_t)k;
        }
    }
    return arg;
}

tol_status_t tol_replay_set_codec(tol_replay_t *rb, const tol_replay_codec_t *codec)
{
    TOL_CHECK(rb != NULL && codec != NULL && (rb->bits == 4u || rb->bits > 128u), TOL_ERR_ARG);
    if (rb->bits > 128u) {
        TOL_CHECK(codec->lo != NULL && codec->channels == 0u, TOL_ERR_ARG);
        rb->codec = codec;
        return TOL_OK;
    }
    TOL_CHECK(codec->lo != NULL && codec->step != NULL && codec->channels > 0u, TOL_ERR_ARG);
    TOL_CHECK(rb->dim % codec->channels == 0u, TOL_ERR_ARG);
    for (uint16_t c = 0; c < codec->channels; c++) TOL_CHECK(codec->step[c] > 0u, TOL_ERR_ARG);
    rb->codec = codec;
    return TOL_OK;
}

tol_status_t tol_replay_init(tol_replay_t *rb, uint8_t *mem, size_t mem_bytes,
                             uint16_t capacity, uint16_t dim, uint8_t bits,
                             uint16_t n_classes, uint8_t policy, float scale,
                             int32_t zero_point, tol_prng_t *prng)
{
    TOL_CHECK(rb != NULL && mem != NULL && prng != NULL, TOL_ERR_ARG);
    TOL_CHECK(capacity > 0u && dim > 0u && n_classes > 0u, TOL_ERR_ARG);
    TOL_CHECK(bits == 32u || bits == 8u || bits == 7u || bits == 4u ||
                  (bits > 128u && dim % (uint16_t)(bits - 128u) == 0u),
              TOL_ERR_ARG);
    TOL_CHECK(policy <= (uint8_t)TOL_REPLAY_AR1, TOL_ERR_ARG);
    TOL_CHECK(scale > 0.0f && isfinite(scale), TOL_ERR_ARG);
    TOL_CHECK(zero_point >= -128 && zero_point <= 127, TOL_ERR_ARG);
    TOL_CHECK(((uintptr_t)mem & 3u) == 0u, TOL_ERR_ARG);
    TOL_CHECK(mem_bytes >= TOL_REPLAY_BYTES(capacity, dim, bits, n_classes), TOL_ERR_OVERFLOW);
    rb->capacity = capacity;
    rb->dim = dim;
    rb->n_classes = n_classes;
    rb->bits = bits;
    rb->policy = policy;
    rb->scale = scale;
    rb->zero_point = zero_point;
    rb->row_bytes = TOL_REPLAY_ROW_BYTES(dim, bits);
    rb->prng = prng;
    rb->codec = NULL;
    uint8_t *p = mem;
    rb->rows = p;
    p += TOL_ALIGN4((size_t)capacity * rb->row_bytes);
    rb->class_seen = (uint32_t *)(void *)p;
    p += (size_t)4u * n_classes;
    rb->labels = (uint16_t *)(void *)p;
    p += TOL_ALIGN4((size_t)2u * capacity);
    rb->count = (uint16_t *)(void *)p;
    tol_replay_clear(rb);
    return TOL_OK;
}

void tol_replay_clear(tol_replay_t *rb)
{
    rb->fill = 0;
    rb->seen = 0;
    rb->batches = 0;
    memset(rb->class_seen, 0, (size_t)rb->n_classes * sizeof(uint32_t));
    memset(rb->count, 0, (size_t)rb->n_classes * sizeof(uint16_t));
    memset(rb->labels, 0, (size_t)rb->capacity * sizeof(uint16_t));
}

static void tol_replay_store_(tol_replay_t *rb, uint16_t slot, const float *x, uint16_t label)
{
    uint8_t *row = &rb->rows[(size_t)slot * rb->row_bytes];
    if (rb->bits == 32u) {
        memcpy(row, x, (size_t)rb->dim * sizeof(float));
    } else if (rb->bits == 8u) {
        tol_replay_quantize(x, rb->dim, rb->scale, rb->zero_point, (int8_t *)(void *)row);
    } else if (rb->bits > 128u) {
        const uint16_t sub = (uint16_t)(rb->bits - 128u);
        int8_t q[127];
        for (uint16_t m = 0; m < rb->row_bytes; m++) {
            tol_replay_quantize(&x[(size_t)m * sub], sub, rb->scale, rb->zero_point, q);
            row[m] = tol_replay_pq_nearest(
                q, &rb->codec->lo[(size_t)m * TOL_REPLAY_PQ_CODEWORDS * sub], sub);
        }
    } else if (rb->bits == 4u) {
        const tol_replay_codec_t *cd = rb->codec;
        memset(row, 0, rb->row_bytes);
        for (uint16_t i = 0; i < rb->dim; i++) {
            const uint16_t c = (uint16_t)(i % cd->channels);
            const uint8_t code = tol_replay_code4(
                tol_replay_quantize1_(x[i], rb->scale, rb->zero_point), cd->lo[c], cd->step[c]);
            row[i / 2u] = (uint8_t)(row[i / 2u] | (uint8_t)(code << (4u * (i & 1u))));
        }
    } else {
        int8_t q7[8];
        for (uint16_t i = 0; i < rb->dim; i = (uint16_t)(i + 8u)) {
            const uint16_t m = (uint16_t)((rb->dim - i) < 8 ? (rb->dim - i) : 8);
            for (uint16_t k = 0; k < m; k++) {
                q7[k] = tol_replay_requant7(
                    tol_replay_quantize1_(x[i + k], rb->scale, rb->zero_point));
            }
            tol_replay_pack_group_(q7, m, &row[(i / 8u) * 7u]);
        }
    }
    if (slot < rb->fill) {
        rb->count[rb->labels[slot]]--;
    } else {
        rb->fill++;
    }
    rb->labels[slot] = label;
    rb->count[label]++;
}

void tol_replay_get(const tol_replay_t *rb, uint16_t idx, float *x, uint16_t *label)
{
    const uint8_t *row = &rb->rows[(size_t)idx * rb->row_bytes];
    if (rb->bits == 32u) {
        memcpy(x, row, (size_t)rb->dim * sizeof(float));
    } else if (rb->bits == 8u) {
        const int8_t *q = (const int8_t *)(const void *)row;
        for (uint16_t j = 0; j < rb->dim; j++) {
            x[j] = rb->scale * (float)((int32_t)q[j] - rb->zero_point);
        }
    } else if (rb->bits > 128u) {
        const uint16_t sub = (uint16_t)(rb->bits - 128u);
        for (uint16_t m = 0; m < rb->row_bytes; m++) {
            const int8_t *c =
                &rb->codec->lo[((size_t)m * TOL_REPLAY_PQ_CODEWORDS + row[m]) * sub];
            for (uint16_t j = 0; j < sub; j++) {
                x[(size_t)m * sub + j] = rb->scale * (float)((int32_t)c[j] - rb->zero_point);
            }
        }
    } else if (rb->bits == 4u) {
        const tol_replay_codec_t *cd = rb->codec;
        for (uint16_t j = 0; j < rb->dim; j++) {
            const uint16_t c = (uint16_t)(j % cd->channels);
            const uint8_t code = (uint8_t)(((unsigned)row[j / 2u] >> (4u * (j & 1u))) & 0x0Fu);
            const int8_t q = tol_replay_decode4(code, cd->lo[c], cd->step[c]);
            x[j] = rb->scale * (float)((int32_t)q - rb->zero_point);
        }
    } else {
        int8_t q7[8];
        for (uint16_t i = 0; i < rb->dim; i = (uint16_t)(i + 8u)) {
            const uint16_t m = (uint16_t)((rb->dim - i) < 8 ? (rb->dim - i) : 8);
            tol_replay_unpack_group_(&row[(i / 8u) * 7u], m, q7);
            for (uint16_t k = 0; k < m; k++) {
                x[i + k] = rb->scale * (float)(2 * (int32_t)q7[k] - rb->zero_point);
            }
        }
    }
    if (label != NULL) *label = rb->labels[idx];
}

uint16_t tol_replay_draw(tol_replay_t *rb)
{
    return (uint16_t)tol_prng_below(rb->prng, rb->fill);
}

/* Slot of the k-th (0-based, ascending) entry holding class c. */
static uint16_t tol_replay_find_(const tol_replay_t *rb, uint16_t c, uint32_t k)
{
    for (uint16_t s = 0; s < rb->fill; s++) {
        if (rb->labels[s] == c) {
            if (k == 0u) return s;
            k--;
        }
    }
    return 0; /* unreachable when k < count[c] */
}

static void tol_replay_offer_(tol_replay_t *rb, const float *x, uint16_t y)
{
    rb->seen++;
    rb->class_seen[y]++;
    if (rb->fill < rb->capacity) {
        tol_replay_store_(rb, rb->fill, x, y);
        return;
    }
    if (rb->policy == (uint8_t)TOL_REPLAY_RESERVOIR) {
        const uint32_t j = tol_prng_below(rb->prng, rb->seen);
        if (j < rb->capacity) tol_replay_store_(rb, (uint16_t)j, x, y);
        return;
    }
    /* BALANCED */
    uint16_t largest = 0;
    for (uint16_t c = 1; c < rb->n_classes; c++) {
        if (rb->count[c] > rb->count[largest]) largest = c;
    }
    if (rb->count[y] == rb->count[largest]) {
        const uint32_t j = tol_prng_below(rb->prng, rb->class_seen[y]);
        if (j < rb->count[y]) tol_replay_store_(rb, tol_replay_find_(rb, y, j), x, y);
    } else {
        const uint32_t k = tol_prng_below(rb->prng, rb->count[largest]);
        tol_replay_store_(rb, tol_replay_find_(rb, largest, k), x, y);
    }
}

tol_status_t tol_replay_add_batch(tol_replay_t *rb, const float *x, const uint16_t *labels,
                                  uint16_t n)
{
    TOL_CHECK(x != NULL && labels != NULL, TOL_ERR_ARG);
    TOL_CHECK(n >= 1u && n <= TOL_REPLAY_MAX_BATCH, TOL_ERR_ARG);
    TOL_CHECK((rb->bits != 4u && rb->bits <= 128u) || rb->codec != NULL, TOL_ERR_ARG);
    for (uint16_t i = 0; i < n; i++) TOL_CHECK(labels[i] < rb->n_classes, TOL_ERR_LABEL);
    const size_t d = rb->dim;
    if (rb->policy != (uint8_t)TOL_REPLAY_AR1) {
        for (uint16_t i = 0; i < n; i++) tol_replay_offer_(rb, &x[i * d], labels[i]);
        rb->batches++; /* every policy keeps every counter: a policy set later starts from them */
        return TOL_OK;
    }
    /* AR1 */
    uint16_t i = 0;
    for (; i < n && rb->fill < rb->capacity; i++) {
        rb->seen++;
        rb->class_seen[labels[i]]++;
        tol_replay_store_(rb, rb->fill, &x[i * d], labels[i]);
    }
    const uint16_t m = (uint16_t)(n - i);
    if (m > 0u) {
        uint8_t perm[TOL_REPLAY_MAX_BATCH];
        for (uint16_t k = 0; k < m; k++) {
            perm[k] = (uint8_t)(i + k);
            rb->seen++;
            rb->class_seen[labels[i + k]]++;
        }
        const uint32_t den = rb->batches + 1u;
        const uint32_t q = rb->capacity / den;
        const uint32_t r = rb->capacity % den;
        uint32_t h;
        if (q >= m) {
            h = m;
        } else {
            h = q + (tol_prng_below(rb->prng, den) < r ? 1u : 0u);
        }
        for (uint16_t k = 0; k < h; k++) {
            const uint16_t pick = (uint16_t)(k + tol_prng_below(rb->prng, (uint32_t)(m - k)));
            const uint8_t t = perm[k];
            perm[k] = perm[pick];
            perm[pick] = t;
            const uint16_t slot = (uint16_t)tol_prng_below(rb->prng, rb->capacity);
            tol_replay_store_(rb, slot, &x[perm[k] * d], labels[perm[k]]);
        }
    }
    rb->batches++;
    return TOL_OK;
}

tol_status_t tol_replay_check(const tol_replay_t *rb)
{
    uint32_t slots = 0;
    for (uint16_t i = 0; i < rb->fill; i++) TOL_CHECK(rb->labels[i] < rb->n_classes, TOL_ERR_RANGE);
    for (uint16_t c = 0; c < rb->n_classes; c++) slots += rb->count[c];
    TOL_CHECK(slots == rb->fill, TOL_ERR_RANGE);
    return TOL_OK;
}
