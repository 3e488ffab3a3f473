/* tol_proto.c - frame parse/build (see tol_proto.h and docs/protocol.md). */
#include "tol_proto.h"

#include <string.h>

#include "tol_cobs.h"
#include "tol_crc32.h"

tol_status_t tol_proto_parse(uint8_t *buf, size_t n, tol_frame_t *out)
{
    TOL_CHECK(buf != NULL && out != NULL, TOL_ERR_ARG);
    memset(out, 0, sizeof(*out));
    size_t len = 0;
    TOL_TRY(tol_cobs_decode_inplace(buf, n, &len));
    TOL_CHECK(len >= TOL_PROTO_OVERHEAD, TOL_ERR_FRAME);
    uint32_t want = tol_get_u32(buf + len - TOL_PROTO_CRC_BYTES);
    uint32_t got = tol_crc32(TOL_CRC32_INIT, buf, len - TOL_PROTO_CRC_BYTES);
    TOL_CHECK(want == got, TOL_ERR_CRC);
    out->version = buf[0];
    out->type = buf[1];
    out->seq = tol_get_u16(buf + 2);
    out->length = tol_get_u16(buf + 4);
    out->crc = got;
    TOL_CHECK(out->version == TOL_PROTO_VERSION, TOL_ERR_VERSION);
    TOL_CHECK((size_t)out->length == len - TOL_PROTO_OVERHEAD, TOL_ERR_LENGTH);
    out->payload = buf + TOL_PROTO_HEADER_BYTES;
    return TOL_OK;
}

tol_status_t tol_proto_build(uint8_t *dst, size_t dst_cap, uint8_t *scratch, size_t scratch_cap,
                             uint8_t type, uint16_t seq, const uint8_t *payload, uint16_t length,
                             size_t *out_len)
{
    TOL_CHECK(dst != NULL && scratch != NULL && out_len != NULL, TOL_ERR_ARG);
    TOL_CHECK(payload != NULL || length == 0u, TOL_ERR_ARG);
    size_t raw = (size_t)length + TOL_PROTO_OVERHEAD;
    TOL_CHECK(scratch_cap >= raw, TOL_ERR_OVERFLOW);
    scratch[0] = (uint8_t)TOL_PROTO_VERSION;
    scratch[1] = type;
    tol_put_u16(scratch + 2, seq);
    tol_put_u16(scratch + 4, length);
    if (length > 0u) memmove(scratch + TOL_PROTO_HEADER_BYTES, payload, length);
    tol_put_u32(scratch + TOL_PROTO_HEADER_BYTES + length,
                tol_crc32(TOL_CRC32_INIT, scratch, TOL_PROTO_HEADER_BYTES + (size_t)length));
    TOL_CHECK(dst_cap >= 1u, TOL_ERR_OVERFLOW);
    size_t enc = 0;
    TOL_TRY(tol_cobs_encode(dst, dst_cap - 1u, scratch, raw, &enc));
    dst[enc] = 0u;
    *out_len = enc + 1u;
    return TOL_OK;
}
