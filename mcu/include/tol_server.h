/*
 * tol_server.h - the device side of the protocol: byte stream in, replies out.
 *
 * The application feeds every received byte to tol_server_feed(); complete frames
 * are parsed, de-duplicated (a retransmitted request gets the cached reply and
 * is never executed twice) and dispatched. Replies go out through
 * tol_hal_uart_write(). All memory is inside tol_server_t; the caller (mcu/app/main.c)
 * owns one static instance.
 *
 * The core never names the application: the model messages (SAMPLE, PREDICT,
 * SET, SAVE, ...) go to the tol_model_if_t the application hands to
 * tol_server_init() (mcu/app/model.c's tol_model_glue, or mcu/app/nomodel).
 */
#ifndef TOL_SERVER_H
#define TOL_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tol_cpu.h"
#include "tol_proto.h"
#include "tol_status.h"
#include "tol_store.h"

#include "config.h"   /* the model's sizes (models/<name>/config.h or mcu/app/nomodel) */

#define TOL_SERVER_MAX_(a, b) ((a) > (b) ? (a) : (b))
/* float32 inputs are accepted while they fit in 8 KB; larger models take int8 only */
#define TOL_SERVER_FLOAT_INPUT (4u * (TOL_INPUT_SIZE) + 3u <= 8192u)
/* largest request payload: SAMPLE = label u16 + encoding u8 + input */
#define TOL_SERVER_MAX_REQUEST                                                          \
    TOL_SERVER_MAX_(256u, 3u + (TOL_SERVER_FLOAT_INPUT ? 4u : 1u) * (unsigned)(TOL_INPUT_SIZE))
/* largest reply payload: INFO/GET_HEAD (<= 512), STATS (120 + 6 per class of a classifier:
 * class counts, the persistence and record blocks, replay slots per class), EMBED (the latent) */
#define TOL_SERVER_STATS_CLASSES ((TOL_HEAD_MODE) == 0 ? (unsigned)(TOL_HEAD_MAX_CLASSES) : 0u)
#define TOL_SERVER_MAX_REPLY \
    TOL_SERVER_MAX_(TOL_SERVER_MAX_(512u, 128u + 6u * TOL_SERVER_STATS_CLASSES), (unsigned)(TOL_LATENT_DIM) + 16u)
#define TOL_SERVER_MAX_PAYLOAD TOL_SERVER_MAX_(TOL_SERVER_MAX_REQUEST, TOL_SERVER_MAX_REPLY)

#define TOL_SERVER_RX_BYTES TOL_PROTO_WIRE_MAX(TOL_SERVER_MAX_REQUEST)  /* encoded request */
#define TOL_SERVER_TX_BYTES TOL_PROTO_WIRE_MAX(TOL_SERVER_MAX_REPLY)    /* encoded reply */
#define TOL_SERVER_RAW_BYTES (TOL_SERVER_MAX_REPLY + TOL_PROTO_OVERHEAD)

#define TOL_SERVER_REPLY_CACHE 8u   /* requests a host may pipeline */
#define TOL_SERVER_CACHE_WIRE 48u   /* replies up to this size (SAMPLE's is 31) are cached */

/*
 * The model behind the protocol, as a table of callbacks (all required; the
 * table and what it points to are owned by the application and must outlive
 * the tol_server_t).
 */
typedef struct {
    /* Set up the backbone and learner (once, from tol_server_init). */
    tol_status_t (*init)(void);
    /* Handle a model message (SAMPLE, PREDICT, EMBED, SET, GET, RESET, GET_HEAD, SET_HEAD,
     * REPLAY_ADD, SAVE, LOAD). req[0..req_len): request payload (read only);
     * reply[0..reply_cap): out; *reply_len: bytes written. Layouts: docs/protocol.md. */
    tol_status_t (*handle)(uint8_t type, const uint8_t *req, uint16_t req_len, uint8_t *reply,
                           uint16_t reply_cap, uint16_t *reply_len);
    /* Append the learner's statistics to a STATS reply; returns bytes written (<= cap). */
    uint16_t (*stats)(uint8_t *out, uint16_t cap);
    /* BENCH regions >= 2 (2 backbone, 3 head predict, 4 training step); *cycles out. */
    tol_status_t (*bench)(uint8_t region, uint32_t *cycles);
    /* Persistence at boot, for INFO and the boot line (docs/persistence.md). */
    tol_store_status_t (*store_status)(void);
    /* INFO's adaptive-stage block (layers:u8 params:u32 bytes:u32 hash:u32; docs/adaptive.md);
     * returns bytes written. NULL for a model without an adaptive stage. */
    uint16_t (*info_stage)(uint8_t *out, uint16_t cap);
    /* Idle work: called by tol_server_idle_work between frames while no byte waits; does one
     * bounded unit (a rehearsal step) and returns true, or false when there is none left.
     * NULL: never any. */
    bool (*idle)(void);
    /* The boot self-test of the core (tol_cpu.h) the model's init ran, for INFO, BOARD and
     * the boot line; r: out. NULL: none (a firmware without a model runs no kernel). */
    void (*cpu)(tol_cpu_report_t *r);
} tol_model_if_t;

typedef struct {
    uint32_t frames_ok;       /* well-formed requests received */
    uint32_t frames_bad;      /* dropped: COBS/CRC/size errors */
    uint32_t duplicates;      /* retransmissions answered from the reply cache */
    uint32_t rx_overflows;    /* frames longer than the receive buffer */
} tol_link_stats_t;

/* Seqs a host session used lately (tol_server.c, "Order"). */
typedef struct {
    uint32_t handled;  /* bit i: seq newest - i was handled (i < 32); set for seqs before the
                          range began */
    uint16_t newest;   /* the newest seq handled in the range */
    uint16_t used;     /* 0: empty */
} tol_server_seqs_t;

typedef struct {
    /* receive: raw bytes of the frame being collected */
    uint8_t rx[TOL_SERVER_RX_BYTES];
    size_t rx_len;
    bool rx_overflow;
    /* reply assembly and the cached last reply (for retransmissions) */
    uint8_t scratch[TOL_SERVER_RAW_BYTES];
    uint8_t tx[TOL_SERVER_TX_BYTES];
    size_t tx_len;
    /* replies of the last TOL_SERVER_REPLY_CACHE requests, for retransmissions
     * (a pipelining host has up to that many requests in flight) */
    struct {
        uint16_t seq;
        uint32_t crc;          /* CRC of the request: same seq + same CRC = same request */
        uint16_t wire_len;     /* 0: empty slot; > TOL_SERVER_CACHE_WIRE: too big, see `tx` */
        uint8_t wire[TOL_SERVER_CACHE_WIRE];
    } cache[TOL_SERVER_REPLY_CACHE];
    uint8_t cache_next;
    /* the seqs handled lately, for the order of learning (tol_server.c, "Order"): [0] the range
     * of the current host session, [1] the one before the last jump (a resumed session's
     * resends of an earlier one's frames) */
    tol_server_seqs_t seqs[2];
    tol_link_stats_t link;
    uint32_t boot_cycles;     /* cycle counter at tol_server_init */
    const tol_model_if_t *model; /* the application's model (tol_server_init) */
} tol_server_t;

/*
 * Reset all state, initialise `model` (model->init) and announce the boot with
 * the text line "tinyol boot board=<b> fw=<v> boot=<n> model=<name>\r\n"
 * followed by 0x00. `model` (in, borrowed for the app's lifetime) is the model
 * behind the protocol.
 */
void tol_server_init(tol_server_t *app, const tol_model_if_t *model);

/* Consume one received byte; may send a reply. */
void tol_server_feed(tol_server_t *app, uint8_t byte);

/* The main loop calls this when no received byte waits: between frames (none part way
 * received) it runs one unit of the model's idle work (tol_model_if_t.idle). Returns true
 * if it did some (poll the UART again before sleeping), false when there is nothing to do. */
bool tol_server_idle_work(tol_server_t *app);

/*
 * Send a device text line: `text` (must start with "tinyol "), then "\r\n" and
 * the 0x00 delimiter. Clients print such lines; they never parse as frames.
 */
void tol_server_print(const char *text);

#endif /* TOL_SERVER_H */
