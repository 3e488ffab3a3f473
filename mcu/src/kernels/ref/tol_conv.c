/* tol_conv.c (reference) - CONV_2D and DEPTHWISE_CONV_2D in plain C,
 * following TFLM reference_integer_ops::ConvPerChannel / DepthwiseConvPerChannel. */
#include "tol_kernels.h"

#include "../tol_kernels_util.h"

void tol_conv2d_s8(const tol_conv_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t in_w = p->in_w, in_c = p->in_c;
    const int32_t filter_size = p->k_h * p->k_w * in_c;

    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_top;
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int32_t ix0 = ox * p->stride_w - p->pad_left;
            for (int32_t oc = 0; oc < p->out_c; ++oc) {
                const int8_t *w = p->weights + oc * filter_size;
                int32_t acc = 0;
                for (int32_t ky = 0; ky < p->k_h; ++ky) {
                    const int32_t iy = iy0 + ky * p->dil_h;
                    if (iy < 0 || iy >= p->in_h) {
                        continue;
                    }
                    for (int32_t kx = 0; kx < p->k_w; ++kx) {
                        const int32_t ix = ix0 + kx * p->dil_w;
                        if (ix < 0 || ix >= in_w) {
                            continue;
                        }
                        const int8_t *x = input + (iy * in_w + ix) * in_c;
                        const int8_t *wk = w + (ky * p->k_w + kx) * in_c;
                        for (int32_t ic = 0; ic < in_c; ++ic) {
                            acc += (int32_t)wk[ic] * ((int32_t)x[ic] + p->input_offset);
                        }
                    }
                }
                if (p->bias != NULL) {
                    acc += p->bias[oc];
                }
                acc = tol_mbqm_(acc, p->out_mult[oc], p->out_shift[oc]) + p->output_offset;
                *output++ = (int8_t)tol_clamp_(acc, p->act_min, p->act_max);
            }
        }
    }
}

void tol_depthwise_conv2d_s8(const tol_conv_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t in_w = p->in_w, in_c = p->in_c, out_c = p->out_c;
    const int32_t dm = p->depth_mult;

    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_top;
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int32_t ix0 = ox * p->stride_w - p->pad_left;
            for (int32_t ic = 0; ic < in_c; ++ic) {
                for (int32_t m = 0; m < dm; ++m) {
                    const int32_t oc = ic * dm + m;
                    int32_t acc = 0;
                    for (int32_t ky = 0; ky < p->k_h; ++ky) {
                        const int32_t iy = iy0 + ky * p->dil_h;
                        if (iy < 0 || iy >= p->in_h) {
                            continue;
                        }
                        for (int32_t kx = 0; kx < p->k_w; ++kx) {
                            const int32_t ix = ix0 + kx * p->dil_w;
                            if (ix < 0 || ix >= in_w) {
                                continue;
                            }
                            const int32_t x = input[(iy * in_w + ix) * in_c + ic];
                            const int32_t w = p->weights[(ky * p->k_w + kx) * out_c + oc];
                            acc += w * (x + p->input_offset);
                        }
                    }
                    if (p->bias != NULL) {
                        acc += p->bias[oc];
                    }
                    acc = tol_mbqm_(acc, p->out_mult[oc], p->out_shift[oc]) + p->output_offset;
                    output[(oy * p->out_w + ox) * out_c + oc] = (int8_t)tol_clamp_(acc, p->act_min, p->act_max);
                }
            }
        }
    }
}
