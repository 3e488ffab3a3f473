/* tol_const_arith.c (reference) - MUL and ADD/SUB with a constant operand
 * broadcast along the last axis (what an unfused BatchNormalization becomes),
 * following TFLM reference_integer_ops::Mul / Add with the constant's terms
 * precomputed on the host. */
#include "tol_kernels.h"

#include "../tol_kernels_util.h"

void tol_mul_const_s8(const tol_mul_const_params_t *p, const int8_t *input, int8_t *output)
{
    int32_t c = 0;
    for (int32_t i = 0; i < p->size; ++i) {
        const int32_t prod = (input[i] + p->input_offset) * p->factor[c];
        const int32_t r = tol_mbqm_(prod, p->out_mult, p->out_shift) + p->output_offset;
        output[i] = (int8_t)tol_clamp_(r, p->act_min, p->act_max);
        if (++c == p->period) {
            c = 0;
        }
    }
}

void tol_add_const_s8(const tol_add_const_params_t *p, const int8_t *input, int8_t *output)
{
    int32_t c = 0;
    for (int32_t i = 0; i < p->size; ++i) {
        const int32_t a = (int32_t)((uint32_t)(input[i] + p->input_offset) << p->left_shift);
        const int32_t sum = tol_mbqm_(a, p->in_mult, p->in_shift) + p->addend[c];
        const int32_t r = tol_mbqm_(sum, p->out_mult, p->out_shift) + p->output_offset;
        output[i] = (int8_t)tol_clamp_(r, p->act_min, p->act_max);
        if (++c == p->period) {
            c = 0;
        }
    }
}
