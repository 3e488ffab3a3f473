/*
 * flash_stm32l4.c - tol_flash.h for STM32L4 silicon and Renode (RM0351 and
 * RM0394 section 3, RM0432 section 3: the embedded flash interface).
 *
 * Geometry comes from linker symbols (stm32l4_common.ld), not from the
 * FLASHSIZE register in system memory: _store_start/_store_end (the store
 * region, the last TOL_STORE_BYTES of flash), _flash_page_bytes (2 KB; 4 KB on
 * the dual-bank L4R5) and _flash_bank_bytes (half the flash on dual-bank parts).
 *
 * Sequence (RM0351 3.3.6/3.3.7): wait until not BSY, clear the error flags
 * (write 1 to clear), unlock CR with KEY1/KEY2, then
 *   erase:   CR = PER | PNB | BKER, then STRT; wait BSY; check SR errors
 *   program: CR = PG; per double-word two 32-bit stores; wait BSY; check errors
 * and lock again. Only 32-bit register accesses. After an erase the caches are
 * reset (stale lines of the erased page), then the page is blank-checked and
 * programmed data is read back, so a target whose flash silently ignores us
 * (QEMU) gives TOL_ERR_FLASH instead of a phantom record.
 *
 * QEMU implements no flash interface: its registers read 0, so CR.LOCK never
 * reads 1. tol_flash_region() probes that (writing LOCK is harmless on
 * silicon) and reports TOL_ERR_FLASH: persistence is unavailable there.
 */
#include <stdbool.h>
#include <string.h>

#include "stm32l4.h"
#include "tol_flash.h"

extern uint32_t _store_start[], _store_end[], _flash_page_bytes[], _flash_bank_bytes[], _flash_origin[];

/* FLASH interface registers beyond ACR (offsets from TOL_FLASH_R_BASE) */
#define FL_KEYR 0x08u
#define FL_SR 0x10u
#define FL_CR 0x14u
#define FL_KEY1 0x45670123u
#define FL_KEY2 0xCDEF89ABu
#define FL_SR_EOP (1u << 0)
#define FL_SR_OPERR (1u << 1)
#define FL_SR_PROGERR (1u << 3)
#define FL_SR_WRPERR (1u << 4)
#define FL_SR_PGAERR (1u << 5)
#define FL_SR_SIZERR (1u << 6)
#define FL_SR_PGSERR (1u << 7)
#define FL_SR_MISERR (1u << 8)
#define FL_SR_FASTERR (1u << 9)
#define FL_SR_RDERR (1u << 14)
#define FL_SR_OPTVERR (1u << 15)
#define FL_SR_BSY (1u << 16)
#define FL_SR_ERRORS                                                                                  \
    (FL_SR_OPERR | FL_SR_PROGERR | FL_SR_WRPERR | FL_SR_PGAERR | FL_SR_SIZERR | FL_SR_PGSERR |         \
     FL_SR_MISERR | FL_SR_FASTERR | FL_SR_RDERR | FL_SR_OPTVERR)
#define FL_CR_PG (1u << 0)
#define FL_CR_PER (1u << 1)
#define FL_CR_PNB_POS 3u
#define FL_CR_PNB_MASK (0xFFu << 3)
#define FL_CR_BKER (1u << 11)
#define FL_CR_STRT (1u << 16)
#define FL_CR_LOCK (1u << 31)
#define FL_ACR_ICEN (1u << 9)
#define FL_ACR_DCEN (1u << 10)
#define FL_ACR_ICRST (1u << 11)
#define FL_ACR_DCRST (1u << 12)
/* Page erase takes up to ~25 ms, a double-word ~90 us: a bound far above that */
#define FL_BUSY_SPINS 20000000u

#define FL(offset) TOL_REG(TOL_FLASH_R_BASE, offset)

static uint32_t tol_fl_sym(const uint32_t *sym)
{
    return (uint32_t)(uintptr_t)sym;
}

static tol_status_t tol_fl_wait(void)
{
    for (uint32_t i = 0; i < FL_BUSY_SPINS; i++) {
        uint32_t sr = FL(FL_SR);
        if ((sr & FL_SR_BSY) == 0u) return (sr & FL_SR_ERRORS) != 0u ? TOL_ERR_FLASH : TOL_OK;
    }
    return TOL_ERR_FLASH;
}

/* Lock CR, and say whether the lock took (it never does without a flash interface). */
static bool tol_fl_lock(void)
{
    FL(FL_CR) = FL_CR_LOCK;
    return (FL(FL_CR) & FL_CR_LOCK) != 0u;
}

/* Wait for idle, clear stale error flags, unlock CR. */
static tol_status_t tol_fl_begin(void)
{
    TOL_CHECK(tol_fl_lock(), TOL_ERR_FLASH);
    (void)tol_fl_wait();
    FL(FL_SR) = FL_SR_ERRORS | FL_SR_EOP; /* write-1-to-clear */
    TOL_CHECK((FL(FL_SR) & FL_SR_BSY) == 0u, TOL_ERR_FLASH);
    FL(FL_KEYR) = FL_KEY1;
    FL(FL_KEYR) = FL_KEY2;
    TOL_CHECK((FL(FL_CR) & FL_CR_LOCK) == 0u, TOL_ERR_FLASH);
    return TOL_OK;
}

static tol_status_t tol_fl_end(tol_status_t st)
{
    uint32_t sr = FL(FL_SR);
    FL(FL_SR) = sr & (FL_SR_ERRORS | FL_SR_EOP);
    (void)tol_fl_lock();
    return st;
}

/* Reset the instruction and data caches (they may hold lines of an erased page). */
static void tol_fl_flush_caches(void)
{
    uint32_t acr = FL(FLASH_ACR);
    uint32_t on = acr & (FL_ACR_ICEN | FL_ACR_DCEN);
    FL(FLASH_ACR) = acr & ~on;
    FL(FLASH_ACR) = (acr & ~on) | FL_ACR_ICRST | FL_ACR_DCRST;
    FL(FLASH_ACR) = acr & ~on;
    FL(FLASH_ACR) = acr;
}

static bool tol_fl_inside(uint32_t addr, size_t n)
{
    uint32_t start = tol_fl_sym(_store_start);
    uint32_t end = tol_fl_sym(_store_end);
    return addr >= start && addr <= end && n <= end - addr;
}

tol_status_t tol_flash_region(tol_flash_region_t *r)
{
    r->start = tol_fl_sym(_store_start);
    r->bytes = tol_fl_sym(_store_end) - r->start;
    r->page_bytes = tol_fl_sym(_flash_page_bytes);
    TOL_CHECK(r->bytes > 0u, TOL_ERR_UNSUPPORTED);
    TOL_CHECK(tol_fl_lock(), TOL_ERR_FLASH); /* QEMU: no flash interface */
    return TOL_OK;
}

tol_status_t tol_flash_erase_page(uint32_t addr)
{
    const uint32_t page = tol_fl_sym(_flash_page_bytes);
    const uint32_t bank_bytes = tol_fl_sym(_flash_bank_bytes);
    TOL_CHECK(tol_fl_inside(addr, page) && (addr - tol_fl_sym(_flash_origin)) % page == 0u, TOL_ERR_ARG);
    const uint32_t off = addr - tol_fl_sym(_flash_origin);
    const uint32_t bank = off / bank_bytes;
    const uint32_t pnb = (off % bank_bytes) / page;
    TOL_TRY(tol_fl_begin());
    uint32_t cr = FL_CR_PER | ((pnb << FL_CR_PNB_POS) & FL_CR_PNB_MASK) | (bank != 0u ? FL_CR_BKER : 0u);
    FL(FL_CR) = cr;
    FL(FL_CR) = cr | FL_CR_STRT;
    tol_status_t st = tol_fl_wait();
    FL(FL_CR) = 0u;
    st = tol_fl_end(st);
    tol_fl_flush_caches();
    TOL_TRY(st);
    const volatile uint32_t *p = (const volatile uint32_t *)(uintptr_t)addr;
    for (uint32_t i = 0; i < page / 4u; i++) {
        TOL_CHECK(p[i] == 0xFFFFFFFFu, TOL_ERR_FLASH); /* blank check: did the erase happen? */
    }
    return TOL_OK;
}

tol_status_t tol_flash_program(uint32_t addr, const uint8_t *data, size_t n)
{
    TOL_CHECK(tol_fl_inside(addr, n) && addr % TOL_FLASH_DWORD == 0u && n % TOL_FLASH_DWORD == 0u, TOL_ERR_ARG);
    volatile uint32_t *dst = (volatile uint32_t *)(uintptr_t)addr;
    for (size_t k = 0; k < n / 4u; k++) {
        TOL_CHECK(dst[k] == 0xFFFFFFFFu, TOL_ERR_FLASH); /* only erased double-words (PROGERR) */
    }
    TOL_TRY(tol_fl_begin());
    FL(FL_CR) = FL_CR_PG;
    tol_status_t st = TOL_OK;
    for (size_t k = 0; k < n && st == TOL_OK; k += TOL_FLASH_DWORD) {
        uint32_t w[2];
        memcpy(w, data + k, sizeof(w));
        uint32_t primask;
        __asm volatile("mrs %0, primask\n cpsid i" : "=r"(primask)::"memory");
        dst[k / 4u] = w[0]; /* the pair must reach the flash back to back */
        dst[k / 4u + 1u] = w[1];
        __asm volatile("msr primask, %0" ::"r"(primask) : "memory");
        st = tol_fl_wait();
    }
    FL(FL_CR) = 0u;
    st = tol_fl_end(st);
    TOL_TRY(st);
    for (size_t k = 0; k < n / 4u; k++) {
        uint32_t w;
        memcpy(&w, data + 4u * k, sizeof(w));
        TOL_CHECK(dst[k] == w, TOL_ERR_FLASH); /* read back */
    }
    return TOL_OK;
}

void tol_flash_read(uint32_t addr, uint8_t *dst, size_t n)
{
    memcpy(dst, (const void *)(uintptr_t)addr, n);
}
