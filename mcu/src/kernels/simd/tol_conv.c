/* tol_conv.c (SIMD) - CONV_2D and DEPTHWISE_CONV_2D for the Cortex-M4 DSP
 * extension, bit-exact with the reference versions.
 *
 * CONV_2D: no im2col buffer. For each output pixel the valid kernel window is
 * computed once; 4 output channels are then accumulated together. With
 * dilation 1 the input run x[iy][ix0+kx0 .. ix0+kx1)[0..in_c) and the matching
 * weight run are both contiguous, so one dot product of length
 * (kx1-kx0)*in_c covers a whole kernel row, even for in_c = 1 or 3. Each
 * input word is widened once (SXTAB16 adds the input offset on the way) and
 * used by 4 filters, 2 MACs per SMLAD.
 * DEPTHWISE_CONV_2D (depth multiplier 1): 4 channels per pass, one input word
 * and one weight word per tap, SMLABB/SMLATT on the widened halves. */
#include "tol_kernels.h"

#include "../tol_kernels_util.h"
#include "tol_simd_dot.h"

/* Valid kernel taps [k0, k1) along one axis: 0 <= i0 + k*d < n. */
static inline void tol_tap_range_(int32_t i0, int32_t d, int32_t n, int32_t k, int32_t *k0, int32_t *k1)
{
    const int32_t lo = i0 >= 0 ? 0 : (-i0 + d - 1) / d;
    const int32_t hi = (n - i0) <= 0 ? 0 : tol_min_(k, (n - i0 + d - 1) / d);
    *k0 = lo;
    *k1 = hi > lo ? hi : lo;
}

TOL_SIMD_FN void tol_conv2d_s8(const tol_conv_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t in_w = p->in_w, in_c = p->in_c, k_w = p->k_w, out_c = p->out_c;
    const int32_t fsz = p->k_h * k_w * in_c;
    const int32_t off = p->input_offset;
    const uint32_t off2 = tol_dup16_(off);
    const int32_t x_row = p->dil_h * in_w * in_c; /* input step between kernel rows */
    const int32_t w_row = k_w * in_c;             /* weight step between kernel rows */
    const int32_t seg_dx = p->dil_w * in_c;
    const int32_t zp = p->output_offset, lo = p->act_min, hi = p->act_max;
    /* locals: int8 output stores may alias *p, which would force reloads */
    const int32_t *const mult = p->out_mult;
    const int32_t *const shift = p->out_shift;
    const int32_t *const bias = p->bias;
    const int8_t *const weights = p->weights;

    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_top;
        int32_t ky0, ky1;
        tol_tap_range_(iy0, p->dil_h, p->in_h, p->k_h, &ky0, &ky1);
        const int32_t nrows = ky1 - ky0;
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int32_t ix0 = ox * p->stride_w - p->pad_left;
            int32_t kx0, kx1;
            tol_tap_range_(ix0, p->dil_w, in_w, k_w, &kx0, &kx1);
            /* a kernel row is nseg runs of seg_len contiguous values */
            const int32_t nseg = p->dil_w == 1 ? (kx1 > kx0 ? 1 : 0) : kx1 - kx0;
            const int32_t seg_len = p->dil_w == 1 ? (kx1 - kx0) * in_c : in_c;
            const int8_t *x0 = input + ((iy0 + ky0 * p->dil_h) * in_w + ix0 + kx0 * p->dil_w) * in_c;
            const int8_t *wb = weights + (ky0 * k_w + kx0) * in_c;
            int32_t oc = 0;
            for (; oc + 4 <= out_c; oc += 4, wb += 4 * fsz) {
                int32_t acc[4] = {0, 0, 0, 0};
                if (bias != NULL) {
                    acc[0] = bias[oc];
                    acc[1] = bias[oc + 1];
                    acc[2] = bias[oc + 2];
                    acc[3] = bias[oc + 3];
                }
                const int8_t *x = x0;
                const int8_t *w = wb;
                for (int32_t r = 0; r < nrows; ++r, x += x_row, w += w_row) {
                    const int8_t *xs = x;
                    const int8_t *ws = w;
                    for (int32_t s = 0; s < nseg; ++s, xs += seg_dx, ws += in_c) {
                        tol_dot4_(xs, ws, fsz, seg_len, off2, off, acc);
                    }
                }
                for (int32_t j = 0; j < 4; ++j) {
                    output[oc + j] = tol_requant1_(acc[j], mult[oc + j], shift[oc + j], zp, lo, hi);
                }
            }
            for (; oc < out_c; ++oc, wb += fsz) {
                int32_t acc = bias != NULL ? bias[oc] : 0;
                const int8_t *x = x0;
                const int8_t *w = wb;
                for (int32_t r = 0; r < nrows; ++r, x += x_row, w += w_row) {
                    const int8_t *xs = x;
                    const int8_t *ws = w;
                    for (int32_t s = 0; s < nseg; ++s, xs += seg_dx, ws += in_c) {
                        acc = tol_dot1_(xs, ws, seg_len, off2, off, acc);
                    }
                }
                output[oc] = tol_requant1_(acc, mult[oc], shift[oc], zp, lo, hi);
            }
            output += out_c;
        }
    }
}

/* Any depth multiplier: plain loops (channel order oc = ic * dm + m). */
static void tol_dw_generic_(const tol_conv_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t in_w = p->in_w, in_c = p->in_c, out_c = p->out_c, dm = p->depth_mult;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_top;
        int32_t ky0, ky1;
        tol_tap_range_(iy0, p->dil_h, p->in_h, p->k_h, &ky0, &ky1);
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int32_t ix0 = ox * p->stride_w - p->pad_left;
            int32_t kx0, kx1;
            tol_tap_range_(ix0, p->dil_w, in_w, p->k_w, &kx0, &kx1);
            for (int32_t ic = 0; ic < in_c; ++ic) {
                for (int32_t m = 0; m < dm; ++m) {
                    const int32_t oc = ic * dm + m;
                    int32_t acc = p->bias != NULL ? p->bias[oc] : 0;
                    for (int32_t ky = ky0; ky < ky1; ++ky) {
                        const int32_t iy = iy0 + ky * p->dil_h;
                        for (int32_t kx = kx0; kx < kx1; ++kx) {
                            const int32_t ix = ix0 + kx * p->dil_w;
                            const int32_t x = input[(iy * in_w + ix) * in_c + ic];
                            acc += p->weights[(ky * p->k_w + kx) * out_c + oc] * (x + p->input_offset);
                        }
                    }
                    output[oc] = tol_requant1_(acc, p->out_mult[oc], p->out_shift[oc], p->output_offset,
                                               p->act_min, p->act_max);
                }
            }
            output += out_c;
        }
    }
}

TOL_SIMD_FN void tol_depthwise_conv2d_s8(const tol_conv_params_t *p, const int8_t *input, int8_t *output)
{
    if (p->depth_mult != 1) {
        tol_dw_generic_(p, input, output);
        return;
    }
    const int32_t in_w = p->in_w, c = p->in_c, k_w = p->k_w;
    const int32_t off = p->input_offset;
    const uint32_t off2 = tol_dup16_(off);
    const int32_t x_row = p->dil_h * in_w * c, w_row = k_w * c, x_tap = p->dil_w * c;
    const int32_t zp = p->output_offset, lo = p->act_min, hi = p->act_max;
    const int32_t *const mult = p->out_mult;
    const int32_t *const shift = p->out_shift;
    const int32_t *const bias = p->bias;
    const int8_t *const weights = p->weights;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_top;
        int32_t ky0, ky1;
        tol_tap_range_(iy0, p->dil_h, p->in_h, p->k_h, &ky0, &ky1);
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int32_t ix0 = ox * p->stride_w - p->pad_left;
            int32_t kx0, kx1;
            tol_tap_range_(ix0, p->dil_w, in_w, k_w, &kx0, &kx1);
            const int32_t ntaps = kx1 - kx0;
            const int8_t *x0 = input + ((iy0 + ky0 * p->dil_h) * in_w + ix0 + kx0 * p->dil_w) * c;
            const int8_t *w0 = weights + (ky0 * k_w + kx0) * c;
            int32_t ch = 0;
            for (; ch + 4 <= c; ch += 4) {
                int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
                if (bias != NULL) {
                    a0 = bias[ch];
                    a1 = bias[ch + 1];
                    a2 = bias[ch + 2];
                    a3 = bias[ch + 3];
                }
                const int8_t *xr = x0 + ch;
                const int8_t *wr = w0 + ch;
                for (int32_t ky = ky0; ky < ky1; ++ky, xr += x_row, wr += w_row) {
                    const int8_t *x = xr;
                    const int8_t *w = wr;
                    for (int32_t t = 0; t < ntaps; ++t, x += x_tap, w += c) {
                        const uint32_t xv = tol_read_s8x4(x);
                        const uint32_t wv = tol_read_s8x4(w);
                        const uint32_t xe = tol_sxtab16(off2, xv);
                        const uint32_t xo = tol_sxtab16_ror8(off2, xv);
                        const uint32_t we = tol_sxtb16(wv);
                        const uint32_t wo = tol_sxtb16_ror8(wv);
                        a0 = tol_smlabb(xe, we, a0);
                        a2 = tol_smlatt(xe, we, a2);
                        a1 = tol_smlabb(xo, wo, a1);
                        a3 = tol_smlatt(xo, wo, a3);
                    }
                }
                output[ch] = tol_requant1_(a0, mult[ch], shift[ch], zp, lo, hi);
                output[ch + 1] = tol_requant1_(a1, mult[ch + 1], shift[ch + 1], zp, lo, hi);
                output[ch + 2] = tol_requant1_(a2, mult[ch + 2], shift[ch + 2], zp, lo, hi);
                output[ch + 3] = tol_requant1_(a3, mult[ch + 3], shift[ch + 3], zp, lo, hi);
            }
            for (; ch < c; ++ch) {
                int32_t acc = bias != NULL ? bias[ch] : 0;
                const int8_t *xr = x0 + ch;
                const int8_t *wr = w0 + ch;
                for (int32_t ky = ky0; ky < ky1; ++ky, xr += x_row, wr += w_row) {
                    const int8_t *x = xr;
                    const int8_t *w = wr;
                    for (int32_t t = 0; t < ntaps; ++t, x += x_tap, w += c) {
                        acc += *w * (*x + off);
                    }
                }
                output[ch] = tol_requant1_(acc, mult[ch], shift[ch], zp, lo, hi);
            }
            output += c;
        }
    }
}
