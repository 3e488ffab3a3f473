/*
 * bench_op.h - the per-operator timer that `tinyol bench --tflm` wraps around
 * each kernel call of a copy of a generated backbone.c (bench builds only).
 */
#ifndef TOL_BENCH_OP_H
#define TOL_BENCH_OP_H

#include "bench_rt.h"

#define TOL_BENCH_OP(index, name, call)                 \
    do {                                                \
        const uint64_t tol_bench_t0 = tol_bench_ticks(); \
        call;                                           \
        const uint64_t tol_bench_t1 = tol_bench_ticks(); \
        tol_bench_puts("op ");                          \
        tol_bench_kv(name, tol_bench_t1 - tol_bench_t0); \
    } while (0)

#endif
