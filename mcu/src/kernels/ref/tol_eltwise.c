/* tol_eltwise.c - PAD, requantize/RELU and the exported requantization helper,
 * plain C following TFLM reference kernels. Shared by both implementations
 * (the SIMD build includes this file). */
#include "tol_kernels.h"

#include <string.h>

#include "../tol_kernels_util.h"

int32_t tol_mbqm(int32_t x, int32_t mult, int32_t shift)
{
    return tol_mbqm_(x, mult, shift);
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
