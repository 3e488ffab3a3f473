/* exit_semihost.c - tol_hal_exit for TEST builds only: semihosting
 * SYS_EXIT_EXTENDED, so QEMU (-semihosting-config enable=on,target=native)
 * ends with the code. On silicon without a debugger `bkpt` faults: never link
 * this file into a release build (the builder picks exit_reset.c there). */
#include <stdint.h>

#include "tol_hal.h"

void tol_hal_exit(int code)
{
    tol_hal_uart_flush();
    uint32_t block[2] = {0x20026u /* ADP_Stopped_ApplicationExit */, (uint32_t)code};
    register uint32_t r0 __asm("r0") = 0x20u; /* SYS_EXIT_EXTENDED */
    register uint32_t *r1 __asm("r1") = block;
    __asm volatile("bkpt 0xAB" : : "r"(r0), "r"(r1) : "memory");
    tol_hal_reset(); /* no debugger answered: fall back to a reset */
}
