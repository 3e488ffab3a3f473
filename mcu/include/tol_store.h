/*
 * tol_store.h - power-safe record store in the flash region of tol_flash.h.
 *
 * The region is split into n_slots >= 2 equal slots of whole pages (the slot
 * size is chosen by the caller from the largest record it will write, so a
 * bigger region holds more slots). Each slot holds at most one record:
 *
 *   offset  field
 *        0  magic:u32 ("TOLS")  header_crc:u32      <- the commit double-word, programmed LAST
 *        8  format:u16 (1)  0:u16  model_hash:u32
 *       16  seq:u32  payload_len:u32
 *       24  payload_crc:u32  erases:u32  slot_bytes:u32  0:u32
 *       40  payload[payload_len], padded with 0xFF to a double-word
 *
 * header_crc = CRC-32 of bytes 8..39, payload_crc = CRC-32 of the payload
 * (tol_crc32.h). A record is valid when magic, header_crc, format, slot size,
 * length and payload_crc all check. Saves go round-robin: to the slot after
 * the newest valid record of this model (so never over it, and every page of
 * the region wears at the same rate). A save erases the pages it needs (each
 * double-word is programmed once per erase),
 * programs the payload, then the header, and the commit double-word last: a
 * save cut short at any step leaves the previous record the newest valid one;
 * a double-word torn by the cut fails its ECC check when read, and the scan
 * takes its slot as invalid.
 * `erases` carries the region's page-erase count forward (wear accounting).
 *
 * Usage (the app layer owns the tol_store_t):
 *   tol_store_init(&st, TOL_MODEL_HASH, max_record);   once at boot: scans the slots
 *   tol_store_newest(&st, &rec) / tol_store_read       load the newest record of this model
 *   tol_store_begin(&st, len); tol_store_append(&st, chunk, n)...; tol_store_commit(&st);
 */
#ifndef TOL_STORE_H
#define TOL_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "tol_flash.h"
#include "tol_status.h"

#define TOL_STORE_MAX_SLOTS 64u
#define TOL_STORE_MAGIC 0x534C4F54u  /* "TOLS" little-endian */
#define TOL_STORE_FORMAT 1u
#define TOL_STORE_HEADER_BYTES 40u

/* One valid record found by the scan. */
typedef struct {
    uint8_t slot;          /* 0..n_slots-1 */
    uint32_t model_hash;
    uint32_t seq;          /* grows by one per save (across slots) */
    uint32_t payload_len;
    uint32_t payload_addr; /* flash address of the payload */
} tol_store_record_t;

typedef struct {
    tol_flash_region_t region;
    uint32_t slot_bytes;        /* whole pages */
    uint8_t n_slots;            /* 2..TOL_STORE_MAX_SLOTS */
    uint32_t model_hash;        /* records of this model are "ours" */
    tol_status_t flash;         /* TOL_OK, or why the store cannot be used (tol_flash_region) */
    bool have_newest;           /* `newest` holds the newest valid record of this model */
    tol_store_record_t newest;
    bool foreign;               /* a valid record of another model exists */
    int16_t newest_any;         /* slot of the newest valid record of any model, -1 none */
    uint32_t seq_max;           /* highest seq of any valid record (any model) */
    uint32_t erases;            /* page erases in the region over its life (persisted) */
    uint32_t saves;             /* records committed since boot */
    uint32_t erases_boot;       /* page erases since boot */
    uint8_t damaged;            /* damaged records the scan skipped that may be newer than `newest`
                                 * (a save cut at its commit, or flash that changed): boot restores
                                 * an older state than the last save, and says so */
    /* the save in progress */
    bool writing;
    uint8_t target;             /* slot being written */
    uint32_t len;               /* announced payload length */
    uint32_t at;                /* payload bytes appended */
    uint32_t crc;               /* CRC of the payload so far */
    uint8_t tail[TOL_FLASH_DWORD]; /* bytes waiting for a full double-word */
} tol_store_t;

/* Look at the flash region, size the slots for records of up to max_record
 * bytes (header included; 0 = two slots), scan every slot. Returns s->flash:
 * TOL_OK, or TOL_ERR_FLASH / TOL_ERR_UNSUPPORTED when the target cannot
 * store records (every other call then returns that status). */
tol_status_t tol_store_init(tol_store_t *s, uint32_t model_hash, uint32_t max_record);

/* Newest valid record whose model hash matches (out: *rec).
 * TOL_ERR_MODEL if the only valid records belong to another model,
 * TOL_ERR_NO_RECORD if there is none. */
tol_status_t tol_store_newest(const tol_store_t *s, tol_store_record_t *rec);

/* Copy payload bytes [offset, offset + n) of `rec` to dst (out). TOL_ERR_RANGE past the end. */
tol_status_t tol_store_read(const tol_store_t *s, const tol_store_record_t *rec, uint32_t offset,
                            uint8_t *dst, uint32_t n);

/* Largest payload a slot holds. */
uint32_t tol_store_capacity(const tol_store_t *s);

/* Start a save of exactly payload_len bytes into the next slot (round-robin
 * after the newest record of this model) and erase the pages the record
 * needs (all of them: erased-ness is never inferred from 0xFF). TOL_ERR_OVERFLOW if it does not
 * fit a slot. */
tol_status_t tol_store_begin(tol_store_t *s, uint32_t payload_len);

/* Append n payload bytes (any n). TOL_ERR_OVERFLOW past payload_len. */
tol_status_t tol_store_append(tol_store_t *s, const uint8_t *data, uint32_t n);

/* Finish: program the last partial double-word, check the payload CRC in
 * flash, program the header and then the commit double-word. On success the
 * new record is the newest. TOL_ERR_LENGTH if fewer bytes than announced. */
tol_status_t tol_store_commit(tol_store_t *s);

/* ---- persistence status, reported by INFO and the boot line ------------------ */

typedef enum {
    TOL_STORE_NONE = 0,        /* firmware without persistence (no model) */
    TOL_STORE_UNAVAILABLE = 1, /* no writable flash (QEMU) or no region: exported head */
    TOL_STORE_EMPTY = 2,       /* no valid record: started from the exported head */
    TOL_STORE_LOADED = 3,      /* the newest record of this model was loaded at boot */
    TOL_STORE_FOREIGN = 4,     /* only records of another model: exported head */
    TOL_STORE_REJECTED = 5     /* a record of this model did not fit the learner: exported head */
} tol_store_state_t;

typedef struct {
    uint8_t state;   /* tol_store_state_t at boot */
    uint32_t seq;    /* seq of the loaded record (0 if none) */
    uint8_t damaged; /* tol_store_t.damaged at boot: newer records skipped as damaged */
} tol_store_status_t;

/* Boot-time persistence status: the app reports it through tol_model_if_t.store_status. */

/* "none", "unavailable", "empty", "loaded", "foreign", "rejected" ("?" otherwise). */
static inline const char *tol_store_state_name(uint8_t state)
{
    static const char *const names[] = {"none", "unavailable", "empty", "loaded", "foreign", "rejected"};
    return state < sizeof(names) / sizeof(names[0]) ? names[state] : "?";
}

#endif /* TOL_STORE_H */
