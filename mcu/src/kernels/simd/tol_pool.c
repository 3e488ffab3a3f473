/* tol_pool.c (SIMD build) - pooling and MEAN are memory-bound and gain nothing
 * from SMLAD: the SIMD build compiles the reference implementation. */
#include "../ref/tol_pool.c"
