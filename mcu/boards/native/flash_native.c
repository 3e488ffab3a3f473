/*
 * flash_native.c - tol_flash.h for the native target: a file-backed
 * simulation of an STM32L4 store region (erase to 0xFF, program aligned
 * double-words that are still erased, anything else is a programming error).
 *
 * Geometry follows the Nucleo-L476RG: 2 KB pages, the region is the last
 * 128 KB of a 1 MB flash (0x080E0000..0x08100000). The image lives in
 * <state dir>/flash.bin; every step is written through to it, so a process
 * killed at any point leaves the file exactly as far as the flash got.
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

#define TOL_NATIVE_STORE_START 0x080E0000u
#define TOL_NATIVE_STORE_BYTES (128u * 1024u)
#define TOL_NATIVE_PAGE_BYTES 2048u
#define TOL_NATIVE_CUT_EXIT 75

static struct {
    uint8_t mem[TOL_NATIVE_STORE_BYTES];
    int fd;             /* flash.bin, or -1 (memory only) */
    long steps;         /* erase/program steps so far */
    long cut_after;     /* TINYOL_FLASH_CUT_AFTER, -1 = never */
} tol_fn = {.fd = -1, .cut_after = -1};

void tol_flash_native_attach(const char *state_dir)
{
    memset(tol_fn.mem, 0xFF, sizeof(tol_fn.mem));
    const char *cut = getenv("TINYOL_FLASH_CUT_AFTER");
    tol_fn.cut_after = (cut != NULL && *cut != '\0') ? strtol(cut, NULL, 10) : -1;
    if (state_dir == NULL) return;
    char path[4096];
    snprintf(path, sizeof(path), "%s/flash.bin", state_dir);
    tol_fn.fd = open(path, O_RDWR | O_CREAT, 0644);
    if (tol_fn.fd < 0) {
        fprintf(stderr, "tinyol native: %s: %s (flash not persistent)\n", path, strerror(errno));
        return;
    }
    struct stat st;
    if (fstat(tol_fn.fd, &st) == 0 && st.st_size == (off_t)sizeof(tol_fn.mem) &&
        pread(tol_fn.fd, tol_fn.mem, sizeof(tol_fn.mem), 0) == (ssize_t)sizeof(tol_fn.mem)) {
        return;
    }
    /* new (or wrong-sized) image: an erased region, written aside and renamed into place
     * so a kill meanwhile never leaves a short flash.bin */
    memset(tol_fn.mem, 0xFF, sizeof(tol_fn.mem));
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || pwrite(fd, tol_fn.mem, sizeof(tol_fn.mem), 0) != (ssize_t)sizeof(tol_fn.mem) ||
        fsync(fd) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "tinyol native: %s: %s\n", path, strerror(errno));
        if (fd >= 0) close(fd);
        return;
    }
    close(tol_fn.fd);
    tol_fn.fd = fd;
}

static void tol_fn_step(void)
{
    if (tol_fn.cut_after >= 0 && tol_fn.steps >= tol_fn.cut_after) {
        fflush(NULL);
        _exit(TOL_NATIVE_CUT_EXIT); /* power cut: the step does not happen */
    }
    tol_fn.steps++;
}

static tol_status_t tol_fn_sync(uint32_t off, uint32_t n)
{
    if (tol_fn.fd < 0) return TOL_OK;
    return pwrite(tol_fn.fd, tol_fn.mem + off, n, (off_t)off) == (ssize_t)n ? TOL_OK : TOL_ERR_FLASH;
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
    tol_fn_step();
    memset(tol_fn.mem + off, 0xFF, TOL_NATIVE_PAGE_BYTES);
    return tol_fn_sync(off, TOL_NATIVE_PAGE_BYTES);
}

tol_status_t tol_flash_program(uint32_t addr, const uint8_t *data, size_t n)
{
    TOL_CHECK(tol_fn_inside(addr, n), TOL_ERR_ARG);
    uint32_t off = addr - TOL_NATIVE_STORE_START;
    TOL_CHECK(off % TOL_FLASH_DWORD == 0u && n % TOL_FLASH_DWORD == 0u, TOL_ERR_ARG);
    for (size_t k = 0; k < n; k += TOL_FLASH_DWORD) {
        uint8_t *cell = tol_fn.mem + off + k;
        for (uint32_t i = 0; i < TOL_FLASH_DWORD; i++) {
            TOL_CHECK(cell[i] == 0xFFu, TOL_ERR_FLASH); /* PROGERR: not erased */
        }
        tol_fn_step();
        memcpy(cell, data + k, TOL_FLASH_DWORD);
        TOL_TRY(tol_fn_sync(off + (uint32_t)k, TOL_FLASH_DWORD));
    }
    return TOL_OK;
}

void tol_flash_read(uint32_t addr, uint8_t *dst, size_t n)
{
    if (!tol_fn_inside(addr, n)) {
        memset(dst, 0xFF, n);
        return;
    }
    memcpy(dst, tol_fn.mem + (addr - TOL_NATIVE_STORE_START), n);
}
