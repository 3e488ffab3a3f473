/* tol_reduce.c (SIMD build) - table lookups, reductions and copies gain nothing from
 * the DSP instructions: the SIMD build compiles the reference code. */
#include "../ref/tol_reduce.c"
