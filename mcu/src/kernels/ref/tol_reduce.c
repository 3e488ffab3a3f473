/* tol_reduce.c (reference) - MEAN and REDUCE_MAX over one run of contiguous
 * axes ([outer][n][inner] -> [outer][inner]), following TFLM's reduce kernels,
 * and MEAN over H and W (its [1][h w][c] case). The SIMD build compiles this file. */
#include "tol_kernels.h"

#include "../tol_kernels_util.h"

void tol_mean_s8(const tol_reduce_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t n = p->n, inner = p->inner;
    for (int32_t o = 0; o < p->outer; ++o) {
        const int8_t *x = input + o * n * inner;
        for (int32_t ch = 0; ch < inner; ++ch) {
            int32_t sum = 0;
            for (int32_t i = 0; i < n; ++i) {
                sum += x[i * inner + ch];
            }
            if (p->requant == 0) {
                output[ch] = (int8_t)(sum / n);
            } else {
                const int32_t r = tol_mbqm_(sum - p->input_zp * n, p->mult, p->shift) + p->output_zp;
                output[ch] = (int8_t)tol_clamp_(r, -128, 127);
            }
        }
        output += inner;
    }
}

/* MEAN over H and W of [h][w][c]: tol_mean_s8 over [1][h w][c]. */
void tol_mean_hw_s8(const tol_mean_params_t *p, const int8_t *input, int8_t *output)
{
    const tol_reduce_params_t r = {1, p->h * p->w, p->c, p->requant,
                                   p->input_zp, p->output_zp, p->mult, p->shift};
    tol_mean_s8(&r, input, output);
}

void tol_reduce_max_s8(const tol_reduce_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t n = p->n, inner = p->inner;
    for (int32_t o = 0; o < p->outer; ++o) {
        const int8_t *x = input + o * n * inner;
        for (int32_t ch = 0; ch < inner; ++ch) {
            int32_t m = -128;
            for (int32_t i = 0; i < n; ++i) {
                m = tol_max_(m, x[i * inner + ch]);
            }
            output[ch] = (int8_t)m;
        }
        output += inner;
    }
}
