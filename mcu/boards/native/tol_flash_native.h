/* tol_flash_native.h - the native target's simulated flash (flash_native.c). */
#ifndef TOL_FLASH_NATIVE_H
#define TOL_FLASH_NATIVE_H

#include <stdint.h>

/*
 * Open the simulated store region: <state_dir>/flash.bin (created erased, 0xFF;
 * a file of another size is refused: one line on stderr, exit 2)
 * or, with state_dir NULL, memory that does not survive a reset. Called by
 * tol_hal_init() before the model glue looks for a stored record.
 * Test hook: environment variable TINYOL_FLASH_CUT_AFTER=k ends the process
 * (exit code 75, like a power cut) instead of performing flash step k+1;
 * with TINYOL_FLASH_CUT_TORN=1 that step is left half done (torn).
 */
void tol_flash_native_attach(const char *state_dir);

/*
 * The store region's geometry (before attach): the last store_bytes of a flash of flash_bytes
 * from 0x08000000, erased in pages of page_bytes (store_bytes a multiple of two pages, at most
 * 1 MB). 0, or -1 for a geometry the simulation cannot hold. Default: the Nucleo-L476RG's.
 */
int tol_flash_native_geometry(uint32_t flash_bytes, uint32_t store_bytes, uint32_t page_bytes);

#endif /* TOL_FLASH_NATIVE_H */
