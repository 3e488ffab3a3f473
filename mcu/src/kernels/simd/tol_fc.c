/* tol_fc.c (SIMD) - FULLY_CONNECTED with 4 output neurons per pass and
 * 2 MACs per SMLAD; bit-exact with the reference version. */
#include "tol_kernels.h"

#include "../tol_kernels_util.h"
#include "tol_simd_dot.h"

TOL_SIMD_FN void tol_fully_connected_s8(const tol_fc_params_t *p, const int8_t *input, int8_t *output)
{
    const int32_t depth = p->in_features, out_f = p->out_features;
    const uint32_t off2 = tol_dup16_(p->input_offset);
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
            for (int32_t j = 0; j < 4; ++j) {
                *output++ = tol_requant1_(acc[j], p->out_mult[o + j], p->out_shift[o + j], p->output_offset,
                                          p->act_min, p->act_max);
            }
        }
        for (; o < out_f; ++o) {
            int32_t acc = p->bias != NULL ? p->bias[o] : 0;
            acc = tol_dot1_(x, p->weights + o * depth, depth, off2, p->input_offset, acc);
            *output++ = tol_requant1_(acc, p->out_mult[o], p->out_shift[o], p->output_offset, p->act_min,
                                      p->act_max);
        }
    }
}
