/*
 * ours_main.c - tinyol's side of `tinyol bench --tflm`: runs the generated
 * backbone (backbone.c + our kernels) on the input in bench_case.h under the
 * same counter and stack paint as tflm_main.cc. Built twice: plainly (total
 * instructions, stack, output bytes) and with TOL_BENCH_TIMED_OPS, where the
 * host has wrapped each operator call of a copy of backbone.c in
 * TOL_BENCH_OP(index, "NAME", call) for the per-operator table.
 */
#include <stdint.h>

#include "backbone.h"
#include "bench_case.h"
#include "bench_rt.h"

static int8_t tol_bench_in[TOL_BACKBONE_INPUT_SIZE];
static int8_t tol_bench_latent[TOL_BACKBONE_LATENT_SIZE];

int tol_bench_main(void)
{
    _Static_assert(TOL_BENCH_INPUT_SIZE == TOL_BACKBONE_INPUT_SIZE, "input size");
    for (uint32_t i = 0; i < TOL_BACKBONE_INPUT_SIZE; i++) {
        tol_bench_in[i] = tol_bench_input[i];
    }
    const uintptr_t sp = tol_bench_stack_paint();
    const uint64_t r0 = tol_bench_ticks();
    const uint64_t r1 = tol_bench_ticks();
    const uint64_t t0 = tol_bench_ticks();
    const tol_status_t s = tol_backbone_invoke(tol_bench_in, tol_bench_latent);
    const uint64_t t1 = tol_bench_ticks();
    if (s != TOL_OK) {
        tol_bench_puts("error invoke\n");
        return 4;
    }
    tol_bench_kv("stack", tol_bench_stack_used(sp));
    tol_bench_kv("invoke_ticks", t1 - t0);
    tol_bench_kv("overhead_ticks", r1 - r0);
    tol_bench_hex("output", tol_bench_latent, TOL_BACKBONE_LATENT_SIZE);
    tol_bench_puts("done\n");
    return 0;
}
