/* tol_server.c - frame collection, de-duplication, dispatch (see tol_server.h). */
#include "tol_server.h"

#include <string.h>

#include "config.h"
#include "tol_crc32.h"
#include "tol_hal.h"
#include "tol_store.h"
#include "tol_version.h"

#ifndef TOL_HAS_MODEL
#define TOL_HAS_MODEL 1
#endif
#ifndef TOL_KERNELS_SIMD
#define TOL_KERNELS_SIMD 0
#endif
#ifndef TOL_TEST_BUILD
#define TOL_TEST_BUILD 0
#endif

/* INFO flag bits (docs/protocol.md) */
#define TOL_INFO_EMULATED   0x01u
#define TOL_INFO_TEST_BUILD 0x02u
#define TOL_INFO_SIMD       0x04u
#define TOL_INFO_HAS_MODEL  0x08u
#define TOL_INFO_STORE_DAMAGED 0x10u /* boot skipped a damaged record newer than the one it restored */
#define TOL_INFO_CPU_FAULT  0x20u /* the core failed its boot self-test (BOARD says which check) */

/* The model's boot self-test, or all zero (nothing checked) without one. */
static tol_cpu_report_t tol_server_cpu(const tol_server_t *app)
{
    tol_cpu_report_t r = {0u, 0u, 0u};
    if (app->model->cpu != NULL) app->model->cpu(&r);
    return r;
}

/* ---- small text helpers (no printf: it costs kilobytes of flash) -------- */

static size_t tol_server_append(char *dst, size_t at, size_t cap, const char *s)
{
    while (*s != '\0' && at + 1u < cap) dst[at++] = *s++;
    dst[at] = '\0';
    return at;
}

static size_t tol_server_append_u32(char *dst, size_t at, size_t cap, uint32_t v)
{
    char digits[11];
    size_t n = 0;
    do {
        digits[n++] = (char)('0' + (char)(v % 10u));
        v /= 10u;
    } while (v != 0u);
    while (n > 0u && at + 1u < cap) dst[at++] = digits[--n];
    dst[at] = '\0';
    return at;
}

void tol_server_print(const char *text)
{
    static const uint8_t tail[3] = {'\r', '\n', 0u};
    tol_hal_uart_write((const uint8_t *)text, strlen(text));
    tol_hal_uart_write(tail, sizeof(tail));
}

/* ---- replies ---------------------------------------------------------------- */

/* Where handlers write reply payloads: inside scratch, after the header (no copy). */
static uint8_t *tol_server_reply_buf(tol_server_t *app)
{
    return app->scratch + TOL_PROTO_HEADER_BYTES;
}

static void tol_server_send(tol_server_t *app, uint8_t type, uint16_t seq, uint16_t length)
{
    size_t n = 0;
    if (tol_proto_build(app->tx, sizeof(app->tx), app->scratch, sizeof(app->scratch), type, seq,
                        tol_server_reply_buf(app), length, &n) != TOL_OK) {
        app->tx_len = 0;
        return;
    }
    app->tx_len = n;
    tol_hal_uart_write(app->tx, n);
}

static void tol_server_send_error(tol_server_t *app, uint16_t seq, tol_status_t status, uint8_t req_type,
                               uint16_t detail)
{
    uint8_t *p = tol_server_reply_buf(app);
    p[0] = (uint8_t)status;
    p[1] = req_type;
    tol_put_u16(p + 2, detail);
    tol_server_send(app, (uint8_t)TOL_MSG_ERROR, seq, 4u);
}

/* " key=name,name" for the checks in mask (nothing when it is 0). */
static size_t tol_server_append_checks(char *dst, size_t at, size_t cap, const char *key, uint32_t mask)
{
    const char *sep = key;
    for (uint32_t bit = 0; mask != 0u && tol_cpu_check_name(bit) != NULL; ++bit) {
        if ((mask >> bit & 1u) != 0u) {
            at = tol_server_append(dst, at, cap, sep);
            at = tol_server_append(dst, at, cap, tol_cpu_check_name(bit));
            sep = ",";
        }
    }
    return at;
}

/* ---- handlers: each fills the reply payload and returns its length via *len - */

static tol_status_t tol_server_on_info(tol_server_t *app, const tol_frame_t *req, uint16_t *len)
{
    TOL_CHECK(req->length == 0u, TOL_ERR_LENGTH);
    const tol_hal_info_t *hi = tol_hal_info();
    uint8_t *p = tol_server_reply_buf(app);
    uint8_t flags = 0u;
    if (hi->emulated) flags |= TOL_INFO_EMULATED;
    if (TOL_TEST_BUILD) flags |= TOL_INFO_TEST_BUILD;
    if (TOL_KERNELS_SIMD) flags |= TOL_INFO_SIMD;
    if (TOL_HAS_MODEL) flags |= TOL_INFO_HAS_MODEL;
    if (app->model->store_status().damaged != 0u) flags |= TOL_INFO_STORE_DAMAGED;
    if (tol_server_cpu(app).faults != 0u) flags |= TOL_INFO_CPU_FAULT;
    p[0] = (uint8_t)TOL_PROTO_VERSION;
    p[1] = flags;
    tol_put_u16(p + 2, (uint16_t)TOL_SERVER_MAX_REQUEST);
    tol_put_u32(p + 4, (uint32_t)TOL_FW_VERSION_NUM);
    tol_put_u32(p + 8, (uint32_t)TOL_MODEL_HASH);
    tol_put_u32(p + 12, hi->boot_count);
    tol_put_u32(p + 16, hi->cpu_hz);
    tol_put_u32(p + 20, hi->ram_used);
    tol_put_u32(p + 24, hi->ram_total);
    tol_put_u32(p + 28, hi->ram2_used);
    tol_put_u32(p + 32, hi->ram2_total);
    tol_put_u32(p + 36, hi->flash_used);
    tol_put_u32(p + 40, hi->flash_total);
    tol_put_u16(p + 44, (uint16_t)TOL_INPUT_SIZE);
    tol_put_u16(p + 46, (uint16_t)TOL_LATENT_DIM);
    tol_put_u16(p + 48, (uint16_t)TOL_HEAD_MAX_CLASSES);
    p[50] = (uint8_t)TOL_HEAD_MODE;
    p[51] = (uint8_t)TOL_REPLAY_BITS;
    size_t at = 52u;
    const char *strings[2] = {hi->board, TOL_MODEL_NAME};
    for (size_t i = 0; i < 2u; i++) {
        size_t n = strlen(strings[i]);
        if (n > 32u) n = 32u;
        p[at++] = (uint8_t)n;
        memcpy(p + at, strings[i], n);
        at += n;
    }
    tol_store_status_t store = app->model->store_status(); /* persistence at boot (docs/persistence.md) */
    p[at] = store.state;
    tol_put_u32(p + at + 1u, store.seq);
    at += 5u;
    if (app->model->info_stage != NULL) { /* adaptive stage block (docs/adaptive.md) */
        at += app->model->info_stage(p + at, (uint16_t)(TOL_SERVER_MAX_REPLY - at));
    }
    *len = (uint16_t)at;
    return TOL_OK;
}

static tol_status_t tol_server_on_stats(tol_server_t *app, const tol_frame_t *req, uint16_t *len)
{
    TOL_CHECK(req->length <= 1u, TOL_ERR_LENGTH);
    TOL_CHECK(req->length == 0u || req->payload[0] == (uint8_t)TOL_PROTO_STATS_SHORT, TOL_ERR_ARG);
    uint8_t *p = tol_server_reply_buf(app);
    tol_put_u32(p + 0, app->link.frames_ok);
    tol_put_u32(p + 4, app->link.frames_bad);
    tol_put_u32(p + 8, app->link.duplicates);
    tol_put_u32(p + 12, app->link.rx_overflows);
    tol_put_u32(p + 16, tol_hal_uart_errors());
    *len = (uint16_t)(20u + app->model->stats(p + 20, (uint16_t)(TOL_SERVER_MAX_REPLY - 20u)));
    if (req->length == 1u && *len > TOL_PROTO_STATS_SHORT_BYTES) {
        *len = (uint16_t)TOL_PROTO_STATS_SHORT_BYTES;  /* the short form: the counters only */
    }
    return TOL_OK;
}

/* BOARD: what `tinyol doctor` checks (docs/protocol.md). The cycle counter and its
 * epoch let the host measure the core clock against its own; sysclk/baud are read back
 * from the clock and UART registers; the store's geometry is tol_flash_region()'s. */
static tol_status_t tol_server_on_board(tol_server_t *app, const tol_frame_t *req, uint16_t *len)
{
    TOL_CHECK(req->length == 0u, TOL_ERR_LENGTH);
    const tol_hal_info_t *hi = tol_hal_info();
    uint8_t *p = tol_server_reply_buf(app);
    tol_flash_region_t r = {0u, 0u, 0u};
    tol_status_t flash = tol_flash_region(&r);
    tol_put_u32(p + 0, tol_hal_cycles());
    tol_put_u32(p + 4, tol_hal_cycles_epoch());
    tol_put_u32(p + 8, hi->cpu_hz);
    tol_put_u32(p + 12, hi->sysclk_hz);
    tol_put_u32(p + 16, hi->uart_baud);
    tol_put_u32(p + 20, r.page_bytes);
    tol_put_u32(p + 24, r.start);
    tol_put_u32(p + 28, r.bytes);
    p[32] = (uint8_t)flash;
    p[33] = 0u;
    const tol_cpu_report_t cpu = tol_server_cpu(app);
    tol_put_u32(p + 34, cpu.checked);
    tol_put_u32(p + 38, cpu.faults);
    tol_put_u32(p + 42, cpu.fallbacks);
    *len = 46u;
    return TOL_OK;
}

/* EXIT with this code provokes a fault instead (test builds): checks the fault report. */
#define TOL_EXIT_CODE_FAULT 0xFEu

/* Branch to an address without the Thumb bit: an INVSTATE UsageFault on
 * Cortex-M (a crash on native). Reached only from EXIT 0xFE in test builds. */
static void tol_server_fault(void)
{
    volatile uintptr_t target = (uintptr_t)0x20000000u;
    void (*jump)(void) = (void (*)(void))target;
    jump();
}

static tol_status_t tol_server_on_exit(tol_server_t *app, const tol_frame_t *req, uint16_t *len)
{
    (void)app;
    TOL_CHECK(TOL_TEST_BUILD, TOL_ERR_UNSUPPORTED);
    TOL_CHECK(req->length == 1u, TOL_ERR_LENGTH);
    *len = 0u;
    return TOL_OK; /* the exit itself happens after the reply is sent */
}

/*
 * BENCH: run one measurement region between two cycle-counter reads.
 * payload: region u8, param u16. reply: cycles u32, valid u8 (0 when a UART
 * receive disturbed the counter, see tol_hal.h).
 * Region 0 measures nothing (the overhead of the measurement itself);
 * region 1 runs CRC-32 over `param` bytes (a fixed, known workload).
 */
static uint8_t tol_server_bench_buf[1024];

static tol_status_t tol_server_on_bench(tol_server_t *app, const tol_frame_t *req, uint16_t *len)
{
    TOL_CHECK(req->length == 3u, TOL_ERR_LENGTH);
    uint8_t region = req->payload[0];
    uint16_t param = tol_get_u16(req->payload + 1);
    uint8_t *p = tol_server_reply_buf(app);
    if (region >= 2u) {
        uint32_t cycles = 0;
        TOL_TRY(app->model->bench(region, &cycles));
        tol_put_u32(p, cycles);
        p[4] = (uint8_t)(cycles != 0xFFFFFFFFu);
        tol_put_u32(p + 5, 0u);
        *len = 9u;
        return TOL_OK;
    }
    TOL_CHECK(param <= sizeof(tol_server_bench_buf), TOL_ERR_RANGE);
    for (size_t i = 0; i < param; i++) tol_server_bench_buf[i] = (uint8_t)(i * 7u + 1u);
    uint32_t epoch = tol_hal_cycles_epoch();
    uint32_t sink = 0;
    uint32_t t0 = tol_hal_cycles();
    if (region == 1u) sink = tol_crc32(TOL_CRC32_INIT, tol_server_bench_buf, param);
    uint32_t t1 = tol_hal_cycles();
    tol_put_u32(p, t1 - t0);
    p[4] = (uint8_t)(epoch == tol_hal_cycles_epoch());
    tol_put_u32(p + 5, sink);
    *len = 9u;
    return TOL_OK;
}

static tol_status_t tol_server_dispatch(tol_server_t *app, const tol_frame_t *req, uint16_t *len)
{
    switch ((tol_msg_t)req->type) {
    case TOL_MSG_INFO:
        return tol_server_on_info(app, req, len);
    case TOL_MSG_STATS:
        return tol_server_on_stats(app, req, len);
    case TOL_MSG_EXIT:
        return tol_server_on_exit(app, req, len);
    case TOL_MSG_BENCH:
        return tol_server_on_bench(app, req, len);
    case TOL_MSG_BOARD:
        return tol_server_on_board(app, req, len);
    case TOL_MSG_SAMPLE:
    case TOL_MSG_PREDICT:
    case TOL_MSG_EMBED:
    case TOL_MSG_SET:
    case TOL_MSG_GET:
    case TOL_MSG_RESET:
    case TOL_MSG_GET_HEAD:
    case TOL_MSG_SET_HEAD:
    case TOL_MSG_REPLAY_ADD:
    case TOL_MSG_SAVE:
    case TOL_MSG_LOAD:
    case TOL_MSG_GET_STAGE:
    case TOL_MSG_SET_STAGE:
        return app->model->handle(req->type, req->payload, req->length, tol_server_reply_buf(app),
                                (uint16_t)TOL_SERVER_MAX_REPLY, len);
    default:
        return TOL_ERR_TYPE;
    }
}

/* Error for a frame that never became a request: built on the stack so the
 * cached reply of the last real request (for retransmissions) survives. */
static void tol_server_send_link_error(uint16_t seq, tol_status_t status, uint8_t req_type)
{
    uint8_t raw[TOL_PROTO_OVERHEAD + 4u];
    uint8_t wire[TOL_PROTO_WIRE_MAX(4u)];
    uint8_t payload[4] = {(uint8_t)status, req_type, 0u, 0u};
    size_t n = 0;
    if (tol_proto_build(wire, sizeof(wire), raw, sizeof(raw), (uint8_t)TOL_MSG_ERROR, seq, payload,
                        4u, &n) == TOL_OK) {
        tol_hal_uart_write(wire, n);
    }
}

/* ---- order ----------------------------------------------------------------------
 * A pipelining host has up to TOL_SERVER_REPLY_CACHE - 1 requests in flight, with
 * consecutive seqs. When one is lost on the way, the ones sent after it arrive first.
 * A SAMPLE learns, so it must run in the order sent: a SAMPLE runs only when each of the
 * TOL_SERVER_REPLY_CACHE - 1 seqs before it was handled (executed, or answered with an error
 * under its seq); otherwise it is refused with ERR_ORDER (not executed, not cached) and the
 * host sends it again after the missing one (go-back-N, docs/protocol.md). Checking only the
 * newest seq handled was not enough (issue 34: learned 1,4,2,3): an INFO check that ran
 * inside the gap moved it past the missing samples, and their late resends then ran in the
 * order they arrived.
 * The seqs handled are kept per range: a seq far from the current range's newest (a new host
 * session starts at a random seq) opens a new one, in which the seqs before it count as
 * handled; the range before it is kept, so that a resumed session's resends of the earlier
 * session's frames (their own seqs) are checked against what that session left. */
#define TOL_SERVER_SEQ_RING 65535u  /* seqs run 1..65535; 0 is reserved */
#define TOL_SERVER_SEQ_LATE 32u     /* a seq this close behind a range's newest belongs to it */
#define TOL_SERVER_SEQ_AHEAD 8u     /* ... and this close ahead (a host has <= 8 in flight) */

/* How far `to` is ahead of `from` on the seq ring (0..65534). */
static uint32_t tol_server_seq_dist(uint16_t from, uint16_t to)
{
    return ((uint32_t)to + TOL_SERVER_SEQ_RING - (uint32_t)from) % TOL_SERVER_SEQ_RING;
}

static bool tol_server_seq_near(uint16_t newest, uint16_t seq)
{
    return tol_server_seq_dist(newest, seq) <= TOL_SERVER_SEQ_AHEAD ||
           tol_server_seq_dist(seq, newest) < TOL_SERVER_SEQ_LATE;
}

/* The range `seq` belongs to, made current: the current one, the one before (swapped in), or
 * a new one (the current becomes the one before). */
static void tol_server_seq_range(tol_server_t *app, uint16_t seq)
{
    if (app->seqs[0].used != 0u && tol_server_seq_near(app->seqs[0].newest, seq)) return;
    const bool back = app->seqs[1].used != 0u && tol_server_seq_near(app->seqs[1].newest, seq);
    const tol_server_seqs_t cur = app->seqs[0];
    if (back) {
        app->seqs[0] = app->seqs[1];
    } else {
        /* a new range: as if every seq before this one had been handled */
        app->seqs[0].newest = (uint16_t)((seq + TOL_SERVER_SEQ_RING - 2u) % TOL_SERVER_SEQ_RING + 1u);
        app->seqs[0].handled = 0xFFFFFFFFu;
        app->seqs[0].used = 1u;
    }
    app->seqs[1] = cur;
}

static bool tol_server_seq_handled(const tol_server_t *app, uint16_t seq)
{
    const uint32_t behind = tol_server_seq_dist(seq, app->seqs[0].newest);
    if (behind > TOL_SERVER_SEQ_RING - 1u - TOL_SERVER_SEQ_AHEAD) return false; /* ahead of the newest */
    return behind >= 32u || ((app->seqs[0].handled >> behind) & 1u) != 0u;
}

static bool tol_server_out_of_order(tol_server_t *app, const tol_frame_t *req)
{
    if (req->type != (uint8_t)TOL_MSG_SAMPLE) return false;
    tol_server_seq_range(app, req->seq);
    for (uint32_t k = 1u; k < TOL_SERVER_REPLY_CACHE; k++) {
        const uint16_t before = (uint16_t)(((uint32_t)req->seq + TOL_SERVER_SEQ_RING - 1u - k) % TOL_SERVER_SEQ_RING + 1u);
        if (!tol_server_seq_handled(app, before)) return true;
    }
    return false;
}

static void tol_server_note_seq(tol_server_t *app, uint16_t seq)
{
    if (seq == 0u) return;  /* reserved: never a request's */
    tol_server_seq_range(app, seq);
    const uint32_t ahead = tol_server_seq_dist(app->seqs[0].newest, seq);
    if (ahead >= 1u && ahead <= TOL_SERVER_SEQ_AHEAD) {
        app->seqs[0].handled = (app->seqs[0].handled << ahead) | 1u;
        app->seqs[0].newest = seq;
    } else {
        const uint32_t behind = tol_server_seq_dist(seq, app->seqs[0].newest);
        if (behind < 32u) app->seqs[0].handled |= 1u << behind;
    }
}

static void tol_server_on_frame(tol_server_t *app, uint8_t *raw, size_t n)
{
    tol_frame_t req;
    tol_status_t st = tol_proto_parse(raw, n, &req);
    if (st == TOL_ERR_FRAME || st == TOL_ERR_CRC || st == TOL_ERR_ARG) {
        /* seq unknown or untrustworthy: answer with seq 0 so the host learns of it */
        app->link.frames_bad++;
        tol_server_send_link_error(0u, st, 0u);
        return;
    }
    if (st != TOL_OK) {
        app->link.frames_bad++;
        tol_server_note_seq(app, req.seq);  /* answered under its seq: not a gap */
        tol_server_send_link_error(req.seq, st, req.type);
        return;
    }
    if (req.seq == 0u) {
        /* seq 0 is reserved for link errors (docs/protocol.md): never executed */
        app->link.frames_bad++;
        tol_server_send_link_error(0u, TOL_ERR_FRAME, req.type);
        return;
    }
    if ((uint32_t)req.length > (uint32_t)TOL_SERVER_MAX_REQUEST) {
        /* the receive buffer holds a little more than INFO.max_payload (COBS slack):
         * the advertised maximum is the limit */
        app->link.frames_bad++;
        tol_server_note_seq(app, req.seq);
        tol_server_send_link_error(req.seq, TOL_ERR_LENGTH, req.type);
        return;
    }
    for (size_t i = 0; i < TOL_SERVER_REPLY_CACHE; i++) {
        const uint8_t k = (uint8_t)((app->cache_next + TOL_SERVER_REPLY_CACHE - 1u - i) % TOL_SERVER_REPLY_CACHE);
        if (app->cache[k].wire_len == 0u || app->cache[k].seq != req.seq || app->cache[k].crc != req.crc) {
            continue;
        }
        app->link.duplicates++; /* retransmission: the same reply, no second execution */
        if (app->cache[k].wire_len <= TOL_SERVER_CACHE_WIRE) {
            tol_hal_uart_write(app->cache[k].wire, app->cache[k].wire_len);
        } else if (i == 0u) {
            tol_hal_uart_write(app->tx, app->tx_len); /* a large reply: only the latest is kept */
        } else {
            tol_server_send_link_error(req.seq, TOL_ERR_FULL, req.type); /* executed; reply no longer kept */
        }
        return;
    }
    if (tol_server_out_of_order(app, &req)) {
        /* an earlier request is missing: not executed, not cached (the resend runs it) */
        tol_server_send_link_error(req.seq, TOL_ERR_ORDER, req.type);
        return;
    }
    tol_server_note_seq(app, req.seq);
    app->link.frames_ok++;
    uint16_t len = 0;
    st = tol_server_dispatch(app, &req, &len);
    if (st == TOL_OK) {
        tol_server_send(app, (uint8_t)(req.type | TOL_PROTO_REPLY_FLAG), req.seq, len);
    } else {
        tol_server_send_error(app, req.seq, st, req.type, 0u);
    }
    uint8_t k = app->cache_next;
    app->cache_next = (uint8_t)((k + 1u) % TOL_SERVER_REPLY_CACHE);
    app->cache[k].seq = req.seq;
    app->cache[k].crc = req.crc;
    app->cache[k].wire_len = (uint16_t)(app->tx_len > 0xFFFFu ? 0xFFFFu : app->tx_len);
    if (app->tx_len <= TOL_SERVER_CACHE_WIRE) memcpy(app->cache[k].wire, app->tx, app->tx_len);
    if (st == TOL_OK && req.type == (uint8_t)TOL_MSG_EXIT) {
        tol_hal_uart_flush();
        if (req.payload[0] == TOL_EXIT_CODE_FAULT) tol_server_fault();
        tol_hal_exit((int)req.payload[0]);
    }
}

/* ---- public API ---------------------------------------------------------------- */

void tol_server_init(tol_server_t *app, const tol_model_if_t *model_if)
{
    memset(app, 0, sizeof(*app));
    app->model = model_if;
    app->boot_cycles = tol_hal_cycles();
    tol_status_t model = app->model->init();
    const tol_hal_info_t *hi = tol_hal_info();
    char line[224]; /* with damaged=, cpu_faults= and cpu_fallback= naming every check: 214 */
    size_t at = 0;
    at = tol_server_append(line, at, sizeof(line), "tinyol boot board=");
    at = tol_server_append(line, at, sizeof(line), hi->board);
    at = tol_server_append(line, at, sizeof(line), " fw=" TOL_FW_VERSION_STR " boot=");
    at = tol_server_append_u32(line, at, sizeof(line), hi->boot_count);
    at = tol_server_append(line, at, sizeof(line), " model=" TOL_MODEL_NAME);
    at = tol_server_append(line, at, sizeof(line), " store=");
    tol_store_status_t store = app->model->store_status();
    at = tol_server_append(line, at, sizeof(line), tol_store_state_name(store.state));
    if (store.damaged != 0u) { /* an older state than the last save: say it */
        at = tol_server_append(line, at, sizeof(line), " damaged=");
        at = tol_server_append_u32(line, at, sizeof(line), store.damaged);
    }
    if (model != TOL_OK) {
        at = tol_server_append(line, at, sizeof(line), " model_error=");
        at = tol_server_append(line, at, sizeof(line), tol_status_name(model));
    }
    const tol_cpu_report_t cpu = tol_server_cpu(app);
    at = tol_server_append_checks(line, at, sizeof(line), " cpu_faults=", cpu.faults);
    at = tol_server_append_checks(line, at, sizeof(line), " cpu_fallback=", cpu.fallbacks);
    (void)at;
    tol_server_print(line);
}

void tol_server_feed(tol_server_t *app, uint8_t byte)
{
    if (byte == 0u) {
        if (app->rx_overflow) {
            app->link.rx_overflows++;
            tol_server_send_link_error(0u, TOL_ERR_OVERFLOW, 0u);
        } else if (app->rx_len > 0u) {
            tol_server_on_frame(app, app->rx, app->rx_len);
        }
        app->rx_len = 0;
        app->rx_overflow = false;
        return;
    }
    if (app->rx_len < sizeof(app->rx)) {
        app->rx[app->rx_len++] = byte;
    } else {
        app->rx_overflow = true;
    }
}

bool tol_server_idle_work(tol_server_t *app)
{
    if (app->rx_len > 0u || app->rx_overflow || app->model->idle == NULL) return false;
    return app->model->idle();
}
