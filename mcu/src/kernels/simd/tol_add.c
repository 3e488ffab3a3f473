/* tol_add.c (SIMD build) - ADD with the one-SMLAL requantization of
 * tol_simd_dot.h (same results as the reference, about half the instructions).
 * From TOL_ADD_TABLE_MIN elements on, each input's rescaled value
 * mbqm((x + offset) << left_shift) is tabulated once per call for all 256 int8
 * values (2 x 1 KB on the stack): the same values, so the same sums and outputs,
 * and one table load per input instead of one SMLAL requantization. */
#include "tol_kernels.h"

#include "../tol_kernels_util.h"
#include "tol_simd_dot.h"

#define TOL_ADD_TABLE_MIN 256

/* t[x + 128] = mbqm((off + x) << ls, m, s) for every int8 x. */
static void tol_add_table_(int32_t *t, int32_t off, int32_t ls, int32_t m, int32_t s)
{
    for (int32_t x = -128; x < 128; ++x) {
        t[x + 128] = tol_mbqm_fast_((int32_t)((uint32_t)(off + x) << ls), m, s);
    }
}

static TOL_SIMD_FN __attribute__((noinline)) void tol_add_tab_(const tol_add_params_t *p, const int8_t *in1,
                                                               const int8_t *in2, int8_t *output)
{
    int32_t t1[256], t2[256];
    tol_add_table_(t1, p->in1_offset, p->left_shift, p->in1_mult, p->in1_shift);
    tol_add_table_(t2, p->in2_offset, p->left_shift, p->in2_mult, p->in2_shift);
    /* locals: the int8 output stores may alias *p */
    const int32_t n = p->size, mo = p->out_mult, so = p->out_shift, zp = p->output_offset;
    const int32_t lo = p->act_min, hi = p->act_max;
    const int32_t *const c1 = t1 + 128, *const c2 = t2 + 128;
    if (lo == -128 && hi == 127) {
        for (int32_t i = 0; i < n; ++i) {
            output[i] = (int8_t)tol_ssat8(tol_mbqm_fast_(c1[in1[i]] + c2[in2[i]], mo, so) + zp);
        }
        return;
    }
    for (int32_t i = 0; i < n; ++i) {
        output[i] = (int8_t)tol_clamp_(tol_mbqm_fast_(c1[in1[i]] + c2[in2[i]], mo, so) + zp, lo, hi);
    }
}

TOL_SIMD_FN void tol_add_s8(const tol_add_params_t *p, const int8_t *in1, const int8_t *in2, int8_t *output)
{
    if (p->size >= TOL_ADD_TABLE_MIN) {
        tol_add_tab_(p, in1, in2, output);
        return;
    }
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
