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
