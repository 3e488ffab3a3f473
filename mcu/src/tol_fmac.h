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

#include <stdint.h>

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

/* acc + w[0] x[0] + w[1] x[1] + ... (left to right), n8 blocks of 8: VLDM + 8 VMLA. */
static inline float tol_fmac_dot8_(float acc, const float **w, const float **x, uint32_t n8)
{
    const float *pw = *w;
    const float *px = *x;
    __asm__ volatile(
        "1:\n"
        "vldmia %[pw]!, {s16-s23}\n"
        "vldmia %[px]!, {s24-s31}\n"
        "vmla.f32 %[acc], s16, s24\n"
        "vmla.f32 %[acc], s17, s25\n"
        "vmla.f32 %[acc], s18, s26\n"
        "vmla.f32 %[acc], s19, s27\n"
        "vmla.f32 %[acc], s20, s28\n"
        "vmla.f32 %[acc], s21, s29\n"
        "vmla.f32 %[acc], s22, s30\n"
        "vmla.f32 %[acc], s23, s31\n"
        "subs %[n], %[n], #1\n"
        "bne 1b\n"
        : [acc] "+t"(acc), [pw] "+r"(pw), [px] "+r"(px), [n] "+r"(n8)
        :
        : "s16", "s17", "s18", "s19", "s20", "s21", "s22", "s23", "s24", "s25", "s26", "s27",
          "s28", "s29", "s30", "s31", "cc", "memory");
    *w = pw;
    *x = px;
    return acc;
}

/* Four rows at once (w rows `stride` floats apart): z[i] += sum_j w_i[j] x[j], each
 * row's sum left to right; x's block of 8 is loaded once for the four rows. */
static inline void tol_fmac_dot4x8_(float *z, const float *w, uint32_t stride, const float *x,
                                    uint32_t n8)
{
    float a0 = z[0], a1 = z[1], a2 = z[2], a3 = z[3];
    const float *w0 = w;
    const float *w1 = w + stride;
    const float *w2 = w + 2u * stride;
    const float *w3 = w + 3u * stride;
    __asm__ volatile(
        "1:\n"
        "vldmia %[px]!, {s24-s31}\n"
        "vldmia %[w0]!, {s16-s23}\n"
        "vmla.f32 %[a0], s16, s24\n"
        "vmla.f32 %[a0], s17, s25\n"
        "vmla.f32 %[a0], s18, s26\n"
        "vmla.f32 %[a0], s19, s27\n"
        "vmla.f32 %[a0], s20, s28\n"
        "vmla.f32 %[a0], s21, s29\n"
        "vmla.f32 %[a0], s22, s30\n"
        "vmla.f32 %[a0], s23, s31\n"
        "vldmia %[w1]!, {s16-s23}\n"
        "vmla.f32 %[a1], s16, s24\n"
        "vmla.f32 %[a1], s17, s25\n"
        "vmla.f32 %[a1], s18, s26\n"
        "vmla.f32 %[a1], s19, s27\n"
        "vmla.f32 %[a1], s20, s28\n"
        "vmla.f32 %[a1], s21, s29\n"
        "vmla.f32 %[a1], s22, s30\n"
        "vmla.f32 %[a1], s23, s31\n"
        "vldmia %[w2]!, {s16-s23}\n"
        "vmla.f32 %[a2], s16, s24\n"
        "vmla.f32 %[a2], s17, s25\n"
        "vmla.f32 %[a2], s18, s26\n"
        "vmla.f32 %[a2], s19, s27\n"
        "vmla.f32 %[a2], s20, s28\n"
        "vmla.f32 %[a2], s21, s29\n"
        "vmla.f32 %[a2], s22, s30\n"
        "vmla.f32 %[a2], s23, s31\n"
        "vldmia %[w3]!, {s16-s23}\n"
        "vmla.f32 %[a3], s16, s24\n"
        "vmla.f32 %[a3], s17, s25\n"
        "vmla.f32 %[a3], s18, s26\n"
        "vmla.f32 %[a3], s19, s27\n"
        "vmla.f32 %[a3], s20, s28\n"
        "vmla.f32 %[a3], s21, s29\n"
        "vmla.f32 %[a3], s22, s30\n"
        "vmla.f32 %[a3], s23, s31\n"
        "subs %[n], %[n], #1\n"
        "bne 1b\n"
        : [a0] "+t"(a0), [a1] "+t"(a1), [a2] "+t"(a2), [a3] "+t"(a3), [w0] "+r"(w0),
          [w1] "+r"(w1), [w2] "+r"(w2), [w3] "+r"(w3), [px] "+r"(x), [n] "+r"(n8)
        :
        : "s16", "s17", "s18", "s19", "s20", "s21", "s22", "s23", "s24", "s25", "s26", "s27",
          "s28", "s29", "s30", "s31", "cc", "memory");
    z[0] = a0;
    z[1] = a1;
    z[2] = a2;
    z[3] = a3;
}

/* y[k] = y[k] + a x[k] over n8 blocks of 8: VLDM x, VLDM y, 8 VMLA, VSTM y. */
static inline void tol_fmac_axpy8_(float *y, float a, const float *x, uint32_t n8)
{
    __asm__ volatile(
        "1:\n"
        "vldmia %[px]!, {s24-s31}\n"
        "vldmia %[py], {s16-s23}\n"
        "vmla.f32 s16, %[a], s24\n"
        "vmla.f32 s17, %[a], s25\n"
        "vmla.f32 s18, %[a], s26\n"
        "vmla.f32 s19, %[a], s27\n"
        "vmla.f32 s20, %[a], s28\n"
        "vmla.f32 s21, %[a], s29\n"
        "vmla.f32 s22, %[a], s30\n"
        "vmla.f32 s23, %[a], s31\n"
        "vstmia %[py]!, {s16-s23}\n"
        "subs %[n], %[n], #1\n"
        "bne 1b\n"
        : [py] "+r"(y), [px] "+r"(x), [n] "+r"(n8)
        : [a] "t"(a)
        : "s16", "s17", "s18", "s19", "s20", "s21", "s22", "s23", "s24", "s25", "s26", "s27",
          "s28", "s29", "s30", "s31", "cc", "memory");
}

/* out[k] = 0.0f + e[0] x[k] + e[es] x[xs + k] + ... (nb terms, left to right), k = 0..7:
 * eight sums in registers, one VLDM per batch sample. es, xs: strides in floats. */
static inline void tol_fmac_outer8_(float *out, const float *e, uint32_t es, const float *x,
                                    uint32_t xs, uint32_t nb)
{
    const float zero = 0.0f;
    float t;
    const uint32_t es_b = 4u * es;
    const uint32_t xs_b = 4u * xs;
    __asm__ volatile(
        "vmov.f32 s16, %[zero]\n"
        "vmov.f32 s17, %[zero]\n"
        "vmov.f32 s18, %[zero]\n"
        "vmov.f32 s19, %[zero]\n"
        "vmov.f32 s20, %[zero]\n"
        "vmov.f32 s21, %[zero]\n"
        "vmov.f32 s22, %[zero]\n"
        "vmov.f32 s23, %[zero]\n"
        "1:\n"
        "vldr %[t], [%[pe]]\n"
        "vldmia %[px], {s24-s31}\n"
        "add %[pe], %[pe], %[es]\n"
        "add %[px], %[px], %[xs]\n"
        "vmla.f32 s16, %[t], s24\n"
        "vmla.f32 s17, %[t], s25\n"
        "vmla.f32 s18, %[t], s26\n"
        "vmla.f32 s19, %[t], s27\n"
        "vmla.f32 s20, %[t], s28\n"
        "vmla.f32 s21, %[t], s29\n"
        "vmla.f32 s22, %[t], s30\n"
        "vmla.f32 s23, %[t], s31\n"
        "subs %[n], %[n], #1\n"
        "bne 1b\n"
        "vstmia %[out], {s16-s23}\n"
        : [t] "=&t"(t), [pe] "+r"(e), [px] "+r"(x), [n] "+r"(nb)
        : [zero] "t"(zero), [es] "r"(es_b), [xs] "r"(xs_b), [out] "r"(out)
        : "s16", "s17", "s18", "s19", "s20", "s21", "s22", "s23", "s24", "s25", "s26", "s27",
          "s28", "s29", "s30", "s31", "cc", "memory");
}

/* SGD without momentum buffers over n8 blocks of 8 weights, gradient g:
 * g' = g + wd w; wn = w - lr g'; chk += 0 * wn; wn stored if commit. */
static inline float tol_fmac_sgd8_(float *w, const float *g, uint32_t n8, float lr, float wd,
                                   float chk, int commit)
{
    const float zero = 0.0f;
    const uint32_t step = commit ? 0u : 32u;
    __asm__ volatile(
        "1:\n"
        "vldmia %[g]!, {s16-s23}\n"
        "vldmia %[w], {s24-s31}\n"
        "vmla.f32 s16, %[wd], s24\n"
        "vmla.f32 s17, %[wd], s25\n"
        "vmla.f32 s18, %[wd], s26\n"
        "vmla.f32 s19, %[wd], s27\n"
        "vmla.f32 s20, %[wd], s28\n"
        "vmla.f32 s21, %[wd], s29\n"
        "vmla.f32 s22, %[wd], s30\n"
        "vmla.f32 s23, %[wd], s31\n"
        "vmls.f32 s24, %[lr], s16\n"
        "vmls.f32 s25, %[lr], s17\n"
        "vmls.f32 s26, %[lr], s18\n"
        "vmls.f32 s27, %[lr], s19\n"
        "vmls.f32 s28, %[lr], s20\n"
        "vmls.f32 s29, %[lr], s21\n"
        "vmls.f32 s30, %[lr], s22\n"
        "vmls.f32 s31, %[lr], s23\n"
        "vmla.f32 %[chk], s24, %[zero]\n"
        "vmla.f32 %[chk], s25, %[zero]\n"
        "vmla.f32 %[chk], s26, %[zero]\n"
        "vmla.f32 %[chk], s27, %[zero]\n"
        "vmla.f32 %[chk], s28, %[zero]\n"
        "vmla.f32 %[chk], s29, %[zero]\n"
        "vmla.f32 %[chk], s30, %[zero]\n"
        "vmla.f32 %[chk], s31, %[zero]\n"
        "cbnz %[step], 2f\n"
        "vstmia %[w], {s24-s31}\n"
        "2:\n"
        "adds %[w], %[w], #32\n"
        "subs %[n], %[n], #1\n"
        "bne 1b\n"
        : [chk] "+t"(chk), [w] "+l"(w), [g] "+r"(g), [n] "+r"(n8)
        : [zero] "t"(zero), [lr] "t"(lr), [wd] "t"(wd), [step] "l"(step)
        : "s16", "s17", "s18", "s19", "s20", "s21", "s22", "s23", "s24", "s25", "s26", "s27",
          "s28", "s29", "s30", "s31", "cc", "memory");
    return chk;
}

/* As tol_fmac_sgd8_ for one block, the gradient being g[k] = 0.0f + e x[k]. */
static inline float tol_fmac_sgd8_ex_(float *w, float e, const float *x, float lr, float wd,
                                      float chk, int commit)
{
    const float zero = 0.0f;
    const uint32_t skip = commit ? 0u : 1u;
    __asm__ volatile(
        "vldmia %[x], {s24-s31}\n"
        "vldmia %[w], {s16-s23}\n"
        "vmov.f32 s8, %[zero]\n"
        "vmov.f32 s9, %[zero]\n"
        "vmov.f32 s10, %[zero]\n"
        "vmov.f32 s11, %[zero]\n"
        "vmov.f32 s12, %[zero]\n"
        "vmov.f32 s13, %[zero]\n"
        "vmov.f32 s14, %[zero]\n"
        "vmov.f32 s15, %[zero]\n"
        "vmla.f32 s8, %[e], s24\n"
        "vmla.f32 s9, %[e], s25\n"
        "vmla.f32 s10, %[e], s26\n"
        "vmla.f32 s11, %[e], s27\n"
        "vmla.f32 s12, %[e], s28\n"
        "vmla.f32 s13, %[e], s29\n"
        "vmla.f32 s14, %[e], s30\n"
        "vmla.f32 s15, %[e], s31\n"
        "vmla.f32 s8, %[wd], s16\n"
        "vmla.f32 s9, %[wd], s17\n"
        "vmla.f32 s10, %[wd], s18\n"
        "vmla.f32 s11, %[wd], s19\n"
        "vmla.f32 s12, %[wd], s20\n"
        "vmla.f32 s13, %[wd], s21\n"
        "vmla.f32 s14, %[wd], s22\n"
        "vmla.f32 s15, %[wd], s23\n"
        "vmls.f32 s16, %[lr], s8\n"
        "vmls.f32 s17, %[lr], s9\n"
        "vmls.f32 s18, %[lr], s10\n"
        "vmls.f32 s19, %[lr], s11\n"
        "vmls.f32 s20, %[lr], s12\n"
        "vmls.f32 s21, %[lr], s13\n"
        "vmls.f32 s22, %[lr], s14\n"
        "vmls.f32 s23, %[lr], s15\n"
        "vmla.f32 %[chk], s16, %[zero]\n"
        "vmla.f32 %[chk], s17, %[zero]\n"
        "vmla.f32 %[chk], s18, %[zero]\n"
        "vmla.f32 %[chk], s19, %[zero]\n"
        "vmla.f32 %[chk], s20, %[zero]\n"
        "vmla.f32 %[chk], s21, %[zero]\n"
        "vmla.f32 %[chk], s22, %[zero]\n"
        "vmla.f32 %[chk], s23, %[zero]\n"
        "cbnz %[skip], 2f\n"
        "vstmia %[w], {s16-s23}\n"
        "2:\n"
        : [chk] "+t"(chk)
        : [w] "r"(w), [x] "r"(x), [e] "t"(e), [zero] "t"(zero), [lr] "t"(lr), [wd] "t"(wd),
          [skip] "l"(skip)
        : "s8", "s9", "s10", "s11", "s12", "s13", "s14", "s15", "s16", "s17", "s18", "s19",
          "s20", "s21", "s22", "s23", "s24", "s25", "s26", "s27", "s28", "s29", "s30", "s31",
          "memory");
    return chk;
}


/* SGD with momentum buffers over n8 blocks of 8: g' = g + wd w; v = g' + mu vw;
 * wn = w - lr v; chk += 0 * wn; v and wn stored if commit. */
static inline float tol_fmac_sgd8_vw_(float *w, float *vw, const float *g, uint32_t n8, float lr,
                                      float mu, float wd, float chk, int commit)
{
    const float zero = 0.0f;
    const uint32_t skip = commit ? 0u : 1u;
    __asm__ volatile(
        "1:\n"
        "vldmia %[g]!, {s16-s23}\n"
        "vldmia %[w], {s24-s31}\n"
        "vldmia %[vw], {s8-s15}\n"
        "vmla.f32 s16, %[wd], s24\n"
        "vmla.f32 s17, %[wd], s25\n"
        "vmla.f32 s18, %[wd], s26\n"
        "vmla.f32 s19, %[wd], s27\n"
        "vmla.f32 s20, %[wd], s28\n"
        "vmla.f32 s21, %[wd], s29\n"
        "vmla.f32 s22, %[wd], s30\n"
        "vmla.f32 s23, %[wd], s31\n"
        "vmla.f32 s16, %[mu], s8\n"
        "vmla.f32 s17, %[mu], s9\n"
        "vmla.f32 s18, %[mu], s10\n"
        "vmla.f32 s19, %[mu], s11\n"
        "vmla.f32 s20, %[mu], s12\n"
        "vmla.f32 s21, %[mu], s13\n"
        "vmla.f32 s22, %[mu], s14\n"
        "vmla.f32 s23, %[mu], s15\n"
        "vmls.f32 s24, %[lr], s16\n"
        "vmls.f32 s25, %[lr], s17\n"
        "vmls.f32 s26, %[lr], s18\n"
        "vmls.f32 s27, %[lr], s19\n"
        "vmls.f32 s28, %[lr], s20\n"
        "vmls.f32 s29, %[lr], s21\n"
        "vmls.f32 s30, %[lr], s22\n"
        "vmls.f32 s31, %[lr], s23\n"
        "vmla.f32 %[chk], s24, %[zero]\n"
        "vmla.f32 %[chk], s25, %[zero]\n"
        "vmla.f32 %[chk], s26, %[zero]\n"
        "vmla.f32 %[chk], s27, %[zero]\n"
        "vmla.f32 %[chk], s28, %[zero]\n"
        "vmla.f32 %[chk], s29, %[zero]\n"
        "vmla.f32 %[chk], s30, %[zero]\n"
        "vmla.f32 %[chk], s31, %[zero]\n"
        "cbnz %[skip], 2f\n"
        "vstmia %[vw], {s16-s23}\n"
        "vstmia %[w], {s24-s31}\n"
        "2:\n"
        "adds %[w], %[w], #32\n"
        "adds %[vw], %[vw], #32\n"
        "subs %[n], %[n], #1\n"
        "bne 1b\n"
        : [chk] "+t"(chk), [w] "+r"(w), [vw] "+r"(vw), [g] "+r"(g), [n] "+r"(n8)
        : [zero] "t"(zero), [lr] "t"(lr), [wd] "t"(wd), [mu] "t"(mu), [skip] "l"(skip)
        : "s8", "s9", "s10", "s11", "s12", "s13", "s14", "s15", "s16", "s17", "s18", "s19",
          "s20", "s21", "s22", "s23", "s24", "s25", "s26", "s27", "s28", "s29", "s30", "s31", "cc", "memory");
    return chk;
}


/* As tol_fmac_sgd8_vw_ for one block of 4, the gradient being g[k] = 0.0f + e x[k]. */
static inline float tol_fmac_sgd4_vw_ex_(float *w, float *vw, float e, const float *x, float lr,
                                         float mu, float wd, float chk, int commit)
{
    const float zero = 0.0f;
    const uint32_t skip = commit ? 0u : 1u;
    __asm__ volatile(
        "vldmia %[x], {s28-s31}\n"
        "vldmia %[w], {s20-s23}\n"
        "vldmia %[vw], {s24-s27}\n"
        "vmov.f32 s16, %[zero]\n"
        "vmov.f32 s17, %[zero]\n"
        "vmov.f32 s18, %[zero]\n"
        "vmov.f32 s19, %[zero]\n"
        "vmla.f32 s16, %[e], s28\n"
        "vmla.f32 s17, %[e], s29\n"
        "vmla.f32 s18, %[e], s30\n"
        "vmla.f32 s19, %[e], s31\n"
        "vmla.f32 s16, %[wd], s20\n"
        "vmla.f32 s17, %[wd], s21\n"
        "vmla.f32 s18, %[wd], s22\n"
        "vmla.f32 s19, %[wd], s23\n"
        "vmla.f32 s16, %[mu], s24\n"
        "vmla.f32 s17, %[mu], s25\n"
        "vmla.f32 s18, %[mu], s26\n"
        "vmla.f32 s19, %[mu], s27\n"
        "vmls.f32 s20, %[lr], s16\n"
        "vmls.f32 s21, %[lr], s17\n"
        "vmls.f32 s22, %[lr], s18\n"
        "vmls.f32 s23, %[lr], s19\n"
        "vmla.f32 %[chk], s20, %[zero]\n"
        "vmla.f32 %[chk], s21, %[zero]\n"
        "vmla.f32 %[chk], s22, %[zero]\n"
        "vmla.f32 %[chk], s23, %[zero]\n"
        "cbnz %[skip], 2f\n"
        "vstmia %[vw], {s16-s19}\n"
        "vstmia %[w], {s20-s23}\n"
        "2:\n"
        : [chk] "+t"(chk)
        : [w] "r"(w), [vw] "r"(vw), [x] "r"(x), [e] "t"(e), [zero] "t"(zero), [lr] "t"(lr),
          [wd] "t"(wd), [mu] "t"(mu), [skip] "l"(skip)
        : "s16", "s17", "s18", "s19", "s20", "s21", "s22", "s23", "s24", "s25", "s26", "s27", "s28", "s29", "s30", "s31", "memory");
    return chk;
}

#else

#include <stdint.h>


static inline float tol_fmac_mla(float acc, float a, float b)
{
    return acc + a * b;
}

static inline float tol_fmac_mls(float acc, float a, float b)
{
    return acc - a * b;
}

/* The block primitives in plain C: the same operations in the same order. */
static inline float tol_fmac_dot8_(float acc, const float **w, const float **x, uint32_t n8)
{
    const float *pw = *w;
    const float *px = *x;
    for (uint32_t k = 0; k < 8u * n8; k++) acc = tol_fmac_mla(acc, pw[k], px[k]);
    *w = pw + 8u * n8;
    *x = px + 8u * n8;
    return acc;
}

static inline void tol_fmac_dot4x8_(float *z, const float *w, uint32_t stride, const float *x,
                                    uint32_t n8)
{
    for (uint32_t i = 0; i < 4u; i++) {
        const float *pw = w + i * stride;
        const float *px = x;
        z[i] = tol_fmac_dot8_(z[i], &pw, &px, n8);
    }
}

static inline void tol_fmac_axpy8_(float *y, float a, const float *x, uint32_t n8)
{
    for (uint32_t k = 0; k < 8u * n8; k++) y[k] = tol_fmac_mla(y[k], a, x[k]);
}

static inline void tol_fmac_outer8_(float *out, const float *e, uint32_t es, const float *x,
                                    uint32_t xs, uint32_t nb)
{
    for (uint32_t k = 0; k < 8u; k++) {
        float a = 0.0f;
        for (uint32_t b = 0; b < nb; b++) a = tol_fmac_mla(a, e[b * es], x[b * xs + k]);
        out[k] = a;
    }
}

static inline float tol_fmac_sgd8_(float *w, const float *g, uint32_t n8, float lr, float wd,
                                   float chk, int commit)
{
    for (uint32_t k = 0; k < 8u * n8; k++) {
        const float gk = tol_fmac_mla(g[k], wd, w[k]);
        const float wn = tol_fmac_mls(w[k], lr, gk);
        chk = tol_fmac_mla(chk, wn, 0.0f);
        if (commit) w[k] = wn;
    }
    return chk;
}

static inline float tol_fmac_sgd8_vw_(float *w, float *vw, const float *g, uint32_t n8, float lr,
                                      float mu, float wd, float chk, int commit)
{
    for (uint32_t k = 0; k < 8u * n8; k++) {
        const float gk = tol_fmac_mla(g[k], wd, w[k]);
        const float v = tol_fmac_mla(gk, mu, vw[k]);
        const float wn = tol_fmac_mls(w[k], lr, v);
        chk = tol_fmac_mla(chk, wn, 0.0f);
        if (commit) {
            vw[k] = v;
            w[k] = wn;
        }
    }
    return chk;
}

static inline float tol_fmac_sgd4_vw_ex_(float *w, float *vw, float e, const float *x, float lr,
                                         float mu, float wd, float chk, int commit)
{
    float g[4];
    for (uint32_t k = 0; k < 4u; k++) g[k] = tol_fmac_mla(0.0f, e, x[k]);
    for (uint32_t k = 0; k < 4u; k++) {
        const float gk = tol_fmac_mla(g[k], wd, w[k]);
        const float v = tol_fmac_mla(gk, mu, vw[k]);
        const float wn = tol_fmac_mls(w[k], lr, v);
        chk = tol_fmac_mla(chk, wn, 0.0f);
        if (commit) {
            vw[k] = v;
            w[k] = wn;
        }
    }
    return chk;
}

static inline float tol_fmac_sgd8_ex_(float *w, float e, const float *x, float lr, float wd,
                                      float chk, int commit)
{
    float g[8];
    for (uint32_t k = 0; k < 8u; k++) g[k] = tol_fmac_mla(0.0f, e, x[k]);
    return tol_fmac_sgd8_(w, g, 1u, lr, wd, chk, commit);
}

#endif

#endif /* TOL_FMAC_H */
