/* tol_head.c - trainable Dense head; see tol_head.h. Plain C, float32; every
 * multiply-add goes through tol_fmac.h (VMLA/VMLS on the M4F, same floats). */
#include "tol_head.h"

#include <math.h>
#include <string.h>

#include "tol_fmac.h"

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
    h->gw = NULL;
    h->gb = NULL;
    if (max_batch > 1u) {
        h->gw = f;
        f += n;
        h->gb = f;
        f += rows;
    }
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

/* acc + sum_j w[j] x[j], j ascending: blocks of 8 (tol_fmac.h), then the rest. */
static float tol_head_dot_(const float *w, const float *x, uint16_t d, float acc)
{
    if (d >= 8u) acc = tol_fmac_dot8_(acc, &w, &x, (uint32_t)d >> 3);
    for (uint16_t n = (uint16_t)(d & 7u); n > 0u; n--) {
        acc = tol_fmac_mla(acc, *w++, *x++);
    }
    return acc;
}

void tol_head_forward(tol_head_t *h, const float *x)
{
    const uint16_t d = h->dim;
    const uint16_t rows = h->rows;
    const uint8_t *act = h->active;
    uint16_t r = 0;
    while (r < rows) {
        if (!act[r]) {
            h->z[r] = 0.0f;
            r++;
            continue;
        }
        const float *wr = &h->w[(size_t)r * d];
        if (d >= 8u && r + 4u <= rows && act[r + 1u] && act[r + 2u] && act[r + 3u]) {
            /* four rows share each block of x; every row's sum keeps its order */
            float *z = &h->z[r];
            for (uint16_t i = 0; i < 4u; i++) z[i] = h->b[r + i];
            tol_fmac_dot4x8_(z, wr, d, x, (uint32_t)d >> 3);
            const uint16_t j0 = (uint16_t)(d & ~7u);
            for (uint16_t i = 0; i < 4u; i++) {
                float acc = z[i];
                for (uint16_t j = j0; j < d; j++) acc = tol_fmac_mla(acc, wr[(size_t)i * d + j], x[j]);
                z[i] = acc;
            }
            r = (uint16_t)(r + 4u);
        } else {
            h->z[r] = tol_head_dot_(wr, x, d, h->b[r]);
            r++;
        }
    }
}

/* tol_head_expf for x in [-87, 0] (inlined where a loop knows that much: its constants
 * then stay in registers across the loop). */
static inline float tol_head_exp_le0_(float x)
{
    /* x = k ln2 + r, |r| <= ln2/2; ln2 split in two (Cody-Waite) */
    /* floor(y) for y in [-125.5, 0.5]: truncate, then step down if that rounded up
     * (the same float as floorf, without a libm call) */
    const float y = tol_fmac_mla(0.5f, x, 1.44269504f);
    float kf = (float)(int32_t)y;
    if (kf > y) kf -= 1.0f;
    const float r = tol_fmac_mls(tol_fmac_mls(x, kf, 0.693359375f), kf, -2.12194440e-4f);
    float p = 1.98412698e-4f; /* 1/5040; then Horner: p = p * r + c */
    p = tol_fmac_mla(1.38888889e-3f, p, r); /* 1/720 */
    p = tol_fmac_mla(8.33333333e-3f, p, r); /* 1/120 */
    p = tol_fmac_mla(4.16666667e-2f, p, r); /* 1/24 */
    p = tol_fmac_mla(1.66666667e-1f, p, r); /* 1/6 */
    p = tol_fmac_mla(0.5f, p, r);
    p = tol_fmac_mla(1.0f, p, r);
    p = tol_fmac_mla(1.0f, p, r);
    const uint32_t bits = (uint32_t)((int32_t)kf + 127) << 23; /* 2^k, k in [-126, 0] */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

float tol_head_expf(float x)
{
    if (!(x >= -87.0f)) return 0.0f; /* also NaN */
    if (x > 0.0f) x = 0.0f;
    return tol_head_exp_le0_(x);
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

void tol_head_view(const tol_head_t *h, uint16_t first, tol_head_t *v)
{
    *v = *h;
    v->x = &h->x[(size_t)first * h->dim];
    v->e = &h->e[(size_t)first * h->rows];
    v->max_batch = (uint16_t)(h->max_batch - first);
    v->n_batch = 0;
}

void tol_head_view_end(tol_head_t *h, const tol_head_t *v)
{
    h->n_active = v->n_active;
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

/* Scores of batch samples b0 .. b0+n-1 into their error rows: e[b][r] = b[r] + W[r] . x_b
 * (j ascending) for the active rows (the others are left alone). Four active rows times two
 * samples share each block of weights and inputs (tol_fmac_dot4x2_); every sum keeps the
 * order of tol_head_forward. */
static void tol_head_forward_n_(tol_head_t *h, uint16_t b0, uint16_t n)
{
    const uint16_t d = h->dim;
    const uint16_t rows = h->rows;
    const uint8_t *act = h->active;
    const uint32_t n8 = (uint32_t)d >> 3;
    const uint16_t j0 = (uint16_t)(d & ~7u);
    const float *xs = &h->x[(size_t)b0 * d];
    float *es = &h->e[(size_t)b0 * rows];
    uint16_t r = 0;
    while (r < rows) {
        if (!act[r]) {
            r++;
            continue;
        }
        const float *wr = &h->w[(size_t)r * d];
        const uint16_t nr = (d >= 8u && r + 4u <= rows && act[r + 1u] && act[r + 2u] && act[r + 3u]) ? 4u : 1u;
        const float *br = &h->b[r];
        uint16_t b = 0;
        if (n8 > 0u) {
            for (; b + 2u <= n; b = (uint16_t)(b + 2u)) {
                float *z0 = &es[(size_t)b * rows + r];
                const float *x0 = &xs[(size_t)b * d];
                if (nr == 4u) {
                    tol_fmac_dot4x2_(z0, z0 + rows, br, wr, d, x0, x0 + d, n8);
                } else {
                    tol_fmac_dot1x2_(z0, z0 + rows, br[0], wr, x0, x0 + d, n8);
                }
            }
        }
        for (; b < n; b++) {
            /* the last of an odd number of samples (or every sample if d < 8) */
            float *z0 = &es[(size_t)b * rows + r];
            const float *x0 = &xs[(size_t)b * d];
            for (uint16_t i = 0; i < nr; i++) z0[i] = br[i];
            if (n8 == 0u) continue;
            if (nr == 4u) {
                tol_fmac_dot4x8_(z0, wr, d, x0, n8);
            } else {
                const float *pw = wr;
                const float *px = x0;
                z0[0] = tol_fmac_dot8_(z0[0], &pw, &px, n8);
            }
        }
        if (j0 < d) {
            for (b = 0; b < n; b++) {
                float *z = &es[(size_t)b * rows + r];
                const float *x = &xs[(size_t)b * d];
                for (uint16_t i = 0; i < nr; i++) {
                    float acc = z[i];
                    for (uint16_t j = j0; j < d; j++) acc = tol_fmac_mla(acc, wr[(size_t)i * d + j], x[j]);
                    z[i] = acc;
                }
            }
        }
        r = (uint16_t)(r + nr);
    }
}

/* One sample's scores in e (float[rows], active rows) -> its cross-entropy errors
 * (p_r - [r == label]) * weight, 0 for inactive rows: tol_head_softmax's steps. */
static void tol_head_ce_errors_(const tol_head_t *h, float *e, uint16_t label, float weight)
{
    const uint16_t rows = h->rows;
    const uint8_t *act = h->active;
    float zmax = -INFINITY;
    float sum = 0.0f;
    if (h->n_active == rows) {
        for (uint16_t r = 0; r < rows; r++) {
            if (e[r] > zmax) zmax = e[r];
        }
        for (uint16_t r = 0; r < rows; r++) {
            /* e[r] - zmax <= 0 (or NaN): tol_head_expf without its clamp */
            const float x = e[r] - zmax;
            const float p = x >= -87.0f ? tol_head_exp_le0_(x) : 0.0f;
            e[r] = p;
            sum += p;
        }
        /* (p - 0.0f) * weight is p * weight */
        const float pl = e[label] / sum;
        for (uint16_t r = 0; r < rows; r++) e[r] = e[r] / sum * weight;
        e[label] = (pl - 1.0f) * weight;
        return;
    }
    for (uint16_t r = 0; r < rows; r++) {
        if (act[r] && e[r] > zmax) zmax = e[r];
    }
    for (uint16_t r = 0; r < rows; r++) {
        if (act[r]) {
            const float p = tol_head_expf(e[r] - zmax);
            e[r] = p;
            sum += p;
        }
    }
    for (uint16_t r = 0; r < rows; r++) {
        const float t = (r == label) ? 1.0f : 0.0f;
        e[r] = act[r] ? (e[r] / sum - t) * weight : 0.0f;
    }
}

tol_status_t tol_head_grad_add_ce_n(tol_head_t *h, const uint16_t *labels, uint16_t n, float weight)
{
    TOL_CHECK(n <= h->max_batch - h->n_batch, TOL_ERR_FULL);
    for (uint16_t i = 0; i < n; i++) TOL_CHECK(labels[i] < h->rows, TOL_ERR_LABEL);
    const uint16_t b0 = h->n_batch;
    tol_head_forward_n_(h, b0, n);
    for (uint16_t i = 0; i < n; i++) {
        tol_head_ce_errors_(h, &h->e[(size_t)(b0 + i) * h->rows], labels[i], weight);
    }
    h->n_batch = (uint16_t)(b0 + n);
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

/* e_r = (z_r - t_r) * coef from the scores in h->z (the forward of xs). */
static void tol_head_mse_errors_(tol_head_t *h, const float *target, float weight)
{
    float *e = &h->e[(size_t)h->n_batch * h->rows];
    const float coef = 2.0f / (float)h->rows * weight;
    for (uint16_t r = 0; r < h->rows; r++) {
        e[r] = h->active[r] ? (h->z[r] - target[r]) * coef : 0.0f;
    }
    h->n_batch++;
}

tol_status_t tol_head_grad_add_mse(tol_head_t *h, const float *x, const float *target,
                                   float weight, float *mse)
{
    TOL_CHECK(h->n_batch < h->max_batch, TOL_ERR_FULL);
    const float *xs = tol_head_take_(h, x);
    const float m = tol_head_mse(h, xs, target);
    if (mse != NULL) *mse = m;
    tol_head_mse_errors_(h, target, weight);
    return TOL_OK;
}

tol_status_t tol_head_grad_add_mse_z(tol_head_t *h, const float *x, const float *target,
                                     float weight)
{
    TOL_CHECK(h->n_batch < h->max_batch, TOL_ERR_FULL);
    (void)tol_head_take_(h, x);
    tol_head_mse_errors_(h, target, weight);
    return TOL_OK;
}

/* The gradient of the active rows into gW/gb (max_batch > 1):
 * gW[r][j] = sum_b e_b[r] x_b[j], gb[r] = sum_b e_b[r], b ascending from 0.0f.
 * Five active rows at a time: 5 x 4 blocks of sums in registers (tol_fmac_outer5x4_);
 * other rows one at a time, eight columns per block (tol_fmac_outer8_). */
static void tol_head_grad_form_(tol_head_t *h)
{
    const uint16_t d = h->dim;
    const uint16_t rows = h->rows;
    const uint16_t nb = h->n_batch;
    const uint8_t *act = h->active;
    uint16_t r = 0;
    while (r < rows) {
        if (!act[r]) {
            r++;
            continue;
        }
        const uint16_t nr = (d >= 4u && r + 5u <= rows && act[r + 1u] && act[r + 2u] && act[r + 3u] &&
                             act[r + 4u]) ? 5u : 1u;
        const uint16_t r_end = (uint16_t)(r + nr);
        uint16_t j_rest = 0; /* columns already formed for all nr rows */
        if (nr == 5u) {
            for (; j_rest + 4u <= d; j_rest = (uint16_t)(j_rest + 4u)) {
                tol_fmac_outer5x4_(&h->gw[(size_t)r * d + j_rest], d, &h->e[r], rows, &h->x[j_rest], d, nb);
            }
        }
        for (; r < r_end; r++) {
            float *g0 = &h->gw[(size_t)r * d];
            const float *e0 = &h->e[r];
            float sb = 0.0f;
            for (uint16_t b = 0; b < nb; b++) sb += e0[(size_t)b * rows];
            h->gb[r] = sb;
            uint16_t j = j_rest;
            for (; j + 8u <= d; j = (uint16_t)(j + 8u)) {
                tol_fmac_outer8_(&g0[j], e0, rows, &h->x[j], d, nb);
            }
            for (; j < d; j++) {
                float a = 0.0f;
                for (uint16_t b = 0; b < nb; b++) {
                    a = tol_fmac_mla(a, e0[(size_t)b * rows], h->x[(size_t)b * d + j]);
                }
                g0[j] = a;
            }
        }
    }
}

static float tol_head_gb_(const tol_head_t *h, uint16_t r)
{
    if (h->gb != NULL && h->n_batch > 1u) return h->gb[r];
    return h->n_batch > 0u ? 0.0f + h->e[r] : 0.0f;
}

/* Row r's gradient source: gW's row (batch > 1), or the single sample's factors
 * e and x with g[j] = 0.0f + e x[j] (an empty batch: e = 0 and x = the row's own
 * finite weights, so g[j] = 0.0f as a sum of no terms). */
typedef struct {
    const float *g; /* gW row or NULL */
    float e;
    const float *x;
} tol_head_grow_t;

static tol_head_grow_t tol_head_grad_row_(const tol_head_t *h, uint16_t r)
{
    tol_head_grow_t gr = {NULL, 0.0f, &h->w[(size_t)r * h->dim]};
    if (h->gw != NULL && h->n_batch > 1u) {
        gr.g = &h->gw[(size_t)r * h->dim];
    } else if (h->n_batch > 0u) {
        gr.e = h->e[r];
        gr.x = h->x;
    }
    return gr;
}

/* sum_j g[j]^2 of row r, j ascending, continuing s */
static float tol_head_sq_row_(const tol_head_t *h, uint16_t r, float s)
{
    const tol_head_grow_t gr = tol_head_grad_row_(h, r);
    for (uint16_t j = 0; j < h->dim; j++) {
        const float g = gr.g != NULL ? gr.g[j] : tol_fmac_mla(0.0f, gr.e, gr.x[j]);
        s = tol_fmac_mla(s, g, g);
    }
    return s;
}

/* One pass over row r: the new momentum and weights, written if `commit`;
 * returns the sum of 0 * (each new value): NaN iff one of them is not finite. */
static float tol_head_update_row_(tol_head_t *h, uint16_t r, float lr, float mu, float wd,
                                  float sc, int scale, int commit)
{
    const tol_head_grow_t gr = tol_head_grad_row_(h, r);
    const uint16_t d = h->dim;
    const size_t o = (size_t)r * d;
    float *w = &h->w[o];
    float *vw = h->vw != NULL ? &h->vw[o] : NULL;
    float chk = 0.0f;
    if (scale) {
        /* clipped (rare): element by element */
        for (uint16_t j = 0; j < d; j++) {
            const float gj = gr.g != NULL ? gr.g[j] : tol_fmac_mla(0.0f, gr.e, gr.x[j]);
            chk = tol_fmac_sgd1_(&w[j], vw != NULL ? &vw[j] : NULL, gj * sc, lr, mu, wd, 1, chk, commit);
        }
    } else {
        /* no momentum buffers: blocks of 8 (tol_fmac.h), then the rest element by element */
        uint16_t j = 0;
        if (vw == NULL && gr.g != NULL && d >= 8u) {
            chk = tol_fmac_sgd8_(w, gr.g, (uint32_t)d >> 3, lr, wd, chk, commit);
            j = (uint16_t)(d & ~7u);
        } else if (vw == NULL) {
            float gbuf[8];
            for (; j + 8u <= d; j = (uint16_t)(j + 8u)) {
                for (uint16_t k = 0; k < 8u; k++) gbuf[k] = tol_fmac_mla(0.0f, gr.e, gr.x[j + k]);
                chk = tol_fmac_sgd8_(&w[j], gbuf, 1u, lr, wd, chk, commit);
            }
        }
        for (; j < d; j++) {
            const float gj = gr.g != NULL ? gr.g[j] : tol_fmac_mla(0.0f, gr.e, gr.x[j]);
            chk = tol_fmac_sgd1_(&w[j], vw != NULL ? &vw[j] : NULL, gj, lr, mu, wd, 1, chk, commit);
        }
    }
    float gb = tol_head_gb_(h, r);
    if (scale) gb = gb * sc;
    return tol_fmac_sgd1_(&h->b[r], h->vb != NULL ? &h->vb[r] : NULL, gb, lr, mu, wd, 0, chk, commit);
}

/* A whole pass without clipping, row loop kept tight: the gradient from gW
 * (batch > 1) or from the single sample's factors, with or without momentum buffers. */
static float tol_head_pass_plain_(tol_head_t *h, float lr, float mu, float wd, int commit)
{
    const uint16_t d = h->dim;
    const uint16_t rows = h->rows;
    const uint32_t n8 = (uint32_t)d >> 3;
    const uint16_t j0 = (uint16_t)(d & ~7u);
    const int from_g = h->gw != NULL && h->n_batch > 1u;
    const int empty = h->n_batch == 0u;
    const int has_v = h->vw != NULL;
    const int v0 = has_v && mu == 0.0f && commit; /* vw stored, not read (tol_fmac.h) */
    float chk = 0.0f;
    for (uint16_t r = 0; r < rows; r++) {
        if (!h->active[r]) continue;
        float *w = &h->w[(size_t)r * d];
        float *vw = has_v ? &h->vw[(size_t)r * d] : NULL;
        const float e = empty ? 0.0f : h->e[r];
        const float *x = empty ? w : h->x;
        const float *g = from_g ? &h->gw[(size_t)r * d] : NULL;
        if (from_g) {
            if (n8 > 0u) {
                if (v0) {
                    tol_fmac_sgd8_v0_(w, vw, g, n8, lr, wd);
                } else {
                    chk = has_v ? tol_fmac_sgd8_vw_(w, vw, g, n8, lr, mu, wd, chk, commit)
                                : tol_fmac_sgd8_(w, g, n8, lr, wd, chk, commit);
                }
            }
        } else {
            for (uint16_t j = 0; j < j0; j = (uint16_t)(j + 8u)) {
                if (v0) {
                    tol_fmac_sgd8_v0_ex_(&w[j], &vw[j], e, &x[j], lr, wd);
                } else if (has_v) {
                    chk = tol_fmac_sgd4_vw_ex_(&w[j], &vw[j], e, &x[j], lr, mu, wd, chk, commit);
                    chk = tol_fmac_sgd4_vw_ex_(&w[j + 4u], &vw[j + 4u], e, &x[j + 4u], lr, mu, wd,
                                               chk, commit);
                } else {
                    chk = tol_fmac_sgd8_ex_(&w[j], e, &x[j], lr, wd, chk, commit);
                }
            }
        }
        for (uint16_t j = j0; j < d; j++) {
            const float gj = from_g ? g[j] : tol_fmac_mla(0.0f, e, x[j]);
            chk = tol_fmac_sgd1_(&w[j], has_v ? &vw[j] : NULL, gj, lr, mu, wd, 1, chk, commit);
        }
        const float gb = from_g ? h->gb[r] : (empty ? 0.0f : 0.0f + e);
        chk = tol_fmac_sgd1_(&h->b[r], has_v ? &h->vb[r] : NULL, gb, lr, mu, wd, 0, chk, commit);
    }
    return chk;
}

/* The commit of tol_head_pass_plain_ for a batch of one sample with mu = 0 (the
 * autoencoder step), row loop kept tight: g = 0.0f + e x, v = g + wd w (the bias:
 * v = 0.0f + e), stored to vw unread if there are momentum buffers
 * (tol_fmac_sgd8_v0_ex_), w - lr v. The same floats as the general pass. */
static void tol_head_commit_v0_one_(tol_head_t *h, float lr, float wd)
{
    const uint16_t d = h->dim;
    const uint16_t rows = h->rows;
    const uint16_t j0 = (uint16_t)(d & ~7u);
    const float *x = h->x;
    const float *e = h->e;
    const uint8_t *act = h->active;
    float *w = h->w;
    float *vw = h->vw;
    for (uint16_t r = 0; r < rows; r++, w += d) {
        if (!act[r]) {
            if (vw != NULL) vw += d;
            continue;
        }
        const float er = e[r];
        if (vw != NULL) {
            for (uint16_t j = 0; j < j0; j = (uint16_t)(j + 8u)) {
                tol_fmac_sgd8_v0_ex_(&w[j], &vw[j], er, &x[j], lr, wd);
            }
        } else {
            for (uint16_t j = 0; j < j0; j = (uint16_t)(j + 8u)) {
                (void)tol_fmac_sgd8_ex_(&w[j], er, &x[j], lr, wd, 0.0f, 1);
            }
        }
        for (uint16_t j = j0; j < d; j++) {
            (void)tol_fmac_sgd1_(&w[j], vw != NULL ? &vw[j] : NULL, tol_fmac_mla(0.0f, er, x[j]), lr, 0.0f,
                                 wd, 1, 0.0f, 1);
        }
        const float v = 0.0f + er;
        if (h->vb != NULL) h->vb[r] = v;
        h->b[r] = tol_fmac_mls(h->b[r], lr, v);
        if (vw != NULL) vw += d;
    }
}

/* The OR of the bits of n floats, continuing acc: one instruction per value. */
static uint32_t tol_head_or_(const float *v, size_t n, uint32_t acc)
{
    size_t i = 0;
    for (; i + 8u <= n; i += 8u) {
        uint32_t u[8];
        memcpy(u, &v[i], sizeof u);
        acc |= ((u[0] | u[1]) | (u[2] | u[3])) | ((u[4] | u[5]) | (u[6] | u[7]));
    }
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], sizeof u);
        acc |= u;
    }
    return acc;
}

#define TOL_HEAD_BIG_BIT 0x40000000u
#define TOL_HEAD_BIG 3.68934881e19f /* 2^65 */

/* max |v[i]| of finite values (checked by tol_head_big_ first), continuing m */
static float tol_head_max_abs_(const float *v, size_t n, float m)
{
    for (size_t i = 0; i < n; i++) {
        const float a = fabsf(v[i]);
        if (a > m) m = a;
    }
    return m;
}

/* 1 if no new weight, bias or momentum of a plain step (no clipping) from a
 * batch of at most one sample can be inf or NaN, so the check pass can be
 * skipped (the committed values are the same either way): every old value is
 * finite with |w|, |v| < 2^65, the gradient is e x (bias: e) with
 * |g| <= G = max|e| max(|x|, 1), so |v'| <= G + (|wd| + |mu|) 2^65 and
 * |w'| <= 2^65 + |lr| |v'|, which must stay under 1e30 (2^28 below FLT_MAX:
 * float rounding in the bound or in the step cannot close that gap). The test
 * costs ~2 instructions per value, the check pass ~8 per weight. (A batch's gW
 * is not tested: measured, it did not pay for itself on a 10 x 32 head.)
 * With mu == 0 the momentum buffers are not scanned: they are always finite (zeroed,
 * committed only when the new weights are finite, checked on restore), so
 * v' = g' + 0 vw = g' whatever their size. max|e| is bounded by the OR of the e's
 * bits (one instruction per value): its exponent field is >= every e's, so
 * |e| < 2^(E - 126); an inf or NaN e gives E = 255 and fails the bound. */
static int tol_head_bounded_(const tol_head_t *h, float lr, float mu, float wd)
{
    const uint16_t d = h->dim;
    const int one = h->n_batch > 0u;
    /* all rows active (the usual case): each array in one run; else row by row */
    const int all = h->n_active == h->rows;
    const uint16_t nrun = all ? 1u : h->rows;
    const size_t len = all ? (size_t)h->rows * d : d;
    const size_t blen = all ? h->rows : 1u;
    const int scan_v = h->vw != NULL && mu != 0.0f;
    uint32_t big = 0u;
    uint32_t ebits = 0u;
    for (uint16_t r = 0; r < nrun; r++) {
        if (!all && !h->active[r]) continue;
        const size_t o = (size_t)r * d;
        big = tol_fmac_big_(&h->b[r], blen, tol_fmac_big_(&h->w[o], len, big));
        if (scan_v) big = tol_fmac_big_(&h->vb[r], blen, tol_fmac_big_(&h->vw[o], len, big));
        if (one) ebits = tol_head_or_(&h->e[r], blen, ebits);
    }
    if (one) big = tol_fmac_big_(h->x, d, big);
    if (big & TOL_HEAD_BIG_BIT) return 0;
    const uint32_t eexp = (ebits >> 23) & 0xFFu;
    if (eexp >= 0xFEu) return 0; /* |e| may reach 2^127, or inf / NaN */
    const uint32_t ebound_bits = (eexp + 1u) << 23; /* 2^(E - 126) */
    float emax;
    memcpy(&emax, &ebound_bits, sizeof emax);
    const float g = one ? emax * tol_head_max_abs_(h->x, d, 1.0f) : 0.0f;
    const float v_new = g + (fabsf(wd) + fabsf(mu)) * TOL_HEAD_BIG;
    const float w_new = TOL_HEAD_BIG + fabsf(lr) * v_new;
    return w_new < 1e30f ? 1 : 0; /* also 0 for NaN */
}

tol_status_t tol_head_step(tol_head_t *h, float lr, float momentum, float weight_decay,
                           float clip_norm)
{
    TOL_CHECK(momentum == 0.0f || h->vw != NULL, TOL_ERR_ARG);
    if (h->gw != NULL && h->n_batch > 1u) tol_head_grad_form_(h); /* the only time it is formed */
    int scale = 0;
    float sc = 1.0f;
    if (clip_norm > 0.0f) {
        float s = 0.0f;
        for (uint16_t r = 0; r < h->rows; r++) {
            if (!h->active[r]) continue;
            s = tol_head_sq_row_(h, r, s);
            const float gb = tol_head_gb_(h, r);
            s = tol_fmac_mla(s, gb, gb);
        }
        const float norm = sqrtf(s);
        if (!tol_head_finite_(norm)) return TOL_ERR_DIVERGED;
        if (norm > clip_norm) {
            scale = 1;
            sc = clip_norm / norm;
        }
    }
    /* pass 0 checks every new value, pass 1 commits the same values. W and b are
     * finite before the step, so a non-finite v (or vb) always makes its new weight
     * (or bias) non-finite too: checking the new weights checks both. */
    const int plain = !scale;
    const int batch = h->gw != NULL && h->n_batch > 1u;
    if (plain && !batch && tol_head_bounded_(h, lr, momentum, weight_decay)) {
        /* nothing can overflow */
        if (h->n_batch == 1u && momentum == 0.0f) {
            tol_head_commit_v0_one_(h, lr, weight_decay);
        } else {
            (void)tol_head_pass_plain_(h, lr, momentum, weight_decay, 1);
        }
        return TOL_OK;
    }
    for (int pass = 0; pass < 2; pass++) {
        float chk = 0.0f;
        if (plain) {
            chk = tol_head_pass_plain_(h, lr, momentum, weight_decay, pass);
            if (pass == 0 && !(chk == chk)) return TOL_ERR_DIVERGED;
            continue;
        }
        for (uint16_t r = 0; r < h->rows; r++) {
            if (!h->active[r]) continue;
            chk += tol_head_update_row_(h, r, lr, momentum, weight_decay, sc, scale, pass);
        }
        if (pass == 0 && !(chk == chk)) return TOL_ERR_DIVERGED;
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
