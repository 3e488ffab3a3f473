/*
 * tol_cpu_run.h - the body both tol_cpu.c files share (private to mcu/src/kernels): the
 * known-answer loop over the checks a build runs. Include once, after the helpers that the
 * checks' expressions name (tol_acle.h, tol_fmac.h).
 */
#ifndef TOL_CPU_RUN_H
#define TOL_CPU_RUN_H

#include <stdint.h>
#include <string.h>

#include "tol_cpu.h"
#include "tol_cpu_kat.h"

static inline float tol_cpu_u2f_(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t tol_cpu_f2u_(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* One check on one vector: the helper's result as hi << 32 | lo. The operands go through a
 * volatile so the compiler cannot fold the known answer at build time. */
static uint64_t tol_cpu_eval_(uint32_t check, const tol_cpu_kat_t *k)
{
    volatile uint32_t va = k->a, vb = k->b, vc = k->c;
    const uint32_t a = va, b = vb, c = vc;
    (void)a;
    (void)b;
    (void)c;
    switch (check) {
#define TOL_CPU_CASE_(bit, expr) \
    case (bit): return (uint64_t)(expr);
        TOL_CPU_KAT_EXPR(TOL_CPU_CASE_)
#undef TOL_CPU_CASE_
    default: return 0u;
    }
}

/* Run every known answer of the checks in `mask`; the mask of those that failed. */
static uint32_t tol_cpu_run_(uint32_t mask)
{
    uint32_t faults = 0u;
    for (uint32_t i = 0; i < (uint32_t)(sizeof tol_cpu_kat / sizeof tol_cpu_kat[0]); ++i) {
        const tol_cpu_kat_t *k = &tol_cpu_kat[i];
        const uint32_t bit = 1u << k->check;
        if ((mask & bit) != 0u && tol_cpu_eval_(k->check, k) != (((uint64_t)k->hi << 32) | k->lo)) {
            faults |= bit;
        }
    }
    return faults;
}

#endif /* TOL_CPU_RUN_H */
