/*
 * fuzz_app.c - fuzz target for the device side of the protocol: COBS/CRC
 * parser, reply cache, dispatcher (tol_server.c) and the model glue behind it
 * (mcu/app/model.c + learner + backbone + persistence on tests/c/flash_sim.c,
 * or mcu/app/nomodel).
 *
 * Built two ways (tests/host/test_fuzz.py, docs/streaming.md):
 *   clang -fsanitize=fuzzer,address,undefined ...        libFuzzer entry point
 *   gcc -fsanitize=address,undefined -DTOL_FUZZ_MAIN ...  a main() that replays
 *       inputs from files: each file holds records [len u32 LE][input bytes]
 *
 * One input = one fresh device with erased flash, so every finding replays alone.
 * Input layout: byte 0 selects the mode.
 *   even: structured - a sequence of requests, each
 *         type u8, seq u16, len u16, ctl u8, then `len` payload bytes (fewer if
 *         the input ends); the harness frames it correctly (COBS + CRC) so the
 *         fuzzer reaches the message handlers, then ctl may damage the frame:
 *         bit 0 flip the bits of one wire byte, bit 1 omit the delimiter,
 *         bit 2 send it twice (a retransmission), bit 3 wrong version.
 *   odd:  raw bytes straight into the receiver.
 * Invariants checked (abort() = a finding besides the sanitizers'):
 *   - every chunk the device sends is a valid reply frame or a "tinyol " line;
 *   - an undamaged request gets exactly one reply carrying its seq (or, when it
 *     is larger than the receive buffer, one seq-0 ERR_OVERFLOW).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tol_server.h"
#include "tol_cobs.h"
#include "tol_crc32.h"
#include "tol_proto.h"

void tol_test_init(void);
int sim_setup(uint32_t bytes, uint32_t page, uint8_t fill, uint32_t max_record); /* flash_sim.c */
void tol_test_feed(const uint8_t *data, size_t n);
size_t tol_test_take(uint8_t *dst, size_t cap);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t fz_out[1 << 16];
static uint8_t fz_wire[TOL_PROTO_WIRE_MAX(4096u)];
static uint8_t fz_scratch[4096u + TOL_PROTO_OVERHEAD];
static uint8_t fz_chunk[1 << 16];

/* Check the device's output; return how many frames carry `seq` (and whether any seq-0 error). */
static size_t fz_check_output(uint16_t seq, size_t *seq0_errors)
{
    size_t n = tol_test_take(fz_out, sizeof(fz_out));
    size_t hits = 0, start = 0;
    *seq0_errors = 0;
    for (size_t i = 0; i < n; i++) {
        if (fz_out[i] != 0u) continue;
        size_t len = i - start;
        if (len > 0u) {
            memcpy(fz_chunk, fz_out + start, len);
            tol_frame_t f;
            if (tol_proto_parse(fz_chunk, len, &f) == TOL_OK) {
                if ((f.type & TOL_PROTO_REPLY_FLAG) == 0u && f.type != (uint8_t)TOL_MSG_ERROR) abort();
                if (f.seq == seq && seq != 0u) hits++;
                if (f.seq == 0u) (*seq0_errors)++;
            } else if (len < 7u || memcmp(fz_out + start, "tinyol ", 7) != 0) {
                abort(); /* the device sent something that is neither a frame nor a text line */
            }
        }
        start = i + 1u;
    }
    if (start != n) abort(); /* every output ends with a delimiter */
    return hits;
}

static void fz_structured(const uint8_t *data, size_t size)
{
    size_t at = 0;
    while (at + 6u <= size) {
        uint8_t type = data[at];
        uint16_t seq = (uint16_t)(data[at + 1] | (data[at + 2] << 8));
        uint16_t len = (uint16_t)(data[at + 3] | (data[at + 4] << 8));
        uint8_t ctl = data[at + 5];
        at += 6u;
        if (len > 4096u) len = (uint16_t)(len % 4097u);
        if (len > size - at) len = (uint16_t)(size - at);
        size_t n = 0;
        if (tol_proto_build(fz_wire, sizeof(fz_wire), fz_scratch, sizeof(fz_scratch), type, seq,
                            data + at, len, &n) != TOL_OK) abort();
        at += len;
        if (ctl & 8u) {
            /* a wrong version: rebuild by hand (header byte 0) with a valid CRC */
            fz_scratch[0] = (uint8_t)(TOL_PROTO_VERSION + 1u + (ctl >> 4));
            uint32_t crc = tol_crc32(TOL_CRC32_INIT, fz_scratch, TOL_PROTO_HEADER_BYTES + len);
            tol_put_u32(fz_scratch + TOL_PROTO_HEADER_BYTES + len, crc);
            size_t m = 0;
            if (tol_cobs_encode(fz_wire, sizeof(fz_wire) - 1u, fz_scratch,
                                TOL_PROTO_OVERHEAD + (size_t)len, &m) != TOL_OK) abort();
            fz_wire[m] = 0u;
            n = m + 1u;
        }
        int damaged = (ctl & 3u) != 0u;
        if (ctl & 1u) fz_wire[(size_t)(ctl >> 2) * 7u % (n - 1u)] ^= (uint8_t)(ctl | 1u);
        size_t send = (ctl & 2u) ? n - 1u : n;
        tol_test_feed(fz_wire, send);
        if (ctl & 4u) tol_test_feed(fz_wire, send);
        size_t seq0 = 0;
        size_t hits = fz_check_output(seq, &seq0);
        if (!damaged && seq != 0u) {
            size_t want = (ctl & 4u) ? 2u : 1u;
            int overflow = n - 1u > TOL_SERVER_RX_BYTES;
            if (overflow ? seq0 != want : hits != want) abort(); /* one reply per request */
        }
        if (ctl & 2u) {  /* finish the frame left open, so the next request starts clean */
            static const uint8_t zero = 0u;
            tol_test_feed(&zero, 1u);
            (void)fz_check_output(0u, &seq0);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (sim_setup(64u * 1024u, 2048u, 0xFFu, 0u) != 0) abort(); /* erased flash: SAVE/LOAD work */
    tol_test_init();
    size_t seq0 = 0;
    (void)fz_check_output(0u, &seq0); /* the boot line */
    if (size == 0u) return 0;
    if (data[0] & 1u) {
        tol_test_feed(data + 1, size - 1u);
        (void)fz_check_output(0u, &seq0);
    } else {
        fz_structured(data + 1, size - 1u);
    }
    return 0;
}

#ifdef TOL_FUZZ_MAIN
/* Replay inputs: each file holds records [len u32 LE][bytes]. Prints the count. */
int main(int argc, char **argv)
{
    static uint8_t buf[1 << 20];
    size_t total = 0;
    for (int a = 1; a < argc; a++) {
        FILE *f = fopen(argv[a], "rb");
        if (f == NULL) {
            perror(argv[a]);
            return 2;
        }
        uint8_t hdr[4];
        while (fread(hdr, 1, 4, f) == 4u) {
            size_t len = (size_t)hdr[0] | ((size_t)hdr[1] << 8) | ((size_t)hdr[2] << 16) |
                         ((size_t)hdr[3] << 24);
            if (len > sizeof(buf) || fread(buf, 1, len, f) != len) {
                fprintf(stderr, "%s: truncated record\n", argv[a]);
                return 2;
            }
            LLVMFuzzerTestOneInput(buf, len);
            total++;
        }
        fclose(f);
    }
    printf("fuzz inputs: %zu\n", total);
    return 0;
}
#endif
