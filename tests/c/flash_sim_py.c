/*
 * flash_sim_py.c - tol_flash.h whose operations are Python callbacks (ctypes),
 * so tol_store.c can run against a flash model written in Python: the Renode
 * FLASH peripheral script (mcu/renode/flash.py) driven the way
 * flash_stm32l4.c drives the silicon. A callback returning PY_CUT cuts the
 * power: control longjmps back to py_save().
 */
#include <setjmp.h>
#include <string.h>

#include "tol_flash.h"
#include "tol_store.h"

#define PY_CUT (-1)

typedef int (*py_erase_fn)(uint32_t addr);
typedef int (*py_program_fn)(uint32_t addr, const uint8_t *data, uint32_t n);
typedef void (*py_read_fn)(uint32_t addr, uint8_t *dst, uint32_t n);

static py_erase_fn py_erase_;
static py_program_fn py_program_;
static py_read_fn py_read_;
static tol_flash_region_t py_region_;
static jmp_buf py_jmp_;

void py_attach(uint32_t start, uint32_t bytes, uint32_t page, py_erase_fn e, py_program_fn p, py_read_fn r)
{
    py_region_.start = start;
    py_region_.bytes = bytes;
    py_region_.page_bytes = page;
    py_erase_ = e;
    py_program_ = p;
    py_read_ = r;
}

static tol_status_t py_status_(int rc)
{
    if (rc == PY_CUT) longjmp(py_jmp_, 1);
    return (tol_status_t)rc;
}

tol_status_t tol_flash_region(tol_flash_region_t *r)
{
    *r = py_region_;
    return TOL_OK;
}

tol_status_t tol_flash_erase_page(uint32_t addr)
{
    return py_status_(py_erase_(addr));
}

tol_status_t tol_flash_program(uint32_t addr, const uint8_t *data, size_t n)
{
    return py_status_(py_program_(addr, data, (uint32_t)n));
}

void tol_flash_read(uint32_t addr, uint8_t *dst, size_t n)
{
    py_read_(addr, dst, (uint32_t)n);
}

/* Save payload[0..n) (appended in `chunk` pieces); the status, or PY_CUT on a power cut. */
int py_save(const uint8_t *payload, uint32_t n, uint32_t hash, uint32_t chunk)
{
    static tol_store_t st;
    if (setjmp(py_jmp_) != 0) return PY_CUT;
    tol_status_t s = tol_store_init(&st, hash, 0u);
    if (s == TOL_OK) s = tol_store_begin(&st, n);
    for (uint32_t at = 0; s == TOL_OK && at < n; at += chunk) {
        uint32_t k = n - at < chunk ? n - at : chunk;
        s = tol_store_append(&st, payload + at, k);
    }
    if (s == TOL_OK) s = tol_store_commit(&st);
    return (int)s;
}

/* Boot: the newest record of `hash` into dst; its status, *len and *seq. */
int py_boot(uint32_t hash, uint8_t *dst, uint32_t cap, uint32_t *len, uint32_t *seq)
{
    tol_store_t st;
    tol_store_record_t rec;
    tol_status_t s = tol_store_init(&st, hash, 0u);
    if (s == TOL_OK) s = tol_store_newest(&st, &rec);
    if (s != TOL_OK) return (int)s;
    *len = rec.payload_len;
    *seq = rec.seq;
    if (rec.payload_len > cap) return (int)TOL_ERR_OVERFLOW;
    return (int)tol_store_read(&st, &rec, 0u, dst, rec.payload_len);
}
