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
 * and one weight word per tap, SMLABB/SMLATT on the widened halves; depth
 * multiplier 4k: 4 channels of one input channel per pass, one input byte and
 * one weight word per tap. */
#include "tol_kernels.h"

#include <string.h>

#include "../tol_kernels_util.h"
#include "tol_simd_dot.h"

/* Valid kernel taps [k0, k1) along one axis: 0 <= i0 + k*d < n. */
static inline void tol_tap_range_(int32_t i0, int32_t d, int32_t n, int32_t k, int32_t *k0, int32_t *k1)
{
    if (d == 1) { /* undilated: no divisions */
        const int32_t lo = i0 >= 0 ? 0 : -i0;
        const int32_t hi = (n - i0) <= 0 ? 0 : tol_min_(k, n - i0);
        *k0 = lo;
        *k1 = hi > lo ? hi : lo;
        return;
    }
    const int32_t lo = i0 >= 0 ? 0 : (-i0 + d - 1) / d;
    const int32_t hi = (n - i0) <= 0 ? 0 : tol_min_(k, (n - i0 + d - 1) / d);
    *k0 = lo;
    *k1 = hi > lo ? hi : lo;
}

/* ---- CONV_2D with a 2-column int16 scratch (the common, faster path) ------
 * The kernel windows of two output pixels are written once as int16 values
 * (input + offset, 0 for taps outside the image, as TFLM skips them), in the
 * lane order SXTB16 produces for the weights, (k0, k2) and (k1, k3) per group
 * of 4, and interleaved by pixel so one LDRD fetches both pixels' words:
 *   group g (16 bytes): [px0 k0,k2][px1 k0,k2][px0 k1,k3][px1 k1,k3]
 *   tail values k >= k4 (fsz % 4 of them): int16 pairs [px0 k][px1 k].
 * Then 2 filters x 2 pixels are accumulated together: per group of 4 values
 * 2 weight loads, 4 SXTB16, 2 LDRD and 8 SMLAD (16 MACs). */

static inline void tol_store16_(int8_t *dst, int32_t v)
{
    const int16_t h = (int16_t)v;
    TOL_COPY4(dst, &h, sizeof h);
}

static inline int32_t tol_load16_(const int8_t *src)
{
    int16_t h;
    TOL_COPY4(&h, src, sizeof h);
    return h;
}

static inline void tol_store32_(int8_t *dst, uint32_t v)
{
    TOL_COPY4(dst, &v, sizeof v);
}

/* Windows of up to this many values (in_c % 4 != 0) are gathered as bytes first. */
#define TOL_IM2COL_WIN 256

/* The gather loops copy a few bytes: keep GCC from turning them into memcpy/memset calls. */
#if defined(__GNUC__) && !defined(__clang__)
#define TOL_NO_LIBCALLS __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define TOL_NO_LIBCALLS
#endif

/* Window of output pixel (oy, ox) -> pixel slot px of col. Parameters are
 * copied to locals first: the int8/int16 stores may alias *p. */
static TOL_NO_LIBCALLS void tol_im2col_(const tol_conv_params_t *p, const int8_t *input, int32_t oy, int32_t ox, int8_t *col,
                        int32_t px)
{
    const int32_t in_c = p->in_c, off = p->input_offset;
    const int32_t in_h = p->in_h, in_w = p->in_w, k_h = p->k_h, k_w = p->k_w;
    const int32_t dil_h = p->dil_h, dil_w = p->dil_w;
    const uint32_t off2 = tol_dup16_(off);
    const int32_t k4 = (k_h * k_w * in_c) & ~3;
    const int32_t iy0 = oy * p->stride_h - p->pad_top, ix0 = ox * p->stride_w - p->pad_left;
    if ((in_c & 3) == 0) { /* every tap starts a group of 4: 2 words per group */
        int8_t *dst = col + 4 * px;
        for (int32_t ky = 0, iy = iy0; ky < k_h; ++ky, iy += dil_h) {
            const int row_ok = iy >= 0 && iy < in_h;
            for (int32_t kx = 0, ix = ix0; kx < k_w; ++kx, ix += dil_w) {
                if (row_ok && ix >= 0 && ix < in_w) {
                    const int8_t *src = input + (iy * in_w + ix) * in_c;
                    for (int32_t c = 0; c < in_c; c += 4, dst += 16) {
                        const uint32_t v = tol_read_s8x4(src + c);
                        tol_store32_(dst, tol_sxtab16(off2, v));
                        tol_store32_(dst + 8, tol_sxtab16_ror8(off2, v));
                    }
                } else {
                    for (int32_t c = 0; c < in_c; c += 4, dst += 16) {
                        tol_store32_(dst, 0u);
                        tol_store32_(dst + 8, 0u);
                    }
                }
            }
        }
        return;
    }
    const int32_t fsz = k_h * k_w * in_c;
    if (fsz <= TOL_IM2COL_WIN) {
        /* gather the window as bytes (taps outside the image get the input
         * zero point -off, i.e. 0 once the offset is added), then widen 4 at a
         * time exactly like the in_c % 4 == 0 path */
        int8_t win[TOL_IM2COL_WIN + 3];
        const int8_t pad = (int8_t)-off;
        int32_t kx0, kx1; /* valid taps of every row (the same for all rows) */
        tol_tap_range_(ix0, dil_w, in_w, k_w, &kx0, &kx1);
        const int32_t row_len = k_w * in_c, n_left = kx0 * in_c, n_right = (k_w - kx1) * in_c;
        const int32_t n_mid = row_len - n_left - n_right;
        const int32_t x_tap = dil_w * in_c;
        int8_t *w = win;
        for (int32_t ky = 0, iy = iy0; ky < k_h; ++ky, iy += dil_h) {
            if (iy < 0 || iy >= in_h) {
                for (int32_t i = 0; i < row_len; ++i) {
                    *w++ = pad;
                }
                continue;
            }
            for (int32_t i = 0; i < n_left; ++i) {
                *w++ = pad;
            }
            const int8_t *src = input + (iy * in_w + ix0 + kx0 * dil_w) * in_c;
            if (dil_w == 1) { /* the valid taps of a row are one contiguous run: by words */
                int32_t i = 0;
                for (; i + 4 <= n_mid; i += 4) {
                    tol_store32_(w + i, tol_read_s8x4(src + i));
                }
                for (; i < n_mid; ++i) {
                    w[i] = src[i];
                }
                w += n_mid;
            } else {
                for (int32_t kx = kx0; kx < kx1; ++kx, src += x_tap) {
                    for (int32_t c = 0; c < in_c; ++c) {
                        *w++ = src[c];
                    }
                }
            }
            for (int32_t i = 0; i < n_right; ++i) {
                *w++ = pad;
            }
        }
        int8_t *dst = col + 4 * px;
        for (int32_t g = 0; g < k4; g += 4, dst += 16) {
            const uint32_t v = tol_read_s8x4(win + g);
            tol_store32_(dst, tol_sxtab16(off2, v));
            tol_store32_(dst + 8, tol_sxtab16_ror8(off2, v));
        }
        for (int32_t t = k4; t < fsz; ++t) {
            tol_store16_(col + 2 * (2 * t + px), win[t] + off);
        }
        return;
    }
    /* large windows: value k of a group of 4 goes to int16 slot
     * 8 * (k / 4) + 2 * px + {0, 4, 1, 5}[k % 4]; the tail (k >= k4) is px-interleaved */
    static const uint8_t lane_slot[4] = {0, 4, 1, 5};
    int32_t k = 0;
    for (int32_t ky = 0, iy = iy0; ky < k_h; ++ky, iy += dil_h) {
        const int row_ok = iy >= 0 && iy < in_h;
        for (int32_t kx = 0, ix = ix0; kx < k_w; ++kx, ix += dil_w) {
            const int ok = row_ok && ix >= 0 && ix < in_w;
            const int8_t *src = input + (ok ? (iy * in_w + ix) * in_c : 0);
            for (int32_t c = 0; c < in_c; ++c, ++k) {
                const int32_t slot = k < k4 ? 8 * (k >> 2) + 2 * px + lane_slot[k & 3] : 2 * k + px;
                tol_store16_(col + 2 * slot, ok ? src[c] + off : 0);
            }
        }
    }
}

/* Without a scratch buffer from the caller, windows of up to 64 values
 * (TOL_CONV2D_SCRATCH_BYTES <= 256) use two columns on the stack. */
#define TOL_CONV_STACK_COL_BYTES 256

/* On the out-of-line instances of tol_conv_mac2x2_: TOL_SIMD_FN plus loop heads on word
 * addresses. The loop's first instruction (LDR/LDRD) is 32 bits wide; at a half-word address every
 * taken loop branch costs the Cortex-M4 one more refill cycle (ResNet's 3x3 layer 2: +2 % cycles
 * when a code change moved it there). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#define TOL_CONV_LOOP_FN __attribute__((optimize("no-schedule-insns", "align-loops=4")))
#else
#define TOL_CONV_LOOP_FN TOL_SIMD_FN
#endif

/* a[0..3] (u0 c0, u0 c1, u1 c0, u1 c1) += ng groups of 4 values: u0, u1 are int8 runs (widened
 * here; has_off: adding off2 in both lanes, SXTAB16), c the matching int16 words of two columns
 * c0, c1 interleaved per group as [c0 k0,k2][c1 k0,k2][c0 k1,k3][c1 k1,k3]. The CONV_2D paths pass
 * two filters as u and two pixels' windows as c; the pointwise path two pixels as u and two
 * filters, widened once per layer, as c. 8 SMLAD (16 MACs) per group. */
static inline __attribute__((always_inline)) void tol_conv_mac2x2_(const int8_t *u0, const int8_t *u1,
                                                                   const uint32_t *c, int32_t ng, uint32_t off2,
                                                                   int has_off, int32_t *a)
{
    int32_t a00 = a[0], a01 = a[1], a10 = a[2], a11 = a[3];
    for (int32_t n = ng; n > 0; --n) {
        const uint32_t v0 = tol_read_s8x4(u0);
        const uint32_t v1 = tol_read_s8x4(u1);
        u0 += 4;
        u1 += 4;
        uint32_t x0 = c[0], x1 = c[1];
        uint32_t e = has_off ? tol_sxtab16(off2, v0) : tol_sxtb16(v0);
        a00 = tol_smlad(e, x0, a00);
        a01 = tol_smlad(e, x1, a01);
        e = has_off ? tol_sxtab16(off2, v1) : tol_sxtb16(v1);
        a10 = tol_smlad(e, x0, a10);
        a11 = tol_smlad(e, x1, a11);
        x0 = c[2];
        x1 = c[3];
        c += 4;
        e = has_off ? tol_sxtab16_ror8(off2, v0) : tol_sxtb16_ror8(v0);
        a00 = tol_smlad(e, x0, a00);
        a01 = tol_smlad(e, x1, a01);
        e = has_off ? tol_sxtab16_ror8(off2, v1) : tol_sxtb16_ror8(v1);
        a10 = tol_smlad(e, x0, a10);
        a11 = tol_smlad(e, x1, a11);
    }
    a[0] = a00;
    a[1] = a01;
    a[2] = a10;
    a[3] = a11;
}

/* Both pixels of col (out0: pixel 0's outputs, out1: pixel 1's, or NULL when
 * there is only one) for every output channel; full: the clamp is [-128, 127].
 * Inlined into two out-of-line instances so the register allocator sees only
 * these loops (the 2x2 inner loop needs 13 registers). */
static inline __attribute__((always_inline)) void tol_conv_px2_body_(const tol_conv_params_t *p,
                                                                     const uint32_t *col, int8_t *out0,
                                                                     int8_t *out1, int full,
                                                                     const tol_rqs_t *rq)
{
    const int32_t out_c = p->out_c;
    const int32_t fsz = p->k_h * p->k_w * p->in_c, k4 = fsz & ~3;
    const int32_t zp = p->output_offset, lo = p->act_min, hi = p->act_max;
    const int32_t *const mult = p->out_mult;
    const int32_t *const shift = p->out_shift;
    const int32_t *const bias = p->bias;
    const int8_t *w = p->weights;
    const int8_t *const tail = (const int8_t *)(col + 2 * k4 / 2);
    int32_t oc = 0;
    for (; oc + 2 <= out_c; oc += 2, w += 2 * fsz) {
        const int32_t b0 = bias != NULL ? bias[oc] : 0;
        const int32_t b1 = bias != NULL ? bias[oc + 1] : 0;
        int32_t a[4] = {b0, b0, b1, b1};
        tol_conv_mac2x2_(w, w + fsz, col, k4 >> 2, 0u, 0, a);
        int32_t a00 = a[0], a01 = a[1], a10 = a[2], a11 = a[3];
        const int8_t *const w0 = w + k4;
        const int8_t *const w1 = w + fsz + k4;
        for (int32_t k = 0; k < fsz - k4; ++k) {
            const int32_t x0 = tol_load16_(tail + 4 * k), x1 = tol_load16_(tail + 4 * k + 2);
            a00 += w0[k] * x0;
            a01 += w0[k] * x1;
            a10 += w1[k] * x0;
            a11 += w1[k] * x1;
        }
        if (rq != NULL) {
            const tol_rqs_t *const q0 = rq + oc;
            const tol_rqs_t *const q1 = q0 + 1;
            out0[oc] = tol_rq_clamp_(tol_rqs_apply_(a00, q0) + zp, lo, hi, full);
            out0[oc + 1] = tol_rq_clamp_(tol_rqs_apply_(a10, q1) + zp, lo, hi, full);
            if (out1 != NULL) {
                out1[oc] = tol_rq_clamp_(tol_rqs_apply_(a01, q0) + zp, lo, hi, full);
                out1[oc + 1] = tol_rq_clamp_(tol_rqs_apply_(a11, q1) + zp, lo, hi, full);
            }
        } else if (full) {
            out0[oc] = tol_requant1_full_(a00, mult[oc], shift[oc], zp);
            out0[oc + 1] = tol_requant1_full_(a10, mult[oc + 1], shift[oc + 1], zp);
            if (out1 != NULL) {
                out1[oc] = tol_requant1_full_(a01, mult[oc], shift[oc], zp);
                out1[oc + 1] = tol_requant1_full_(a11, mult[oc + 1], shift[oc + 1], zp);
            }
        } else {
            out0[oc] = tol_requant1_(a00, mult[oc], shift[oc], zp, lo, hi);
            out0[oc + 1] = tol_requant1_(a10, mult[oc + 1], shift[oc + 1], zp, lo, hi);
            if (out1 != NULL) {
                out1[oc] = tol_requant1_(a01, mult[oc], shift[oc], zp, lo, hi);
                out1[oc + 1] = tol_requant1_(a11, mult[oc + 1], shift[oc + 1], zp, lo, hi);
            }
        }
    }
    if (oc < out_c) {
        int32_t a0 = bias != NULL ? bias[oc] : 0;
        int32_t a1 = a0;
        const uint32_t *c = col;
        for (int32_t k = 0; k < k4; k += 4, c += 4) {
            const uint32_t wv = tol_read_s8x4(w + k);
            const uint32_t we = tol_sxtb16(wv), wo = tol_sxtb16_ror8(wv);
            a0 = tol_smlad(we, c[0], a0);
            a1 = tol_smlad(we, c[1], a1);
            a0 = tol_smlad(wo, c[2], a0);
            a1 = tol_smlad(wo, c[3], a1);
        }
        for (int32_t k = k4; k < fsz; ++k) {
            a0 += w[k] * tol_load16_(tail + 4 * (k - k4));
            a1 += w[k] * tol_load16_(tail + 4 * (k - k4) + 2);
        }
        out0[oc] = tol_requant1_(a0, mult[oc], shift[oc], zp, lo, hi);
        if (out1 != NULL) {
            out1[oc] = tol_requant1_(a1, mult[oc], shift[oc], zp, lo, hi);
        }
    }
}

static TOL_CONV_LOOP_FN __attribute__((noinline)) void tol_conv_px2_(const tol_conv_params_t *p, const uint32_t *col,
                                                                int8_t *out0, int8_t *out1)
{
    tol_conv_px2_body_(p, col, out0, out1, 0, NULL);
}

static TOL_CONV_LOOP_FN __attribute__((noinline)) void tol_conv_px2_full_(const tol_conv_params_t *p,
                                                                     const uint32_t *col, int8_t *out0,
                                                                     int8_t *out1)
{
    tol_conv_px2_body_(p, col, out0, out1, 1, NULL);
}

static TOL_CONV_LOOP_FN __attribute__((noinline)) void tol_conv_px2_rq_(const tol_conv_params_t *p, const uint32_t *col,
                                                                   int8_t *out0, int8_t *out1, const tol_rqs_t *rq)
{
    tol_conv_px2_body_(p, col, out0, out1, 0, rq);
}

static TOL_CONV_LOOP_FN __attribute__((noinline)) void tol_conv_px2_full_rq_(const tol_conv_params_t *p,
                                                                        const uint32_t *col, int8_t *out0,
                                                                        int8_t *out1, const tol_rqs_t *rq)
{
    tol_conv_px2_body_(p, col, out0, out1, 1, rq);
}

/* ---- CONV_2D over blocks of pixel pairs (scratch_px >= 4) -------------------
 * The scratch holds npair two-pixel columns (each laid out as above). Filters
 * are the outer loop: a filter pair is read from flash once for the whole block
 * instead of once per pixel pair; its later reads hit the ART's 256-byte data
 * cache. Windows longer than TOL_CONV_CHUNK_G groups of 4 are taken in chunks
 * (2 filters x 4 x TOL_CONV_CHUNK_G bytes stay cached), the block's sums in
 * acc[][] between chunks. Same sums, same order per output as tol_conv_px2_. */
#define TOL_CONV_BLK_PAIRS 8
#define TOL_CONV_CHUNK_G 24

/* The requantization constants of a layer, copied out of *p (the int8 output stores may alias it). */
typedef struct {
    const tol_rqs_t *rq;                 /* prepared per channel, or NULL: p->out_mult/out_shift */
    int32_t zp, lo, hi;
} tol_blk_q_t;

/* One output of channel oc: the prepared constants q (k->rq != NULL) or oc's multiplier and shift
 * (read from *p). */
static inline __attribute__((always_inline)) int8_t tol_blk_rq_(int32_t acc, const tol_blk_q_t *k, const tol_rqs_t *q,
                                                                const tol_conv_params_t *p, int32_t oc, int full)
{
    if (k->rq != NULL) {
        return tol_rq_clamp_(tol_rqs_apply_(acc, q) + k->zp, k->lo, k->hi, full);
    }
    /* from *p: fewer estimated cycles than from the copy on VWW's 128-channel pointwise layers */
    if (full) {
        return tol_requant1_full_(acc, p->out_mult[oc], p->out_shift[oc], p->output_offset);
    }
    return tol_requant1_(acc, p->out_mult[oc], p->out_shift[oc], p->output_offset, p->act_min, p->act_max);
}

/* Every output channel of nvalid pixels (npair = (nvalid + 1) / 2 columns in col, pair_words
 * words apart); out: the block's first pixel. rq: the prepared per-channel constants, or NULL
 * (then out_mult/out_shift: layers with a shift > -2 or more than TOL_CONV_RQ_TABLE channels). */
static inline __attribute__((always_inline)) void tol_conv_blk_body_(const tol_conv_params_t *p,
                                                                     const uint32_t *col, int32_t pair_words,
                                                                     int32_t nvalid, int8_t *out, int full,
                                                                     const tol_rqs_t *rq)
{
    const int32_t out_c = p->out_c, npair = (nvalid + 1) / 2;
    const int32_t fsz = p->k_h * p->k_w * p->in_c, k4 = fsz & ~3, ng = k4 >> 2;
    const int32_t *const bias = p->bias;
    const int8_t *w = p->weights;
    const tol_blk_q_t kq = {rq, p->output_offset, p->act_min, p->act_max};
    int32_t acc[TOL_CONV_BLK_PAIRS][4];
    int32_t oc = 0;
    for (; oc + 2 <= out_c; oc += 2, w += 2 * fsz) {
        const int32_t b0 = bias != NULL ? bias[oc] : 0;
        const int32_t b1 = bias != NULL ? bias[oc + 1] : 0;
        for (int32_t j = 0; j < npair; ++j) {
            acc[j][0] = b0;
            acc[j][1] = b0;
            acc[j][2] = b1;
            acc[j][3] = b1;
        }
        for (int32_t g0 = 0; g0 < ng; g0 += TOL_CONV_CHUNK_G) {
            const int32_t gn = tol_min_(TOL_CONV_CHUNK_G, ng - g0);
            for (int32_t j = 0; j < npair; ++j) {
                tol_conv_mac2x2_(w + 4 * g0, w + fsz + 4 * g0, col + j * pair_words + 4 * g0, gn, 0u, 0, acc[j]);
            }
        }
        const tol_rqs_t *const q0 = rq != NULL ? rq + oc : NULL;
        const tol_rqs_t *const q1 = rq != NULL ? q0 + 1 : NULL;
        for (int32_t j = 0; j < npair; ++j) {
            int32_t *const a = acc[j];
            const int8_t *const tail = (const int8_t *)(col + j * pair_words + k4);
            for (int32_t k = 0; k < fsz - k4; ++k) {
                const int32_t x0 = tol_load16_(tail + 4 * k), x1 = tol_load16_(tail + 4 * k + 2);
                a[0] += w[k4 + k] * x0;
                a[1] += w[k4 + k] * x1;
                a[2] += w[fsz + k4 + k] * x0;
                a[3] += w[fsz + k4 + k] * x1;
            }
            int8_t *const o0 = out + 2 * j * out_c + oc;
            o0[0] = tol_blk_rq_(a[0], &kq, q0, p, oc, full);
            o0[1] = tol_blk_rq_(a[2], &kq, q1, p, oc + 1, full);
            if (2 * j + 1 < nvalid) {
                o0[out_c] = tol_blk_rq_(a[1], &kq, q0, p, oc, full);
                o0[out_c + 1] = tol_blk_rq_(a[3], &kq, q1, p, oc + 1, full);
            }
        }
    }
    if (oc < out_c) { /* the last filter of an odd count, as tol_conv_px2_body_ does it */
        const tol_rqs_t *const q0 = rq != NULL ? rq + oc : NULL;
        for (int32_t j = 0; j < npair; ++j) {
            const uint32_t *c = col + j * pair_words;
            const int8_t *const tail = (const int8_t *)(c + k4);
            int32_t a0 = bias != NULL ? bias[oc] : 0;
            int32_t a1 = a0;
            for (int32_t k = 0; k < k4; k += 4, c += 4) {
                const uint32_t wv = tol_read_s8x4(w + k);
                const uint32_t we = tol_sxtb16(wv), wo = tol_sxtb16_ror8(wv);
                a0 = tol_smlad(we, c[0], a0);
                a1 = tol_smlad(we, c[1], a1);
                a0 = tol_smlad(wo, c[2], a0);
                a1 = tol_smlad(wo, c[3], a1);
            }
            for (int32_t k = k4; k < fsz; ++k) {
                a0 += w[k] * tol_load16_(tail + 4 * (k - k4));
                a1 += w[k] * tol_load16_(tail + 4 * (k - k4) + 2);
            }
            int8_t *const o0 = out + 2 * j * out_c + oc;
            o0[0] = tol_blk_rq_(a0, &kq, q0, p, oc, full);
            if (2 * j + 1 < nvalid) {
                o0[out_c] = tol_blk_rq_(a1, &kq, q0, p, oc, full);
            }
        }
    }
}

static TOL_CONV_LOOP_FN __attribute__((noinline)) void tol_conv_blk_(const tol_conv_params_t *p, const uint32_t *col,
                                                                int32_t pair_words, int32_t nvalid, int8_t *out,
                                                                const tol_rqs_t *rq)
{
    tol_conv_blk_body_(p, col, pair_words, nvalid, out, 0, rq);
}

static TOL_CONV_LOOP_FN __attribute__((noinline)) void tol_conv_blk_full_(const tol_conv_params_t *p, const uint32_t *col,
                                                                     int32_t pair_words, int32_t nvalid, int8_t *out,
                                                                     const tol_rqs_t *rq)
{
    tol_conv_blk_body_(p, col, pair_words, nvalid, out, 1, rq);
}

static TOL_CONV_LOOP_FN __attribute__((noinline)) void tol_conv_blk_mq_(const tol_conv_params_t *p, const uint32_t *col,
                                                                   int32_t pair_words, int32_t nvalid, int8_t *out)
{
    tol_conv_blk_body_(p, col, pair_words, nvalid, out, 0, NULL);
}

static TOL_CONV_LOOP_FN __attribute__((noinline)) void tol_conv_blk_full_mq_(const tol_conv_params_t *p,
                                                                        const uint32_t *col, int32_t pair_words,
                                                                        int32_t nvalid, int8_t *out)
{
    tol_conv_blk_body_(p, col, pair_words, nvalid, out, 1, NULL);
}

/* Layers with at most this many output channels (and right shifts by >= 2)
 * prepare their requantization constants once, on the stack (12 bytes each). */
#define TOL_CONV_RQ_TABLE 256

/* ---- CONV_2D 1x1, stride 1, no padding, in_c % 4 == 0 (pointwise) -----------------------
 * Weight-stationary: a layer's filters do not fit in the ART's 256-byte data cache, so the paths
 * above read every filter from flash once per pixel pair (or block). Here the loops are turned
 * around: each filter pair is widened once into int16 words on the stack (the column layout
 * above, filters in place of pixels) and run over every pixel pair of the image, read straight
 * from the input (widened with the offset by SXTAB16): no im2col, and the flash reads of the
 * weights once per layer. Same int32 sums as the other paths (int32 addition is exact mod 2^32). */
#define TOL_CONV_PW_MAX_C 256 /* in_c limit: the widened filter pair is 4 * in_c bytes of stack */
/* With a pixel block in the scratch, maps of fewer pixels keep the block path: the widening of
 * each filter pair is then paid over too few pixels (VWW's 6x6 and 3x3 pointwise layers: the same
 * or fewer estimated cycles with the block). */
#define TOL_CONV_PW_MIN_PX 64

static int tol_conv_is_pw_(const tol_conv_params_t *p)
{
    if (p->scratch != NULL && p->scratch_px >= 4 && p->out_h * p->out_w < TOL_CONV_PW_MIN_PX) {
        return 0;
    }
    return p->k_h == 1 && p->k_w == 1 && p->stride_h == 1 && p->stride_w == 1 && p->pad_top == 0 &&
           p->pad_left == 0 && p->out_h == p->in_h && p->out_w == p->in_w && (p->in_c & 3) == 0 &&
           p->in_c <= TOL_CONV_PW_MAX_C;
}

static inline __attribute__((always_inline)) void tol_conv_pw_body_(const tol_conv_params_t *p,
                                                                    const int8_t *input, int8_t *output,
                                                                    int full, const tol_rqs_t *rq)
{
    const int32_t in_c = p->in_c, out_c = p->out_c, npx = p->out_h * p->out_w, ng = in_c >> 2;
    const uint32_t off2 = tol_dup16_(p->input_offset);
    const int32_t *const bias = p->bias;
    const int8_t *w = p->weights;
    const tol_blk_q_t kq = {rq, p->output_offset, p->act_min, p->act_max};
    uint32_t wt[TOL_CONV_PW_MAX_C]; /* per group of 4: [f0 k0,k2][f1 k0,k2][f0 k1,k3][f1 k1,k3] */
    int32_t oc = 0;
    for (; oc + 2 <= out_c; oc += 2, w += 2 * in_c) {
        for (int32_t g = 0; g < ng; ++g) {
            const uint32_t v0 = tol_read_s8x4(w + 4 * g), v1 = tol_read_s8x4(w + in_c + 4 * g);
            wt[4 * g] = tol_sxtb16(v0);
            wt[4 * g + 1] = tol_sxtb16(v1);
            wt[4 * g + 2] = tol_sxtb16_ror8(v0);
            wt[4 * g + 3] = tol_sxtb16_ror8(v1);
        }
        const int32_t b0 = bias != NULL ? bias[oc] : 0;
        const int32_t b1 = bias != NULL ? bias[oc + 1] : 0;
        const tol_rqs_t *const q0 = rq != NULL ? rq + oc : NULL;
        const tol_rqs_t *const q1 = rq != NULL ? q0 + 1 : NULL;
        const int8_t *x = input;
        int8_t *o = output + oc;
        int32_t j = 0;
        for (; j + 2 <= npx; j += 2, x += 2 * in_c, o += 2 * out_c) {
            int32_t a[4] = {b0, b1, b0, b1}; /* px0 f0, px0 f1, px1 f0, px1 f1 */
            tol_conv_mac2x2_(x, x + in_c, wt, ng, off2, 1, a);
            o[0] = tol_blk_rq_(a[0], &kq, q0, p, oc, full);
            o[1] = tol_blk_rq_(a[1], &kq, q1, p, oc + 1, full);
            o[out_c] = tol_blk_rq_(a[2], &kq, q0, p, oc, full);
            o[out_c + 1] = tol_blk_rq_(a[3], &kq, q1, p, oc + 1, full);
        }
        if (j < npx) { /* an odd pixel count: the last pixel alone */
            int32_t a0 = b0, a1 = b1;
            for (int32_t g = 0; g < ng; ++g) {
                const uint32_t v = tol_read_s8x4(x + 4 * g);
                const uint32_t xe = tol_sxtab16(off2, v), xo = tol_sxtab16_ror8(off2, v);
                a0 = tol_smlad(xe, wt[4 * g], a0);
                a1 = tol_smlad(xe, wt[4 * g + 1], a1);
                a0 = tol_smlad(xo, wt[4 * g + 2], a0);
                a1 = tol_smlad(xo, wt[4 * g + 3], a1);
            }
            o[0] = tol_blk_rq_(a0, &kq, q0, p, oc, full);
            o[1] = tol_blk_rq_(a1, &kq, q1, p, oc + 1, full);
        }
    }
    if (oc < out_c) { /* the last filter of an odd count: widened as [k0,k2][k1,k3] per group */
        for (int32_t g = 0; g < ng; ++g) {
            const uint32_t v = tol_read_s8x4(w + 4 * g);
            wt[2 * g] = tol_sxtb16(v);
            wt[2 * g + 1] = tol_sxtb16_ror8(v);
        }
        const int32_t b0 = bias != NULL ? bias[oc] : 0;
        const tol_rqs_t *const q0 = rq != NULL ? rq + oc : NULL;
        const int8_t *x = input;
        for (int32_t j = 0; j < npx; ++j, x += in_c) {
            int32_t a0 = b0;
            for (int32_t g = 0; g < ng; ++g) {
                const uint32_t v = tol_read_s8x4(x + 4 * g);
                a0 = tol_smlad(tol_sxtab16(off2, v), wt[2 * g], a0);
                a0 = tol_smlad(tol_sxtab16_ror8(off2, v), wt[2 * g + 1], a0);
            }
            output[j * out_c + oc] = tol_blk_rq_(a0, &kq, q0, p, oc, full);
        }
    }
}

static TOL_CONV_LOOP_FN __attribute__((noinline)) void tol_conv_pw_(const tol_conv_params_t *p, const int8_t *input,
                                                               int8_t *output, const tol_rqs_t *rq)
{
    tol_conv_pw_body_(p, input, output, 0, rq);
}

static TOL_CONV_LOOP_FN __attribute__((noinline)) void tol_conv_pw_full_(const tol_conv_params_t *p,
                                                                    const int8_t *input, int8_t *output,
                                                                    const tol_rqs_t *rq)
{
    tol_conv_pw_body_(p, input, output, 1, rq);
}

/* The layer's prepared requantization constants in table (out_c <= TOL_CONV_RQ_TABLE, every
 * shift <= -2), else 0. */
static int tol_conv_rq_table_(const tol_conv_params_t *p, tol_rqs_t *table)
{
    int ok = p->out_c <= TOL_CONV_RQ_TABLE;
    for (int32_t oc = 0; ok && oc < p->out_c; ++oc) {
        ok = tol_rqs_prep_(&table[oc], p->out_mult[oc], p->out_shift[oc]);
    }
    return ok;
}

static TOL_SIMD_FN __attribute__((noinline)) void tol_conv2d_pw_(const tol_conv_params_t *p, const int8_t *input, int8_t *output)
{
    tol_rqs_t table[TOL_CONV_RQ_TABLE];
    const tol_rqs_t *const rq = tol_conv_rq_table_(p, table) ? table : NULL;
    if (p->act_min == -128 && p->act_max == 127) {
        tol_conv_pw_full_(p, input, output, rq);
    } else {
        tol_conv_pw_(p, input, output, rq);
    }
}

static TOL_SIMD_FN __attribute__((noinline)) void tol_conv2d_im2col_(const tol_conv_params_t *p, const int8_t *input, int8_t *output,
                                           int8_t *scratch)
{
    const int full = p->act_min == -128 && p->act_max == 127;
    const int32_t out_c = p->out_c, out_w = p->out_w, npx = p->out_h * out_w;
    tol_rqs_t table[TOL_CONV_RQ_TABLE];
    const int use_table = tol_conv_rq_table_(p, table);
    const int32_t blk = tol_min_(p->scratch_px, 2 * TOL_CONV_BLK_PAIRS) & ~1;
    if (blk >= 4) {
        const int32_t pair_bytes = TOL_CONV2D_SCRATCH_BYTES(p->k_h, p->k_w, p->in_c);
        const uint32_t *const col = (const uint32_t *)(void *)scratch;
        for (int32_t px = 0; px < npx; px += blk) {
            const int32_t nvalid = tol_min_(blk, npx - px);
            for (int32_t q = 0; q < nvalid; ++q) {
                tol_im2col_(p, input, (px + q) / out_w, (px + q) % out_w, scratch + (q >> 1) * pair_bytes, q & 1);
            }
            int8_t *const out = output + px * out_c;
            if (use_table && full) {
                tol_conv_blk_full_(p, col, pair_bytes / 4, nvalid, out, table);
            } else if (use_table) {
                tol_conv_blk_(p, col, pair_bytes / 4, nvalid, out, table);
            } else if (full) {
                tol_conv_blk_full_mq_(p, col, pair_bytes / 4, nvalid, out);
            } else {
                tol_conv_blk_mq_(p, col, pair_bytes / 4, nvalid, out);
            }
        }
        return;
    }
    for (int32_t px = 0; px < npx; px += 2) {
        const int32_t two = px + 1 < npx;
        tol_im2col_(p, input, px / out_w, px % out_w, scratch, 0);
        if (two) {
            tol_im2col_(p, input, (px + 1) / out_w, (px + 1) % out_w, scratch, 1);
        }
        int8_t *const out0 = output + px * out_c;
        const uint32_t *const col = (const uint32_t *)(void *)scratch;
        int8_t *const out1 = two ? out0 + out_c : NULL;
        if (use_table && full) {
            tol_conv_px2_full_rq_(p, col, out0, out1, table);
        } else if (use_table) {
            tol_conv_px2_rq_(p, col, out0, out1, table);
        } else if (full) {
            tol_conv_px2_full_(p, col, out0, out1);
        } else {
            tol_conv_px2_(p, col, out0, out1);
        }
    }
}

/* Small windows (first layers, e.g. 3x3x1) without a scratch: the two columns on the stack. */
static TOL_SIMD_FN __attribute__((noinline)) void tol_conv2d_stack_col_(const tol_conv_params_t *p,
                                                                        const int8_t *input, int8_t *output)
{
    uint32_t col[TOL_CONV_STACK_COL_BYTES / 4];
    tol_conv2d_im2col_(p, input, output, (int8_t *)col);
}

/* No scratch: im2col-free path, 4 filters per pass. */
static TOL_SIMD_FN __attribute__((noinline)) void tol_conv2d_direct_(const tol_conv_params_t *p,
                                                                     const int8_t *input, int8_t *output);

/* A dispatcher with a small frame: each path's stack is its own. */
TOL_SIMD_FN void tol_conv2d_s8(const tol_conv_params_t *p, const int8_t *input, int8_t *output)
{
    if (tol_conv_is_pw_(p)) {
        tol_conv2d_pw_(p, input, output);
    } else if (p->scratch != NULL) {
        tol_conv2d_im2col_(p, input, output, p->scratch);
    } else if (TOL_CONV2D_SCRATCH_BYTES(p->k_h, p->k_w, p->in_c) <= TOL_CONV_STACK_COL_BYTES) {
        tol_conv2d_stack_col_(p, input, output);
    } else {
        tol_conv2d_direct_(p, input, output);
    }
}

static TOL_SIMD_FN __attribute__((noinline)) void tol_conv2d_direct_(const tol_conv_params_t *p,
                                                                     const int8_t *input, int8_t *output)
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

#define TOL_DW_MAX_TAPS 25 /* kernels up to 5x5 use the tap-list path */

/* One tap for 4 channels: x points at 4 input bytes (channels ch..ch+3), w at
 * the tap's weights widened once per block (w[0]: channels 0, 2; w[1]: 1, 3). */
static inline void tol_dw_tap4_(const int8_t *x, const uint32_t *w, uint32_t off2, int32_t a[4])
{
    const uint32_t xv = tol_read_s8x4(x);
    const uint32_t xe = tol_sxtab16(off2, xv);
    a[0] = tol_smlabb(xe, w[0], a[0]);
    a[2] = tol_smlatt(xe, w[0], a[2]);
    const uint32_t xo = tol_sxtab16_ror8(off2, xv);
    a[1] = tol_smlabb(xo, w[1], a[1]);
    a[3] = tol_smlatt(xo, w[1], a[3]);
}

/* What a block of 4 depthwise channels needs, prepared once per block. */
typedef struct {
    tol_rq_t q[4];                 /* requantization constants */
    int32_t b[4];                  /* biases */
    uint32_t wt[2 * TOL_DW_MAX_TAPS]; /* widened weights, 2 words per tap */
    uint32_t off2;                 /* input offset in both lanes */
    int32_t x_tap, x_row, x_px;    /* input steps: next tap, next kernel row, next pixel */
    int32_t out_px;                /* output step between pixels (channels) */
    int32_t zp, lo, hi;            /* output zero point and clamp */
    int32_t fast;                  /* all 4 shifts < 0: q[] is valid */
    const int32_t *mult, *shift;   /* this block's per-channel requantization */
} tol_dw_blk_t;

/* The 4 sums by value: a caller's accumulators stay registers (an array passed by
 * address would keep them in memory). */
static inline __attribute__((always_inline)) void tol_dw_store4_(const tol_dw_blk_t *k, int32_t a0, int32_t a1,
                                                                 int32_t a2, int32_t a3, int8_t *out)
{
    if (k->fast && k->lo == -128 && k->hi == 127) {
        const int32_t zp = k->zp;
        out[0] = (int8_t)tol_ssat8(tol_rq_apply_(a0, &k->q[0]) + zp);
        out[1] = (int8_t)tol_ssat8(tol_rq_apply_(a1, &k->q[1]) + zp);
        out[2] = (int8_t)tol_ssat8(tol_rq_apply_(a2, &k->q[2]) + zp);
        out[3] = (int8_t)tol_ssat8(tol_rq_apply_(a3, &k->q[3]) + zp);
        return;
    }
    if (k->fast) {
        const int32_t zp = k->zp, lo = k->lo, hi = k->hi;
        out[0] = (int8_t)tol_clamp_(tol_rq_apply_(a0, &k->q[0]) + zp, lo, hi);
        out[1] = (int8_t)tol_clamp_(tol_rq_apply_(a1, &k->q[1]) + zp, lo, hi);
        out[2] = (int8_t)tol_clamp_(tol_rq_apply_(a2, &k->q[2]) + zp, lo, hi);
        out[3] = (int8_t)tol_clamp_(tol_rq_apply_(a3, &k->q[3]) + zp, lo, hi);
        return;
    }
    const int32_t a[4] = {a0, a1, a2, a3};
    for (int32_t j = 0; j < 4; ++j) {
        out[j] = tol_requant1_(a[j], k->mult[j], k->shift[j], k->zp, k->lo, k->hi);
    }
}

/* n interior pixels of a 3x3 kernel (all 9 taps valid), 4 channels, taps
 * unrolled. Out of line so the register allocator sees only this loop. */
static TOL_SIMD_FN __attribute__((noinline)) void tol_dw3x3_run4_(const tol_dw_blk_t *k, const int8_t *x,
                                                                  int8_t *out, int32_t n)
{
    const uint32_t off2 = k->off2;
    const int32_t x_tap = k->x_tap, x_row = k->x_row, x_px = k->x_px, out_px = k->out_px;
    const uint32_t *const w = k->wt;
    for (; n > 0; --n, x += x_px, out += out_px) {
        int32_t a[4] = {k->b[0], k->b[1], k->b[2], k->b[3]};
        const int8_t *r = x;
        tol_dw_tap4_(r, w + 0, off2, a);
        tol_dw_tap4_(r + x_tap, w + 2, off2, a);
        tol_dw_tap4_(r + 2 * x_tap, w + 4, off2, a);
        r += x_row;
        tol_dw_tap4_(r, w + 6, off2, a);
        tol_dw_tap4_(r + x_tap, w + 8, off2, a);
        tol_dw_tap4_(r + 2 * x_tap, w + 10, off2, a);
        r += x_row;
        tol_dw_tap4_(r, w + 12, off2, a);
        tol_dw_tap4_(r + x_tap, w + 14, off2, a);
        tol_dw_tap4_(r + 2 * x_tap, w + 16, off2, a);
        tol_dw_store4_(k, a[0], a[1], a[2], a[3], out);
    }
}

/* One pixel, 4 channels: nrow kernel rows of ncol valid taps each; x points at
 * the first valid tap's input, w at its widened weights. */
static inline __attribute__((always_inline)) void tol_dw_px4_(const tol_dw_blk_t *k, const int8_t *x,
                                                              const uint32_t *w, int8_t *out, int32_t w_row,
                                                              int32_t nrow, int32_t ncol)
{
    int32_t a[4] = {k->b[0], k->b[1], k->b[2], k->b[3]};
    const uint32_t off2 = k->off2;
    const int32_t x_tap = k->x_tap, x_row = k->x_row;
    for (; nrow > 0; --nrow, x += x_row, w += w_row) {
        switch (ncol) {
        case 3:
            tol_dw_tap4_(x + 2 * x_tap, w + 4, off2, a);
            /* fall through */
        case 2:
            tol_dw_tap4_(x + x_tap, w + 2, off2, a);
            /* fall through */
        case 1:
            tol_dw_tap4_(x, w, off2, a);
            /* fall through */
        case 0:
            break;
        default:
            for (int32_t t = 0; t < ncol; ++t) {
                tol_dw_tap4_(x + t * x_tap, w + 2 * t, off2, a);
            }
            break;
        }
    }
    tol_dw_store4_(k, a[0], a[1], a[2], a[3], out);
}

/* n pixels with the same valid tap window [ky0, ky1) x [kx0, kx1) (a border
 * row or column); x points at tap (ky0, kx0) of the first pixel, x_step and
 * out_step go to the next pixel. */
static TOL_SIMD_FN __attribute__((noinline)) void tol_dw_run4_(const tol_dw_blk_t *k, const int8_t *x0,
                                                               int8_t *out, int32_t n, int32_t x_step,
                                                               int32_t out_step, int32_t k_w, int32_t ky0,
                                                               int32_t ky1, int32_t kx0, int32_t kx1)
{
    const uint32_t *const w = k->wt + 2 * (ky0 * k_w + kx0);
    for (; n > 0; --n, x0 += x_step, out += out_step) {
        tol_dw_px4_(k, x0, w, out, 2 * k_w, ky1 - ky0, kx1 - kx0);
    }
}

/* Small maps (up to 6 x 6 pixels, or mostly border like 3x3 with "same" padding):
 * every pixel's valid tap window is worked out once per layer (tol_dw_pix_t), and
 * each block of 4 channels runs the whole map in one call. */
#define TOL_DW_SMALL_MAX_PX 64
#define TOL_DW_SMALL_ANY_PX 36 /* maps up to this many pixels take the small path whatever their border */

typedef struct {
    int32_t x;         /* input offset of the first valid tap (channel 0) */
    uint8_t w;         /* its tap index (ky0 * k_w + kx0) */
    uint8_t nrow, ncol; /* valid kernel rows, valid taps per row */
} tol_dw_pix_t;

static TOL_SIMD_FN __attribute__((noinline)) void tol_dw_small4_(const tol_dw_blk_t *k, const tol_dw_pix_t *px,
                                                                 int32_t n, int32_t w_row, const int8_t *input,
                                                                 int8_t *output)
{
    const int32_t out_px = k->out_px;
    for (; n > 0; --n, ++px, output += out_px) {
        tol_dw_px4_(k, input + px->x, k->wt + 2 * px->w, output, w_row, px->nrow, px->ncol);
    }
}

/* Depth multiplier 1, kernel of at most TOL_DW_MAX_TAPS taps, blocks of 4
 * channels: the block is the outer loop, so its weights are widened once
 * (into wt[], on the stack) and its requantization constants prepared once.
 * Interior pixels of a 3x3 kernel run the 9 taps unrolled (per tap 1 input
 * load, 2 SXTAB16, 2 weight loads, 4 SMLAxx); border pixels loop over their
 * valid taps. Leftover channels (c % 4) use plain C. */
static TOL_SIMD_FN void tol_dw_taps_(const tol_conv_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t in_w = p->in_w, c = p->in_c, k_w = p->k_w, k_h = p->k_h, ntap = k_h * k_w;
    const int32_t dil_h = p->dil_h, dil_w = p->dil_w;
    const int32_t out_h = p->out_h, out_w = p->out_w;
    const uint32_t off2 = tol_dup16_(p->input_offset);
    const int32_t off = p->input_offset;
    const int32_t zp = p->output_offset, lo = p->act_min, hi = p->act_max;
    const int32_t *const mult = p->out_mult;
    const int32_t *const shift = p->out_shift;
    const int32_t *const bias = p->bias;
    const int8_t *const weights = p->weights;
    const int is3x3 = k_h == 3 && k_w == 3;
    tol_dw_blk_t k;
    k.off2 = off2;
    k.x_tap = dil_w * c;
    k.x_row = dil_h * in_w * c;
    k.x_px = p->stride_w * c;
    k.out_px = c;
    k.zp = zp;
    k.lo = lo;
    k.hi = hi;
    /* interior columns: all k_w taps inside the image */
    int32_t ox_lo = 0, ox_hi = 0;
    while (ox_lo < out_w && ox_lo * p->stride_w - p->pad_left < 0) {
        ++ox_lo;
    }
    for (int32_t ox = 0; ox < out_w; ++ox) {
        if (ox * p->stride_w - p->pad_left + (k_w - 1) * dil_w < in_w) {
            ox_hi = ox + 1;
        }
    }
    if (ox_hi < ox_lo) {
        ox_hi = ox_lo;
    }
    /* the same for rows: [oy_lo, oy_hi) have all k_h taps inside the image */
    int32_t oy_lo = 0, oy_hi = 0;
    while (oy_lo < out_h && oy_lo * p->stride_h - p->pad_top < 0) {
        ++oy_lo;
    }
    for (int32_t oy = 0; oy < out_h; ++oy) {
        if (oy * p->stride_h - p->pad_top + (k_h - 1) * dil_h < p->in_h) {
            oy_hi = oy + 1;
        }
    }
    if (oy_hi < oy_lo) {
        oy_hi = oy_lo;
    }
    /* small maps go pixel by pixel: up to 6 x 6 pixels, or mostly border (interior under a
     * quarter). The border runs, corner calls and short interior runs of the other path then
     * cost more than the per-pixel window: on MobileNet's 6 x 6 maps the small path's one
     * loop stays in the ART's 1 KB instruction cache, those four functions do not. */
    tol_dw_pix_t pix[TOL_DW_SMALL_MAX_PX];
    const int32_t n_px = out_h * out_w;
    const int small = n_px <= TOL_DW_SMALL_MAX_PX &&
                      (n_px <= TOL_DW_SMALL_ANY_PX || 4 * (oy_hi - oy_lo) * (ox_hi - ox_lo) < n_px);
    if (small) {
        tol_dw_pix_t *q = pix;
        for (int32_t oy = 0; oy < out_h; ++oy) {
            const int32_t iy0 = oy * p->stride_h - p->pad_top;
            int32_t ky0, ky1;
            tol_tap_range_(iy0, dil_h, p->in_h, k_h, &ky0, &ky1);
            for (int32_t ox = 0; ox < out_w; ++ox, ++q) {
                const int32_t ix0 = ox * p->stride_w - p->pad_left;
                int32_t kx0, kx1;
                tol_tap_range_(ix0, dil_w, in_w, k_w, &kx0, &kx1);
                q->x = ((iy0 + ky0 * dil_h) * in_w + ix0 + kx0 * dil_w) * c;
                q->w = (uint8_t)(ky0 * k_w + kx0);
                q->nrow = (uint8_t)(ky1 - ky0);
                q->ncol = (uint8_t)(kx1 - kx0);
            }
        }
    }
    int32_t ch = 0;
    for (; ch + 4 <= c; ch += 4) {
        k.fast = 1;
        k.mult = mult + ch;
        k.shift = shift + ch;
        for (int32_t j = 0; j < 4; ++j) {
            k.b[j] = bias != NULL ? bias[ch + j] : 0;
            k.fast &= tol_rq_prep_(&k.q[j], mult[ch + j], shift[ch + j]);
        }
        for (int32_t t = 0; t < ntap; ++t) {
            const uint32_t wv = tol_read_s8x4(weights + t * c + ch);
            k.wt[2 * t] = tol_sxtb16(wv);
            k.wt[2 * t + 1] = tol_sxtb16_ror8(wv);
        }
        if (small) {
            tol_dw_small4_(&k, pix, n_px, 2 * k_w, input + ch, output + ch);
            continue;
        }
        /* border rows: per row, single corner pixels and one run of the rest */
        for (int32_t oy = 0; oy < out_h; ++oy) {
            if (oy == oy_lo && oy_hi > oy_lo) {
                oy = oy_hi - 1; /* the band of full rows is done below */
                continue;
            }
            const int32_t iy0 = oy * p->stride_h - p->pad_top;
            int32_t ky0, ky1;
            tol_tap_range_(iy0, dil_h, p->in_h, k_h, &ky0, &ky1);
            int8_t *const out = output + oy * out_w * c + ch;
            const int8_t *const xrow = input + (iy0 + ky0 * dil_h) * in_w * c + ch;
            for (int32_t ox = 0; ox < out_w; ++ox) {
                if (ox == ox_lo && ox_hi > ox_lo) {
                    tol_dw_run4_(&k, xrow + (ox_lo * p->stride_w - p->pad_left) * c, out + ox_lo * c,
                                 ox_hi - ox_lo, k.x_px, c, k_w, ky0, ky1, 0, k_w);
                    ox = ox_hi - 1;
                    continue;
                }
                const int32_t ix0 = ox * p->stride_w - p->pad_left;
                int32_t kx0, kx1;
                tol_tap_range_(ix0, dil_w, in_w, k_w, &kx0, &kx1);
                tol_dw_run4_(&k, xrow + (ix0 + kx0 * dil_w) * c, out + ox * c, 1, 0, 0, k_w, ky0, ky1, kx0,
                             kx1);
            }
        }
        if (oy_hi <= oy_lo) {
            continue;
        }
        /* band of rows with all k_h taps: border columns as vertical runs */
        const int32_t nband = oy_hi - oy_lo;
        const int32_t iyb = oy_lo * p->stride_h - p->pad_top;
        for (int32_t ox = 0; ox < out_w; ++ox) {
            if (ox == ox_lo && ox_hi > ox_lo) {
                ox = ox_hi - 1;
                continue;
            }
            const int32_t ix0 = ox * p->stride_w - p->pad_left;
            int32_t kx0, kx1;
            tol_tap_range_(ix0, dil_w, in_w, k_w, &kx0, &kx1);
            tol_dw_run4_(&k, input + (iyb * in_w + ix0 + kx0 * dil_w) * c + ch, output + (oy_lo * out_w + ox) * c + ch,
                         nband, p->stride_h * in_w * c, out_w * c, k_w, 0, k_h, kx0, kx1);
        }
        /* interior: 3x3 unrolled, other kernels through the run loop */
        if (ox_hi > ox_lo) {
            for (int32_t oy = oy_lo; oy < oy_hi; ++oy) {
                const int8_t *const x = input + ((oy * p->stride_h - p->pad_top) * in_w +
                                                 ox_lo * p->stride_w - p->pad_left) * c + ch;
                int8_t *const out = output + (oy * out_w + ox_lo) * c + ch;
                if (is3x3) {
                    tol_dw3x3_run4_(&k, x, out, ox_hi - ox_lo);
                } else {
                    tol_dw_run4_(&k, x, out, ox_hi - ox_lo, k.x_px, c, k_w, 0, k_h, 0, k_w);
                }
            }
        }
    }
    for (; ch < c; ++ch) {
        const int32_t b0 = bias != NULL ? bias[ch] : 0;
        int8_t *out = output + ch;
        for (int32_t oy = 0; oy < out_h; ++oy) {
            const int32_t iy0 = oy * p->stride_h - p->pad_top;
            int32_t ky0, ky1;
            tol_tap_range_(iy0, dil_h, p->in_h, k_h, &ky0, &ky1);
            for (int32_t ox = 0; ox < out_w; ++ox, out += c) {
                const int32_t ix0 = ox * p->stride_w - p->pad_left;
                int32_t kx0, kx1;
                tol_tap_range_(ix0, dil_w, in_w, k_w, &kx0, &kx1);
                int32_t acc = b0;
                for (int32_t ky = ky0; ky < ky1; ++ky) {
                    for (int32_t kx = kx0; kx < kx1; ++kx) {
                        const int32_t xi = input[((iy0 + ky * dil_h) * in_w + ix0 + kx * dil_w) * c + ch];
                        acc += weights[(ky * k_w + kx) * c + ch] * (xi + off);
                    }
                }
                *out = tol_requant1_(acc, mult[ch], shift[ch], zp, lo, hi);
            }
        }
    }
}

/* Depth multiplier a multiple of 4: the 4 output channels ic * dm + m .. + 3 read one input
 * channel, so each tap loads the input value once (duplicated into both halves) and one weight
 * word, and does 4 MACs (SMLABB/SMLATT on the widened weight halves). (A depthwise convolution of
 * a single input channel is lowered to CONV_2D by codegen: one dot product per kernel row.) */
static TOL_SIMD_FN void tol_dw_mult4_(const tol_conv_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t in_w = p->in_w, in_c = p->in_c, out_c = p->out_c, dm = p->depth_mult, k_w = p->k_w;
    const int32_t off = p->input_offset, zp = p->output_offset, lo = p->act_min, hi = p->act_max;
    const int32_t *const mult = p->out_mult;
    const int32_t *const shift = p->out_shift;
    const int32_t *const bias = p->bias;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_top;
        int32_t ky0, ky1;
        tol_tap_range_(iy0, p->dil_h, p->in_h, p->k_h, &ky0, &ky1);
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int32_t ix0 = ox * p->stride_w - p->pad_left;
            int32_t kx0, kx1;
            tol_tap_range_(ix0, p->dil_w, in_w, k_w, &kx0, &kx1);
            for (int32_t ic = 0; ic < in_c; ++ic) {
                const int8_t *const xc = input + ic;
                for (int32_t m = 0; m < dm; m += 4) {
                    const int32_t oc = ic * dm + m;
                    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
                    if (bias != NULL) {
                        a0 = bias[oc];
                        a1 = bias[oc + 1];
                        a2 = bias[oc + 2];
                        a3 = bias[oc + 3];
                    }
                    for (int32_t ky = ky0; ky < ky1; ++ky) {
                        const int32_t iy = iy0 + ky * p->dil_h;
                        const int8_t *x = xc + (iy * in_w + ix0 + kx0 * p->dil_w) * in_c;
                        const int8_t *w = p->weights + (ky * k_w + kx0) * out_c + oc;
                        const int32_t x_step = p->dil_w * in_c;
                        for (int32_t kx = kx0; kx < kx1; ++kx, x += x_step, w += out_c) {
                            const uint32_t xx = tol_dup16_(*x + off);
                            const uint32_t wv = tol_read_s8x4(w);
                            const uint32_t we = tol_sxtb16(wv);
                            const uint32_t wo = tol_sxtb16_ror8(wv);
                            a0 = tol_smlabb(we, xx, a0);
                            a2 = tol_smlatt(we, xx, a2);
                            a1 = tol_smlabb(wo, xx, a1);
                            a3 = tol_smlatt(wo, xx, a3);
                        }
                    }
                    output[oc] = tol_requant1_(a0, mult[oc], shift[oc], zp, lo, hi);
                    output[oc + 1] = tol_requant1_(a1, mult[oc + 1], shift[oc + 1], zp, lo, hi);
                    output[oc + 2] = tol_requant1_(a2, mult[oc + 2], shift[oc + 2], zp, lo, hi);
                    output[oc + 3] = tol_requant1_(a3, mult[oc + 3], shift[oc + 3], zp, lo, hi);
                }
            }
            output += out_c;
        }
    }
}

TOL_SIMD_FN void tol_depthwise_conv2d_s8(const tol_conv_params_t *p, const int8_t *input, int8_t *output)
{
    if (p->depth_mult % 4 == 0) {
        tol_dw_mult4_(p, input, output);
        return;
    }
    if (p->depth_mult != 1) {
        tol_dw_generic_(p, input, output);
        return;
    }
    if (p->k_h * p->k_w <= TOL_DW_MAX_TAPS) {
        tol_dw_taps_(p, input, output);
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
