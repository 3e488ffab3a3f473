/* tol_const_arith.c (SIMD build) - MUL and ADD/SUB with a broadcast constant,
 * using the one-SMLAL requantization of tol_simd_dot.h (same results as the
 * reference). */
#include "tol_kernels.h"

#include "../tol_kernels_util.h"
#include "tol_simd_dot.h"

TOL_SIMD_FN void tol_mul_const_s8(const tol_mul_const_params_t *p, const int8_t *input, int8_t *output)
{
    /* locals: the int8 output stores may alias *p */
    const int32_t n = p->size, period = p->period, off = p->input_offset;
    const int32_t mo = p->out_mult, so = p->out_shift, zp = p->output_offset;
    const int32_t lo = p->act_min, hi = p->act_max;
    const int32_t *factor = p->factor;
    int32_t c = 0;
    for (int32_t i = 0; i < n; ++i) {
        const int32_t r = tol_mbqm_fast_((input[i] + off) * factor[c], mo, so) + zp;
        output[i] = (int8_t)tol_clamp_(r, lo, hi);
        if (++c == period) {
            c = 0;
        }
    }
}

TOL_SIMD_FN void tol_add_const_s8(const tol_add_const_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t n = p->size, period = p->period, off = p->input_offset, ls = p->left_shift;
    const int32_t mi = p->in_mult, si = p->in_shift, mo = p->out_mult, so = p->out_shift;
    const int32_t zp = p->output_offset, lo = p->act_min, hi = p->act_max;
    const int32_t *addend = p->addend;
    int32_t c = 0;
    for (int32_t i = 0; i < n; ++i) {
        const int32_t a = (int32_t)((uint32_t)(input[i] + off) << ls);
        const int32_t r = tol_mbqm_fast_(tol_mbqm_fast_(a, mi, si) + addend[c], mo, so) + zp;
        output[i] = (int8_t)tol_clamp_(r, lo, hi);
        if (++c == period) {
            c = 0;
        }
    }
}
