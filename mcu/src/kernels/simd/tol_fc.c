/* tol_fc.c (SIMD) - FULLY_CONNECTED with 4 output neurons per pass and
 * 2 MACs per SMLAD; bit-exact with the reference version. */
#include "tol_kernels.h"

#include "../tol_kernels_util.h"
#include "tol_simd_dot.h"

/* Requantize the 4 accumulators of a block of output rows into out[0..3]. The common case
 * (right shifts by >= 2, the full int8 range) is unrolled with the sign-built rounding
 * constant (tol_rq_sign_) and SSAT: ~13 instructions per output instead of ~28. */
static inline __attribute__((always_inline)) void tol_fc_out4_(int32_t a0, int32_t a1, int32_t a2, int32_t a3,
                                                               const int32_t *mult, const int32_t *shift,
                                                               int32_t zp, int32_t lo, int32_t hi, int full,
                                                               int8_t *out)
{
    if (full && shift[0] < -1 && shift[1] < -1 && shift[2] < -1 && shift[3] < -1) {
        out[0] = (int8_t)tol_ssat8(tol_rq_sign_(a0, mult[0], (int32_t)(1u << (-2 - shift[0])), -1 - shift[0]) + zp);
        out[1] = (int8_t)tol_ssat8(tol_rq_sign_(a1, mult[1], (int32_t)(1u << (-2 - shift[1])), -1 - shift[1]) + zp);
        out[2] = (int8_t)tol_ssat8(tol_rq_sign_(a2, mult[2], (int32_t)(1u << (-2 - shift[2])), -1 - shift[2]) + zp);
        out[3] = (int8_t)tol_ssat8(tol_rq_sign_(a3, mult[3], (int32_t)(1u << (-2 - shift[3])), -1 - shift[3]) + zp);
    } else {
        const int32_t acc[4] = {a0, a1, a2, a3};
        for (int32_t j = 0; j < 4; ++j) {
            out[j] = tol_rq_clamp_(tol_mbqm_fast_(acc[j], mult[j], shift[j]) + zp, lo, hi, full);
        }
    }
}

TOL_SIMD_FN void tol_fully_connected_s8(const tol_fc_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t depth = p->in_features, out_f = p->out_features;
    const uint32_t off2 = tol_dup16_(p->input_offset);
    const int full = p->act_min == -128 && p->act_max == 127;
    for (int32_t r = 0; r < p->rows; ++r) {
        const int8_t *x = input + r * depth;
        int32_t o = 0;
        for (; o + 4 <= out_f; o += 4) {
            int32_t acc[4] = {0, 0, 0, 0};
            if (p->bias != NULL) {
                for (int32_t j = 0; j < 4; ++j) {
                    acc[j] = p->bias[o + j];
                }
            }
            tol_dot4_(x, p->weights + o * depth, depth, depth, off2, p->input_offset, acc);
            tol_fc_out4_(acc[0], acc[1], acc[2], acc[3], p->out_mult + o, p->out_shift + o, p->output_offset,
                         p->act_min, p->act_max, full, output);
            output += 4;
        }
        for (; o < out_f; ++o) {
            int32_t acc = p->bias != NULL ? p->bias[o] : 0;
            acc = tol_dot1_(x, p->weights + o * depth, depth, off2, p->input_offset, acc);
            *output++ = tol_requant1_(acc, p->out_mult[o], p->out_shift[o], p->output_offset, p->act_min,
                                      p->act_max);
        }
    }
}

/* Signed low / high half of a word of two int16 weights. */
static inline int32_t tol_lo16_(uint32_t w)
{
    return (int32_t)(int16_t)(uint16_t)w;
}

static inline int32_t tol_hi16_(uint32_t w)
{
    return (int32_t)(int16_t)(uint16_t)(w >> 16);
}

/* One block of 4 output rows of tol_fully_connected_s8w16: bias, the dot products (per 4
 * inputs one LDR and two SXTAB16 shared by the 4 rows, 4 LDRD of weights, 8 SMLAD), then the
 * 4 requantizations (tol_rq_sign_ when every shift of the block is a right shift by >= 2).
 * Returns the next block's weights. */
static TOL_SIMD_FN __attribute__((noinline)) const uint32_t *
tol_fc16_block4_(const tol_fc16_params_t *p, const int8_t *x, const uint32_t *w, int32_t o, uint32_t off2,
                 int full, int8_t *out)
{
    const int32_t depth = p->in_features, offset = p->input_offset;
    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    if (p->bias != NULL) {
        a0 = p->bias[o];
        a1 = p->bias[o + 1];
        a2 = p->bias[o + 2];
        a3 = p->bias[o + 3];
    }
    int32_t n = depth >> 2;
    while (n-- > 0) {
        const uint32_t xv = tol_read_s8x4(x);
        const uint32_t xe = tol_sxtab16(off2, xv);
        const uint32_t xo = tol_sxtab16_ror8(off2, xv);
        uint32_t wa, wb;
        x += 4;
        tol_ldrd2_(&w, &wa, &wb);
        a0 = tol_smlad(xe, wa, a0);
        a0 = tol_smlad(xo, wb, a0);
        tol_ldrd2_(&w, &wa, &wb);
        a1 = tol_smlad(xe, wa, a1);
        a1 = tol_smlad(xo, wb, a1);
        tol_ldrd2_(&w, &wa, &wb);
        a2 = tol_smlad(xe, wa, a2);
        a2 = tol_smlad(xo, wb, a2);
        tol_ldrd2_(&w, &wa, &wb);
        a3 = tol_smlad(xe, wa, a3);
        a3 = tol_smlad(xo, wb, a3);
    }
    n = depth & 3;
    while (n-- > 0) {
        const int32_t xv = *x++ + offset;
        a0 += tol_lo16_(w[0]) * xv;
        a1 += tol_hi16_(w[0]) * xv;
        a2 += tol_lo16_(w[1]) * xv;
        a3 += tol_hi16_(w[1]) * xv;
        w += 2;
    }
    tol_fc_out4_(a0, a1, a2, a3, p->out_mult + o, p->out_shift + o, p->output_offset, p->act_min, p->act_max,
                 full, out);
    return w;
}

TOL_SIMD_FN void tol_fully_connected_s8w16(const tol_fc16_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t depth = p->in_features, out_f = p->out_features;
    const uint32_t off2 = tol_dup16_(p->input_offset);
    const int full = p->act_min == -128 && p->act_max == 127;
    for (int32_t r = 0; r < p->rows; ++r) {
        const int8_t *x = input + r * depth;
        const uint32_t *w = p->weights;
        int32_t o = 0;
        for (; o + 4 <= out_f; o += 4) {
            w = tol_fc16_block4_(p, x, w, o, off2, full, output);
            output += 4;
        }
        for (; o < out_f; ++o) {
            int32_t acc = p->bias != NULL ? p->bias[o] : 0;
            const int8_t *xi = x;
            for (int32_t n = depth >> 2; n > 0; --n) {
                const uint32_t xv = tol_read_s8x4(xi);
                xi += 4;
                acc = tol_smlad(tol_sxtab16(off2, xv), w[0], acc);
                acc = tol_smlad(tol_sxtab16_ror8(off2, xv), w[1], acc);
                w += 2;
            }
            for (int32_t n = depth & 3; n > 0; --n) {
                acc += tol_lo16_(*w++) * (*xi++ + p->input_offset);
            }
            const int32_t v = tol_mbqm_fast_(acc, p->out_mult[o], p->out_shift[o]) + p->output_offset;
            *output++ = tol_rq_clamp_(v, p->act_min, p->act_max, full);
        }
    }
}
