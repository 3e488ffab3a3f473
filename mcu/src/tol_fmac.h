/*
 * tol_fmac.h - float multiply-accumulate for the learner (private to mcu/src).
 *
 * tol_fmac_mla(acc, a, b) = acc + a * b and tol_fmac_mls(acc, a, b) = acc - a * b,
 * each with the product rounded to float first and then the sum: the same float
 * as the two separate operations (and as host/tinyol/learn/learner.py's numpy), never
 * a fused multiply-add. On a Cortex-M4F each is written out as VMUL.F32 + VADD.F32
 * (VNMUL.F32 + VADD.F32 for the subtraction), in asm so that no compiler setting can
 * contract them into a VFMA (a different rounding). VMLA.F32 / VMLS.F32 (VFPv4's
 * "chained" multiply-accumulate) round the same way, but the M4 issues one in 3 cycles
 * against 1 + 1 for the pair (Cortex-M4 TRM, FPU instruction timings), so the block
 * kernels below multiply a whole block into temporaries first and then add, in the
 * same lane order. Elsewhere (native and host builds): the plain expression; -std=c11
 * keeps it uncontracted.
 */
#ifndef TOL_FMAC_H
#define TOL_FMAC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__arm__) && defined(__ARM_FP) && ((__ARM_FP & 4) != 0) && !defined(__SOFTFP__)

#include <stdint.h>

static inline float tol_fmac_mla(float acc, float a, float b)
{
    float t;
    __asm__("vmul.f32 %[t], %[a], %[b]\n"
            "vadd.f32 %[acc], %[acc], %[t]"
            : [acc] "+t"(acc), [t] "=&t"(t)
            : [a] "t"(a), [b] "t"(b));
    return acc;
}

static inline float tol_fmac_mls(float acc, float a, float b)
{
    float t;
    __asm__("vnmul.f32 %[t], %[a], %[b]\n"
            "vadd.f32 %[acc], %[acc], %[t]"
            : [acc] "+t"(acc), [t] "=&t"(t)
            : [a] "t"(a), [b] "t"(b));
    return acc;
}

/* ---- assembler text, one instruction over the lanes of a register block ----------------
 * A block is a list of operands, one per lane: a bank of consecutive S registers
 * (TOL_FMAC_S0_, _S8_, _S16_, _S24_: 8 lanes; _S16Q_ ... _S28Q_: 4 lanes) or one named asm
 * operand repeated (TOL_FMAC_ALL8_("%[lr]")). TOL_FMAC_OP8_(ins, A, B, C) is the 8 lines
 * "ins A_k, B_k, C_k"; TOL_FMAC_MOV8_(A, B) the 8 lines "vmov.f32 A_k, B_k"; 4-lane forms
 * likewise. Every asm block below is written from these. */
#define TOL_FMAC_S0_ "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"
#define TOL_FMAC_S8_ "s8", "s9", "s10", "s11", "s12", "s13", "s14", "s15"
#define TOL_FMAC_S16_ "s16", "s17", "s18", "s19", "s20", "s21", "s22", "s23"
#define TOL_FMAC_S24_ "s24", "s25", "s26", "s27", "s28", "s29", "s30", "s31"
#define TOL_FMAC_S16Q_ "s16", "s17", "s18", "s19"
#define TOL_FMAC_S20Q_ "s20", "s21", "s22", "s23"
#define TOL_FMAC_S24Q_ "s24", "s25", "s26", "s27"
#define TOL_FMAC_S28Q_ "s28", "s29", "s30", "s31"
#define TOL_FMAC_ALL8_(x) x, x, x, x, x, x, x, x
#define TOL_FMAC_ALL4_(x) x, x, x, x
#define TOL_FMAC_CALL_(m, ...) m(__VA_ARGS__)
#define TOL_FMAC_L3_(ins, a, b, c) ins " " a ", " b ", " c "\n"
#define TOL_FMAC_L2_(ins, a, b) ins " " a ", " b "\n"
#define TOL_FMAC_OP4X_(ins, a0, a1, a2, a3, b0, b1, b2, b3, c0, c1, c2, c3)                        \
    TOL_FMAC_L3_(ins, a0, b0, c0) TOL_FMAC_L3_(ins, a1, b1, c1) TOL_FMAC_L3_(ins, a2, b2, c2)      \
    TOL_FMAC_L3_(ins, a3, b3, c3)
#define TOL_FMAC_OP8X_(ins, a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, b4, b5, b6, b7, c0, c1, \
                       c2, c3, c4, c5, c6, c7)                                                     \
    TOL_FMAC_OP4X_(ins, a0, a1, a2, a3, b0, b1, b2, b3, c0, c1, c2, c3)                            \
    TOL_FMAC_OP4X_(ins, a4, a5, a6, a7, b4, b5, b6, b7, c4, c5, c6, c7)
#define TOL_FMAC_MOV4X_(a0, a1, a2, a3, b0, b1, b2, b3)                                            \
    TOL_FMAC_L2_("vmov.f32", a0, b0) TOL_FMAC_L2_("vmov.f32", a1, b1)                             \
    TOL_FMAC_L2_("vmov.f32", a2, b2) TOL_FMAC_L2_("vmov.f32", a3, b3)
#define TOL_FMAC_MOV8X_(a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, b4, b5, b6, b7)            \
    TOL_FMAC_MOV4X_(a0, a1, a2, a3, b0, b1, b2, b3) TOL_FMAC_MOV4X_(a4, a5, a6, a7, b4, b5, b6, b7)
#define TOL_FMAC_OP8_(ins, A, B, C) TOL_FMAC_CALL_(TOL_FMAC_OP8X_, ins, A, B, C)
#define TOL_FMAC_OP4_(ins, A, B, C) TOL_FMAC_CALL_(TOL_FMAC_OP4X_, ins, A, B, C)
#define TOL_FMAC_MOV8_(A, B) TOL_FMAC_CALL_(TOL_FMAC_MOV8X_, A, B)
#define TOL_FMAC_MOV4_(A, B) TOL_FMAC_CALL_(TOL_FMAC_MOV4X_, A, B)
#define TOL_FMAC_S8Q_ "s8", "s9", "s10", "s11"
#define TOL_FMAC_S12Q_ "s12", "s13", "s14", "s15"

/* A_k = A_k + B_k C_k over 8 (4) lanes as VMUL into the temporaries T, then VADD: T_k = B_k C_k
 * for every lane first, then A_k = A_k + T_k in lane order (a single accumulator, ALL8, sums
 * left to right). T may be B's or C's own bank when that bank is not read again (in place).
 * MSC: A_k = A_k - B_k C_k as VNMUL + VADD, which is VMLS's definition (FPAdd(A, FPNeg(FPMul))). */
#define TOL_FMAC_MAC8X_(a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, b4, b5, b6, b7, c0, c1, c2, c3, c4, c5, c6, c7, t0, t1, t2, t3, t4, t5, t6, t7) \
    TOL_FMAC_OP8X_("vmul.f32", t0, t1, t2, t3, t4, t5, t6, t7, b0, b1, b2, b3, b4, b5, b6, b7, c0, c1, c2, c3, c4, c5, c6, c7) \
    TOL_FMAC_OP8X_("vadd.f32", a0, a1, a2, a3, a4, a5, a6, a7, a0, a1, a2, a3, a4, a5, a6, a7, t0, t1, t2, t3, t4, t5, t6, t7)
#define TOL_FMAC_MSC8X_(a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, b4, b5, b6, b7, c0, c1, c2, c3, c4, c5, c6, c7, t0, t1, t2, t3, t4, t5, t6, t7) \
    TOL_FMAC_OP8X_("vnmul.f32", t0, t1, t2, t3, t4, t5, t6, t7, b0, b1, b2, b3, b4, b5, b6, b7, c0, c1, c2, c3, c4, c5, c6, c7) \
    TOL_FMAC_OP8X_("vadd.f32", a0, a1, a2, a3, a4, a5, a6, a7, a0, a1, a2, a3, a4, a5, a6, a7, t0, t1, t2, t3, t4, t5, t6, t7)
#define TOL_FMAC_MAC4X_(a0, a1, a2, a3, b0, b1, b2, b3, c0, c1, c2, c3, t0, t1, t2, t3) \
    TOL_FMAC_OP4X_("vmul.f32", t0, t1, t2, t3, b0, b1, b2, b3, c0, c1, c2, c3) \
    TOL_FMAC_OP4X_("vadd.f32", a0, a1, a2, a3, a0, a1, a2, a3, t0, t1, t2, t3)
#define TOL_FMAC_MSC4X_(a0, a1, a2, a3, b0, b1, b2, b3, c0, c1, c2, c3, t0, t1, t2, t3) \
    TOL_FMAC_OP4X_("vnmul.f32", t0, t1, t2, t3, b0, b1, b2, b3, c0, c1, c2, c3) \
    TOL_FMAC_OP4X_("vadd.f32", a0, a1, a2, a3, a0, a1, a2, a3, t0, t1, t2, t3)
#define TOL_FMAC_MAC8_(...) TOL_FMAC_CALL_(TOL_FMAC_MAC8X_, __VA_ARGS__)
#define TOL_FMAC_MSC8_(...) TOL_FMAC_CALL_(TOL_FMAC_MSC8X_, __VA_ARGS__)
#define TOL_FMAC_MAC4_(...) TOL_FMAC_CALL_(TOL_FMAC_MAC4X_, __VA_ARGS__)
#define TOL_FMAC_MSC4_(...) TOL_FMAC_CALL_(TOL_FMAC_MSC4X_, __VA_ARGS__)
/* The same with one temporary t for all lanes, each product added at once (VMUL t, VADD). */
#define TOL_FMAC_MS1_(a, b, c, t) TOL_FMAC_L3_("vmul.f32", t, b, c) TOL_FMAC_L3_("vadd.f32", a, a, t)
#define TOL_FMAC_MAC8TX_(a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, b4, b5, b6, b7, c0, c1, c2, c3, c4, c5, c6, c7, t) \
    TOL_FMAC_MS1_(a0, b0, c0, t) TOL_FMAC_MS1_(a1, b1, c1, t) TOL_FMAC_MS1_(a2, b2, c2, t) TOL_FMAC_MS1_(a3, b3, c3, t) TOL_FMAC_MS1_(a4, b4, c4, t) TOL_FMAC_MS1_(a5, b5, c5, t) TOL_FMAC_MS1_(a6, b6, c6, t) TOL_FMAC_MS1_(a7, b7, c7, t)
#define TOL_FMAC_MAC8T_(...) TOL_FMAC_CALL_(TOL_FMAC_MAC8TX_, __VA_ARGS__)
/* G_k = 0.0f + e X_k (the product into G, then 0.0f + it, the sum VMLA onto a zeroed G gave). */
#define TOL_FMAC_EX8_(G, X)                                                                        \
    TOL_FMAC_CALL_(TOL_FMAC_OP8X_, "vmul.f32", G, TOL_FMAC_ALL8_("%[e]"), X)                      \
    TOL_FMAC_CALL_(TOL_FMAC_OP8X_, "vadd.f32", G, TOL_FMAC_ALL8_("%[zero]"), G)

/* acc += row . x over one block of 8 (row in s16-s23, x in s24-s31), left to right. */
#define TOL_FMAC_DOT8_(acc) TOL_FMAC_MAC8_(TOL_FMAC_ALL8_(acc), TOL_FMAC_S16_, TOL_FMAC_S24_, TOL_FMAC_S16_)

/* The SGD block, the gradient g in s16-s23 and the weights w in s24-s31 (8 lanes):
 * g' = g + wd w (DECAY), [v = g' + mu vw, vw in s8-s15 (MOMENTUM)], wn = w - lr v in
 * s24-s31 (W) and chk += 0 * wn (CHK). One text for the variants with and without momentum
 * and with a stored or an e x gradient. Every SGD primitive below either checks (commit 0:
 * chk accumulated, nothing stored) or commits (commit 1: v and wn stored, chk returned
 * unchanged: a commit follows a check pass or a bound, and its chk is never read). */
#define TOL_FMAC_SGD8_DECAY_(T) TOL_FMAC_MAC8_(TOL_FMAC_S16_, TOL_FMAC_ALL8_("%[wd]"), TOL_FMAC_S24_, T)
#define TOL_FMAC_SGD8_DECAY1_ TOL_FMAC_MAC8T_(TOL_FMAC_S16_, TOL_FMAC_ALL8_("%[wd]"), TOL_FMAC_S24_, "%[t]")
#define TOL_FMAC_SGD8_MOMENTUM_ TOL_FMAC_MAC8_(TOL_FMAC_S16_, TOL_FMAC_ALL8_("%[mu]"), TOL_FMAC_S8_, TOL_FMAC_S8_)
#define TOL_FMAC_SGD8_W_(T) TOL_FMAC_MSC8_(TOL_FMAC_S24_, TOL_FMAC_ALL8_("%[lr]"), TOL_FMAC_S16_, T)
#define TOL_FMAC_SGD8_CHK_(T) TOL_FMAC_MAC8_(TOL_FMAC_ALL8_("%[chk]"), TOL_FMAC_S24_, TOL_FMAC_ALL8_("%[zero]"), T)
#define TOL_FMAC_CLOBBER16_                                                                        \
    "s16", "s17", "s18", "s19", "s20", "s21", "s22", "s23", "s24", "s25", "s26", "s27", "s28",    \
        "s29", "s30", "s31"
#define TOL_FMAC_CLOBBER24_                                                                        \
    "s8", "s9", "s10", "s11", "s12", "s13", "s14", "s15", TOL_FMAC_CLOBBER16_

/* acc + w[0] x[0] + w[1] x[1] + ... (left to right), n8 blocks of 8: VLDM + 8 VMUL + 8 VADD. */
static inline float tol_fmac_dot8_(float acc, const float **w, const float **x, uint32_t n8)
{
    const float *pw = *w;
    const float *px = *x;
    __asm__ volatile(
        "1:\n"
        "vldmia %[pw]!, {s16-s23}\n"
        "vldmia %[px]!, {s24-s31}\n"
        TOL_FMAC_DOT8_("%[acc]")
        "subs %[n], %[n], #1\n"
        "bne 1b\n"
        : [acc] "+t"(acc), [pw] "+r"(pw), [px] "+r"(px), [n] "+r"(n8)
        :
        : TOL_FMAC_CLOBBER16_, "cc", "memory");
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
        TOL_FMAC_DOT8_("%[a0]")
        "vldmia %[w1]!, {s16-s23}\n"
        TOL_FMAC_DOT8_("%[a1]")
        "vldmia %[w2]!, {s16-s23}\n"
        TOL_FMAC_DOT8_("%[a2]")
        "vldmia %[w3]!, {s16-s23}\n"
        TOL_FMAC_DOT8_("%[a3]")
        "subs %[n], %[n], #1\n"
        "bne 1b\n"
        : [a0] "+t"(a0), [a1] "+t"(a1), [a2] "+t"(a2), [a3] "+t"(a3), [w0] "+r"(w0),
          [w1] "+r"(w1), [w2] "+r"(w2), [w3] "+r"(w3), [px] "+r"(x), [n] "+r"(n8)
        :
        : TOL_FMAC_CLOBBER16_, "cc", "memory");
    z[0] = a0;
    z[1] = a1;
    z[2] = a2;
    z[3] = a3;
}

/* Two samples at once: the products w_k x0_k and w_k x1_k in place of x0 and x1 (w in s16-s23,
 * x0 in s8-s15, x1 in s24-s31, all three reloaded per block), then a0 += and a1 += them: each
 * sum still runs left to right. */
#define TOL_FMAC_DOT8X2_(a0, a1)                                                                   \
    TOL_FMAC_OP8_("vmul.f32", TOL_FMAC_S8_, TOL_FMAC_S16_, TOL_FMAC_S8_)                          \
    TOL_FMAC_OP8_("vmul.f32", TOL_FMAC_S24_, TOL_FMAC_S16_, TOL_FMAC_S24_)                        \
    TOL_FMAC_OP8_("vadd.f32", TOL_FMAC_ALL8_(a0), TOL_FMAC_ALL8_(a0), TOL_FMAC_S8_)               \
    TOL_FMAC_OP8_("vadd.f32", TOL_FMAC_ALL8_(a1), TOL_FMAC_ALL8_(a1), TOL_FMAC_S24_)
/* The same for x0, x1 kept across rows, w's block loaded as two halves of 4 (s16-s19), the
 * products into s20-s23 and (x1's) in place: X0Q, X1Q the halves' lanes of x0 and x1. */
#define TOL_FMAC_DOT4X2H_(a0, a1, X0Q, X1Q)                                                        \
    TOL_FMAC_CALL_(TOL_FMAC_OP4X_, "vmul.f32", TOL_FMAC_S20Q_, TOL_FMAC_S16Q_, X0Q)               \
    TOL_FMAC_CALL_(TOL_FMAC_OP4X_, "vmul.f32", TOL_FMAC_S16Q_, TOL_FMAC_S16Q_, X1Q)               \
    TOL_FMAC_OP4_("vadd.f32", TOL_FMAC_ALL4_(a0), TOL_FMAC_ALL4_(a0), TOL_FMAC_S20Q_)             \
    TOL_FMAC_OP4_("vadd.f32", TOL_FMAC_ALL4_(a1), TOL_FMAC_ALL4_(a1), TOL_FMAC_S16Q_)
#define TOL_FMAC_DOT4X2ROW_(rw, a0, a1)                                                            \
    "vldmia " rw "!, {s16-s19}\n" TOL_FMAC_DOT4X2H_(a0, a1, TOL_FMAC_S8Q_, TOL_FMAC_S24Q_)       \
    "vldmia " rw "!, {s16-s19}\n" TOL_FMAC_DOT4X2H_(a0, a1, TOL_FMAC_S12Q_, TOL_FMAC_S28Q_)

/* Four rows (w rows `stride` floats apart) times two samples x0, x1: z0[i] = bias[i] + w_i . x0
 * and z1[i] = bias[i] + w_i . x1 (i = 0..3) over n8 blocks of 8, every sum left to right. Each
 * block of a row is loaded once for both samples; the eight sums stay in s0-s7. The six
 * pointers reach the asm through memory (one LDM into registers it reserves), so that the
 * operands the compiler must place stay few at any optimisation level. */
static inline void tol_fmac_dot4x2_(float *z0, float *z1, const float *bias, const float *w,
                                    uint32_t stride, const float *x0, const float *x1, uint32_t n8)
{
    const float *p[6] = {w, w + stride, w + 2u * stride, w + 3u * stride, x0, x1};
    __asm__ volatile(
        "ldm %[p], {r4, r5, r6, r8, r10, r11}\n"
        "vldmia %[bias], {s0-s3}\n"
        TOL_FMAC_MOV4X_("s4", "s5", "s6", "s7", "s0", "s1", "s2", "s3")
        "1:\n"
        "vldmia r10!, {s8-s15}\n"
        "vldmia r11!, {s24-s31}\n"
        TOL_FMAC_DOT4X2ROW_("r4", "s0", "s4")
        TOL_FMAC_DOT4X2ROW_("r5", "s1", "s5")
        TOL_FMAC_DOT4X2ROW_("r6", "s2", "s6")
        TOL_FMAC_DOT4X2ROW_("r8", "s3", "s7")
        "subs %[n], %[n], #1\n"
        "bne 1b\n"
        "vstmia %[z0], {s0-s3}\n"
        "vstmia %[z1], {s4-s7}\n"
        : [n] "+r"(n8)
        : [p] "r"(p), [bias] "r"(bias), [z0] "r"(z0), [z1] "r"(z1)
        : "r4", "r5", "r6", "r8", "r10", "r11", "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7",
          TOL_FMAC_CLOBBER24_, "cc", "memory");
}

/* One row times two samples: *z0 = bias + w . x0, *z1 = bias + w . x1 over n8 blocks of 8. */
static inline void tol_fmac_dot1x2_(float *z0, float *z1, float bias, const float *w, const float *x0,
                                    const float *x1, uint32_t n8)
{
    float a0 = bias;
    float a1 = bias;
    __asm__ volatile(
        "1:\n"
        "vldmia %[w]!, {s16-s23}\n"
        "vldmia %[x0]!, {s8-s15}\n"
        "vldmia %[x1]!, {s24-s31}\n"
        TOL_FMAC_DOT8X2_("%[a0]", "%[a1]")
        "subs %[n], %[n], #1\n"
        "bne 1b\n"
        : [a0] "+t"(a0), [a1] "+t"(a1), [w] "+r"(w), [x0] "+r"(x0), [x1] "+r"(x1), [n] "+r"(n8)
        :
        : TOL_FMAC_CLOBBER24_, "cc", "memory");
    *z0 = a0;
    *z1 = a1;
}

/* y[k] = y[k] + a x[k] over n8 blocks of 8: VLDM x, VLDM y, 8 VMUL + 8 VADD, VSTM y. */
static inline void tol_fmac_axpy8_(float *y, float a, const float *x, uint32_t n8)
{
    __asm__ volatile(
        "1:\n"
        "vldmia %[px]!, {s24-s31}\n"
        "vldmia %[py], {s16-s23}\n"
        TOL_FMAC_MAC8_(TOL_FMAC_S16_, TOL_FMAC_ALL8_("%[a]"), TOL_FMAC_S24_, TOL_FMAC_S24_)
        "vstmia %[py]!, {s16-s23}\n"
        "subs %[n], %[n], #1\n"
        "bne 1b\n"
        : [py] "+r"(y), [px] "+r"(x), [n] "+r"(n8)
        : [a] "t"(a)
        : TOL_FMAC_CLOBBER16_, "cc", "memory");
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
        TOL_FMAC_MOV8_(TOL_FMAC_S16_, TOL_FMAC_ALL8_("%[zero]"))
        "1:\n"
        "vldr %[t], [%[pe]]\n"
        "vldmia %[px], {s24-s31}\n"
        "add %[pe], %[pe], %[es]\n"
        "add %[px], %[px], %[xs]\n"
        TOL_FMAC_MAC8_(TOL_FMAC_S16_, TOL_FMAC_ALL8_("%[t]"), TOL_FMAC_S24_, TOL_FMAC_S24_)
        "subs %[n], %[n], #1\n"
        "bne 1b\n"
        "vstmia %[out], {s16-s23}\n"
        : [t] "=&t"(t), [pe] "+r"(e), [px] "+r"(x), [n] "+r"(nb)
        : [zero] "t"(zero), [es] "r"(es_b), [xs] "r"(xs_b), [out] "r"(out)
        : TOL_FMAC_CLOBBER16_, "cc", "memory");
}

/* Four output channels of a convolution over the kernel rows of one window: z[i] += the sum, row
 * after row (nrows), of w_i[row] . x[row] over n8 blocks of 8 (each row's run of taps, left to
 * right). w: channel 0's first tap, channels wstride floats apart; each next kernel row starts
 * wrow floats further in W and xrow floats further in x. One call per window instead of one
 * per kernel row; the four sums stay in s0-s3 across the rows. */
static inline void tol_fmac_dot4x8_rows_(float *z, const float *w, uint32_t wstride, uint32_t wrow,
                                         const float *x, uint32_t xrow, uint32_t n8, uint32_t nrows)
{
    const uintptr_t p[9] = {(uintptr_t)w, (uintptr_t)(w + wstride), (uintptr_t)(w + 2u * wstride),
                            (uintptr_t)(w + 3u * wstride), (uintptr_t)x, 4u * (wrow - 8u * n8),
                            4u * (xrow - 8u * n8), n8, nrows};
    uint32_t t;
    __asm__ volatile(
        "ldm %[p], {r4, r5, r6, r8, r10, r11}\n"
        "ldr lr, [%[p], #32]\n"
        "vldmia %[z], {s0-s3}\n"
        "2:\n"
        "ldr %[t], [%[p], #28]\n"
        "1:\n"
        "vldmia r10!, {s24-s31}\n"
        "vldmia r4!, {s16-s23}\n"
        TOL_FMAC_DOT8_("s0")
        "vldmia r5!, {s16-s23}\n"
        TOL_FMAC_DOT8_("s1")
        "vldmia r6!, {s16-s23}\n"
        TOL_FMAC_DOT8_("s2")
        "vldmia r8!, {s16-s23}\n"
        TOL_FMAC_DOT8_("s3")
        "subs %[t], %[t], #1\n"
        "bne 1b\n"
        "add r4, r4, r11\n"
        "add r5, r5, r11\n"
        "add r6, r6, r11\n"
        "add r8, r8, r11\n"
        "ldr %[t], [%[p], #24]\n"
        "add r10, r10, %[t]\n"
        "subs lr, lr, #1\n"
        "bne 2b\n"
        "vstmia %[z], {s0-s3}\n"
        : [t] "=&r"(t)
        : [p] "r"(p), [z] "r"(z)
        : "r4", "r5", "r6", "r8", "r10", "r11", "lr", "s0", "s1", "s2", "s3", TOL_FMAC_CLOBBER16_, "cc",
          "memory");
}

/* Eight lanes of y[k] += a[k] b[k] (k = 0..7): VLDM y, a, b, 8 VMUL + 8 VADD, VSTM y. */
static inline void tol_fmac_vmla8_(float *y, const float *a, const float *b)
{
    __asm__ volatile(
        "vldmia %[a], {s8-s15}\n"
        "vldmia %[b], {s16-s23}\n"
        "vldmia %[y], {s0-s7}\n"
        TOL_FMAC_MAC8_(TOL_FMAC_S0_, TOL_FMAC_S8_, TOL_FMAC_S16_, TOL_FMAC_S8_)
        "vstmia %[y], {s0-s7}\n"
        :
        : [y] "r"(y), [a] "r"(a), [b] "r"(b)
        : "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "s12", "s13", "s14",
          "s15", "s16", "s17", "s18", "s19", "s20", "s21", "s22", "s23", "memory");
}

/* A depthwise window, eight channels: acc[k] = bias[k] + the taps of nrows kernel rows (ntaps
 * each) in (ky, kx) order, w_t[k] x_t[k]; a tap is ws floats further in W and xs in x, a kernel
 * row wrow floats further in W and xrow in x (from the row's first tap). The eight sums stay
 * in s0-s7; pointers and strides reach the asm through memory (one LDM). */
static inline void tol_fmac_dwwin8_(float *acc, const float *bias, const float *w, uint32_t ws,
                                    uint32_t wrow, const float *x, uint32_t xs, uint32_t xrow,
                                    uint32_t ntaps, uint32_t nrows)
{
    const uintptr_t p[8] = {(uintptr_t)w, (uintptr_t)x, 4u * ws, 4u * xs, 4u * (wrow - ntaps * ws),
                            4u * (xrow - ntaps * xs), ntaps, nrows};
    uint32_t t;
    __asm__ volatile(
        "ldm %[p], {r4, r5, r6, r8, r10, r11}\n"
        "ldr lr, [%[p], #28]\n"
        "vldmia %[bias], {s0-s7}\n"
        "2:\n"
        "ldr %[t], [%[p], #24]\n"
        "1:\n"
        "vldmia r4, {s8-s15}\n"
        "vldmia r5, {s16-s23}\n"
        "add r4, r4, r6\n"
        "add r5, r5, r8\n"
        TOL_FMAC_MAC8_(TOL_FMAC_S0_, TOL_FMAC_S8_, TOL_FMAC_S16_, TOL_FMAC_S8_)
        "subs %[t], %[t], #1\n"
        "bne 1b\n"
        "add r4, r4, r10\n"
        "add r5, r5, r11\n"
        "subs lr, lr, #1\n"
        "bne 2b\n"
        "vstmia %[acc], {s0-s7}\n"
        : [t] "=&r"(t)
        : [p] "r"(p), [acc] "r"(acc), [bias] "r"(bias)
        : "r4", "r5", "r6", "r8", "r10", "r11", "lr", "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8",
          "s9", "s10", "s11", "s12", "s13", "s14", "s15", "s16", "s17", "s18", "s19", "s20", "s21", "s22",
          "s23", "cc", "memory");
}

/* Column sums of eight lanes: out[k] = 0.0f + x[0][k] + x[1][k] + ... (n rows xs floats apart,
 * left to right; n >= 1). */
static inline void tol_fmac_colsum8_(float *out, const float *x, uint32_t xs, uint32_t n)
{
    static const float zero[8];
    const uint32_t xs_b = 4u * xs;
    __asm__ volatile(
        "vldmia %[z], {s0-s7}\n"
        "1:\n"
        "vldmia %[x], {s8-s15}\n"
        "add %[x], %[x], %[xs]\n"
        TOL_FMAC_OP8_("vadd.f32", TOL_FMAC_S0_, TOL_FMAC_S0_, TOL_FMAC_S8_)
        "subs %[n], %[n], #1\n"
        "bne 1b\n"
        "vstmia %[out], {s0-s7}\n"
        : [x] "+r"(x), [n] "+r"(n)
        : [z] "r"(zero), [out] "r"(out), [xs] "r"(xs_b)
        : "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "s12", "s13", "s14",
          "s15", "cc", "memory");
}

/* Eight lanes of y[k] += a[k]: VLDM y, a, 8 VADD, VSTM y. */
static inline void tol_fmac_vadd8_(float *y, const float *a)
{
    __asm__ volatile(
        "vldmia %[y], {s0-s7}\n"
        "vldmia %[a], {s8-s15}\n"
        TOL_FMAC_OP8_("vadd.f32", TOL_FMAC_S0_, TOL_FMAC_S0_, TOL_FMAC_S8_)
        "vstmia %[y], {s0-s7}\n"
        :
        : [y] "r"(y), [a] "r"(a)
        : "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "s12", "s13", "s14",
          "s15", "memory");
}

/* y[k] = a[k], k = 0..7: one VLDM, one VSTM. */
static inline void tol_fmac_copy8_(float *y, const float *a)
{
    __asm__ volatile("vldmia %[a], {s0-s7}\n"
                     "vstmia %[y], {s0-s7}\n"
                     :
                     : [y] "r"(y), [a] "r"(a)
                     : "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "memory");
}

/* A 5 x 4 block of the batch gradient: g[i][k] = 0.0f + e[0][i] x[0][k] + e[1][i] x[1][k] + ...
 * (nb terms, left to right; i = 0..4 rows, k = 0..3 columns), the 20 sums in s12-s31, one VLDM
 * each for the five errors and the four inputs of a sample. g rows gs floats apart; e and x
 * rows (samples) es and xs floats apart. The pointers and strides reach the asm through
 * memory (one LDM into registers it reserves). */
static inline void tol_fmac_outer5x4_(float *g, uint32_t gs, const float *e, uint32_t es,
                                      const float *x, uint32_t xs, uint32_t nb)
{
    static const float zero[20];
    const uintptr_t p[7] = {(uintptr_t)e, (uintptr_t)x, (uintptr_t)g, 4u * es, 4u * xs, 4u * gs,
                            (uintptr_t)zero};
    __asm__ volatile(
        "ldm %[p], {r4, r5, r6, r8, r10, r11, lr}\n"
        "vldmia lr, {s12-s31}\n"
        "1:\n"
        "vldmia r4, {s0-s4}\n"
        "vldmia r5, {s5-s8}\n"
        "add r4, r4, r8\n"
        "add r5, r5, r10\n"
        "vmul.f32 s9, s0, s5\n"
        "vmul.f32 s10, s0, s6\n"
        "vmul.f32 s11, s0, s7\n"
        "vmul.f32 s0, s0, s8\n"
        "vadd.f32 s12, s12, s9\n"
        "vadd.f32 s13, s13, s10\n"
        "vadd.f32 s14, s14, s11\n"
        "vadd.f32 s15, s15, s0\n"
        "vmul.f32 s9, s1, s5\n"
        "vmul.f32 s10, s1, s6\n"
        "vmul.f32 s11, s1, s7\n"
        "vmul.f32 s1, s1, s8\n"
        "vadd.f32 s16, s16, s9\n"
        "vadd.f32 s17, s17, s10\n"
        "vadd.f32 s18, s18, s11\n"
        "vadd.f32 s19, s19, s1\n"
        "vmul.f32 s9, s2, s5\n"
        "vmul.f32 s10, s2, s6\n"
        "vmul.f32 s11, s2, s7\n"
        "vmul.f32 s2, s2, s8\n"
        "vadd.f32 s20, s20, s9\n"
        "vadd.f32 s21, s21, s10\n"
        "vadd.f32 s22, s22, s11\n"
        "vadd.f32 s23, s23, s2\n"
        "vmul.f32 s9, s3, s5\n"
        "vmul.f32 s10, s3, s6\n"
        "vmul.f32 s11, s3, s7\n"
        "vmul.f32 s3, s3, s8\n"
        "vadd.f32 s24, s24, s9\n"
        "vadd.f32 s25, s25, s10\n"
        "vadd.f32 s26, s26, s11\n"
        "vadd.f32 s27, s27, s3\n"
        "vmul.f32 s9, s4, s5\n"
        "vmul.f32 s10, s4, s6\n"
        "vmul.f32 s11, s4, s7\n"
        "vmul.f32 s4, s4, s8\n"
        "vadd.f32 s28, s28, s9\n"
        "vadd.f32 s29, s29, s10\n"
        "vadd.f32 s30, s30, s11\n"
        "vadd.f32 s31, s31, s4\n"
        "subs %[n], %[n], #1\n"
        "bne 1b\n"
        "vstmia r6, {s12-s15}\n"
        "add r6, r6, r11\n"
        "vstmia r6, {s16-s19}\n"
        "add r6, r6, r11\n"
        "vstmia r6, {s20-s23}\n"
        "add r6, r6, r11\n"
        "vstmia r6, {s24-s27}\n"
        "add r6, r6, r11\n"
        "vstmia r6, {s28-s31}\n"
        : [n] "+r"(nb)
        : [p] "r"(p)
        : "r4", "r5", "r6", "r8", "r10", "r11", "lr", "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7",
          TOL_FMAC_CLOBBER24_, "cc", "memory");
}

/* SGD without momentum buffers over n8 blocks of 8 weights, gradient g:
 * g' = g + wd w; wn = w - lr g'; chk += 0 * wn; wn stored if commit. */
static inline float tol_fmac_sgd8_(float *w, const float *g, uint32_t n8, float lr, float wd,
                                   float chk, int commit)
{
    const float zero = 0.0f;
    if (commit) {
        __asm__ volatile(
            "1:\n"
            "vldmia %[g]!, {s16-s23}\n"
            "vldmia %[w], {s24-s31}\n"
            TOL_FMAC_SGD8_DECAY_(TOL_FMAC_S8_)
            TOL_FMAC_SGD8_W_(TOL_FMAC_S8_)
            "vstmia %[w]!, {s24-s31}\n"
            "subs %[n], %[n], #1\n"
            "bne 1b\n"
            : [w] "+r"(w), [g] "+r"(g), [n] "+r"(n8)
            : [lr] "t"(lr), [wd] "t"(wd)
            : TOL_FMAC_CLOBBER24_, "cc", "memory");
        return chk;
    }
    __asm__ volatile(
        "1:\n"
        "vldmia %[g]!, {s16-s23}\n"
        "vldmia %[w]!, {s24-s31}\n"
        TOL_FMAC_SGD8_DECAY_(TOL_FMAC_S8_)
        TOL_FMAC_SGD8_W_(TOL_FMAC_S8_)
        TOL_FMAC_SGD8_CHK_(TOL_FMAC_S16_)
        "subs %[n], %[n], #1\n"
        "bne 1b\n"
        : [chk] "+t"(chk), [w] "+r"(w), [g] "+r"(g), [n] "+r"(n8)
        : [zero] "t"(zero), [lr] "t"(lr), [wd] "t"(wd)
        : TOL_FMAC_CLOBBER24_, "cc", "memory");
    return chk;
}

/* As tol_fmac_sgd8_ for one block, the gradient being g[k] = 0.0f + e x[k]. */
static inline float tol_fmac_sgd8_ex_(float *w, float e, const float *x, float lr, float wd,
                                      float chk, int commit)
{
    const float zero = 0.0f;
    if (commit) {
        __asm__ volatile(
            "vldmia %[x], {s8-s15}\n"
            "vldmia %[w], {s24-s31}\n"
            TOL_FMAC_EX8_(TOL_FMAC_S16_, TOL_FMAC_S8_)
            TOL_FMAC_SGD8_DECAY_(TOL_FMAC_S8_)
            TOL_FMAC_SGD8_W_(TOL_FMAC_S8_)
            "vstmia %[w], {s24-s31}\n"
            :
            : [w] "r"(w), [x] "r"(x), [e] "t"(e), [zero] "t"(zero), [lr] "t"(lr), [wd] "t"(wd)
            : TOL_FMAC_CLOBBER24_, "memory");
        return chk;
    }
    __asm__ volatile(
        "vldmia %[x], {s8-s15}\n"
        "vldmia %[w], {s24-s31}\n"
        TOL_FMAC_EX8_(TOL_FMAC_S16_, TOL_FMAC_S8_)
        TOL_FMAC_SGD8_DECAY_(TOL_FMAC_S8_)
        TOL_FMAC_SGD8_W_(TOL_FMAC_S8_)
        TOL_FMAC_SGD8_CHK_(TOL_FMAC_S16_)
        : [chk] "+t"(chk)
        : [w] "r"(w), [x] "r"(x), [e] "t"(e), [zero] "t"(zero), [lr] "t"(lr), [wd] "t"(wd)
        : TOL_FMAC_CLOBBER24_, "memory");
    return chk;
}

/* SGD with momentum buffers over n8 blocks of 8: g' = g + wd w; v = g' + mu vw;
 * wn = w - lr v; chk += 0 * wn; v and wn stored if commit. */
static inline float tol_fmac_sgd8_vw_(float *w, float *vw, const float *g, uint32_t n8, float lr,
                                      float mu, float wd, float chk, int commit)
{
    const float zero = 0.0f;
    float t;
    if (commit) {
        __asm__ volatile(
            "1:\n"
            "vldmia %[g]!, {s16-s23}\n"
            "vldmia %[w], {s24-s31}\n"
            "vldmia %[vw], {s8-s15}\n"
            TOL_FMAC_SGD8_DECAY1_
            TOL_FMAC_SGD8_MOMENTUM_
            TOL_FMAC_SGD8_W_(TOL_FMAC_S8_)
            "vstmia %[vw]!, {s16-s23}\n"
            "vstmia %[w]!, {s24-s31}\n"
            "subs %[n], %[n], #1\n"
            "bne 1b\n"
            : [w] "+r"(w), [vw] "+r"(vw), [g] "+r"(g), [n] "+r"(n8), [t] "=&t"(t)
            : [lr] "t"(lr), [wd] "t"(wd), [mu] "t"(mu)
            : TOL_FMAC_CLOBBER24_, "cc", "memory");
        return chk;
    }
    __asm__ volatile(
        "1:\n"
        "vldmia %[g]!, {s16-s23}\n"
        "vldmia %[w]!, {s24-s31}\n"
        "vldmia %[vw]!, {s8-s15}\n"
        TOL_FMAC_SGD8_DECAY1_
        TOL_FMAC_SGD8_MOMENTUM_
        TOL_FMAC_SGD8_W_(TOL_FMAC_S8_)
        TOL_FMAC_SGD8_CHK_(TOL_FMAC_S16_)
        "subs %[n], %[n], #1\n"
        "bne 1b\n"
        : [chk] "+t"(chk), [w] "+r"(w), [vw] "+r"(vw), [g] "+r"(g), [n] "+r"(n8), [t] "=&t"(t)
        : [zero] "t"(zero), [lr] "t"(lr), [wd] "t"(wd), [mu] "t"(mu)
        : TOL_FMAC_CLOBBER24_, "cc", "memory");
    return chk;
}

/* As tol_fmac_sgd8_vw_ for one block of 4, the gradient being g[k] = 0.0f + e x[k]
 * (g in s16-s19, w in s20-s23, vw in s24-s27, x in s28-s31). */
static inline float tol_fmac_sgd4_vw_ex_(float *w, float *vw, float e, const float *x, float lr,
                                         float mu, float wd, float chk, int commit)
{
    const float zero = 0.0f;
#define TOL_FMAC_SGD4_VW_EX_                                                                       \
    "vldmia %[x], {s28-s31}\n"                                                                     \
    "vldmia %[w], {s20-s23}\n"                                                                     \
    "vldmia %[vw], {s24-s27}\n"                                                                    \
    TOL_FMAC_OP4_("vmul.f32", TOL_FMAC_S16Q_, TOL_FMAC_ALL4_("%[e]"), TOL_FMAC_S28Q_)              \
    TOL_FMAC_OP4_("vadd.f32", TOL_FMAC_S16Q_, TOL_FMAC_ALL4_("%[zero]"), TOL_FMAC_S16Q_)           \
    TOL_FMAC_MAC4_(TOL_FMAC_S16Q_, TOL_FMAC_ALL4_("%[wd]"), TOL_FMAC_S20Q_, TOL_FMAC_S28Q_)        \
    TOL_FMAC_MAC4_(TOL_FMAC_S16Q_, TOL_FMAC_ALL4_("%[mu]"), TOL_FMAC_S24Q_, TOL_FMAC_S24Q_)        \
    TOL_FMAC_MSC4_(TOL_FMAC_S20Q_, TOL_FMAC_ALL4_("%[lr]"), TOL_FMAC_S16Q_, TOL_FMAC_S28Q_)
    if (commit) {
        __asm__ volatile(
            TOL_FMAC_SGD4_VW_EX_
            "vstmia %[vw], {s16-s19}\n"
            "vstmia %[w], {s20-s23}\n"
            :
            : [w] "r"(w), [vw] "r"(vw), [x] "r"(x), [e] "t"(e), [zero] "t"(zero), [lr] "t"(lr),
              [wd] "t"(wd), [mu] "t"(mu)
            : TOL_FMAC_CLOBBER16_, "memory");
        return chk;
    }
    __asm__ volatile(
        TOL_FMAC_SGD4_VW_EX_
        TOL_FMAC_MAC4_(TOL_FMAC_ALL4_("%[chk]"), TOL_FMAC_S20Q_, TOL_FMAC_ALL4_("%[zero]"), TOL_FMAC_S28Q_)
        : [chk] "+t"(chk)
        : [w] "r"(w), [vw] "r"(vw), [x] "r"(x), [e] "t"(e), [zero] "t"(zero), [lr] "t"(lr),
          [wd] "t"(wd), [mu] "t"(mu)
        : TOL_FMAC_CLOBBER16_, "memory");
    return chk;
#undef TOL_FMAC_SGD4_VW_EX_
}

/* The commit of tol_fmac_sgd8_ex_ with momentum buffers and mu = 0: v = g' is stored
 * to vw unread (g' + 0 vw = g': vw is finite and g' = 0.0f + ... is never -0). */
static inline void tol_fmac_sgd8_v0_ex_(float *w, float *vw, float e, const float *x, float lr,
                                        float wd)
{
    const float zero = 0.0f;
    __asm__ volatile(
        "vldmia %[x], {s8-s15}\n"
        "vldmia %[w], {s24-s31}\n"
        TOL_FMAC_EX8_(TOL_FMAC_S16_, TOL_FMAC_S8_)
        TOL_FMAC_SGD8_DECAY_(TOL_FMAC_S8_)
        TOL_FMAC_SGD8_W_(TOL_FMAC_S8_)
        "vstmia %[vw], {s16-s23}\n"
        "vstmia %[w], {s24-s31}\n"
        :
        : [w] "r"(w), [vw] "r"(vw), [x] "r"(x), [e] "t"(e), [zero] "t"(zero), [lr] "t"(lr),
          [wd] "t"(wd)
        : TOL_FMAC_CLOBBER24_, "memory");
}

/* The commit of tol_fmac_sgd8_vw_ with mu = 0 (as tol_fmac_sgd8_v0_ex_: vw stored, not read). */
static inline void tol_fmac_sgd8_v0_(float *w, float *vw, const float *g, uint32_t n8, float lr,
                                     float wd)
{
    __asm__ volatile(
        "1:\n"
        "vldmia %[g]!, {s16-s23}\n"
        "vldmia %[w], {s24-s31}\n"
        TOL_FMAC_SGD8_DECAY_(TOL_FMAC_S8_)
        TOL_FMAC_SGD8_W_(TOL_FMAC_S8_)
        "vstmia %[vw]!, {s16-s23}\n"
        "vstmia %[w]!, {s24-s31}\n"
        "subs %[n], %[n], #1\n"
        "bne 1b\n"
        : [w] "+r"(w), [vw] "+r"(vw), [g] "+r"(g), [n] "+r"(n8)
        : [lr] "t"(lr), [wd] "t"(wd)
        : TOL_FMAC_CLOBBER24_, "cc", "memory");
}

#else

#include <stddef.h>
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

static inline void tol_fmac_dot4x2_(float *z0, float *z1, const float *bias, const float *w,
                                    uint32_t stride, const float *x0, const float *x1, uint32_t n8)
{
    for (uint32_t i = 0; i < 4u; i++) {
        z0[i] = bias[i];
        z1[i] = bias[i];
    }
    tol_fmac_dot4x8_(z0, w, stride, x0, n8);
    tol_fmac_dot4x8_(z1, w, stride, x1, n8);
}

static inline void tol_fmac_dot1x2_(float *z0, float *z1, float bias, const float *w, const float *x0,
                                    const float *x1, uint32_t n8)
{
    const float *pw = w;
    const float *px = x0;
    *z0 = tol_fmac_dot8_(bias, &pw, &px, n8);
    pw = w;
    px = x1;
    *z1 = tol_fmac_dot8_(bias, &pw, &px, n8);
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

static inline void tol_fmac_dot4x8_rows_(float *z, const float *w, uint32_t wstride, uint32_t wrow,
                                         const float *x, uint32_t xrow, uint32_t n8, uint32_t nrows)
{
    for (uint32_t r = 0; r < nrows; r++) tol_fmac_dot4x8_(z, w + (size_t)r * wrow, wstride, x + (size_t)r * xrow, n8);
}

static inline void tol_fmac_dwwin8_(float *acc, const float *bias, const float *w, uint32_t ws,
                                    uint32_t wrow, const float *x, uint32_t xs, uint32_t xrow,
                                    uint32_t ntaps, uint32_t nrows)
{
    for (uint32_t k = 0; k < 8u; k++) acc[k] = bias[k];
    for (uint32_t r = 0; r < nrows; r++) {
        for (uint32_t t = 0; t < ntaps; t++) {
            for (uint32_t k = 0; k < 8u; k++) {
                acc[k] = tol_fmac_mla(acc[k], w[r * wrow + t * ws + k], x[r * xrow + t * xs + k]);
            }
        }
    }
}

static inline void tol_fmac_colsum8_(float *out, const float *x, uint32_t xs, uint32_t n)
{
    for (uint32_t k = 0; k < 8u; k++) {
        float a = 0.0f;
        for (uint32_t i = 0; i < n; i++) a += x[i * xs + k];
        out[k] = a;
    }
}

static inline void tol_fmac_vadd8_(float *y, const float *a)
{
    for (uint32_t k = 0; k < 8u; k++) y[k] += a[k];
}

static inline void tol_fmac_copy8_(float *y, const float *a)
{
    for (uint32_t k = 0; k < 8u; k++) y[k] = a[k];
}

static inline void tol_fmac_vmla8_(float *y, const float *a, const float *b)
{
    for (uint32_t k = 0; k < 8u; k++) y[k] = tol_fmac_mla(y[k], a[k], b[k]);
}

static inline void tol_fmac_outer5x4_(float *g, uint32_t gs, const float *e, uint32_t es,
                                      const float *x, uint32_t xs, uint32_t nb)
{
    for (uint32_t i = 0; i < 5u; i++) {
        for (uint32_t k = 0; k < 4u; k++) {
            float a = 0.0f;
            for (uint32_t b = 0; b < nb; b++) a = tol_fmac_mla(a, e[b * es + i], x[b * xs + k]);
            g[i * gs + k] = a;
        }
    }
}

static inline float tol_fmac_sgd1_(float *w, float *vw, float g, float lr, float mu, float wd,
                                   int decay, float chk, int commit);

/* The SGD block of every variant: n weights, gradient g, momentum buffers vw (or NULL). */
static inline float tol_fmac_sgd_(float *w, float *vw, const float *g, uint32_t n, float lr,
                                  float mu, float wd, float chk, int commit)
{
    for (uint32_t k = 0; k < n; k++) {
        chk = tol_fmac_sgd1_(&w[k], vw != NULL ? &vw[k] : NULL, g[k], lr, mu, wd, 1, chk, commit);
    }
    return chk;
}

static inline float tol_fmac_sgd8_(float *w, const float *g, uint32_t n8, float lr, float wd,
                                   float chk, int commit)
{
    return tol_fmac_sgd_(w, NULL, g, 8u * n8, lr, 0.0f, wd, chk, commit);
}

static inline float tol_fmac_sgd8_vw_(float *w, float *vw, const float *g, uint32_t n8, float lr,
                                      float mu, float wd, float chk, int commit)
{
    return tol_fmac_sgd_(w, vw, g, 8u * n8, lr, mu, wd, chk, commit);
}

static inline float tol_fmac_sgd4_vw_ex_(float *w, float *vw, float e, const float *x, float lr,
                                         float mu, float wd, float chk, int commit)
{
    float g[4];
    for (uint32_t k = 0; k < 4u; k++) g[k] = tol_fmac_mla(0.0f, e, x[k]);
    return tol_fmac_sgd_(w, vw, g, 4u, lr, mu, wd, chk, commit);
}

static inline float tol_fmac_sgd8_ex_(float *w, float e, const float *x, float lr, float wd,
                                      float chk, int commit)
{
    float g[8];
    for (uint32_t k = 0; k < 8u; k++) g[k] = tol_fmac_mla(0.0f, e, x[k]);
    return tol_fmac_sgd_(w, NULL, g, 8u, lr, 0.0f, wd, chk, commit);
}

static inline void tol_fmac_sgd8_v0_ex_(float *w, float *vw, float e, const float *x, float lr,
                                        float wd)
{
    float g[8];
    for (uint32_t k = 0; k < 8u; k++) g[k] = tol_fmac_mla(0.0f, e, x[k]);
    (void)tol_fmac_sgd_(w, vw, g, 8u, lr, 0.0f, wd, 0.0f, 1);
}

static inline void tol_fmac_sgd8_v0_(float *w, float *vw, const float *g, uint32_t n8, float lr,
                                     float wd)
{
    (void)tol_fmac_sgd_(w, vw, g, 8u * n8, lr, 0.0f, wd, 0.0f, 1);
}

#endif

/* One SGD element (both builds): g' = g + wd w if decay (weights, not biases);
 * v = g' + mu vw with momentum buffers (vw != NULL), else v = g'; wn = w - lr v;
 * returns chk + 0 * wn (NaN iff wn is not finite); v and wn stored if commit. */
static inline float tol_fmac_sgd1_(float *w, float *vw, float g, float lr, float mu, float wd,
                                   int decay, float chk, int commit)
{
    if (decay) g = tol_fmac_mla(g, wd, *w);
    const float v = vw != NULL ? tol_fmac_mla(g, mu, *vw) : g;
    const float wn = tol_fmac_mls(*w, lr, v);
    if (commit) {
        if (vw != NULL) *vw = v;
        *w = wn;
    }
    return tol_fmac_mla(chk, wn, 0.0f);
}

/* Bit 30 of the result (acc ORed in) is set iff one of the n floats has a magnitude >= 2^65
 * or is inf or NaN (exponent field >= 0xC0: its two top bits, 30 and 29, set):
 * two instructions per value (AND with a shifted operand, ORR). */
static inline uint32_t tol_fmac_big_(const float *v, size_t n, uint32_t acc)
{
    size_t i = 0;
    for (; i + 8u <= n; i += 8u) {
        uint32_t u[8];
        memcpy(u, &v[i], sizeof u);
        acc |= ((u[0] & (u[0] << 1)) | (u[1] & (u[1] << 1))) | ((u[2] & (u[2] << 1)) | (u[3] & (u[3] << 1))) |
               ((u[4] & (u[4] << 1)) | (u[5] & (u[5] << 1))) | ((u[6] & (u[6] << 1)) | (u[7] & (u[7] << 1)));
    }
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], sizeof u);
        acc |= u & (u << 1);
    }
    return acc;
}

#endif /* TOL_FMAC_H */
