/* tol_activation.c (reference) - table-driven int8 activations (LOGISTIC, TANH,
 * LEAKY_RELU, HARD_SWISH) and SOFTMAX, bit-exact with TFLM's reference kernels.
 * The tables come from host/tinyol/model/tflm_int8.py; the SIMD build compiles this file. */
#include "tol_kernels.h"

#include "../tol_kernels_util.h"

void tol_lut_s8(const tol_lut_params_t *p, const int8_t *input, int8_t *output)
{
    const int8_t *table = p->table;
    const int32_t n = p->size;
    for (int32_t i = 0; i < n; ++i) {
        output[i] = table[(uint8_t)(input[i] + 128)];
    }
}

/* gemmlowp SaturatingRoundingMultiplyByPOT<e> for e in {1, 2} (Rescale). */
static int32_t tol_sat_shl_(int32_t x, int32_t e)
{
    const int32_t thr = (int32_t)((1u << (31 - e)) - 1u);
    if (x > thr) {
        return INT32_MAX;
    }
    if (x < -thr) {
        return INT32_MIN;
    }
    return (int32_t)((uint32_t)x << e);
}

/* gemmlowp one_over_one_plus_x_for_x_in_0_1: Q0.31 in and out (Newton-Raphson,
 * three iterations in Q2.29). Additions wrap as in gemmlowp (two's complement). */
static int32_t tol_one_over_one_plus_x_(int32_t a)
{
    const int64_t sum = (int64_t)a + INT32_MAX;
    const int32_t half_denominator = (int32_t)((sum + (sum >= 0 ? 1 : -1)) / 2);
    int32_t x = (int32_t)(1515870810u + (uint32_t)tol_srdhm_(half_denominator, -1010580540));
    for (int i = 0; i < 3; ++i) {
        const int32_t hdx = tol_srdhm_(half_denominator, x);
        const int32_t one_minus = (int32_t)((uint32_t)(1 << 29) - (uint32_t)hdx);
        x = (int32_t)((uint32_t)x + (uint32_t)tol_sat_shl_(tol_srdhm_(x, one_minus), 2));
    }
    return tol_sat_shl_(x, 1);
}

void tol_softmax_s8(const tol_softmax_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t depth = p->depth;
    const int32_t *table = p->exp_table;
    for (int32_t r = 0; r < p->rows; ++r) {
        const int8_t *x = input + r * depth;
        int8_t *y = output + r * depth;
        int32_t max = -128;
        for (int32_t c = 0; c < depth; ++c) {
            max = tol_max_(max, x[c]);
        }
        int32_t sum = 0;  /* Q12.19 */
        for (int32_t c = 0; c < depth; ++c) {
            sum += tol_rdbpot_(table[max - x[c]], 12);
        }
        /* TFLM GetReciprocal(sum, 12): sum >= 2^19 (the max contributes exp(0)) */
        const int32_t headroom = (int32_t)__builtin_clz((uint32_t)sum);
        const int32_t bits_over_unit = 12 - headroom;
        const int32_t shifted = (int32_t)(((uint32_t)sum << headroom) - (1u << 31));
        const int32_t scale = tol_one_over_one_plus_x_(shifted);
        const int32_t exponent = bits_over_unit + 31 - 8;
        for (int32_t c = 0; c < depth; ++c) {
            const int32_t v = tol_rdbpot_(tol_srdhm_(scale, table[max - x[c]]), exponent) - 128;
            y[c] = (int8_t)tol_clamp_(v, -128, 127);
        }
    }
}
