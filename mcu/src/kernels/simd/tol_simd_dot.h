/*
 * tol_simd_dot.h - private dot-product cores of the SIMD kernels.
 *
 * The int8 inputs get their offset added while being widened to int16 pairs
 * (SXTAB16), the int8 weights are widened with SXTB16, and SMLAD does two
 * multiply-accumulates per instruction. Bytes 0/2 and 1/3 of a word are
 * widened separately (the second with a free ROR #8), so inputs and weights
 * are permuted the same way and no repacking is needed.
 */
#ifndef TOL_SIMD_DOT_H
#define TOL_SIMD_DOT_H

#include <stdint.h>

#include "tol_acle.h"
#include "../tol_kernels_util.h"

/* TFLM MultiplyByQuantizedMultiplier, same results as tol_mbqm_ (gemmlowp's
 * two roundings) in one 64-bit multiply-accumulate for the usual right shift.
 * With q = floor((x*m + 2^30) / 2^31) and r = -shift >= 1, gemmlowp returns
 * floor((q + 2^(r-1) - [q<0]) / 2^r) = floor((x*m + 2^30 + 2^(30+r) - [q<0] 2^31) / 2^(31+r))
 * (nested floors), and [q<0] may be replaced by [x<0] because m >= 2^30 or m == 0.
 * The result is the high word of that 64-bit sum shifted right by r - 1. */
static inline int32_t tol_mbqm_fast_(int32_t x, int32_t mult, int32_t shift)
{
    if (shift >= 0) {
        return tol_mbqm_(x, mult, shift); /* multiplier >= 0.5: rare */
    }
    const uint32_t r = (uint32_t)-shift;  /* 1..31 */
    const uint32_t p2 = 1u << r;
    const int64_t round = (int64_t)((uint64_t)(p2 >> 2) << 32) + (int64_t)(0x40000000u + (p2 << 30));
    const int64_t neg = x < 0 ? ((int64_t)1 << 31) : 0;
    const int64_t acc = (int64_t)x * mult + (round - neg);
    return (int32_t)(acc >> 32) >> (r - 1u);
}

/* The same with the per-channel constants prepared once (tol_rq_prep_) for
 * many outputs of that channel. Right shifts only (shift < 0). */
typedef struct {
    int64_t round[2]; /* [0]: 2^30 + 2^(30+r), r = -shift; [1]: the same - 2^31 (x < 0) */
    int32_t mult;     /* Q31 multiplier */
    int32_t rs;       /* r - 1 */
} tol_rq_t;

/* Returns 0 when shift >= 0 (not supported by tol_rq_apply_). */
static inline int tol_rq_prep_(tol_rq_t *q, int32_t mult, int32_t shift)
{
    const uint32_t r = shift < 0 ? (uint32_t)-shift : 1u; /* 1..31 */
    q->round[0] = (int64_t)(((uint64_t)1 << 30) + ((uint64_t)1 << (30u + r)));
    q->round[1] = q->round[0] - ((int64_t)1 << 31);
    q->mult = mult;
    q->rs = (int32_t)r - 1;
    return shift < 0;
}

/* The sign of x picks the rounding constant: LSR, ADD, LDRD, SMLAL, ASR. */
static inline int32_t tol_rq_apply_(int32_t x, const tol_rq_t *q)
{
    const int64_t acc = (int64_t)x * q->mult + q->round[(uint32_t)x >> 31];
    return (int32_t)(acc >> 32) >> q->rs;
}

/* tol_mbqm_fast_ for right shifts r = -shift >= 2 with h = 2^(r-2) and rs = r - 1 prepared:
 * the rounding constant 2^30 + 2^(30+r) - [x<0] 2^31 is, as a 64-bit pair,
 * hi = h - [x<0], lo = 2^30 | (x & 2^31) (the borrow of -2^31 from 2^30 is the -1 in hi),
 * so it is built from x's sign in 3 instructions (AND, ORR, ADD ..., ASR #31) before
 * the SMLAL: no table of 64-bit constants, no branch. */
static inline int32_t tol_rq_sign_(int32_t x, int32_t mult, int32_t h, int32_t rs)
{
    const uint32_t lo = ((uint32_t)x & 0x80000000u) | 0x40000000u;
    const uint32_t hi = (uint32_t)h + (uint32_t)(x >> 31);
    const int64_t acc = (int64_t)(((uint64_t)hi << 32) | lo) + (int64_t)x * mult;
    return (int32_t)(acc >> 32) >> rs;
}

/* tol_rq_sign_'s per-channel constants prepared once (12 bytes: a table of 256 channels
 * is 3 KB of stack). Right shifts by >= 2 only. */
typedef struct {
    int32_t mult; /* Q31 multiplier */
    int32_t h;    /* 2^(r-2), r = -shift */
    int32_t rs;   /* r - 1 */
} tol_rqs_t;

/* Returns 0 when shift > -2 (not supported by tol_rqs_apply_). */
static inline int tol_rqs_prep_(tol_rqs_t *q, int32_t mult, int32_t shift)
{
    const int ok = shift < -1;
    q->mult = mult;
    q->h = ok ? (int32_t)(1u << (-2 - shift)) : 0;
    q->rs = ok ? -1 - shift : 0;
    return ok;
}

static inline int32_t tol_rqs_apply_(int32_t x, const tol_rqs_t *q)
{
    return tol_rq_sign_(x, q->mult, q->h, q->rs);
}

/* tol_requant1_ for layers whose clamp is [-128, 127] (no or a ReLU
 * activation with output zero point -128): one SSAT instead of two compares. */
static inline int8_t tol_requant1_full_(int32_t acc, int32_t mult, int32_t shift, int32_t zp)
{
    return (int8_t)tol_ssat8(tol_mbqm_fast_(acc, mult, shift) + zp);
}

/* Clamp a requantized value to [lo, hi]; full != 0 promises [lo, hi] = [-128, 127]. */
static inline int8_t tol_rq_clamp_(int32_t v, int32_t lo, int32_t hi, int full)
{
    return (int8_t)(full ? tol_ssat8(v) : tol_clamp_(v, lo, hi));
}

/* Requantize one accumulator and clamp it to [lo, hi]. */
static inline int8_t tol_requant1_(int32_t acc, int32_t mult, int32_t shift, int32_t zp, int32_t lo,
                                   int32_t hi)
{
    return (int8_t)tol_clamp_(tol_mbqm_fast_(acc, mult, shift) + zp, lo, hi);
}

/* Both int16 lanes set to v (v in [-32768, 32767]). */
static inline uint32_t tol_dup16_(int32_t v)
{
    return ((uint32_t)v & 0xFFFFu) * 0x00010001u;
}

/* acc[j] += sum_{i<len} w_j[i] * (x[i] + offset), j = 0..3, where
 * w_j = w + j * w_stride. off2 = tol_dup16_(offset). */
static inline void tol_dot4_(const int8_t *x, const int8_t *w, int32_t w_stride, int32_t len,
                             uint32_t off2, int32_t offset, int32_t acc[4])
{
    const int8_t *w0 = w;
    const int8_t *w1 = w0 + w_stride;
    const int8_t *w2 = w1 + w_stride;
    const int8_t *w3 = w2 + w_stride;
    int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
    int32_t n = len >> 2;
    while (n-- > 0) {
        const uint32_t xv = tol_read_s8x4(x);
        const uint32_t xe = tol_sxtab16(off2, xv);
        const uint32_t xo = tol_sxtab16_ror8(off2, xv);
        uint32_t wv;
        x += 4;
        wv = tol_read_s8x4(w0);
        w0 += 4;
        a0 = tol_smlad(xe, tol_sxtb16(wv), a0);
        a0 = tol_smlad(xo, tol_sxtb16_ror8(wv), a0);
        wv = tol_read_s8x4(w1);
        w1 += 4;
        a1 = tol_smlad(xe, tol_sxtb16(wv), a1);
        a1 = tol_smlad(xo, tol_sxtb16_ror8(wv), a1);
        wv = tol_read_s8x4(w2);
        w2 += 4;
        a2 = tol_smlad(xe, tol_sxtb16(wv), a2);
        a2 = tol_smlad(xo, tol_sxtb16_ror8(wv), a2);
        wv = tol_read_s8x4(w3);
        w3 += 4;
        a3 = tol_smlad(xe, tol_sxtb16(wv), a3);
        a3 = tol_smlad(xo, tol_sxtb16_ror8(wv), a3);
    }
    n = len & 3;
    while (n-- > 0) {
        const int32_t xv = *x++ + offset;
        a0 += *w0++ * xv;
        a1 += *w1++ * xv;
        a2 += *w2++ * xv;
        a3 += *w3++ * xv;
    }
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

/* One output channel: returns acc + sum_{i<len} w[i] * (x[i] + offset). */
static inline int32_t tol_dot1_(const int8_t *x, const int8_t *w, int32_t len, uint32_t off2,
                                int32_t offset, int32_t acc)
{
    int32_t n = len >> 2;
    while (n-- > 0) {
        const uint32_t xv = tol_read_s8x4(x);
        const uint32_t wv = tol_read_s8x4(w);
        x += 4;
        w += 4;
        acc = tol_smlad(tol_sxtab16(off2, xv), tol_sxtb16(wv), acc);
        acc = tol_smlad(tol_sxtab16_ror8(off2, xv), tol_sxtb16_ror8(wv), acc);
    }
    n = len & 3;
    while (n-- > 0) {
        acc += *w++ * (*x++ + offset);
    }
    return acc;
}

#endif /* TOL_SIMD_DOT_H */
