/* tol_eltwise.c - ADD, PAD, requantize/RELU and the exported requantization
 * helper, plain C following TFLM reference kernels. Shared by both
 * implementations (the SIMD build includes this file). */
#include "tol_kernels.h"

#include <string.h>

#include "../tol_kernels_util.h"

int32_t tol_mbqm(int32_t x, int32_t mult, int32_t shift)
{
    return tol_mbqm_(x, mult, shift);
}

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

void tol_pad_s8(const tol_pad_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t c = p->c;
    const size_t row_bytes = (size_t)(p->in_w * c);
    memset(output, (int)(int8_t)p->pad_value, (size_t)(p->out_h * p->out_w * c));
    for (int32_t y = 0; y < p->in_h; ++y) {
        int8_t *dst = output + ((y + p->pad_top) * p->out_w + p->pad_left) * c;
        memcpy(dst, input + y * p->in_w * c, row_bytes);
    }
}

void tol_requantize_s8(const tol_requant_params_t *p, const int8_t *input, int8_t *output)
{
    for (int32_t i = 0; i < p->size; ++i) {
        const int32_t r = tol_mbqm_(input[i] - p->input_zp, p->mult, p->shift) + p->output_zp;
        output[i] = (int8_t)tol_clamp_(r, p->act_min, p->act_max);
    }
}
