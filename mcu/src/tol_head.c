/* tol_head.c - trainable Dense head; see tol_head.h. Reference C, float32. */
#include "tol_head.h"

#include <math.h>
#include <string.h>

static int tol_head_finite_(float v)
{
    return isfinite(v) ? 1 : 0;
}

tol_status_t tol_head_init(tol_head_t *h, uint8_t *mem, size_t mem_bytes, uint16_t dim,
                           uint16_t rows, uint16_t max_batch, uint8_t momentum,
                           const float *init_w, const float *init_b, uint16_t init_active)
{
    TOL_CHECK(h != NULL && mem != NULL, TOL_ERR_ARG);
    TOL_CHECK(dim > 0u && rows > 0u && max_batch > 0u && init_active <= rows, TOL_ERR_ARG);
    TOL_CHECK(((uintptr_t)mem & 3u) == 0u, TOL_ERR_ARG);
    TOL_CHECK(mem_bytes >= TOL_HEAD_BYTES(dim, rows, max_batch, momentum), TOL_ERR_OVERFLOW);
    const size_t n = (size_t)rows * dim;
    float *f = (float *)(void *)mem;
    h->dim = dim;
    h->rows = rows;
    h->max_batch = max_batch;
    h->w = f;
    f += n;
    h->b = f;
    f += rows;
    h->vw = NULL;
    h->vb = NULL;
    if (momentum) {
        h->vw = f;
        f += n;
        h->vb = f;
        f += rows;
    }
    h->z = f;
    f += rows;
    h->e = f;
    f += (size_t)max_batch * rows;
    h->x = f;
    f += (size_t)max_batch * dim;
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
    if (h->vw != NULL) {
        memset(h->vw, 0, n * sizeof(float));
        memset(h->vb, 0, (size_t)h->rows * sizeof(float));
    }
    memset(h->z, 0, (size_t)h->rows * sizeof(float));
    for (uint16_t r = 0; r < h->rows; r++) {
        h->active[r] = (uint8_t)(r < h->init_active ? 1u : 0u);
    }
    h->n_active = h->init_active;
    h->n_batch = 0;
}

void tol_head_activate(tol_head_t *h, uint16_t r)
{
    if (r >= h->rows || h->active[r]) return;
    memset(&h->w[(size_t)r * h->dim], 0, (size_t)h->dim * sizeof(float));
    h->b[r] = 0.0f;
    if (h->vw != NULL) {
        memset(&h->vw[(size_t)r * h->dim], 0, (size_t)h->dim * sizeof(float));
        h->vb[r] = 0.0f;
    }
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
    h->n_batch = 0;
}

float *tol_head_batch_slot(tol_head_t *h)
{
    if (h->n_batch >= h->max_batch) return NULL;
    return &h->x[(size_t)h->n_batch * h->dim];
}

/* Store x as the next batch input (unless it is already there); return it. */
static float *tol_head_take_(tol_head_t *h, const float *x)
{
    float *slot = &h->x[(size_t)h->n_batch * h->dim];
    if (x != slot) memcpy(slot, x, (size_t)h->dim * sizeof(float));
    return slot;
}

tol_status_t tol_head_grad_add_ce(tol_head_t *h, const float *x, uint16_t label, float weight,
                                  float *loss)
{
    TOL_CHECK(h->n_batch < h->max_batch, TOL_ERR_FULL);
    TOL_CHECK(label < h->rows, TOL_ERR_LABEL);
    const float *xs = tol_head_take_(h, x);
    float *e = &h->e[(size_t)h->n_batch * h->rows];
    tol_head_forward(h, xs);
    tol_head_softmax(h);
    if (loss != NULL) {
        const float p = h->z[label];
        *loss = -logf(p > 1e-30f ? p : 1e-30f);
    }
    for (uint16_t r = 0; r < h->rows; r++) {
        const float t = (r == label) ? 1.0f : 0.0f;
        e[r] = h->active[r] ? (h->z[r] - t) * weight : 0.0f;
    }
    h->n_batch++;
    return TOL_OK;
}

float tol_head_mse(tol_head_t *h, const float *x, const float *target)
{
    tol_head_forward(h, x);
    float s = 0.0f;
    for (uint16_t r = 0; r < h->rows; r++) {
        const float d = h->z[r] - target[r];
        s += d * d;
    }
    return s / (float)h->rows;
}

tol_status_t tol_head_grad_add_mse(tol_head_t *h, const float *x, const float *target,
                                   float weight, float *mse)
{
    TOL_CHECK(h->n_batch < h->max_batch, TOL_ERR_FULL);
    const float *xs = tol_head_take_(h, x);
    float *e = &h->e[(size_t)h->n_batch * h->rows];
    const float m = tol_head_mse(h, xs, target);
    if (mse != NULL) *mse = m;
    const float coef = 2.0f / (float)h->rows * weight;
    for (uint16_t r = 0; r < h->rows; r++) {
        e[r] = h->active[r] ? (h->z[r] - target[r]) * coef : 0.0f;
    }
    h->n_batch++;
    return TOL_OK;
}

/* Weight gradient element from the factors: sum_b e_b[r] x_b[j]. */
static float tol_head_gw_(const tol_head_t *h, uint16_t r, uint16_t j)
{
    float acc = 0.0f;
    for (uint16_t b = 0; b < h->n_batch; b++) {
        acc += h->e[(size_t)b * h->rows + r] * h->x[(size_t)b * h->dim + j];
    }
    return acc;
}

static float tol_head_gb_(const tol_head_t *h, uint16_t r)
{
    float acc = 0.0f;
    for (uint16_t b = 0; b < h->n_batch; b++) acc += h->e[(size_t)b * h->rows + r];
    return acc;
}

tol_status_t tol_head_step(tol_head_t *h, float lr, float momentum, float weight_decay,
                           float clip_norm)
{
    TOL_CHECK(momentum == 0.0f || h->vw != NULL, TOL_ERR_ARG);
    const uint16_t d = h->dim;
    int scale = 0;
    float sc = 1.0f;
    if (clip_norm > 0.0f) {
        float s = 0.0f;
        for (uint16_t r = 0; r < h->rows; r++) {
            if (!h->active[r]) continue;
            for (uint16_t j = 0; j < d; j++) {
                const float g = tol_head_gw_(h, r, j);
                s += g * g;
            }
            const float gb = tol_head_gb_(h, r);
            s += gb * gb;
        }
        const float norm = sqrtf(s);
        if (!tol_head_finite_(norm)) return TOL_ERR_DIVERGED;
        if (norm > clip_norm) {
            scale = 1;
            sc = clip_norm / norm;
        }
    }
    /* pass 0 checks every new value, pass 1 commits the same values */
    for (int pass = 0; pass < 2; pass++) {
        for (uint16_t r = 0; r < h->rows; r++) {
            if (!h->active[r]) continue;
            const size_t o = (size_t)r * d;
            for (uint16_t j = 0; j < d; j++) {
                float g = tol_head_gw_(h, r, j);
                if (scale) g = g * sc;
                g = g + weight_decay * h->w[o + j];
                const float v = (h->vw != NULL) ? momentum * h->vw[o + j] + g : g;
                const float wn = h->w[o + j] - lr * v;
                if (pass == 0) {
                    if (!tol_head_finite_(v) || !tol_head_finite_(wn)) return TOL_ERR_DIVERGED;
                } else {
                    if (h->vw != NULL) h->vw[o + j] = v;
                    h->w[o + j] = wn;
                }
            }
            float gb = tol_head_gb_(h, r);
            if (scale) gb = gb * sc;
            const float vb = (h->vb != NULL) ? momentum * h->vb[r] + gb : gb;
            const float bn = h->b[r] - lr * vb;
            if (pass == 0) {
                if (!tol_head_finite_(vb) || !tol_head_finite_(bn)) return TOL_ERR_DIVERGED;
            } else {
                if (h->vb != NULL) h->vb[r] = vb;
                h->b[r] = bn;
            }
        }
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
    if (h->vw != NULL) {
        memset(h->vw, 0, n * sizeof(float));
        memset(h->vb, 0, (size_t)h->rows * sizeof(float));
    }
    h->n_active = 0;
    for (uint16_t r = 0; r < h->rows; r++) {
        h->active[r] = (uint8_t)((active == NULL || active[r]) ? 1u : 0u);
        h->n_active = (uint16_t)(h->n_active + h->active[r]);
    }
    h->n_batch = 0;
    return TOL_OK;
}
