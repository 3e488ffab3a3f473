/* tol_add.c (reference) - ADD of two int8 tensors with their own scales,
 * following TFLM reference_integer_ops::Add (left shift 20, three multipliers). */
#include "tol_kernels.h"

#include "../tol_kernels_util.h"

void tol_add_s8(const tol_add_params_t *p, const int8_t *in1, const int8_t *in2, int8_t *output)
{
    for (int32_t i = 0; i < p->size; ++i) {
        const int32_t a = (int32_t)((uint32_t)(p->in1_offset + in1[i]) << p->left_shift);
        const int32_t b = (int32_t)((uint32_t)(p->in2_offset + in2[i]) << p->left_shift);
        const int32_t sa = tol_mbqm_(a, p->in1_mult, p->in1_shift);
        const int32_t sb = tol_mbqm_(b, p->in2_mult, p->in2_shift);
        const int32_t r = tol_mbqm_(sa + sb, p->out_mult, p->out_shift) + p->output_offset;
        output[i] = (int8_t)tol_clamp_(r, p->act_min, p->act_max);
    }
}
