/*
 * flash_stm32l4.c - tol_flash.h for STM32L4 silicon and Renode (RM0351 and
 * RM0394 section 3, RM0432 section 3: the embedded flash interface).
 *
 * The store region comes from linker symbols (stm32l4_common.ld: _store_start/
 * _store_end, the last TOL_STORE_BYTES of flash); the page and bank geometry
 * from the part at run time, as ST's HAL does: FLASHSIZE (KB, 0x1FFF75E0) and,
 * on 2 MB L4R/S parts, OPTR.DBANK (4 KB pages in two banks with DBANK = 1,
 * 8 KB pages in one bank with DBANK = 0; RM0432 3.3.1). 2 KB pages otherwise,
 * two banks from 1 MB up.
 *
 * Sequence (RM0351 3.3.6/3.3.7): wait until not BSY, clear the error flags
 * (write 1 to clear), unlock CR with KEY1/KEY2, then
 *   erase:   CR = PER | PNB | BKER, then STRT; wait BSY; check SR errors
 *   program: CR = PG; per double-word two 32-bit stores; wait BSY; check errors
 * and lock again. Only 32-bit register accesses. Caches as ST's errata ("data
 * cache might be corrupted during Flash memory read-while-write operation")
 * and the HAL handle them: DCEN (and ICEN for an erase) cleared before the
 * operation, the caches that were on reset and enabled again after it. No
 * double-word is assumed erased because it reads 0xFF (one programmed with
 * 0xFF is not erased): the controller's PROGERR is the answer, and the store
 * erases every page it writes (tol_store.c). After an erase the page is
 * blank-checked and programmed data is read back, so a target whose flash
 * silently ignores us (QEMU) gives TOL_ERR_FLASH instead of a phantom record.
 *
 * A double ECC error (a double-word torn by a power cut) raises NMI when read:
 * tol_flash_nmi() (called by startup.c's NMI handler) recognises FLASH_ECCR.ECCD
 * at an address inside the store, clears it and makes the tol_flash_read() in
 * progress return TOL_ERR_FLASH: the store takes the slot as invalid.
 *
 * QEMU implements no flash interface: its registers read 0, so CR.LOCK never
 * reads 1. tol_flash_region() probes that (writing LOCK is harmless on
 * silicon) and reports TOL_ERR_FLASH before reading anything else.
 */
#include <stdbool.h>
#include <string.h>

#include "stm32l4.h"
#include "tol_flash.h"

extern uint32_t _store_start[], _store_end[], _flash_origin[];

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
#define FL_ECCR 0x18u
#define FL_ECCR_ECCD (1u << 31)
#define FL_OPTR 0x20u
#define FL_OPTR_DBANK (1u << 22)
#define FL_FLASHSIZE_ADDR 0x1FFF75E0u /* 16 bits, KB */
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

/* Disable the caches in `which` (ICEN/DCEN) before a program or erase; the ACR to restore. */
static uint32_t tol_fl_caches_off(uint32_t which)
{
    uint32_t acr = FL(FLASH_ACR);
    FL(FLASH_ACR) = acr & ~which;
    return acr;
}

/* After the operation: reset the caches that were on (while disabled), then enable them again. */
static void tol_fl_caches_restore(uint32_t acr)
{
    uint32_t on = acr & (FL_ACR_ICEN | FL_ACR_DCEN);
    uint32_t rst = ((on & FL_ACR_ICEN) != 0u ? FL_ACR_ICRST : 0u) | ((on & FL_ACR_DCEN) != 0u ? FL_ACR_DCRST : 0u);
    uint32_t off = FL(FLASH_ACR) & ~(FL_ACR_ICEN | FL_ACR_DCEN);
    FL(FLASH_ACR) = off | rst;
    FL(FLASH_ACR) = off;
    FL(FLASH_ACR) = off | on;
}

typedef struct {
    uint32_t flash_bytes, page, bank_bytes;
} tol_fl_geometry_t;

/* Page and bank size of this part (RM0351/RM0394/RM0432 3.3.1). */
static tol_fl_geometry_t tol_fl_geometry(void)
{
    uint32_t kb = *(const volatile uint16_t *)(uintptr_t)FL_FLASHSIZE_ADDR;
    tol_fl_geometry_t g = {kb * 1024u, 2048u, kb * 1024u};
    if (kb >= 2048u) {
        bool dbank = (FL(FL_OPTR) & FL_OPTR_DBANK) != 0u;
        g.page = dbank ? 4096u : 8192u;
        g.bank_bytes = dbank ? g.flash_bytes / 2u : g.flash_bytes;
    } else if (kb >= 1024u) {
        g.bank_bytes = g.flash_bytes / 2u;
    }
    return g;
}

/* Set by tol_flash_nmi() when a read of the store met a double ECC error. */
static volatile bool tol_fl_ecc_error;

bool tol_flash_nmi(void)
{
    uint32_t eccr = FL(FL_ECCR);
    if ((eccr & FL_ECCR_ECCD) == 0u) return false;
    tol_fl_geometry_t g = tol_fl_geometry();
    /* ADDR_ECC: byte offset in the bank, BK_ECC above it (bit 19; bit 21 on the L4R/S) */
    uint32_t bk_pos = g.flash_bytes >= 2048u * 1024u ? 21u : 19u;
    uint32_t off = (eccr & ((1u << bk_pos) - 1u)) + ((eccr >> bk_pos) & 1u) * g.bank_bytes;
    uint32_t addr = tol_fl_sym(_flash_origin) + off;
    if (addr < tol_fl_sym(_store_start) || addr >= tol_fl_sym(_store_end)) return false;
    FL(FL_ECCR) = eccr & (FL_ECCR_ECCD | (1u << 24)); /* clear ECCD (write 1), keep ECCIE */
    tol_fl_ecc_error = true;
    return true;
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
    r->page_bytes = 0u;
    TOL_CHECK(r->bytes > 0u, TOL_ERR_UNSUPPORTED);
    TOL_CHECK(tol_fl_lock(), TOL_ERR_FLASH); /* QEMU: no flash interface */
    tol_fl_geometry_t g = tol_fl_geometry();
    TOL_CHECK(tol_fl_sym(_store_end) - tol_fl_sym(_flash_origin) <= g.flash_bytes, TOL_ERR_UNSUPPORTED);
    TOL_CHECK(r->start % g.page == 0u && r->bytes % g.page == 0u, TOL_ERR_UNSUPPORTED);
    r->page_bytes = g.page;
    return TOL_OK;
}

tol_status_t tol_flash_erase_page(uint32_t addr)
{
    const tol_fl_geometry_t g = tol_fl_geometry();
    const uint32_t page = g.page;
    const uint32_t bank_bytes = g.bank_bytes;
    TOL_CHECK(tol_fl_inside(addr, page) && (addr - tol_fl_sym(_flash_origin)) % page == 0u, TOL_ERR_ARG);
    const uint32_t off = addr - tol_fl_sym(_flash_origin);
    const uint32_t bank = off / bank_bytes;
    const uint32_t pnb = (off % bank_bytes) / page;
    const uint32_t acr = tol_fl_caches_off(FL_ACR_ICEN | FL_ACR_DCEN);
    tol_status_t st = tol_fl_begin();
    if (st != TOL_OK) {
        tol_fl_caches_restore(acr);
        return st;
    }
    uint32_t cr = FL_CR_PER | ((pnb << FL_CR_PNB_POS) & FL_CR_PNB_MASK) | (bank != 0u ? FL_CR_BKER : 0u);
    FL(FL_CR) = cr;
    FL(FL_CR) = cr | FL_CR_STRT;
    st = tol_fl_wait();
    FL(FL_CR) = 0u;
    st = tol_fl_end(st);
    tol_fl_caches_restore(acr);
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
    const uint32_t acr = tol_fl_caches_off(FL_ACR_DCEN);
    tol_status_t st = tol_fl_begin();
    if (st != TOL_OK) {
        tol_fl_caches_restore(acr);
        return st;
    }
    FL(FL_CR) = FL_CR_PG;
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
    tol_fl_caches_restore(acr);
    TOL_TRY(st);
    for (size_t k = 0; k < n / 4u; k++) {
        uint32_t w;
        memcpy(&w, data + 4u * k, sizeof(w));
        TOL_CHECK(dst[k] == w, TOL_ERR_FLASH); /* read back */
    }
    return TOL_OK;
}

tol_status_t tol_flash_read(uint32_t addr, uint8_t *dst, size_t n)
{
    tol_fl_ecc_error = false;
    /* whole aligned words where possible (a quarter of the bus reads of a byte copy) */
    while (n > 0u && (addr % 4u != 0u || n < 4u)) {
        *dst++ = *(const volatile uint8_t *)(uintptr_t)addr++;
        n--;
    }
    for (; n >= 4u; n -= 4u, addr += 4u, dst += 4u) {
        uint32_t w = *(const volatile uint32_t *)(uintptr_t)addr;
        memcpy(dst, &w, sizeof(w));
    }
    while (n > 0u) {
        *dst++ = *(const volatile uint8_t *)(uintptr_t)addr++;
        n--;
    }
    __asm volatile("dsb\n isb" ::: "memory"); /* a pending ECC NMI is taken before the check */
    return tol_fl_ecc_error ? TOL_ERR_FLASH : TOL_OK;
}
