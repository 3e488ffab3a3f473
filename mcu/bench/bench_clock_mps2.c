/*
 * bench_clock_mps2.c - the harness's clock on QEMU's mps2-an386 (Cortex-M4, 4 MB of SRAM at
 * 0x20000000; bench_rt.h): the machine has no clock tree to set, its processor clock is fixed
 * (25 MHz in QEMU); only SysTick is started, with its wrap interrupt, as on the STM32L4.
 * Instructions are counted the same way (host/tinyol/bench/icount.py at the machine's clock).
 */
#include "bench_rt.h"

#include "stm32l4.h" /* SysTick's registers: the core's, at the same address on every Cortex-M */

void tol_bench_clock_init(void)
{
    TOL_REG(TOL_SCS_BASE, SYST_RVR) = 0x00FFFFFFu;
    TOL_REG(TOL_SCS_BASE, SYST_CVR) = 0u;
    TOL_REG(TOL_SCS_BASE, SYST_CSR) = 7u; /* processor clock, interrupt, enable */
    while (TOL_REG(TOL_SCS_BASE, SYST_CVR) == 0u) {
    }
}
