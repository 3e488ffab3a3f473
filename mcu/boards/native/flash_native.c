/*
 * flash_native.c - tol_flash.h for the native target: a file-backed
 * simulation of an STM32L4 store region with the strict semantics of
 * docs/persistence.md: erase to 0xFF; each aligned double-word has a state
 * (erased / programmed / torn) and can be programmed once per erase, whatever
 * the value (0xFF included; an all-zero double-word is the one exception, as on
 * silicon), anything else is a programming error; a torn double-word reads
 * back with an ECC error (tol_flash_read says TOL_ERR_FLASH, where silicon
 * raises NMI with FLASH_ECCR.ECCD).
 *
 * Geometry: the board's the native process imitates (--flash FLASH:STORE:PAGE, which
 * `tinyol emulate --emulator native --board B` passes from tinyol.boards: the last 1/8 of its
 * flash and its page size, so a save keeps on native what it keeps on that board), by
 * default the Nucleo-L476RG's: 2 KB pages, the last 128 KB of a 1 MB flash
 * (0x080E0000..0x08100000). The image lives in
 * <state dir>/flash.bin (the bytes, then one state byte per double-word; a
 * file of another size is refused, never wiped);
 * every step is written through to it, so a process killed at any point
 * leaves the file exactly as far as the flash got. With
 * TINYOL_FLASH_CUT_TORN=1 the cut step is left half done: a program tears its
 * double-word (some of its zero bits landed, ECC bad), an erase leaves each
 * double-word of the page erased, untouched or torn.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tol_flash.h"
#include "tol_flash_native.h"

#define TOL_NATIVE_FLASH_BASE 0x08000000u
#define TOL_NATIVE_STORE_MAX (1024u * 1024u) /* largest store region the simulation holds */
#define TOL_NATIVE_CUT_EXIT 75
#define TOL_NATIVE_STORE_START tol_fn.start
#define TOL_NATIVE_STORE_BYTES tol_fn.bytes
#define TOL_NATIVE_PAGE_BYTES tol_fn.page
#define TOL_NATIVE_DWORDS (TOL_NATIVE_STORE_BYTES / TOL_FLASH_DWORD)

enum { TOL_FN_ERASED = 0, TOL_FN_PROGRAMMED = 1, TOL_FN_TORN = 2 };

static struct {
    uint8_t mem[TOL_NATIVE_STORE_MAX];
    uint8_t st[TOL_NATIVE_STORE_MAX / TOL_FLASH_DWORD]; /* state of each double-word; follows mem in flash.bin */
    uint32_t start, bytes, page; /* the region: first byte, size, erase unit */
    int fd;             /* flash.bin, or -1 (memory only) */
    long steps;         /* erase/program steps so far */
    long cut_after;     /* TINYOL_FLASH_CUT_AFTER, -1 = never */
    int torn;           /* TINYOL_FLASH_CUT_TORN: the cut step is left half done */
    uint32_t rng;
} tol_fn = {.start = 0x080E0000u, .bytes = 128u * 1024u, .page = 2048u, .fd = -1, .cut_after = -1, .rng = 0x2545F491u};

static uint32_t tol_fn_rand(void)
{
    uint32_t x = tol_fn.rng; /* xorshift32 */
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    tol_fn.rng = x != 0u ? x : 1u;
    return tol_fn.rng;
}

/* The state folder's flash.bin cannot be used: one line, and the target does not start. */
static void tol_fn_refuse(const char *path, const char *why)
{
    fprintf(stderr, "tinyol native: %s: %s\n", path, why);
    exit(2);
}

int tol_flash_native_geometry(uint32_t flash_bytes, uint32_t store_bytes, uint32_t page_bytes)
{
    if (page_bytes == 0u || page_bytes % TOL_FLASH_DWORD != 0u || store_bytes == 0u ||
        store_bytes > TOL_NATIVE_STORE_MAX || store_bytes % (2u * page_bytes) != 0u ||
        store_bytes > flash_bytes || flash_bytes > 0x08000000u) {
        return -1;
    }
    tol_fn.start = TOL_NATIVE_FLASH_BASE + flash_bytes - store_bytes;
    tol_fn.bytes = store_bytes;
    tol_fn.page = page_bytes;
    return 0;
}

void tol_flash_native_attach(const char *state_dir)
{
    const size_t mem_n = TOL_NATIVE_STORE_BYTES, st_n = TOL_NATIVE_DWORDS;
    memset(tol_fn.mem, 0xFF, mem_n);
    memset(tol_fn.st, TOL_FN_ERASED, st_n);
    const char *cut = getenv("TINYOL_FLASH_CUT_AFTER");
    tol_fn.cut_after = (cut != NULL && *cut != '\0') ? strtol(cut, NULL, 10) : -1;
    const char *torn = getenv("TINYOL_FLASH_CUT_TORN");
    tol_fn.torn = torn != NULL && *torn != '\0' && *torn != '0';
    if (state_dir == NULL) return;
    char path[4096];
    snprintf(path, sizeof(path), "%s/flash.bin", state_dir);
    tol_fn.fd = open(path, O_RDWR | O_CREAT, 0644);
    if (tol_fn.fd < 0) {
        fprintf(stderr, "tinyol native: %s: %s (flash not persistent)\n", path, strerror(errno));
        return;
    }
    struct stat st;
    const off_t want = (off_t)(mem_n + st_n);
    if (fstat(tol_fn.fd, &st) != 0) tol_fn_refuse(path, strerror(errno));
    if (st.st_size == want) {
        if (pread(tol_fn.fd, tol_fn.mem, mem_n, 0) != (ssize_t)mem_n ||
            pread(tol_fn.fd, tol_fn.st, st_n, (off_t)mem_n) != (ssize_t)st_n) {
            tol_fn_refuse(path, strerror(errno));
        }
        return;
    }
    if (st.st_size != 0) {
        /* another board's flash, an older format or not a flash image: never wiped */
        char why[200];
        snprintf(why, sizeof(why),
                 "%lld bytes, but this target's flash takes %lld (%lu KB and a state byte per double-word); "
                 "move it away to start with an erased flash",
                 (long long)st.st_size, (long long)want, (unsigned long)(mem_n / 1024u));
        tol_fn_refuse(path, why);
    }
    /* a new image: an erased region, written aside and renamed into place so a kill
     * meanwhile never leaves a short flash.bin */
    memset(tol_fn.mem, 0xFF, mem_n);
    memset(tol_fn.st, TOL_FN_ERASED, st_n);
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || pwrite(fd, tol_fn.mem, mem_n, 0) != (ssize_t)mem_n ||
        pwrite(fd, tol_fn.st, st_n, (off_t)mem_n) != (ssize_t)st_n ||
        fsync(fd) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "tinyol native: %s: %s\n", path, strerror(errno));
        if (fd >= 0) close(fd);
        return;
    }
    close(tol_fn.fd);
    tol_fn.fd = fd;
}

static tol_status_t tol_fn_sync(uint32_t off, uint32_t n)
{
    if (tol_fn.fd < 0) return TOL_OK;
    uint32_t d0 = off / TOL_FLASH_DWORD, nd = (n + TOL_FLASH_DWORD - 1u) / TOL_FLASH_DWORD;
    if (pwrite(tol_fn.fd, tol_fn.mem + off, n, (off_t)off) != (ssize_t)n) return TOL_ERR_FLASH;
    return pwrite(tol_fn.fd, tol_fn.st + d0, nd, (off_t)(TOL_NATIVE_STORE_BYTES + d0)) == (ssize_t)nd ? TOL_OK
                                                                                             : TOL_ERR_FLASH;
}

/* One erase (data NULL, n bytes) or double-word program (data) at off is about to happen:
 * at the armed step the power fails instead, leaving it undone or (torn mode) half done. */
static void tol_fn_step(uint32_t off, const uint8_t *data, uint32_t n)
{
    if (tol_fn.cut_after >= 0 && tol_fn.steps >= tol_fn.cut_after) {
        if (tol_fn.torn && data != NULL) {
            for (uint32_t i = 0; i < TOL_FLASH_DWORD; i++) {
                tol_fn.mem[off + i] &= (uint8_t)~(~data[i] & tol_fn_rand());
            }
            tol_fn.st[off / TOL_FLASH_DWORD] = TOL_FN_TORN;
        } else if (tol_fn.torn) {
            for (uint32_t d = off / TOL_FLASH_DWORD; d < (off + n) / TOL_FLASH_DWORD; d++) {
                uint32_t r = tol_fn_rand() % 3u;
                if (r == 0u) {
                    memset(tol_fn.mem + d * TOL_FLASH_DWORD, 0xFF, TOL_FLASH_DWORD);
                    tol_fn.st[d] = TOL_FN_ERASED;
                } else if (r == 1u) {
                    tol_fn.mem[d * TOL_FLASH_DWORD] |= (uint8_t)tol_fn_rand();
                    tol_fn.st[d] = TOL_FN_TORN;
                }
            }
        }
        if (tol_fn.torn) (void)tol_fn_sync(off, data != NULL ? TOL_FLASH_DWORD : n);
        fflush(NULL);
        _exit(TOL_NATIVE_CUT_EXIT); /* power cut */
    }
    tol_fn.steps++;
}

static int tol_fn_inside(uint32_t addr, size_t n)
{
    return addr >= TOL_NATIVE_STORE_START && addr - TOL_NATIVE_STORE_START <= TOL_NATIVE_STORE_BYTES &&
           n <= TOL_NATIVE_STORE_BYTES - (addr - TOL_NATIVE_STORE_START);
}

tol_status_t tol_flash_region(tol_flash_region_t *r)
{
    r->start = TOL_NATIVE_STORE_START;
    r->bytes = TOL_NATIVE_STORE_BYTES;
    r->page_bytes = TOL_NATIVE_PAGE_BYTES;
    return TOL_OK;
}

tol_status_t tol_flash_erase_page(uint32_t addr)
{
    TOL_CHECK(tol_fn_inside(addr, TOL_NATIVE_PAGE_BYTES), TOL_ERR_ARG);
    uint32_t off = addr - TOL_NATIVE_STORE_START;
    TOL_CHECK(off % TOL_NATIVE_PAGE_BYTES == 0u, TOL_ERR_ARG);
    tol_fn_step(off, NULL, TOL_NATIVE_PAGE_BYTES);
    memset(tol_fn.mem + off, 0xFF, TOL_NATIVE_PAGE_BYTES);
    memset(tol_fn.st + off / TOL_FLASH_DWORD, TOL_FN_ERASED, TOL_NATIVE_PAGE_BYTES / TOL_FLASH_DWORD);
    return tol_fn_sync(off, TOL_NATIVE_PAGE_BYTES);
}

tol_status_t tol_flash_program(uint32_t addr, const uint8_t *data, size_t n)
{
    TOL_CHECK(tol_fn_inside(addr, n), TOL_ERR_ARG);
    uint32_t off = addr - TOL_NATIVE_STORE_START;
    TOL_CHECK(off % TOL_FLASH_DWORD == 0u && n % TOL_FLASH_DWORD == 0u, TOL_ERR_ARG);
    for (size_t k = 0; k < n; k += TOL_FLASH_DWORD) {
        uint8_t *cell = tol_fn.mem + off + k;
        uint8_t *st = &tol_fn.st[(off + k) / TOL_FLASH_DWORD];
        static const uint8_t zero[TOL_FLASH_DWORD];
        /* PROGERR: programmed since its erase (0xFF or not); all-zero is the exception */
        TOL_CHECK(*st == TOL_FN_ERASED || memcmp(data + k, zero, TOL_FLASH_DWORD) == 0, TOL_ERR_FLASH);
        tol_fn_step(off + (uint32_t)k, data + k, TOL_FLASH_DWORD);
        memcpy(cell, data + k, TOL_FLASH_DWORD);
        *st = TOL_FN_PROGRAMMED;
        TOL_TRY(tol_fn_sync(off + (uint32_t)k, TOL_FLASH_DWORD));
    }
    return TOL_OK;
}

tol_status_t tol_flash_read(uint32_t addr, uint8_t *dst, size_t n)
{
    if (!tol_fn_inside(addr, n)) {
        memset(dst, 0xFF, n);
        return TOL_ERR_ARG;
    }
    uint32_t off = addr - TOL_NATIVE_STORE_START;
    memcpy(dst, tol_fn.mem + off, n);
    for (uint32_t d = off / TOL_FLASH_DWORD; n > 0u && d <= (off + (uint32_t)n - 1u) / TOL_FLASH_DWORD; d++) {
        if (tol_fn.st[d] == TOL_FN_TORN) return TOL_ERR_FLASH; /* double ECC error */
    }
    return TOL_OK;
}
