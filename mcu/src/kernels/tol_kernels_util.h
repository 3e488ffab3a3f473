/*
 * tol_kernels_util.h - private helpers shared by the ref and simd kernels:
 * TFLM's fixed-point requantization (gemmlowp semantics, double rounding) and
 * the geometry helpers. Included by relative path from the kernel sources in ref/ and simd/.
 */
#ifndef TOL_KERNELS_UTIL_H
#define TOL_KERNELS_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* gemmlowp SaturatingRoundingDoublingHighMul for b > INT32_MIN (multipliers
 * are always >= 0): floor((a*b + 2^30) / 2^31), which equals TFLM's
 * sign-dependent nudge followed by a truncating division. */
static inline int32_t tol_srdhm_(int32_t a, int32_t b)
{
    int64_t ab = (int64_t)a * (int64_t)b + ((int64_t)1 << 30);
    return (int32_t)(ab >> 31);
}

/* gemmlowp RoundingDivideByPOT: round half away from zero, exponent in [0, 31]. */
static inline int32_t tol_rdbpot_(int32_t x, int32_t exponent)
{
    int32_t mask = (int32_t)((1u << exponent) - 1u);
    int32_t remainder = x & mask;
    int32_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
    return (x >> exponent) + (remainder > threshold ? 1 : 0);
}

/* TFLM MultiplyByQuantizedMultiplier(int32 x, int32 mult, int shift). */
static inline int32_t tol_mbqm_(int32_t x, int32_t mult, int32_t shift)
{
    int32_t left = shift > 0 ? shift : 0;
    int32_t right = shift > 0 ? 0 : -shift;
    return tol_rdbpot_(tol_srdhm_((int32_t)((uint32_t)x << left), mult), right);
}

static inline int32_t tol_clamp_(int32_t v, int32_t lo, int32_t hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

static inline int32_t tol_max_(int32_t a, int32_t b)
{
    return a > b ? a : b;
}

static inline int32_t tol_min_(int32_t a, int32_t b)
{
    return a < b ? a : b;
}

/* TfLiteRound(float) (roundf: half away from zero) for |x| < 2^23; no libm. */
static inline int32_t tol_roundf_(float x)
{
    int32_t t = (int32_t)x;           /* truncates toward zero */
    float frac = x - (float)t;        /* exact for |x| < 2^23 */
    if (frac >= 0.5f) {
        t += 1;
    } else if (frac <= -0.5f) {
        t -= 1;
    }
    return t;
}

#endif /* TOL_KERNELS_UTIL_H */
