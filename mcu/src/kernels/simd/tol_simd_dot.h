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

/* TFLM MultiplyByQuantizedMultiplier, same results as tol_mbqm_ (the gemmlowp
 * formulation) with a shorter common path: the round-half-away-from-zero
 * division by 2^right is (q + 2^(right-1) - (q < 0)) >> right unless the add
 * would overflow (|q| close to 2^31), where the exact formula is used. */
static inline int32_t tol_mbqm_fast_(int32_t x, int32_t mult, int32_t shift)
{
    const int32_t left = shift > 0 ? shift : 0;
    const int32_t right = left - shift;
    const int32_t q = tol_srdhm_((int32_t)((uint32_t)x << left), mult);
    if (right == 0) {
        return q;
    }
    const int32_t half = (int32_t)(1u << (right - 1));
    if (q > INT32_MAX - half) {
        return tol_rdbpot_(q, right);
    }
    return (q + (q >> 31) + half) >> right;
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
