/*
 * tol_head.h - the trainable last layer (Dense, float32): y = W x + b.
 *
 * Classifier use: rows = C_max output classes, softmax + cross-entropy; a row
 * is "active" once its class has been seen (or is one of the exported initial
 * classes). Inactive rows take no part in softmax, prediction or updates and
 * stay zero; the first sample of a new class activates its row (TinyOL).
 * Autoencoder use: rows = OUT reconstruction outputs, all active, MSE loss.
 *
 * Training is split in three calls so the caller can build mini-batches:
 *   tol_head_grad_zero(); tol_head_grad_add_ce() (or _mse) per sample with
 *   weight 1/B; tol_head_step() -> SGD with momentum, L2 decay, clipping.
 * The gradient is kept factored: for each batch sample its input x_b
 * (float[dim]) and its output error e_b (float[rows]); the weight gradient
 *   gW[r][j] = sum_b e_b[r] * x_b[j]   (b ascending, starting from 0.0f)
 * is formed inside tol_head_step(), once per step: with a batch of one sample
 * it is the single product e_0[r] * x_0[j] (so a 640 x 16 autoencoder head
 * needs 41 KB, not 123 KB); with max_batch > 1 the sums go into a gradient
 * scratch gW [rows][dim] + gb [rows] (formed once, read by the check and the
 * commit pass). tol_head_step() checks every new value before it writes any:
 * an update that would produce NaN/Inf leaves weights and momentum unchanged.
 * Multiply-adds use the FPU's VMLA/VMLS on Cortex-M4F (tol_fmac.h): not fused,
 * so each is the same float as the separate multiply and add.
 *
 * Memory (caller owns it, 4-byte aligned,
 * TOL_HEAD_BYTES(dim, rows, max_batch, momentum) bytes):
 *   W            float[rows][dim]
 *   b            float[rows]
 *   vW, vb       float[rows][dim], float[rows]  only if momentum != 0
 *   z            float[rows]              scores / probabilities (last forward)
 *   e            float[max_batch][rows]   per-sample output errors
 *   x            float[max_batch][dim]    per-sample inputs
 *   gW, gb       float[rows][dim], float[rows]  only if max_batch > 1
 *   active       uint8_t[rows]
 * All loops run in a fixed order that host/tinyol/learn/learner.py reproduces.
 */
#ifndef TOL_HEAD_H
#define TOL_HEAD_H

#include <stddef.h>
#include <stdint.h>

#include "tol_status.h"

#define TOL_ALIGN4(n) ((((size_t)(n)) + 3u) & ~(size_t)3u)

/* Bytes of caller memory for a head of `rows` outputs over `dim` inputs that
 * accumulates up to max_batch samples per step; momentum: 1 to allocate the
 * momentum buffers (needed for momentum > 0), 0 not to. */
#define TOL_HEAD_BYTES(dim, rows, max_batch, momentum)                           \
    ((size_t)4u * ((((momentum) ? 2u : 1u) + ((max_batch) > 1 ? 1u : 0u)) *      \
                       ((size_t)(rows) * (size_t)(dim) + (size_t)(rows)) +       \
                   (size_t)(rows) +                                             \
                   (size_t)(max_batch) * ((size_t)(rows) + (size_t)(dim))) +     \
     TOL_ALIGN4(rows))

typedef struct {
    uint16_t dim;       /* D, inputs */
    uint16_t rows;      /* C_max (classifier) or OUT (autoencoder) */
    uint16_t n_active;  /* number of active rows */
    uint16_t max_batch; /* capacity of the gradient factors */
    uint16_t n_batch;   /* samples accumulated since tol_head_grad_zero */
    float *w, *b;       /* [rows][dim], [rows] */
    float *vw, *vb;     /* momentum buffers (NULL without momentum) */
    float *z;           /* [rows] scores (after tol_head_forward) / probabilities */
    float *e;           /* [max_batch][rows] output errors (weighted) */
    float *x;           /* [max_batch][dim] inputs */
    float *gw, *gb;     /* gradient scratch [rows][dim], [rows] (NULL if max_batch == 1) */
    uint8_t *active;    /* [rows] 1 = row in use */
    const float *init_w;  /* [rows][dim] exported initial weights (not owned) */
    const float *init_b;  /* [rows] exported initial bias (not owned) */
    uint16_t init_active; /* rows active after reset: 0..init_active-1 */
} tol_head_t;

/* Set up a head in caller memory `mem` (mem_bytes >= TOL_HEAD_BYTES(dim,
 * rows, max_batch, momentum), 4-byte aligned) and reset it. init_w/init_b:
 * const initial parameters (row-major [rows][dim] / [rows]; must stay valid;
 * NULL = zero). init_active: rows 0..init_active-1 start active (<= rows).
 * max_batch >= 1. TOL_ERR_ARG on bad sizes/alignment, TOL_ERR_OVERFLOW if
 * mem is short. */
tol_status_t tol_head_init(tol_head_t *h, uint8_t *mem, size_t mem_bytes, uint16_t dim,
                           uint16_t rows, uint16_t max_batch, uint8_t momentum,
                           const float *init_w, const float *init_b, uint16_t init_active);

/* Back to the exported initial head: rows 0..init_active-1 copied from init
 * and active, the other rows zero and inactive, momentum 0, batch empty. */
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
 * polynomial in Horner form, times 2^k. Relative error < 3e-7. */
float tol_head_expf(float x);

/* In place: z <- softmax(z) over the active rows (max-subtracted,
 * tol_head_expf, sum over rows ascending). Inactive rows get 0. */
void tol_head_softmax(tol_head_t *h);

/* Classify x (float[dim]): label = first index of the largest score among
 * active rows (-1 if no row is active), confidence = its softmax probability.
 * Either output pointer may be NULL. Leaves probabilities in h->z. */
void tol_head_predict(tol_head_t *h, const float *x, int32_t *label, float *confidence);

/* Empty the batch (the gradient factors). */
void tol_head_grad_zero(tol_head_t *h);
/* A second handle on h for a batch of its own: *v shares h's parameters, momentum buffers,
 * active flags, scores and gradient scratch, but its batch lives in h's gradient-factor slots
 * first..max_batch-1 (v->max_batch = h->max_batch - first), so whatever sits in the slots
 * before (a learner's queue of fresh samples) stays untouched. Train through v (grad_zero,
 * grad_add_*, step) as through h, then tol_head_view_end(h, v) carries the active-row count
 * back. first < h->max_batch. */
void tol_head_view(const tol_head_t *h, uint16_t first, tol_head_t *v);
void tol_head_view_end(tol_head_t *h, const tol_head_t *v);

/* Where the next batch sample's input will be stored (float[dim]); a caller
 * may write x there and pass this pointer to grad_add_* to avoid a copy.
 * NULL if the batch is full. */
float *tol_head_batch_slot(tol_head_t *h);

/* Add one sample to the batch: cross-entropy gradient with weight w,
 * e_r = (p_r - [r == label]) * w for active rows (0 for inactive ones).
 * x: in, float[dim] (copied unless it is tol_head_batch_slot()); label must be
 * an active row. loss (may be NULL) gets -log p_label.
 * TOL_ERR_FULL if max_batch samples are already in. */
tol_status_t tol_head_grad_add_ce(tol_head_t *h, const float *x, uint16_t label, float weight,
                                  float *loss);

/* Add n samples to the batch at once, the same as n calls of tol_head_grad_add_ce
 * (same errors, bit for bit) with their inputs already in their batch slots (write
 * them at tol_head_batch_slot() + k * dim, k = 0..n-1) and labels[k] (each < rows, an
 * active row): the forward passes share each load of the weights (four rows times two
 * samples per register block). h->z is left as it was. TOL_ERR_FULL if fewer than n
 * slots are free, TOL_ERR_LABEL if a label is out of range (nothing added). */
tol_status_t tol_head_grad_add_ce_n(tol_head_t *h, const uint16_t *labels, uint16_t n, float weight);

/* Add one sample to the batch: MSE gradient, MSE = mean_r (y_r - t_r)^2,
 * e_r = (y_r - t_r) * (2/rows * weight). target: in, float[rows]. mse (may be
 * NULL) gets the sample's MSE (sum ascending, then / rows). */
tol_status_t tol_head_grad_add_mse(tol_head_t *h, const float *x, const float *target,
                                   float weight, float *mse);

/* tol_head_grad_add_mse without its forward pass: the scores in h->z must be
 * the forward of this same x (e.g. right after tol_head_mse(h, x, target)),
 * which gives the same errors. TOL_ERR_FULL if the batch is full. */
tol_status_t tol_head_grad_add_mse_z(tol_head_t *h, const float *x, const float *target,
                                     float weight);

/* Reconstruction MSE of x against target (no batch change). */
float tol_head_mse(tol_head_t *h, const float *x, const float *target);

/* One SGD step on the active rows from the batch:
 *   gW[r][j] = sum_b e_b[r] x_b[j],  gb[r] = sum_b e_b[r]
 *   if clip_norm > 0 and ||(gW,gb)||_2 > clip_norm: g *= clip_norm/||g||
 *     (sum of squares row by row: gW[r][0..dim-1] then gb[r])
 *   g += weight_decay * W            (weights only, not the bias)
 *   v = momentum * v + g;  W -= lr * v   (v = g when there are no buffers)
 * Returns TOL_ERR_DIVERGED (nothing changed) if any new v or W would be
 * NaN/Inf, TOL_ERR_ARG if momentum > 0 without momentum buffers. The batch
 * is left as is (call tol_head_grad_zero before the next one). */
tol_status_t tol_head_step(tol_head_t *h, float lr, float momentum, float weight_decay,
                           float clip_norm);

/* Replace the head parameters (e.g. from a stored or pushed head): w
 * float[rows][dim], b float[rows], active uint8_t[rows] (NULL = all active).
 * Momentum is zeroed. Returns TOL_ERR_NONFINITE (no change) on NaN/Inf. */
tol_status_t tol_head_load(tol_head_t *h, const float *w, const float *b,
                           const uint8_t *active);

#endif /* TOL_HEAD_H */
