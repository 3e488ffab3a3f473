/* tol_flash_native.h - the native target's simulated flash (flash_native.c). */
#ifndef TOL_FLASH_NATIVE_H
#define TOL_FLASH_NATIVE_H

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

#endif /* TOL_FLASH_NATIVE_H */
