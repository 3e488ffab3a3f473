/*
 * flash_region_fixed.c - tol_flash_region() for protocol tests that link no flash
 * simulator: a fixed store region (what BOARD reports), no erase or program.
 */
#include "tol_flash.h"

tol_status_t tol_flash_region(tol_flash_region_t *r)
{
    r->start = 0x080E0000u;
    r->bytes = 0x20000u;
    r->page_bytes = 2048u;
    return TOL_OK;
}
