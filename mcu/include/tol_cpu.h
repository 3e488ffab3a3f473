/*
 * tol_cpu.h - the core's boot self-test: does this core execute the instructions the
 * kernels and the learner rely on as the ARMv7-M architecture says?
 *
 * tol_cpu_selftest() runs known answers (mcu/src/kernels/tol_cpu_kat.h, generated from the
 * manual's pseudo-code by `python -m tinyol.gen_defs`) through the very helpers the kernels
 * call (tol_acle.h: SSUB8+SEL, SXTB16, SXTAB16, SMLAD, SMLABB/SMLATT, SSAT; SMLAL as the
 * compiler emits it) and the learner's VMLA/VMLS (tol_fmac.h). The SIMD build runs them
 * all, the reference build only the learner's (it executes no DSP instruction).
 *
 * Policy (docs/kernels.md, "The core self-test"): a failed check the kernels can route
 * around (TOL_CPU_FALLBACK_CHECKS: the pooling maximum) switches that kernel to its portable
 * path for the rest of the run, so results stay bit-exact; any other failure is reported
 * (INFO flag, BOARD, boot line) and changes nothing: outputs that depend on it are wrong on
 * this core, and the remedy is a build with the reference kernels.
 *
 * Implemented twice, by file like the kernels: kernels/simd/tol_cpu.c, kernels/ref/tol_cpu.c.
 * The fault mask (4 bytes) is the one piece of state the kernels read (tol_cpu_faults()): a
 * property of the chip, set once at boot.
 */
#ifndef TOL_CPU_H
#define TOL_CPU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint32_t checked;   /* bit i: check i ran (bits as in tol_cpu_check_name) */
    uint32_t faults;    /* bit i: check i gave an answer the architecture does not */
    uint32_t fallbacks; /* the faults the kernels now route around (portable path in use) */
} tol_cpu_report_t;

/* Run the checks of this build and keep the faults: the kernels choose their paths by them
 * from now on. Once at boot, before the first inference (docs/kernels.md gives its cost). */
void tol_cpu_selftest(void);

/* What the last tol_cpu_selftest found (all zero before it). r: out. */
void tol_cpu_report(tol_cpu_report_t *r);

/* The faults found (bits of tol_cpu_checks.h); the kernels test theirs on every call. */
uint32_t tol_cpu_faults(void);

/* Set the faults as if the self-test had found them (tests and benchmarks force the portable
 * paths with it). */
void tol_cpu_use(uint32_t faults);

/* Name of check `bit` ("ssub8+sel", ...), NULL beyond the last. */
const char *tol_cpu_check_name(uint32_t bit);

#ifdef __cplusplus
}
#endif

#endif /* TOL_CPU_H */
