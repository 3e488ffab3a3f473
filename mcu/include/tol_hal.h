/*
 * tol_hal.h - the board interface the portable core is written against.
 *
 * Implemented once per target under mcu/boards/<family>/ (stm32l4: registers;
 * native: a host process with a TCP socket or pty as its serial line). The
 * core never touches registers; everything board-specific goes through here.
 */
#ifndef TOL_HAL_H
#define TOL_HAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Facts about the running target, reported by INFO. Owned by the HAL. */
typedef struct {
    const char *board;      /* PlatformIO environment name, e.g. "nucleo_l476rg" */
    uint32_t boot_count;    /* resets since power-on (or since the native state file was made) */
    uint32_t cpu_hz;        /* core clock the cycle counter runs at */
    uint32_t ram_used;      /* bytes of SRAM1 taken by .data/.bss/.noinit + reserved stack */
    uint32_t ram_total;     /* bytes of SRAM1 */
    uint32_t ram2_used;     /* bytes of SRAM2 taken by .ram2 */
    uint32_t ram2_total;    /* bytes of SRAM2 */
    uint32_t flash_used;    /* bytes of flash taken by the image */
    uint32_t flash_total;   /* bytes of flash */
    bool emulated;          /* running under QEMU/Renode/native rather than on silicon */
    uint32_t sysclk_hz;     /* SYSCLK as the clock registers read back after set-up (0: unknown, native) */
    uint32_t uart_baud;     /* console baud from the UART's BRR and that clock (0: unknown, native) */
} tol_hal_info_t;

/* Bring up clocks, the console UART (interrupt-driven receive) and the cycle counter. */
void tol_hal_init(void);

/* Target facts; the pointer stays valid for the program's life. */
const tol_hal_info_t *tol_hal_info(void);

/* Blocking write of n bytes to the console UART. `data` is only read. */
void tol_hal_uart_write(const uint8_t *data, size_t n);

/* Non-blocking read: true and *byte set when a received byte is waiting. */
bool tol_hal_uart_read(uint8_t *byte);

/*
 * Sleep until the next interrupt (WFI on Cortex-M) unless a received byte is
 * already waiting; called by the idle loop so an idle board draws sleep current
 * and an idle emulator frees its host core. Returns after any interrupt.
 */
void tol_hal_idle(void);

/* Count of receive errors (overrun, framing, noise, ring-buffer overflow) since boot. */
uint32_t tol_hal_uart_errors(void);

/*
 * Free-running 32-bit cycle counter at tol_hal_info()->cpu_hz (DWT CYCCNT on
 * silicon, SysTick-based under QEMU where DWT reads 0). A measurement
 * end - start is valid only if tol_hal_cycles_epoch() did not change in
 * between: the QEMU receive workaround restarts SysTick and bumps the epoch.
 */
uint32_t tol_hal_cycles(void);
uint32_t tol_hal_cycles_epoch(void);

/* Wait until the UART has sent everything queued (so a reset/exit loses nothing). */
void tol_hal_uart_flush(void);

/* Software reset. Does not return. */
void tol_hal_reset(void) __attribute__((noreturn));

/*
 * End the program with an exit code: semihosting SYS_EXIT_EXTENDED in test
 * builds (QEMU returns the code), process exit on native, reset otherwise.
 */
void tol_hal_exit(int code) __attribute__((noreturn));

#endif /* TOL_HAL_H */
