/*
 * tol_fmac.h - float multiply-accumulate for the learner (private to mcu/src).
 *
 * tol_fmac_mla(acc, a, b) = acc + a * b and tol_fmac_mls(acc, a, b) = acc - a * b,
 * each with the product rounded to float first and then the sum: the same float
 * as the two separate operations (and as host/tinyol/learner.py's numpy), never
 * a fused multiply-add. On a Cortex-M4F this is one VMLA.F32 / VMLS.F32 (the
 * VFPv4 "chained" multiply-accumulate, which rounds twice), where the compiler
 * would otherwise emit VMUL + VADD (under -std=c11 it never contracts a * b + c,
 * and contracting would give VFMA, a different rounding). Elsewhere (native and
 * host builds): the plain expression; -std=c11 keeps it uncontracted.
 */
#ifndef TOL_FMAC_H
#define TOL_FMAC_H

#if defined(__arm__) && defined(__ARM_FP) && ((__ARM_FP & 4) != 0) && !defined(__SOFTFP__)

static inline float tol_fmac_mla(float acc, float a, float b)
{
    __asm__("vmla.f32 %0, %1, %2" : "+t"(acc) : "t"(a), "t"(b));
    return acc;
}

static inline float tol_fmac_mls(float acc, float a, float b)
{
    __asm__("vmls.f32 %0, %1, %2" : "+t"(acc) : "t"(a), "t"(b));
    return acc;
}

#else

static inline float tol_fmac_mla(float acc, float a, float b)
{
    return acc + a * b;
}

static inline float tol_fmac_mls(float acc, float a, float b)
{
    return acc - a * b;
}

#endif

#endif /* TOL_FMAC_H */
