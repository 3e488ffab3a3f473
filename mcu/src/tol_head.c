/* tol_head.c - trainable Dense head; see tol_head.h. Reference C, float32. */
#include "tol_head.h"

#include <math.h>
#include <string.h>

static int tol_head_finite_(float v)
{
    return isfinite(v) ? 1 : 0;
}

tol_status_t tol_head_init(tol_head_t *h, uint8_t *mem, size_t mem_bytes,
                           uint16_t dim, uint16_t rows, const float *init_w,
                           const float *init_b, uint16_t init_active)
{
    TOL_CHECK(h != NULL && mem != NULL, TOL_ERR_ARG);
    TOL_CHECK(dim > 0u && rows > 0u && init_active <= rows, TOL_ERR_ARG);
    TOL_CHECK(((uintptr_t)mem & 3u) == 0u, TOL_ERR_ARG);
    TOL_CHECK(mem_bytes >= TOL_HEAD_BYTES(dim, rows), TOL_ERR_OVERFLOW);
    const size_t n = (size_t)rows * dim;
    float *f = (float *)(void *)mem;
    h->dim = dim;
    h->rows = rows;
    h->w = f;
    f += n;
    h->vw = f;
    f += n;
    h->gw = f;
    f += n;
    h->b = f;
    f += rows;
    h->vb = f;
    f += rows;
    h->gb = f;
    f += rows;
    h->z = f;
    f += rows;
    h->active = (uint8_t *)(void *)f;
    h->init_w = init_w;
    h->init_b = init_b;
    h->init_active = init_active;
    tol_head_reset(h);
    return TOL_OK;
}

void tol_head_reset(tol_head_t *h)
{
    const size_t n = (size_t)h->rows * h->dim;
    const size_t n_init = (size_t)h->init_active * h->dim;
    memset(h->w, 0, n * sizeof(float));
    memset(h->b, 0, (size_t)h->rows * sizeof(float));
    if (h->init_w != NULL) memcpy(h->w, h->init_w, n_init * sizeof(float));
    if (h->init_b != NULL) memcpy(h->b, h->init_b, (size_t)h->init_active * sizeof(float));
    memset(h->vw, 0, n * sizeof(float));
    memset(h->vb, 0, (size_t)h->rows * sizeof(float));
    memset(h->gw, 0, n * sizeof(float));
    memset(h->gb, 0, (size_t)h->rows * sizeof(float));
    memset(h->z, 0, (size_t)h->rows * sizeof(float));
    for (uint16_t r = 0; r < h->rows; r++) {
        h->active[r] = (uint8_t)(r < h->init_active ? 1u : 0u);
    }
    h->n_active = h->init_active;
}

void tol_head_activate(tol_head_t *h, uint16_t r)
{
    if (r >= h->rows || h->active[r]) return;
    memset(&h->w[(size_t)r * h->dim], 0, (size_t)h->dim * sizeof(float));
    memset(&h->vw[(size_t)r * h->dim], 0, (size_t)h->dim * sizeof(float));
    h->b[r] = 0.0f;
    h->vb[r] = 0.0f;
    h->active[r] = 1u;
    h->n_active++;
}

void tol_head_forward(tol_head_t *h, const float *x)
{
    for (uint16_t r = 0; r < h->rows; r++) {
        if (!h->active[r]) {
            h->z[r] = 0.0f;
            continue;
        }
        const float *wr = &h->w[(size_t)r * h->dim];
        float acc = h->b[r];
        for (uint16_t j = 0; j < h->dim; j++) {
            acc += wr[j] * x[j];
        }
        h->z[r] = acc;
    }
}

float tol_head_expf(float x)
{
    if (!(x >= -87.0f)) return 0.0f; /* also NaN */
    if (x > 0.0f) x = 0.0f;
    /* x = k ln2 + r, |r| <= ln2/2; ln2 split in two (Cody-Waite) */
    const float kf = floorf(x * 1.44269504f + 0.5f);
    const float r = (x - kf * 0.693359375f) - kf * -2.12194440e-4f;
    float p = 1.98412698e-4f; /* 1/5040 */
    p = p * r + 1.38888889e-3f; /* 1/720 */
    p = p * r + 8.33333333e-3f; /* 1/120 */
    p = p * r + 4.16666667e-2f; /* 1/24 */
    p = p * r + 1.66666667e-1f; /* 1/6 */
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const uint32_t bits = (uint32_t)((int32_t)kf + 127) << 23; /* 2^k, k in [-126, 0] */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

void tol_head_softmax(tol_head_t *h)
{
    float zmax = -INFINITY;
    for (uint16_t r = 0; r < h->rows; r++) {
        if (h->active[r] && h->z[r] > zmax) zmax = h->z[r];
    }
    float sum = 0.0f;
    for (uint16_t r = 0; r < h->rows; r++) {
        if (h->active[r]) {
            h->z[r] = tol_head_expf(h->z[r] - zmax);
            sum += h->z[r];
        } else {
            h->z[r] = 0.0f;
        }
    }
    for (uint16_t r = 0; r < h->rows; r++) {
        if (h->active[r]) h->z[r] = h->z[r] / sum;
    }
}

void tol_head_predict(tol_head_t *h, const float *x, int32_t *label, float *confidence)
{
    int32_t best = -1;
    tol_head_forward(h, x);
    for (uint16_t r = 0; r < h->rows; r++) {
        if (h->active[r] && (best < 0 || h->z[r] > h->z[best])) best = (int32_t)r;
    }
    float conf = 0.0f;
    if (best >= 0) {
        tol_head_softmax(h);
        conf = h->z[best];
    }
    if (label != NULL) *label = best;
    if (confidence != NULL) *confidence = conf;
}

void tol_head_grad_zero(tol_head_t *h)
{
    memset(h->gw, 0, (size_t)h->rows * h->dim * sizeof(float));
    memset(h->gb, 0, (size_t)h->rows * sizeof(float));
}

static void tol_head_accumulate_(tol_head_t *h, const float *x, uint16_t r, float g)
{
    float *gr = &h->gw[(size_t)r * h->dim];
    h->gb[r] += g;
    for (uint16_t j = 0; j < h->dim; j++) {
        gr[j] += g * x[j];
    }
}

void tol_head_grad_add_ce(tol_head_t *h, const float *x, uint16_t label, float weight,
                          float *loss)
{
    tol_head_forward(h, x);
    tol_head_softmax(h);
    if (loss != NULL) {
        const float p = h->z[label];
        *loss = -logf(p > 1e-30f ? p : 1e-30f);
    }
    for (uint16_t r = 0; r < h->rows; r++) {
        if (!h->active[r]) continue;
        const float t = (r == label) ? 1.0f : 0.0f;
        tol_head_accumulate_(h, x, r, (h->z[r] - t) * weight);
    }
}

float tol_head_mse(tol_head_t *h, const float *x, const float *target)
{
    tol_head_forward(h, x);
    float s = 0.0f;
    for (uint16_t r = 0; r < h->rows; r++) {
        const float e = h->z[r] - target[r];
        s += e * e;
    }
    return s / (float)h->rows;
}

void tol_head_grad_add_mse(tol_head_t *h, const float *x, const float *target, float weight,
                           float *mse)
{
    const float m = tol_head_mse(h, x, target);
    if (mse != NULL) *mse = m;
    const float coef = 2.0f / (float)h->rows * weight;
    for (uint16_t r = 0; r < h->rows; r++) {
        if (!h->active[r]) continue;
        tol_head_accumulate_(h, x, r, (h->z[r] - target[r]) * coef);
    }
}

tol_status_t tol_head_step(tol_head_t *h, float lr, float momentum, float weight_decay,
                           float clip_norm)
{
    const uint16_t d = h->dim;
    if (clip_norm > 0.0f) {
        float s = 0.0f;
        for (uint16_t r = 0; r < h->rows; r++) {
            if (!h->active[r]) continue;
            const float *gr = &h->gw[(size_t)r * d];
            for (uint16_t j = 0; j < d; j++) s += gr[j] * gr[j];
            s += h->gb[r] * h->gb[r];
        }
        const float norm = sqrtf(s);
        if (!tol_head_finite_(norm)) return TOL_ERR_DIVERGED;
        if (norm > clip_norm) {
            const float sc = clip_norm / norm;
            for (uint16_t r = 0; r < h->rows; r++) {
                if (!h->active[r]) continue;
                float *gr = &h->gw[(size_t)r * d];
                for (uint16_t j = 0; j < d; j++) gr[j] = gr[j] * sc;
                h->gb[r] = h->gb[r] * sc;
            }
        }
    }
    /* Pass 1: new momentum into the gradient scratch; check every new value. */
    for (uint16_t r = 0; r < h->rows; r++) {
        if (!h->active[r]) continue;
        const size_t o = (size_t)r * d;
        for (uint16_t j = 0; j < d; j++) {
            const float g = h->gw[o + j] + weight_decay * h->w[o + j];
            const float v = momentum * h->vw[o + j] + g;
            const float wn = h->w[o + j] - lr * v;
            if (!tol_head_finite_(v) || !tol_head_finite_(wn)) return TOL_ERR_DIVERGED;
            h->gw[o + j] = v;
        }
        const float vb = momentum * h->vb[r] + h->gb[r];
        const float bn = h->b[r] - lr * vb;
        if (!tol_head_finite_(vb) || !tol_head_finite_(bn)) return TOL_ERR_DIVERGED;
        h->gb[r] = vb;
    }
    /* Pass 2: commit. */
    for (uint16_t r = 0; r < h->rows; r++) {
        if (!h->active[r]) continue;
        const size_t o = (size_t)r * d;
        for (uint16_t j = 0; j < d; j++) {
            h->vw[o + j] = h->gw[o + j];
            h->w[o + j] = h->w[o + j] - lr * h->gw[o + j];
        }
        h->vb[r] = h->gb[r];
        h->b[r] = h->b[r] - lr * h->gb[r];
    }
    return TOL_OK;
}

tol_status_t tol_head_load(tol_head_t *h, const float *w, const float *b,
                           const uint8_t *active)
{
    TOL_CHECK(w != NULL && b != NULL, TOL_ERR_ARG);
    const size_t n = (size_t)h->rows * h->dim;
    for (size_t i = 0; i < n; i++) TOL_CHECK(tol_head_finite_(w[i]), TOL_ERR_NONFINITE);
    for (uint16_t r = 0; r < h->rows; r++) TOL_CHECK(tol_head_finite_(b[r]), TOL_ERR_NONFINITE);
    memcpy(h->w, w, n * sizeof(float));
    memcpy(h->b, b, (size_t)h->rows * sizeof(float));
    memset(h->vw, 0, n * sizeof(float));
    memset(h->vb, 0, (size_t)h->rows * sizeof(float));
    h->n_active = 0;
    for (uint16_t r = 0; r < h->rows; r++) {
        h->active[r] = (uint8_t)((active == NULL || active[r]) ? 1u : 0u);
        h->n_active = (uint16_t)(h->n_active + h->active[r]);
    }
    return TOL_OK;
}
