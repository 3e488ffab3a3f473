/*
 * tol_acle.h - the few Cortex-M4 DSP intrinsics the SIMD kernels use.
 *
 * On ARM (with the DSP extension) this maps to <arm_acle.h> plus two inline
 * asm helpers for the rotated extends (GCC 12 has no __ror and does not fold a
 * rotate into SXTB16). On any other target it provides portable C with the
 * exact same results, so the SIMD kernels compile and are tested on the host.
 *
 * Lane convention: a 32-bit word holds two int16 lanes, lane 0 in bits 15..0.
 */
#ifndef TOL_ACLE_H
#define TOL_ACLE_H

#include <stdint.h>
#include <string.h>

/* Fixed-size copies that must become single LDR/STR instructions: GCC's builtin
 * stays inlined even under -ffreestanding / -fno-builtin (plain memcpy then
 * turns into a library call per word). */
#if defined(__GNUC__)
#define TOL_COPY4(dst, src, n) __builtin_memcpy((dst), (src), (n))
#else
#define TOL_COPY4(dst, src, n) memcpy((dst), (src), (n))
#endif

/* Load 4 int8 values (any alignment) as one word: byte 0 in bits 7..0. */
static inline uint32_t tol_read_s8x4(const int8_t *p)
{
    uint32_t v;
    TOL_COPY4(&v, p, sizeof v);
    return v;
}

/* Put on the SIMD kernels: GCC's pre-register-allocation scheduler hoists the
 * weight loads of the 4-channel dot product and then spills to the stack
 * (27 -> 37 instructions per 16 MACs); without it the loop needs no spill. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#define TOL_SIMD_FN __attribute__((optimize("no-schedule-insns")))
#else
#define TOL_SIMD_FN
#endif

/* Per signed byte lane: max(a, b), in plain C (no GE flags): the pooling kernel's path on a
 * core whose SSUB8/SEL failed the boot self-test (tol_cpu.h), and the host build's. */
static inline uint32_t tol_max_s8x4_c(uint32_t a, uint32_t b)
{
    uint32_t r = 0;
    for (uint32_t k = 0; k < 32u; k += 8u) {
        const int8_t x = (int8_t)(uint8_t)(a >> k);
        const int8_t y = (int8_t)(uint8_t)(b >> k);
        r |= (uint32_t)(uint8_t)(x >= y ? x : y) << k;
    }
    return r;
}

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP

#include <arm_acle.h>

/* Per signed byte lane: max(a, b). SSUB8 sets GE[k] when lane k of a - b is >= 0, SEL then
 * takes lane k of a where GE[k] is set (one asm statement: nothing may touch GE between). */
static inline uint32_t tol_max_s8x4(uint32_t a, uint32_t b)
{
    uint32_t d;
    uint32_t r;
    __asm__("ssub8 %0, %2, %3\n\tsel %1, %2, %3" : "=&r"(d), "=r"(r) : "r"(a), "r"(b) : "cc");
    (void)d;
    return r;
}

/* Saturate to [-128, 127]: one SSAT. */
static inline int32_t tol_ssat8(int32_t v)
{
    int32_t r;
    __asm__("ssat %0, #8, %1" : "=r"(r) : "r"(v));
    return r;
}

/* Two words from a word-aligned *p (one LDRD with post-increment), *p += 2. GCC
 * would issue two LDRs from one base register; for read-only data (weights). */
static inline void tol_ldrd2_(const uint32_t **p, uint32_t *a, uint32_t *b)
{
    __asm__("ldrd %0, %1, [%2], #8" : "=r"(*a), "=r"(*b), "+r"(*p));
}

/* Sign-extend bytes 0 and 2 into lanes 0 and 1. */
static inline uint32_t tol_sxtb16(uint32_t x)
{
    return (uint32_t)__sxtb16((int8x4_t)x);
}

/* Sign-extend bytes 1 and 3 into lanes 0 and 1 (SXTB16 with ROR #8). */
static inline uint32_t tol_sxtb16_ror8(uint32_t x)
{
    uint32_t r;
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(x));
    return r;
}

/* Lanes of a plus sign-extended bytes 0 and 2 of x. */
static inline uint32_t tol_sxtab16(uint32_t a, uint32_t x)
{
    return (uint32_t)__sxtab16((int16x2_t)a, (int8x4_t)x);
}

/* Lanes of a plus sign-extended bytes 1 and 3 of x (SXTAB16 with ROR #8). */
static inline uint32_t tol_sxtab16_ror8(uint32_t a, uint32_t x)
{
    uint32_t r;
    __asm__("sxtab16 %0, %1, %2, ror #8" : "=r"(r) : "r"(a), "r"(x));
    return r;
}

/* acc + x.lane0*y.lane0 + x.lane1*y.lane1 (signed 16x16, wrapping add). */
static inline int32_t tol_smlad(uint32_t x, uint32_t y, int32_t acc)
{
    return __smlad((int16x2_t)x, (int16x2_t)y, acc);
}

/* acc + x.lane0*y.lane0 */
static inline int32_t tol_smlabb(uint32_t x, uint32_t y, int32_t acc)
{
    return __smlabb((int32_t)x, (int32_t)y, acc);
}

/* acc + x.lane1*y.lane1 */
static inline int32_t tol_smlatt(uint32_t x, uint32_t y, int32_t acc)
{
    return __smlatt((int32_t)x, (int32_t)y, acc);
}

/* Rotate right (GCC 12's arm_acle.h lacks __ror). */
static inline uint32_t tol_ror(uint32_t x, uint32_t n)
{
    n &= 31u;
    return n ? (x >> n) | (x << (32u - n)) : x;
}

#else /* portable C equivalents, bit-exact with the instructions */

static inline uint32_t tol_max_s8x4(uint32_t a, uint32_t b)
{
    return tol_max_s8x4_c(a, b);
}

static inline int32_t tol_ssat8(int32_t v)
{
    return v < -128 ? -128 : (v > 127 ? 127 : v);
}

static inline uint32_t tol_ror(uint32_t x, uint32_t n)
{
    n &= 31u;
    return n ? (x >> n) | (x << (32u - n)) : x;
}

static inline void tol_ldrd2_(const uint32_t **p, uint32_t *a, uint32_t *b)
{
    *a = (*p)[0];
    *b = (*p)[1];
    *p += 2;
}

static inline uint32_t tol_pack16_(int32_t lo, int32_t hi)
{
    return ((uint32_t)lo & 0xFFFFu) | (((uint32_t)hi & 0xFFFFu) << 16);
}

static inline int32_t tol_lane16_(uint32_t x, int lane)
{
    return (int32_t)(int16_t)(uint16_t)(x >> (16 * lane));
}

static inline int32_t tol_byte8_(uint32_t x, int byte)
{
    return (int32_t)(int8_t)(uint8_t)(x >> (8 * byte));
}

static inline uint32_t tol_sxtb16(uint32_t x)
{
    return tol_pack16_(tol_byte8_(x, 0), tol_byte8_(x, 2));
}

static inline uint32_t tol_sxtb16_ror8(uint32_t x)
{
    return tol_sxtb16(tol_ror(x, 8));
}

static inline uint32_t tol_sxtab16(uint32_t a, uint32_t x)
{
    return tol_pack16_(tol_lane16_(a, 0) + tol_byte8_(x, 0), tol_lane16_(a, 1) + tol_byte8_(x, 2));
}

static inline uint32_t tol_sxtab16_ror8(uint32_t a, uint32_t x)
{
    return tol_sxtab16(a, tol_ror(x, 8));
}

static inline int32_t tol_smlad(uint32_t x, uint32_t y, int32_t acc)
{
    uint32_t s = (uint32_t)acc + (uint32_t)(tol_lane16_(x, 0) * tol_lane16_(y, 0)) +
                 (uint32_t)(tol_lane16_(x, 1) * tol_lane16_(y, 1));
    return (int32_t)s;
}

static inline int32_t tol_smlabb(uint32_t x, uint32_t y, int32_t acc)
{
    return (int32_t)((uint32_t)acc + (uint32_t)(tol_lane16_(x, 0) * tol_lane16_(y, 0)));
}

static inline int32_t tol_smlatt(uint32_t x, uint32_t y, int32_t acc)
{
    return (int32_t)((uint32_t)acc + (uint32_t)(tol_lane16_(x, 1) * tol_lane16_(y, 1)));
}

#endif

#endif /* TOL_ACLE_H */
