/* tol_concat.c (reference) - CONCATENATION of int8 tensors with equal
 * quantization (TFLM requires it for int8): a strided copy. The SIMD build
 * compiles this file. */
#include "tol_kernels.h"

#include <string.h>

void tol_concat_s8(const tol_concat_params_t *p, const int8_t *const *inputs, int8_t *output)
{
    for (int32_t o = 0; o < p->outer; ++o) {
        for (int32_t k = 0; k < p->n_inputs; ++k) {
            const int32_t len = p->inner[k];
            memcpy(output, inputs[k] + o * len, (size_t)len);
            output += len;
        }
    }
}
