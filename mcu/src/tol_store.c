/* tol_store.c - power-safe record store over tol_flash.h; see tol_store.h. */
#include "tol_store.h"

#include <string.h>

#include "tol_crc32.h"

#define TOL_STORE_CHUNK 64u /* bytes read per step when checking a payload CRC */

static uint32_t tol_store_u32_(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static void tol_store_put_u32_(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t tol_store_slot_addr_(const tol_store_t *s, uint8_t slot)
{
    return s->region.start + (uint32_t)slot * s->slot_bytes;
}

static uint32_t tol_store_round8_(uint32_t n)
{
    return (n + (TOL_FLASH_DWORD - 1u)) & ~(TOL_FLASH_DWORD - 1u);
}

/* CRC-32 of n bytes of flash at addr (out: *crc); TOL_ERR_FLASH on an ECC error. */
static tol_status_t tol_store_flash_crc_(uint32_t addr, uint32_t n, uint32_t *crc)
{
    uint8_t buf[TOL_STORE_CHUNK];
    *crc = TOL_CRC32_INIT;
    while (n > 0u) {
        uint32_t k = n < TOL_STORE_CHUNK ? n : TOL_STORE_CHUNK;
        TOL_TRY(tol_flash_read(addr, buf, k));
        *crc = tol_crc32(*crc, buf, k);
        addr += k;
        n -= k;
    }
    return TOL_OK;
}

/* What a slot holds: a valid record, nothing (erased, or not a record of this format and
 * layout), or a damaged record (its commit double-word carries the magic or fails its ECC
 * check, but the record does not check: a save cut at its commit, or flash that changed). */
typedef enum { TOL_SLOT_NONE = 0, TOL_SLOT_VALID = 1, TOL_SLOT_DAMAGED = 2 } tol_slot_kind_t;

/* Check the record in `slot`; if valid fill *r (and *erases). A damaged record whose header
 * checks leaves its model hash and seq in *r (r->payload_len = 1), else r->payload_len = 0. A
 * double-word that fails its ECC check (torn by a power cut) makes the slot damaged. */
static tol_slot_kind_t tol_store_scan_slot_(const tol_store_t *s, uint8_t slot, tol_store_record_t *r,
                                            uint32_t *erases)
{
    uint8_t h[TOL_STORE_HEADER_BYTES];
    uint32_t base = tol_store_slot_addr_(s, slot);
    r->payload_len = 0u;
    /* the commit double-word first: an unfinished record stops here */
    if (tol_flash_read(base, h, TOL_FLASH_DWORD) != TOL_OK) return TOL_SLOT_DAMAGED;
    if (tol_store_u32_(h) != TOL_STORE_MAGIC) return TOL_SLOT_NONE;
    if (tol_flash_read(base + TOL_FLASH_DWORD, h + TOL_FLASH_DWORD, TOL_STORE_HEADER_BYTES - TOL_FLASH_DWORD) !=
        TOL_OK) {
        return TOL_SLOT_DAMAGED;
    }
    if (tol_crc32(TOL_CRC32_INIT, h + 8, TOL_STORE_HEADER_BYTES - 8u) != tol_store_u32_(h + 4)) {
        return TOL_SLOT_DAMAGED;
    }
    if ((uint32_t)h[8] + ((uint32_t)h[9] << 8) != TOL_STORE_FORMAT) return TOL_SLOT_NONE;
    if (tol_store_u32_(h + 32) != s->slot_bytes) return TOL_SLOT_NONE; /* written with another slot layout */
    r->model_hash = tol_store_u32_(h + 12);
    r->seq = tol_store_u32_(h + 16);
    r->payload_len = 1u; /* the header is known */
    uint32_t len = tol_store_u32_(h + 20);
    if (len > s->slot_bytes - TOL_STORE_HEADER_BYTES) return TOL_SLOT_DAMAGED;
    uint32_t crc;
    if (tol_store_flash_crc_(base + TOL_STORE_HEADER_BYTES, len, &crc) != TOL_OK) return TOL_SLOT_DAMAGED;
    if (crc != tol_store_u32_(h + 24)) return TOL_SLOT_DAMAGED;
    r->slot = slot;
    r->payload_len = len;
    r->payload_addr = base + TOL_STORE_HEADER_BYTES;
    *erases = tol_store_u32_(h + 28);
    return TOL_SLOT_VALID;
}

tol_status_t tol_store_init(tol_store_t *s, uint32_t model_hash, uint32_t max_record)
{
    memset(s, 0, sizeof(*s));
    s->model_hash = model_hash;
    s->newest_any = -1;
    s->flash = tol_flash_region(&s->region);
    if (s->flash != TOL_OK) return s->flash;
    const tol_flash_region_t *g = &s->region;
    const uint32_t page = g->page_bytes;
    if (page == 0u || (page % TOL_FLASH_DWORD) != 0u || g->bytes / 2u < page) {
        s->flash = TOL_ERR_UNSUPPORTED;
        return s->flash;
    }
    /* slots of whole pages, as many as fit (at least two; a record too big is refused by begin) */
    uint32_t slot = (max_record + page - 1u) / page * page;
    if (slot == 0u || slot > g->bytes / 2u) slot = g->bytes / 2u / page * page;
    uint32_t n = g->bytes / slot;
    s->slot_bytes = slot;
    s->n_slots = (uint8_t)(n > TOL_STORE_MAX_SLOTS ? TOL_STORE_MAX_SLOTS : n);
    /* damaged records: a header-less one may be of any age; one whose header checks only
     * counts if it is of this model and newer than the record boot restores */
    uint8_t damaged_unknown = 0u;
    uint32_t damaged_seq[TOL_STORE_MAX_SLOTS];
    uint8_t n_damaged = 0u;
    for (uint8_t i = 0; i < s->n_slots; i++) {
        tol_store_record_t r;
        uint32_t erases = 0u;
        tol_slot_kind_t kind = tol_store_scan_slot_(s, i, &r, &erases);
        if (kind == TOL_SLOT_DAMAGED) {
            if (r.payload_len == 0u) {
                damaged_unknown++;
            } else if (r.model_hash == model_hash) {
                damaged_seq[n_damaged++] = r.seq;
            }
        }
        if (kind != TOL_SLOT_VALID) continue;
        if (s->newest_any < 0 || r.seq > s->seq_max) {
            s->newest_any = i;
            s->seq_max = r.seq;
            s->erases = erases; /* the newest record knows the latest count */
        }
        if (r.model_hash != model_hash) {
            s->foreign = true;
        } else if (!s->have_newest || r.seq > s->newest.seq) {
            s->newest = r;
            s->have_newest = true;
        }
    }
    s->damaged = damaged_unknown;
    for (uint8_t i = 0; i < n_damaged; i++) {
        if (!s->have_newest || damaged_seq[i] > s->newest.seq) s->damaged++;
    }
    return TOL_OK;
}

tol_status_t tol_store_newest(const tol_store_t *s, tol_store_record_t *rec)
{
    TOL_TRY(s->flash);
    if (s->have_newest) {
        *rec = s->newest;
        return TOL_OK;
    }
    return s->foreign ? TOL_ERR_MODEL : TOL_ERR_NO_RECORD;
}

tol_status_t tol_store_read(const tol_store_t *s, const tol_store_record_t *rec, uint32_t offset,
                            uint8_t *dst, uint32_t n)
{
    TOL_TRY(s->flash);
    TOL_CHECK(offset <= rec->payload_len && n <= rec->payload_len - offset, TOL_ERR_RANGE);
    return tol_flash_read(rec->payload_addr + offset, dst, n);
}

uint32_t tol_store_capacity(const tol_store_t *s)
{
    return s->flash == TOL_OK ? s->slot_bytes - TOL_STORE_HEADER_BYTES : 0u;
}

tol_status_t tol_store_begin(tol_store_t *s, uint32_t payload_len)
{
    TOL_TRY(s->flash);
    s->writing = false;
    TOL_CHECK(payload_len <= tol_store_capacity(s), TOL_ERR_OVERFLOW);
    /* round-robin: the slot after the newest record (of this model, else of any model) */
    int after = s->have_newest ? (int)s->newest.slot : (int)s->newest_any;
    s->target = (uint8_t)(after < 0 ? 0 : (after + 1) % s->n_slots);
    uint32_t base = tol_store_slot_addr_(s, s->target);
    uint32_t need = TOL_STORE_HEADER_BYTES + tol_store_round8_(payload_len);
    uint32_t page = s->region.page_bytes;
    /* every page the record needs is erased now, whatever it reads: a double-word
     * programmed with 0xFF reads erased but cannot be programmed again */
    for (uint32_t off = 0; off < need; off += page) {
        TOL_TRY(tol_flash_erase_page(base + off));
        s->erases_boot++;
        s->erases++;
    }
    s->len = payload_len;
    s->at = 0u;
    s->crc = TOL_CRC32_INIT;
    s->writing = true;
    return TOL_OK;
}

static tol_status_t tol_store_program_(tol_store_t *s, uint32_t payload_off, const uint8_t *data,
                                       uint32_t n)
{
    tol_status_t st =
        tol_flash_program(tol_store_slot_addr_(s, s->target) + TOL_STORE_HEADER_BYTES + payload_off, data, n);
    if (st != TOL_OK) s->writing = false;
    return st;
}

tol_status_t tol_store_append(tol_store_t *s, const uint8_t *data, uint32_t n)
{
    TOL_TRY(s->flash);
    TOL_CHECK(s->writing, TOL_ERR_ARG);
    TOL_CHECK(n <= s->len - s->at, TOL_ERR_OVERFLOW);
    while (n > 0u) {
        uint32_t fill = s->at % TOL_FLASH_DWORD;
        if (fill == 0u && n >= TOL_FLASH_DWORD) {
            uint32_t k = n & ~(TOL_FLASH_DWORD - 1u);
            TOL_TRY(tol_store_program_(s, s->at, data, k));
            s->crc = tol_crc32(s->crc, data, k);
            s->at += k;
            data += k;
            n -= k;
            continue;
        }
        s->tail[fill] = *data;
        s->crc = tol_crc32(s->crc, data, 1u);
        s->at++;
        data++;
        n--;
        if (s->at % TOL_FLASH_DWORD == 0u) {
            TOL_TRY(tol_store_program_(s, s->at - TOL_FLASH_DWORD, s->tail, TOL_FLASH_DWORD));
        }
    }
    return TOL_OK;
}

tol_status_t tol_store_commit(tol_store_t *s)
{
    TOL_TRY(s->flash);
    TOL_CHECK(s->writing, TOL_ERR_ARG);
    if (s->at != s->len) {
        s->writing = false;
        return TOL_ERR_LENGTH;
    }
    uint32_t fill = s->at % TOL_FLASH_DWORD;
    if (fill != 0u) {
        memset(s->tail + fill, 0xFF, TOL_FLASH_DWORD - fill);
        TOL_TRY(tol_store_program_(s, s->at - fill, s->tail, TOL_FLASH_DWORD));
    }
    s->writing = false;
    uint32_t base = tol_store_slot_addr_(s, s->target);
    /* what is in flash must be what we meant to write before the record is sealed */
    uint32_t crc;
    TOL_TRY(tol_store_flash_crc_(base + TOL_STORE_HEADER_BYTES, s->len, &crc));
    TOL_CHECK(crc == s->crc, TOL_ERR_FLASH);
    uint8_t h[TOL_STORE_HEADER_BYTES];
    memset(h, 0, sizeof(h));
    tol_store_put_u32_(h + 0, TOL_STORE_MAGIC);
    h[8] = (uint8_t)TOL_STORE_FORMAT;
    tol_store_put_u32_(h + 12, s->model_hash);
    tol_store_put_u32_(h + 16, s->seq_max + 1u);
    tol_store_put_u32_(h + 20, s->len);
    tol_store_put_u32_(h + 24, s->crc);
    tol_store_put_u32_(h + 28, s->erases);
    tol_store_put_u32_(h + 32, s->slot_bytes);
    tol_store_put_u32_(h + 4, tol_crc32(TOL_CRC32_INIT, h + 8, TOL_STORE_HEADER_BYTES - 8u));
    TOL_TRY(tol_flash_program(base + TOL_FLASH_DWORD, h + TOL_FLASH_DWORD,
                              TOL_STORE_HEADER_BYTES - TOL_FLASH_DWORD));
    TOL_TRY(tol_flash_program(base, h, TOL_FLASH_DWORD)); /* the commit: now the record exists */
    tol_store_record_t r;
    uint32_t erases = 0u;
    TOL_CHECK(tol_store_scan_slot_(s, s->target, &r, &erases) == TOL_SLOT_VALID, TOL_ERR_FLASH);
    s->newest = r;
    s->have_newest = true;
    s->newest_any = (int16_t)s->target;
    s->seq_max = r.seq;
    s->saves++;
    return TOL_OK;
}
