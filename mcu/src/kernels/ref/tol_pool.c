/* tol_pool.c - AVERAGE_POOL_2D and MAX_POOL_2D in plain C, following TFLM
 * reference_integer_ops::AveragePool / MaxPool. MEAN over H and W
 * (reference_ops::Mean / QuantizedMeanOrSum) is in tol_reduce.c, which both
 * builds compile. */
#include "tol_kernels.h"

#include "../tol_kernels_util.h"

void tol_avgpool2d_s8(const tol_pool_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t c = p->c;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_top;
        const int32_t ky0 = tol_max_(0, -iy0);
        const int32_t ky1 = tol_min_(p->k_h, p->in_h - iy0);
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int32_t ix0 = ox * p->stride_w - p->pad_left;
            const int32_t kx0 = tol_max_(0, -ix0);
            const int32_t kx1 = tol_min_(p->k_w, p->in_w - ix0);
            const int32_t count = (ky1 - ky0) * (kx1 - kx0);
            for (int32_t ch = 0; ch < c; ++ch) {
                int32_t acc = 0;
                for (int32_t ky = ky0; ky < ky1; ++ky) {
                    const int8_t *row = input + ((iy0 + ky) * p->in_w + ix0) * c + ch;
                    for (int32_t kx = kx0; kx < kx1; ++kx) {
                        acc += row[kx * c];
                    }
                }
                if (count > 0) {
                    acc = acc > 0 ? (acc + count / 2) / count : (acc - count / 2) / count;
                }
                *output++ = (int8_t)tol_clamp_(acc, p->act_min, p->act_max);
            }
        }
    }
}

void tol_maxpool2d_s8(const tol_pool_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t c = p->c;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_top;
        const int32_t ky0 = tol_max_(0, -iy0);
        const int32_t ky1 = tol_min_(p->k_h, p->in_h - iy0);
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int32_t ix0 = ox * p->stride_w - p->pad_left;
            const int32_t kx0 = tol_max_(0, -ix0);
            const int32_t kx1 = tol_min_(p->k_w, p->in_w - ix0);
            for (int32_t ch = 0; ch < c; ++ch) {
                int32_t m = -128;
                for (int32_t ky = ky0; ky < ky1; ++ky) {
                    const int8_t *row = input + ((iy0 + ky) * p->in_w + ix0) * c + ch;
                    for (int32_t kx = kx0; kx < kx1; ++kx) {
                        m = tol_max_(m, row[kx * c]);
                    }
                }
                *output++ = (int8_t)tol_clamp_(m, p->act_min, p->act_max);
            }
        }
    }
}
