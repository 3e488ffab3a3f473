/*
 * tol_proto.h - the serial protocol's frame codec (spec: docs/protocol.md).
 *
 * On the wire:  COBS( header | payload | crc32 ) 0x00
 *   header  = version u8, type u8, seq u16 LE, length u16 LE   (6 bytes)
 *   payload = `length` bytes, layout per message type
 *   crc32   = CRC-32/IEEE of header|payload, little-endian
 * A reply carries the request's seq and type | 0x80; errors use TOL_MSG_ERROR.
 *
 * TOL_MSG_LIST is the single source of the message types: the Python side
 * (host/tinyol/_defs.py) is generated from it by `python -m tinyol.gen_defs`.
 */
#ifndef TOL_PROTO_H
#define TOL_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "tol_cobs.h"
#include "tol_status.h"

#define TOL_PROTO_VERSION 1u
#define TOL_PROTO_HEADER_BYTES 6u
#define TOL_PROTO_CRC_BYTES 4u
#define TOL_PROTO_OVERHEAD (TOL_PROTO_HEADER_BYTES + TOL_PROTO_CRC_BYTES)
#define TOL_PROTO_REPLY_FLAG 0x80u
/* Flow: bytes of later requests a device buffers while it executes one. A host keeps at most
 * this many bytes on the way beyond its oldest unanswered request (docs/protocol.md, "Flow");
 * more are lost on a UART while the device computes (issue 34: 27 KB inputs). */
#define TOL_PROTO_RX_AHEAD 2048u
/* STATS' short form (docs/protocol.md, STATS): a request payload of this one byte asks for the
 * reply's first TOL_PROTO_STATS_SHORT_BYTES bytes only (link counters and the learner's counters,
 * no per-class counts or blocks): what a session needs to begin, short enough to come through a
 * noisy line (issue 34: ~190 bytes came through whole at 5 % bit flips 1 time in 20,000). */
#define TOL_PROTO_STATS_SHORT 1u
#define TOL_PROTO_STATS_SHORT_BYTES 60u

/* X(name, code, description) */
#define TOL_MSG_LIST(X)                                                            \
    X(TOL_MSG_INFO,     0x01, "board, firmware, model, memory, boot counter")       \
    X(TOL_MSG_SAMPLE,   0x02, "input + label: predict, then learn")                 \
    X(TOL_MSG_PREDICT,  0x03, "input: predict only")                                \
    X(TOL_MSG_EMBED,    0x04, "input: return the backbone's int8 latent")           \
    X(TOL_MSG_SET,      0x05, "set a learner setting")                              \
    X(TOL_MSG_GET,      0x06, "get a learner setting")                              \
    X(TOL_MSG_STATS,    0x07, "counters, replay fill, cycle counts")                \
    X(TOL_MSG_RESET,    0x08, "return the learner to the exported head")            \
    X(TOL_MSG_GET_HEAD, 0x09, "dump a slice of the head's weights")                 \
    X(TOL_MSG_SAVE,     0x0A, "store the learned state in flash")                   \
    X(TOL_MSG_LOAD,     0x0B, "reload the learned state from flash")                \
    X(TOL_MSG_SET_HEAD, 0x0C, "write a slice of the head's weights")                \
    X(TOL_MSG_BENCH,    0x0D, "run a cost-measurement region")                      \
    X(TOL_MSG_EXIT,     0x0E, "end the program (test builds; semihosting exit)")    \
    X(TOL_MSG_REPLAY_ADD, 0x0F, "input + label: store its latent for replay, no training") \
    X(TOL_MSG_GET_STAGE, 0x10, "dump a slice of the adaptive stage's parameters")  \
    X(TOL_MSG_SET_STAGE, 0x11, "stage a slice of the adaptive stage; the last one commits") \
    X(TOL_MSG_BOARD,    0x12, "clock, console baud and flash geometry as the firmware set them up") \
    X(TOL_MSG_ERROR,    0x7F, "error reply: status u8, request type u8, detail u16")

/* Learner settings addressed by SET/GET: X(name, key, type, description);
 * type f = float32 LE, u = uint32 LE on the wire. */
#define TOL_SETTING_LIST(X)                                                           \
    X(TOL_SET_LR,              1, f, "learning rate (>= 0)")                           \
    X(TOL_SET_MOMENTUM,        2, f, "SGD momentum [0, 1)")                            \
    X(TOL_SET_WEIGHT_DECAY,    3, f, "L2 weight decay (>= 0)")                         \
    X(TOL_SET_CLIP_NORM,       4, f, "gradient-norm clip, 0 = off")                    \
    X(TOL_SET_N_NEW,           5, u, "fresh samples per update")                       \
    X(TOL_SET_N_OLD,           6, u, "replayed samples per update")                    \
    X(TOL_SET_MODE,            7, u, "0 frozen, 1 SGD (TinyOL), 2 SGD + replay")       \
    X(TOL_SET_TRAIN_ANOMALIES, 8, u, "autoencoder: also learn flagged samples")        \
    X(TOL_SET_THRESHOLD_K,     9, f, "autoencoder: threshold = mean + k * std")        \
    X(TOL_SET_EMA_ALPHA,      10, f, "autoencoder: score statistics EMA factor")       \
    X(TOL_SET_WARMUP,         11, u, "autoencoder: samples that train before flagging") \
    X(TOL_SET_AUTOSAVE,       12, u, "save to flash every N committed updates, 0 = off") \
    X(TOL_SET_REHEARSE,       13, u, "classifier: replay-only steps per idle period (0..255), 0 = off") \
    X(TOL_SET_REPLAY_POLICY,  14, u, "replay policy of later offers: 0 reservoir, 1 class-balanced, 2 AR1")

#define TOL_SETTING_ENUM_(name, key, type, desc) name = (key),
typedef enum { TOL_SETTING_LIST(TOL_SETTING_ENUM_) } tol_setting_t;
#undef TOL_SETTING_ENUM_

/* Input encodings of SAMPLE/PREDICT/EMBED (first payload byte). */
#define TOL_INPUT_INT8 0u     /* int8, quantized by the host with the model's input params */
#define TOL_INPUT_FLOAT32 1u  /* float32 LE, quantized on the device */

#define TOL_MSG_ENUM_(name, code, desc) name = (code),
typedef enum { TOL_MSG_LIST(TOL_MSG_ENUM_) } tol_msg_t;
#undef TOL_MSG_ENUM_

/* A decoded frame. `payload` points into the caller's buffer. */
typedef struct {
    uint8_t version;
    uint8_t type;
    uint16_t seq;
    uint16_t length;
    const uint8_t *payload;
    uint32_t crc;            /* the frame's CRC, used to recognise retransmissions */
} tol_frame_t;

/* Bytes a frame with `payload_max` payload bytes needs on the wire, delimiter included. */
#define TOL_PROTO_WIRE_MAX(payload_max) \
    (TOL_COBS_ENCODED_MAX((payload_max) + TOL_PROTO_OVERHEAD) + 1u)

/*
 * Parse a raw frame (COBS-encoded, delimiter stripped) in place.
 * buf[0..n) is overwritten with the decoded bytes; out->payload points into it.
 * Errors: TOL_ERR_FRAME (COBS or size), TOL_ERR_CRC, TOL_ERR_VERSION,
 * TOL_ERR_LENGTH (length field disagrees with the frame size).
 * On TOL_ERR_VERSION/TOL_ERR_LENGTH out->type and out->seq are still filled so
 * the error reply can name the request.
 */
tol_status_t tol_proto_parse(uint8_t *buf, size_t n, tol_frame_t *out);

/*
 * Build a complete wire frame (COBS + trailing 0x00) into dst[0..dst_cap).
 * `payload` may be NULL when length is 0. *out_len is the byte count to send.
 * `scratch` (>= length + TOL_PROTO_OVERHEAD bytes) holds the unencoded frame.
 */
tol_status_t tol_proto_build(uint8_t *dst, size_t dst_cap, uint8_t *scratch, size_t scratch_cap,
                             uint8_t type, uint16_t seq, const uint8_t *payload, uint16_t length,
                             size_t *out_len);

/* Little-endian helpers for payload layouts (no alignment assumptions). */
static inline void tol_put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void tol_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}
static inline uint16_t tol_get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (uint16_t)(p[1] << 8));
}
static inline uint32_t tol_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

#endif /* TOL_PROTO_H */
