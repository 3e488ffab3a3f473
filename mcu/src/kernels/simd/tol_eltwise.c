/* tol_eltwise.c (SIMD build) - ADD, PAD and requantization are dominated by
 * per-element requantization: the SIMD build compiles the reference code. */
#include "../ref/tol_eltwise.c"
