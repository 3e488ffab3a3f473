/*
 * tol_head.h - the trainable last layer (Dense, float32): y = W x + b.
 *
 * Classifier use: rows = C_max output classes, softmax + cross-entropy; a row
 * is "active" once its class has been seen (or is one of the exported initial
 * classes). Inactive rows take no part in softmax, prediction or updates; the
 * first sample of a new class activates its row with zero weights (TinyOL).
 * Autoencoder use: rows = OUT reconstruction outputs, all active, MSE loss.
 *
 * Training is split in three calls so the caller can build mini-batches:
 *   tol_head_grad_zero(); tol_head_grad_add_ce() per sample (weight 1/B);
 *   tol_head_step()  -> SGD with momentum, L2 decay, global-norm clipping.
 * tol_head_step() checks every new value before it writes any: an update that
 * would produce NaN/Inf leaves weights and momentum unchanged.
 *
 * Memory (caller owns it, 4-byte aligned, TOL_HEAD_BYTES(dim, rows) bytes):
 *   W, vW, gW  float[rows][dim]   weights, momentum, gradient/scratch
 *   b, vb, gb  float[rows]
 *   z          float[rows]        scores / probabilities of the last forward
 *   active     uint8_t[rows]
 * All loops run in a fixed order that host/tinyol/learner.py reproduces.
 */
#ifndef TOL_HEAD_H
#define TOL_HEAD_H

#include <stddef.h>
#include <stdint.h>

#include "tol_status.h"

#define TOL_ALIGN4(n) ((((size_t)(n)) + 3u) & ~(size_t)3u)

/* Bytes of caller memory for a head of `rows` outputs over `dim` inputs. */
#define TOL_HEAD_BYTES(dim, rows)                                            \
    ((size_t)4u * (3u * ((size_t)(rows) * (size_t)(dim) + (size_t)(rows)) + \
                   (size_t)(rows)) +                                         \
     TOL_ALIGN4(rows))

typedef struct {
    uint16_t dim;      /* D, inputs */
    uint16_t rows;     /* C_max (classifier) or OUT (autoencoder) */
    uint16_t n_active; /* number of active rows */
    float *w, *b;      /* [rows][dim], [rows] */
    float *vw, *vb;    /* momentum buffers, same shapes */
    float *gw, *gb;    /* gradient accumulators, same shapes */
    float *z;          /* [rows] scores (after tol_head_forward) / probabilities */
    uint8_t *active;   /* [rows] 1 = row in use */
    const float *init_w;  /* [rows][dim] exported initial weights (not owned) */
    const float *init_b;  /* [rows] exported initial bias (not owned) */
    uint16_t init_active; /* rows active after reset: 0..init_active-1 */
} tol_head_t;

/* Set up a head in caller memory `mem` (mem_bytes >= TOL_HEAD_BYTES(dim,rows),
 * 4-byte aligned) and reset it. init_w/init_b: const initial parameters
 * (row-major [rows][dim] / [rows]; must stay valid; NULL = all zero).
 * init_active: rows 0..init_active-1 start active (<= rows).
 * Returns TOL_ERR_ARG on bad sizes/alignment, TOL_ERR_OVERFLOW if mem is short. */
tol_status_t tol_head_init(tol_head_t *h, uint8_t *mem, size_t mem_bytes,
                           uint16_t dim, uint16_t rows, const float *init_w,
                           const float *init_b, uint16_t init_active);

/* Back to the exported initial head: rows 0..init_active-1 copied from init
 * and active, the other rows zero and inactive (inactive rows stay zero until
 * activated), momentum 0. */
void tol_head_reset(tol_head_t *h);

/* Activate row r (r < rows): zero its weights, bias and momentum, mark active.
 * No-op if already active. */
void tol_head_activate(tol_head_t *h, uint16_t r);

/* z[r] = b[r] + sum_j W[r][j] x[j] (j ascending) for active rows; inactive
 * rows get 0. x: in, float[dim]. */
void tol_head_forward(tol_head_t *h, const float *x);

/* exp(x) for x <= 0 (x > 0 is treated as 0; x < -87 and NaN give 0) in float32
 * steps that learner.py's expf() repeats bit for bit, so that the firmware,
 * the host build and the numpy reference agree whatever libm they use:
 * k = floor(x log2e + 1/2), r = x - k ln2 (Cody-Waite), degree-7 Taylor
 * polynomial in Horner form, times 2^k. Relative error < 2e-7. */
float tol_head_expf(float x);

/* In place: z <- softmax(z) over the active rows (max-subtracted,
 * tol_head_expf, sum over rows ascending). Inactive rows get 0. */
void tol_head_softmax(tol_head_t *h);

/* Classify x (float[dim]): label = first index of the largest score among
 * active rows (-1 if no row is active), confidence = its softmax probability.
 * Either output pointer may be NULL. Leaves probabilities in h->z. */
void tol_head_predict(tol_head_t *h, const float *x, int32_t *label, float *confidence);

/* Zero the gradient accumulators (all rows). */
void tol_head_grad_zero(tol_head_t *h);

/* Accumulate weight * d(cross-entropy)/d(W,b) for one sample into gW, gb:
 * g_r = (p_r - [r == label]) * weight; gb[r] += g_r; gW[r][j] += g_r * x[j].
 * label must be an active row. loss (may be NULL) gets -log p_label. */
void tol_head_grad_add_ce(tol_head_t *h, const float *x, uint16_t label, float weight,
                          float *loss);

/* Accumulate weight * d(MSE)/d(W,b) for one sample, MSE = mean_r (y_r - t_r)^2:
 * g_r = (y_r - t_r) * (2/rows * weight). target: in, float[rows]. mse (may be
 * NULL) gets the sample's MSE (sum ascending, then / rows). All rows active. */
void tol_head_grad_add_mse(tol_head_t *h, const float *x, const float *target, float weight,
                           float *mse);

/* Reconstruction MSE of x against target without touching the gradient. */
float tol_head_mse(tol_head_t *h, const float *x, const float *target);

/* One SGD step on the active rows from the accumulated gradient:
 *   if clip_norm > 0 and ||(gW,gb)||_2 > clip_norm: g *= clip_norm/||g||
 *   gW += weight_decay * W         (weights only, not the bias)
 *   v = momentum * v + g;  W -= lr * v      (same for b, v_b)
 * Returns TOL_ERR_DIVERGED (and changes nothing but the scratch gradient) if
 * any new v or W would be NaN/Inf. */
tol_status_t tol_head_step(tol_head_t *h, float lr, float momentum, float weight_decay,
                           float clip_norm);

/* Replace the head parameters (e.g. from a stored or pushed head): w
 * float[rows][dim], b float[rows], active uint8_t[rows] (NULL = all active).
 * Momentum is zeroed. Returns TOL_ERR_NONFINITE (no change) on NaN/Inf. */
tol_status_t tol_head_load(tol_head_t *h, const float *w, const float *b,
                           const uint8_t *active);

#endif /* TOL_HEAD_H */
