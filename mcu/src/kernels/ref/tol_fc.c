/* tol_fc.c (reference) - FULLY_CONNECTED in plain C, following TFLM
 * reference_integer_ops::FullyConnected(PerChannel). */
#include "tol_kernels.h"

#include "../tol_kernels_util.h"

void tol_fully_connected_s8(const tol_fc_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t depth = p->in_features;
    for (int32_t r = 0; r < p->rows; ++r) {
        const int8_t *x = input + r * depth;
        for (int32_t o = 0; o < p->out_features; ++o) {
            const int8_t *w = p->weights + o * depth;
            int32_t acc = 0;
            for (int32_t d = 0; d < depth; ++d) {
                acc += (int32_t)w[d] * ((int32_t)x[d] + p->input_offset);
            }
            if (p->bias != NULL) {
                acc += p->bias[o];
            }
            acc = tol_mbqm_(acc, p->out_mult[o], p->out_shift[o]) + p->output_offset;
            *output++ = (int8_t)tol_clamp_(acc, p->act_min, p->act_max);
        }
    }
}

/* Half number k of the int16 weight words (low half first). */
static int32_t tol_w16_at_(const uint32_t *w, int32_t k)
{
    return (int32_t)(int16_t)(uint16_t)(w[k >> 1] >> (16 * (k & 1)));
}

/* Position (in halves) of w[o][d] in tol_fc16_params_t's blocked layout. */
static int32_t tol_w16_pos_(int32_t depth, int32_t out_f, int32_t o, int32_t d)
{
    static const int32_t lane[4] = {0, 2, 1, 3}; /* SXTAB16 lane order of a group */
    const int32_t groups = depth / 4, full = out_f / 4 * 4;
    if (o < full) {
        const int32_t base = (o / 4) * 4 * depth, j = o % 4;
        return d < 4 * groups ? base + (d / 4) * 16 + j * 4 + lane[d % 4]
                              : base + 16 * groups + (d - 4 * groups) * 4 + j;
    }
    const int32_t base = full * depth + (o - full) * (4 * groups + 2 * (depth % 4));
    return d < 4 * groups ? base + (d / 4) * 4 + lane[d % 4] : base + 4 * groups + 2 * (d - 4 * groups);
}

void tol_fully_connected_s8w16(const tol_fc16_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t depth = p->in_features;
    for (int32_t r = 0; r < p->rows; ++r) {
        const int8_t *x = input + r * depth;
        for (int32_t o = 0; o < p->out_features; ++o) {
            int32_t acc = 0;
            for (int32_t d = 0; d < depth; ++d) {
                acc += tol_w16_at_(p->weights, tol_w16_pos_(depth, p->out_features, o, d)) *
                       ((int32_t)x[d] + p->input_offset);
            }
            if (p->bias != NULL) {
                acc += p->bias[o];
            }
            acc = tol_mbqm_(acc, p->out_mult[o], p->out_shift[o]) + p->output_offset;
            *output++ = (int8_t)tol_clamp_(acc, p->act_min, p->act_max);
        }
    }
}
