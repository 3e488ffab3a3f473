/*
 * flash_sim.c - tol_flash.h for host tests: an in-memory STM32L4 flash
 * region that can lose power after any step.
 *
 * Semantics (the strict ones of docs/persistence.md, as mcu/renode/flash.py):
 * erase sets a page to 0xFF; each aligned 64-bit double-word is erased,
 * programmed or torn, and can be programmed once per erase whatever the value
 * (0xFF included; all-zero is the exception, as on silicon); otherwise a
 * programming error: TOL_ERR_FLASH, nothing written. A torn double-word reads
 * back with an ECC error (tol_flash_read: TOL_ERR_FLASH). Every page erase and
 * every double-word program is one "step". With a cut armed at step k, step k
 * does not complete: in clean mode it has no effect, in torn mode it is left
 * half done (a program clears a random subset of the bits it meant to clear
 * and its double-word is torn; an erase leaves each double-word of the page
 * erased, untouched or torn), then control longjmps back to the test driver,
 * like a reset would.
 *
 * Driver entry points (ctypes): sim_setup, sim_mem, sim_save, sim_boot, ...
 */
#include <setjmp.h>
#include <string.h>

#include "tol_flash.h"
#include "tol_store.h"

#define SIM_BASE 0x08080000u
#define SIM_MAX_BYTES (256u * 1024u)

static uint8_t sim_mem_[SIM_MAX_BYTES];
enum { SIM_ERASED = 0, SIM_PROGRAMMED = 1, SIM_TORN = 2 };
static uint8_t sim_st_[SIM_MAX_BYTES / TOL_FLASH_DWORD]; /* state of each double-word */
static uint32_t sim_bytes_ = 16u * 1024u;
static uint32_t sim_page_ = 2048u;
static uint32_t sim_max_record_; /* slot sizing passed to tol_store_init (0 = two slots) */
static long sim_steps_;
static long sim_cut_at_ = -1;
static int sim_torn_;
static uint32_t sim_rng_ = 1u;
static long sim_prog_errors_;
static jmp_buf sim_jmp_;

static uint32_t sim_rand_(void)
{
    /* xorshift32 */
    uint32_t x = sim_rng_;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    sim_rng_ = x != 0u ? x : 1u;
    return sim_rng_;
}

/* Count one step; at the armed step, apply the torn effect (if any) and cut. */
static void sim_step_(uint32_t off, const uint8_t *dword, uint32_t erase_bytes)
{
    if (sim_cut_at_ >= 0 && sim_steps_ == sim_cut_at_) {
        if (sim_torn_) {
            if (dword != NULL) {
                for (uint32_t i = 0; i < TOL_FLASH_DWORD; i++) {
                    uint8_t clear = (uint8_t)(~dword[i] & sim_rand_()); /* some of the zeros land */
                    sim_mem_[off + i] = (uint8_t)(sim_mem_[off + i] & ~clear);
                }
                sim_st_[off / TOL_FLASH_DWORD] = SIM_TORN;
            } else {
                for (uint32_t d = off / TOL_FLASH_DWORD; d < (off + erase_bytes) / TOL_FLASH_DWORD; d++) {
                    uint32_t r = sim_rand_() % 3u;
                    if (r == 0u) {
                        memset(sim_mem_ + d * TOL_FLASH_DWORD, 0xFF, TOL_FLASH_DWORD);
                        sim_st_[d] = SIM_ERASED;
                    } else if (r == 1u) {
                        for (uint32_t i = 0; i < TOL_FLASH_DWORD; i++) {
                            if (sim_rand_() & 1u) sim_mem_[d * TOL_FLASH_DWORD + i] = 0xFFu;
                        }
                        sim_st_[d] = SIM_TORN;
                    }
                }
            }
        }
        sim_cut_at_ = -1;
        longjmp(sim_jmp_, 1);
    }
    sim_steps_++;
}

tol_status_t tol_flash_region(tol_flash_region_t *r)
{
    r->start = SIM_BASE;
    r->bytes = sim_bytes_;
    r->page_bytes = sim_page_;
    return TOL_OK;
}

tol_status_t tol_flash_erase_page(uint32_t addr)
{
    TOL_CHECK(addr >= SIM_BASE && addr - SIM_BASE < sim_bytes_, TOL_ERR_ARG);
    uint32_t off = addr - SIM_BASE;
    TOL_CHECK(off % sim_page_ == 0u, TOL_ERR_ARG);
    sim_step_(off, NULL, sim_page_);
    memset(sim_mem_ + off, 0xFF, sim_page_);
    memset(sim_st_ + off / TOL_FLASH_DWORD, SIM_ERASED, sim_page_ / TOL_FLASH_DWORD);
    return TOL_OK;
}

tol_status_t tol_flash_program(uint32_t addr, const uint8_t *data, size_t n)
{
    TOL_CHECK(addr >= SIM_BASE && addr - SIM_BASE <= sim_bytes_ && n <= sim_bytes_ - (addr - SIM_BASE),
              TOL_ERR_ARG);
    uint32_t off = addr - SIM_BASE;
    TOL_CHECK(off % TOL_FLASH_DWORD == 0u && n % TOL_FLASH_DWORD == 0u, TOL_ERR_ARG);
    for (size_t k = 0; k < n; k += TOL_FLASH_DWORD) {
        uint32_t o = off + (uint32_t)k;
        static const uint8_t zero[TOL_FLASH_DWORD];
        if (sim_st_[o / TOL_FLASH_DWORD] != SIM_ERASED && memcmp(data + k, zero, TOL_FLASH_DWORD) != 0) {
            sim_prog_errors_++;
            return TOL_ERR_FLASH; /* PROGERR: programmed since its erase (0xFF or not) */
        }
        sim_step_(o, data + k, 0u);
        memcpy(sim_mem_ + o, data + k, TOL_FLASH_DWORD);
        sim_st_[o / TOL_FLASH_DWORD] = SIM_PROGRAMMED;
    }
    return TOL_OK;
}

static long sim_ecc_errors_;

tol_status_t tol_flash_read(uint32_t addr, uint8_t *dst, size_t n)
{
    uint32_t off = addr - SIM_BASE;
    memcpy(dst, sim_mem_ + off, n);
    for (uint32_t d = off / TOL_FLASH_DWORD; n > 0u && d <= (off + (uint32_t)n - 1u) / TOL_FLASH_DWORD; d++) {
        if (sim_st_[d] == SIM_TORN) {
            sim_ecc_errors_++;
            return TOL_ERR_FLASH; /* double ECC error (NMI on silicon) */
        }
    }
    return TOL_OK;
}

/* ---- driver ---------------------------------------------------------------------- */

/* New region of `bytes` (page multiple) filled with `fill` (0xFF = erased), slots sized
 * for records of max_record bytes. 0 on success. */
int sim_setup(uint32_t bytes, uint32_t page, uint8_t fill, uint32_t max_record)
{
    sim_max_record_ = max_record;
    if (bytes > SIM_MAX_BYTES || page == 0u || bytes % page != 0u) return -1;
    sim_bytes_ = bytes;
    sim_page_ = page;
    memset(sim_mem_, fill, sizeof(sim_mem_));
    memset(sim_st_, fill == 0xFFu ? SIM_ERASED : SIM_PROGRAMMED, sizeof(sim_st_));
    sim_ecc_errors_ = 0;
    sim_steps_ = 0;
    sim_cut_at_ = -1;
    sim_prog_errors_ = 0;
    return 0;
}

uint8_t *sim_mem(void) { return sim_mem_; }
long sim_steps(void) { return sim_steps_; }
long sim_prog_errors(void) { return sim_prog_errors_; }
long sim_ecc_errors(void) { return sim_ecc_errors_; }
uint8_t *sim_states(void) { return sim_st_; }

/*
 * Save `payload` as a record of `hash`, appending it in pieces of `chunk`
 * bytes, with the power cut at step `cut_at` of this save (-1: never; torn
 * selects the partial-effect mode, seed its randomness). Returns the status,
 * or -1 when the power was cut. *steps: steps this save took (may be NULL).
 */
int sim_save(const uint8_t *payload, uint32_t n, uint32_t hash, uint32_t chunk, long cut_at, int torn,
             uint32_t seed, long *steps)
{
    static tol_store_t st; /* static: survives the longjmp unclobbered */
    sim_steps_ = 0;
    sim_cut_at_ = cut_at;
    sim_torn_ = torn;
    sim_rng_ = seed != 0u ? seed : 1u;
    if (setjmp(sim_jmp_) != 0) {
        if (steps != NULL) *steps = sim_steps_;
        return -1;
    }
    tol_status_t s = tol_store_init(&st, hash, sim_max_record_);
    if (s == TOL_OK) s = tol_store_begin(&st, n);
    for (uint32_t at = 0; s == TOL_OK && at < n; at += chunk) {
        uint32_t k = n - at < chunk ? n - at : chunk;
        s = tol_store_append(&st, payload + at, k);
    }
    if (s == TOL_OK) s = tol_store_commit(&st);
    sim_cut_at_ = -1;
    if (steps != NULL) *steps = sim_steps_;
    return (int)s;
}

/*
 * Boot: scan the store and read the newest record of `hash` into dst.
 * Returns the status of tol_store_newest/read; *len, *seq, *slot of the record;
 * *erases the persisted page-erase count of the region.
 */
int sim_boot(uint32_t hash, uint8_t *dst, uint32_t cap, uint32_t *len, uint32_t *seq, uint32_t *slot,
             uint32_t *erases)
{
    tol_store_t st;
    tol_status_t s = tol_store_init(&st, hash, sim_max_record_);
    if (s != TOL_OK) return (int)s;
    *erases = st.erases;
    tol_store_record_t rec;
    s = tol_store_newest(&st, &rec);
    if (s != TOL_OK) return (int)s;
    *len = rec.payload_len;
    *seq = rec.seq;
    *slot = rec.slot;
    if (rec.payload_len > cap) return (int)TOL_ERR_OVERFLOW;
    return (int)tol_store_read(&st, &rec, 0u, dst, rec.payload_len);
}

/* Payload bytes a slot holds; *slots the number of slots. */
uint32_t sim_capacity(uint32_t *slots)
{
    tol_store_t st;
    if (tol_store_init(&st, 0u, sim_max_record_) != TOL_OK) return 0u;
    *slots = st.n_slots;
    return tol_store_capacity(&st);
}
