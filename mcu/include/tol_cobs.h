/*
 * tol_cobs.h - Consistent Overhead Byte Stuffing (Cheshire & Baker 1999).
 *
 * Encoded data contains no 0x00 byte, so 0x00 delimits frames on the wire.
 */
#ifndef TOL_COBS_H
#define TOL_COBS_H

#include <stddef.h>
#include <stdint.h>

#include "tol_status.h"

/* Worst-case encoded size of n bytes (without the 0x00 delimiter). */
#define TOL_COBS_ENCODED_MAX(n) ((n) + ((n) / 254u) + 1u)

/*
 * Encode src[0..n) into dst (capacity dst_cap, must not overlap src).
 * On success *out_len is the encoded length (no delimiter appended).
 * TOL_ERR_OVERFLOW if dst_cap < needed.
 */
tol_status_t tol_cobs_encode(uint8_t *dst, size_t dst_cap, const uint8_t *src, size_t n,
                             size_t *out_len);

/*
 * Decode buf[0..n) in place (an encoded frame without its delimiter).
 * On success *out_len is the decoded length (<= n). TOL_ERR_FRAME on a zero
 * byte inside the data or a code byte pointing past the end.
 */
tol_status_t tol_cobs_decode_inplace(uint8_t *buf, size_t n, size_t *out_len);

#endif /* TOL_COBS_H */
