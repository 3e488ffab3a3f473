/*
 * bench_rt.h - bare-metal runtime of the side-by-side benchmark harness
 * (tinyol bench --tflm): start-up, an 80 MHz clock, the SysTick instruction
 * counter, stack painting and semihosting output, for QEMU's b-l475e-iot01a
 * machine under -icount (or mps2-an386, for a TFLM arena larger than the L475's
 * SRAM: bench_mps2.ld). Bench-only: never part of the firmware.
 *
 * Counting: SysTick runs on the processor clock with a wrap interrupt, exactly
 * as the firmware's hal_stm32l4.c does, so host/tinyol/bench/icount.py converts the
 * ticks reported here the same way it converts the firmware's BENCH replies.
 */
#ifndef TOL_BENCH_RT_H
#define TOL_BENCH_RT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The machine's clock and SysTick (bench_clock_stm32l4.c or bench_clock_mps2.c, by file). */
void tol_bench_clock_init(void);

/* SysTick ticks since start-up (monotonic, 64-bit with the wrap count). */
uint64_t tol_bench_ticks(void);

/* Paint the free stack below the caller's frame with a pattern; returns the
 * stack pointer at the call (the reference for tol_bench_stack_used). */
uintptr_t tol_bench_stack_paint(void);

/* Bytes of stack used below `sp_ref` since the last paint (deepest overwritten word). */
uint32_t tol_bench_stack_used(uintptr_t sp_ref);

/* Print a NUL-terminated line (the caller adds '\n') through semihosting. */
void tol_bench_puts(const char *s);

/* Print "key value\n" with an unsigned decimal value. */
void tol_bench_kv(const char *key, uint64_t value);

/* Print "key " followed by `n` bytes in hex and '\n'. */
void tol_bench_hex(const char *key, const int8_t *data, uint32_t n);

/* End QEMU with an exit code (semihosting SYS_EXIT_EXTENDED). */
void tol_bench_exit(int code) __attribute__((noreturn));

/* The harness's entry point (after clock and counter start). */
int tol_bench_main(void);

#ifdef __cplusplus
}
#endif

#endif
