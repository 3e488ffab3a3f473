/*
 * tol_flash.h - the flash HAL: erase pages and program double-words inside the
 * store region reserved at the end of flash (used by tol_store.c only).
 *
 * Implemented per target: mcu/boards/stm32l4/flash_stm32l4.c (the L4 flash
 * interface, geometry from linker symbols), mcu/boards/native/flash_native.c
 * (a file-backed simulation with L4 semantics), tests/c/flash_sim.c (a
 * simulator that can cut the power after any step).
 *
 * L4 semantics every implementation follows (docs/persistence.md): an erased
 * byte reads 0xFF; the programming unit is an aligned 64-bit double-word, which
 * can be programmed once between two erases of its page, whatever the value
 * (one programmed with 0xFF is not erased: a second program is a programming
 * error and nothing is written); a double-word whose programming or erase was
 * cut by a power loss may fail its ECC check when read (tol_flash_read then
 * says so). Addresses are the CPU's (0x08000000 = start of flash).
 */
#ifndef TOL_FLASH_H
#define TOL_FLASH_H

#include <stddef.h>
#include <stdint.h>

#include "tol_status.h"

#define TOL_FLASH_DWORD 8u          /* programming unit, bytes */
#define TOL_FLASH_RATED_CYCLES 10000u /* erase cycles per page the L4 data sheets guarantee */

/* The store region of this target: page-aligned, a whole number of pages. */
typedef struct {
    uint32_t start;      /* address of the first byte */
    uint32_t bytes;      /* size, multiple of page_bytes */
    uint32_t page_bytes; /* erase unit: 2048 (L43x/L47x), 4096 / 8192 (L4R5 DBANK = 1 / 0) */
} tol_flash_region_t;

/*
 * Describe the store region (out: *r). TOL_ERR_FLASH when the target has no
 * writable flash (e.g. QEMU, whose flash interface is not implemented);
 * TOL_ERR_UNSUPPORTED when no region is reserved.
 */
tol_status_t tol_flash_region(tol_flash_region_t *r);

/* Erase the page that starts at `addr` (page-aligned, inside the region) to
 * 0xFF and check that it reads back erased. TOL_ERR_ARG for a bad address,
 * TOL_ERR_FLASH on a controller error or a failed blank check. */
tol_status_t tol_flash_erase_page(uint32_t addr);

/* Program n bytes (n a multiple of 8) from `data` (read only, any alignment)
 * at `addr` (8-aligned, inside the region) double-word by double-word, then
 * read them back. TOL_ERR_ARG for a bad address/length, TOL_ERR_FLASH on a
 * controller error (e.g. a double-word that was not erased) or a mismatch. */
tol_status_t tol_flash_program(uint32_t addr, const uint8_t *data, size_t n);

/* Copy n bytes at `addr` (inside the region) to dst (out). TOL_ERR_FLASH if a
 * double-word read failed its ECC check (its bytes in dst are then garbage). */
tol_status_t tol_flash_read(uint32_t addr, uint8_t *dst, size_t n);

#endif /* TOL_FLASH_H */
