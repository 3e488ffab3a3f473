/* tol_add.c (SIMD build) - ADD with the one-SMLAL requantization of
 * tol_simd_dot.h (same results as the reference, about half the instructions). */
#include "tol_kernels.h"

#include "../tol_kernels_util.h"
#include "tol_simd_dot.h"

TOL_SIMD_FN void tol_add_s8(const tol_add_params_t *p, const int8_t *in1, const int8_t *in2, int8_t *output)
{
    /* locals: the int8 output stores may alias *p */
    const int32_t n = p->size, off1 = p->in1_offset, off2 = p->in2_offset, ls = p->left_shift;
    const int32_t m1 = p->in1_mult, s1 = p->in1_shift, m2 = p->in2_mult, s2 = p->in2_shift;
    const int32_t mo = p->out_mult, so = p->out_shift, zp = p->output_offset;
    const int32_t lo = p->act_min, hi = p->act_max;
    for (int32_t i = 0; i < n; ++i) {
        const int32_t a = (int32_t)((uint32_t)(off1 + in1[i]) << ls);
        const int32_t b = (int32_t)((uint32_t)(off2 + in2[i]) << ls);
        const int32_t r = tol_mbqm_fast_(tol_mbqm_fast_(a, m1, s1) + tol_mbqm_fast_(b, m2, s2), mo, so) + zp;
        output[i] = (int8_t)tol_clamp_(r, lo, hi);
    }
}
