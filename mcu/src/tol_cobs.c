/* tol_cobs.c - COBS encoder and in-place decoder. */
#include "tol_cobs.h"

tol_status_t tol_cobs_encode(uint8_t *dst, size_t dst_cap, const uint8_t *src, size_t n,
                             size_t *out_len)
{
    TOL_CHECK(dst != NULL && out_len != NULL && (src != NULL || n == 0), TOL_ERR_ARG);
    TOL_CHECK(dst_cap >= TOL_COBS_ENCODED_MAX(n), TOL_ERR_OVERFLOW);
    size_t code_at = 0; /* where the current block's code byte goes */
    size_t w = 1;
    uint8_t code = 1;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == 0u) {
            dst[code_at] = code;
            code_at = w++;
            code = 1;
        } else {
            dst[w++] = src[i];
            code++;
            if (code == 0xFFu) {
                dst[code_at] = code;
                code_at = w++;
                code = 1;
            }
        }
    }
    dst[code_at] = code;
    *out_len = w;
    return TOL_OK;
}

tol_status_t tol_cobs_decode_inplace(uint8_t *buf, size_t n, size_t *out_len)
{
    TOL_CHECK(buf != NULL && out_len != NULL, TOL_ERR_ARG);
    size_t r = 0;
    size_t w = 0;
    while (r < n) {
        uint8_t code = buf[r++];
        TOL_CHECK(code != 0u, TOL_ERR_FRAME);
        size_t run = (size_t)code - 1u;
        TOL_CHECK(run <= n - r, TOL_ERR_FRAME);
        for (size_t k = 0; k < run; k++) {
            uint8_t b = buf[r++];
            TOL_CHECK(b != 0u, TOL_ERR_FRAME);
            buf[w++] = b;
        }
        if (code != 0xFFu && r < n) buf[w++] = 0u;
    }
    *out_len = w;
    return TOL_OK;
}
