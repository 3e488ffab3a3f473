/*
 * tol_app.h - the device side of the protocol: byte stream in, replies out.
 *
 * The application feeds every received byte to tol_app_feed(); complete frames
 * are parsed, de-duplicated (a retransmitted request gets the cached reply and
 * is never executed twice) and dispatched. Replies go out through
 * tol_hal_uart_write(). All memory is inside tol_app_t; the caller (mcu/app/main.c)
 * owns one static instance.
 */
#ifndef TOL_APP_H
#define TOL_APP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tol_proto.h"
#include "tol_status.h"

#include "config.h"   /* the model's sizes (models/<name>/config.h or mcu/app/nomodel) */

#define TOL_APP_MAX_(a, b) ((a) > (b) ? (a) : (b))
/* float32 inputs are accepted while they fit in 8 KB; larger models take int8 only */
#define TOL_APP_FLOAT_INPUT (4u * (TOL_INPUT_SIZE) + 3u <= 8192u)
/* largest request payload: SAMPLE = label u16 + encoding u8 + input */
#define TOL_APP_MAX_REQUEST                                                          \
    TOL_APP_MAX_(256u, 3u + (TOL_APP_FLOAT_INPUT ? 4u : 1u) * (unsigned)(TOL_INPUT_SIZE))
/* largest reply payload: INFO/GET_HEAD (<= 512), STATS (64 + 4 per class of a
 * classifier), EMBED (the latent) */
#define TOL_APP_STATS_CLASSES ((TOL_HEAD_MODE) == 0 ? (unsigned)(TOL_HEAD_MAX_CLASSES) : 0u)
#define TOL_APP_MAX_REPLY \
    TOL_APP_MAX_(TOL_APP_MAX_(512u, 64u + 4u * TOL_APP_STATS_CLASSES), (unsigned)(TOL_LATENT_DIM) + 16u)
#define TOL_APP_MAX_PAYLOAD TOL_APP_MAX_(TOL_APP_MAX_REQUEST, TOL_APP_MAX_REPLY)

#define TOL_APP_RX_BYTES TOL_PROTO_WIRE_MAX(TOL_APP_MAX_REQUEST)  /* encoded request */
#define TOL_APP_TX_BYTES TOL_PROTO_WIRE_MAX(TOL_APP_MAX_REPLY)    /* encoded reply */
#define TOL_APP_RAW_BYTES (TOL_APP_MAX_REPLY + TOL_PROTO_OVERHEAD)

#define TOL_APP_REPLY_CACHE 8u   /* requests a host may pipeline */
#define TOL_APP_CACHE_WIRE 48u   /* replies up to this size (SAMPLE's is 31) are cached */

typedef struct {
    uint32_t frames_ok;       /* well-formed requests received */
    uint32_t frames_bad;      /* dropped: COBS/CRC/size errors */
    uint32_t duplicates;      /* retransmissions answered from the reply cache */
    uint32_t rx_overflows;    /* frames longer than the receive buffer */
} tol_link_stats_t;

typedef struct {
    /* receive: raw bytes of the frame being collected */
    uint8_t rx[TOL_APP_RX_BYTES];
    size_t rx_len;
    bool rx_overflow;
    /* reply assembly and the cached last reply (for retransmissions) */
    uint8_t scratch[TOL_APP_RAW_BYTES];
    uint8_t tx[TOL_APP_TX_BYTES];
    size_t tx_len;
    /* replies of the last TOL_APP_REPLY_CACHE requests, for retransmissions
     * (a pipelining host has up to that many requests in flight) */
    struct {
        uint16_t seq;
        uint32_t crc;          /* CRC of the request: same seq + same CRC = same request */
        uint16_t wire_len;     /* 0: empty slot; > TOL_APP_CACHE_WIRE: too big, see `tx` */
        uint8_t wire[TOL_APP_CACHE_WIRE];
    } cache[TOL_APP_REPLY_CACHE];
    uint8_t cache_next;
    tol_link_stats_t link;
    uint32_t boot_cycles;     /* cycle counter at tol_app_init */
} tol_app_t;

/*
 * Reset all state and announce the boot with the text line
 * "tinyol boot board=<b> fw=<v> boot=<n> model=<name>\r\n" followed by 0x00.
 */
void tol_app_init(tol_app_t *app);

/* Consume one received byte; may send a reply. */
void tol_app_feed(tol_app_t *app, uint8_t byte);

/*
 * Send a device text line: `text` (must start with "tinyol "), then "\r\n" and
 * the 0x00 delimiter. Clients print such lines; they never parse as frames.
 */
void tol_app_print(const char *text);

#endif /* TOL_APP_H */
