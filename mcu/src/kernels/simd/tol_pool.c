/* tol_pool.c (SIMD build) - AVERAGE_POOL_2D and MAX_POOL_2D four channels per
 * word: the window sum in two SXTAB16 accumulators (16-bit lanes: exact while
 * the window holds at most 255 values), the window maximum with SSUB8 + SEL.
 * Channels beyond a multiple of 4 take the reference loop. MEAN is the
 * reference code (ref/tol_reduce.c, compiled by the SIMD build too).
 * On a core whose SSUB8/SEL failed the boot self-test (tol_cpu.h; Renode 1.15.3 sets GE
 * wrongly) the maximum takes the portable four-lane path instead, chosen once per call.
 * Bit-exact with the reference kernels (and TFLM). */
#include "tol_kernels.h"

#include "tol_cpu_checks.h"
#include "../tol_kernels_util.h"
#include "tol_acle.h"
#include "tol_cpu.h"

static inline int32_t tol_pool_lane16_(uint32_t x, int lane)
{
    return (int32_t)(int16_t)(uint16_t)(x >> (16 * lane));
}

static inline int32_t tol_pool_byte8_(uint32_t x, int byte)
{
    return (int32_t)(int8_t)(uint8_t)(x >> (8 * byte));
}

static inline int32_t tol_pool_avg_(int32_t acc, int32_t count)
{
    if (count > 0) {
        acc = acc > 0 ? (acc + count / 2) / count : (acc - count / 2) / count;
    }
    return acc;
}

TOL_SIMD_FN void tol_avgpool2d_s8(const tol_pool_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t c = p->c;
    const int32_t c4 = c & ~3;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_top;
        const int32_t ky0 = tol_max_(0, -iy0);
        const int32_t ky1 = tol_min_(p->k_h, p->in_h - iy0);
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int32_t ix0 = ox * p->stride_w - p->pad_left;
            const int32_t kx0 = tol_max_(0, -ix0);
            const int32_t kx1 = tol_min_(p->k_w, p->in_w - ix0);
            const int32_t count = (ky1 - ky0) * (kx1 - kx0);
            int32_t ch = 0;
            if (count <= 255) {
                for (; ch < c4; ch += 4) {
                    uint32_t lo = 0; /* lanes: ch, ch + 2 */
                    uint32_t hi = 0; /* lanes: ch + 1, ch + 3 */
                    for (int32_t ky = ky0; ky < ky1; ++ky) {
                        const int8_t *px = input + ((iy0 + ky) * p->in_w + ix0 + kx0) * c + ch;
                        for (int32_t kx = kx0; kx < kx1; ++kx) {
                            const uint32_t v = tol_read_s8x4(px);
                            lo = tol_sxtab16(lo, v);
                            hi = tol_sxtab16_ror8(hi, v);
                            px += c;
                        }
                    }
                    output[0] = (int8_t)tol_clamp_(tol_pool_avg_(tol_pool_lane16_(lo, 0), count), p->act_min, p->act_max);
                    output[1] = (int8_t)tol_clamp_(tol_pool_avg_(tol_pool_lane16_(hi, 0), count), p->act_min, p->act_max);
                    output[2] = (int8_t)tol_clamp_(tol_pool_avg_(tol_pool_lane16_(lo, 1), count), p->act_min, p->act_max);
                    output[3] = (int8_t)tol_clamp_(tol_pool_avg_(tol_pool_lane16_(hi, 1), count), p->act_min, p->act_max);
                    output += 4;
                }
            }
            for (; ch < c; ++ch) {
                int32_t acc = 0;
                for (int32_t ky = ky0; ky < ky1; ++ky) {
                    const int8_t *row = input + ((iy0 + ky) * p->in_w + ix0) * c + ch;
                    for (int32_t kx = kx0; kx < kx1; ++kx) {
                        acc += row[kx * c];
                    }
                }
                *output++ = (int8_t)tol_clamp_(tol_pool_avg_(acc, count), p->act_min, p->act_max);
            }
        }
    }
}

/* The maximum pooling loop; `portable` (a constant at each call: two copies) picks the lane
 * maximum without GE flags. */
static inline __attribute__((always_inline)) void tol_maxpool_(const tol_pool_params_t *p, const int8_t *input,
                                                               int8_t *output, int portable)
{
    const int32_t c = p->c;
    const int32_t c4 = c & ~3;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
        const int32_t iy0 = oy * p->stride_h - p->pad_top;
        const int32_t ky0 = tol_max_(0, -iy0);
        const int32_t ky1 = tol_min_(p->k_h, p->in_h - iy0);
        for (int32_t ox = 0; ox < p->out_w; ++ox) {
            const int32_t ix0 = ox * p->stride_w - p->pad_left;
            const int32_t kx0 = tol_max_(0, -ix0);
            const int32_t kx1 = tol_min_(p->k_w, p->in_w - ix0);
            int32_t ch = 0;
            for (; ch < c4; ch += 4) {
                uint32_t m = 0x80808080u; /* -128 in every lane */
                for (int32_t ky = ky0; ky < ky1; ++ky) {
                    const int8_t *px = input + ((iy0 + ky) * p->in_w + ix0 + kx0) * c + ch;
                    for (int32_t kx = kx0; kx < kx1; ++kx) {
                        const uint32_t v = tol_read_s8x4(px);
                        m = portable ? tol_max_s8x4_c(m, v) : tol_max_s8x4(m, v);
                        px += c;
                    }
                }
                for (int k = 0; k < 4; k++) {
                    *output++ = (int8_t)tol_clamp_(tol_pool_byte8_(m, k), p->act_min, p->act_max);
                }
            }
            for (; ch < c; ++ch) {
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

TOL_SIMD_FN void tol_maxpool2d_s8(const tol_pool_params_t *p, const int8_t *input, int8_t *output)
{
    if ((tol_cpu_faults() & TOL_CPU_SSUB8_SEL) != 0u) { /* failed the boot self-test */
        tol_maxpool_(p, input, output, 1);
    } else {
        tol_maxpool_(p, input, output, 0);
    }
}
