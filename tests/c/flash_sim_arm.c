/*
 * flash_sim_arm.c - entry points for running the real STM32L4 flash driver
 * (flash_stm32l4.c), tol_store.c and the board's startup.c (its vector table:
 * the NMI vector) as Cortex-M4 code in the Unicorn CPU emulator, with the
 * strict flash model (mcu/renode/flash.py) serving the flash interface and the
 * store region of the array (tests/host/test_persist_unicorn.py). No reset code
 * runs: the test loads the image into RAM and calls these functions directly.
 */
#include <string.h>

#include "tol_flash.h"
#include "tol_hal.h"
#include "tol_store.h"

static tol_store_t arm_store;
volatile int arm_exit_code = -1;

/* What startup.c needs from the app and the HAL. tol_hal_exit parks in
 * arm_halt(), where the test sees a reset. */
__attribute__((noinline, noreturn)) void arm_halt(void)
{
    for (;;) {
        __asm volatile("nop");
    }
}
void tol_hal_exit(int code)
{
    arm_exit_code = code;
    arm_halt();
}
int tol_server_main(void) { return 0; }
void tol_uart_isr(void) {}
void tol_systick_isr(void) {}
void tol_hal_uart_write(const uint8_t *data, size_t n)
{
    (void)data;
    (void)n;
}
void tol_hal_uart_flush(void) {}

/* Save payload[0..n) as a record of `hash` (appended in `chunk` pieces); the status. */
int arm_save(const uint8_t *payload, uint32_t n, uint32_t hash, uint32_t chunk)
{
    tol_status_t s = tol_store_init(&arm_store, hash, 0u);
    if (s == TOL_OK) s = tol_store_begin(&arm_store, n);
    for (uint32_t at = 0; s == TOL_OK && at < n; at += chunk) {
        uint32_t k = n - at < chunk ? n - at : chunk;
        s = tol_store_append(&arm_store, payload + at, k);
    }
    if (s == TOL_OK) s = tol_store_commit(&arm_store);
    return (int)s;
}

/* Boot: newest record of `hash` into dst[0..cap); out[0] = length, out[1] = seq. The status. */
int arm_boot(uint32_t hash, uint8_t *dst, uint32_t cap, uint32_t *out)
{
    tol_store_record_t rec;
    tol_status_t s = tol_store_init(&arm_store, hash, 0u);
    if (s == TOL_OK) s = tol_store_newest(&arm_store, &rec);
    if (s != TOL_OK) return (int)s;
    out[0] = rec.payload_len;
    out[1] = rec.seq;
    if (rec.payload_len > cap) return (int)TOL_ERR_OVERFLOW;
    return (int)tol_store_read(&arm_store, &rec, 0u, dst, rec.payload_len);
}

/* tol_flash_region into out[0..3) (start, bytes, page); the status. */
int arm_region(uint32_t *out)
{
    tol_flash_region_t r;
    memset(&r, 0, sizeof(r));
    tol_status_t s = tol_flash_region(&r);
    out[0] = r.start;
    out[1] = r.bytes;
    out[2] = r.page_bytes;
    return (int)s;
}

int arm_erase(uint32_t addr)
{
    return (int)tol_flash_erase_page(addr);
}

int arm_program(uint32_t addr, const uint8_t *data, uint32_t n)
{
    return (int)tol_flash_program(addr, data, n);
}
