/*
 * bench_clock_stm32l4.c - the harness's clock on QEMU's b-l475e-iot01a (bench_rt.h): it repeats
 * hal_stm32l4.c's set-up (MSI 4 MHz -> PLL -> 80 MHz SYSCLK) so SysTick ticks at the firmware's
 * rate, then starts SysTick with its wrap interrupt.
 */
#include "bench_rt.h"

#include "stm32l4.h"

void tol_bench_clock_init(void)
{
    uint32_t acr = TOL_REG(TOL_FLASH_R_BASE, FLASH_ACR);
    acr = (acr & ~FLASH_ACR_LATENCY_MASK) | 4u | FLASH_ACR_PRFTEN | FLASH_ACR_ICEN | FLASH_ACR_DCEN;
    TOL_REG(TOL_FLASH_R_BASE, FLASH_ACR) = acr;
    TOL_REG(TOL_RCC_BASE, RCC_CR) |= RCC_CR_MSION;
    while ((TOL_REG(TOL_RCC_BASE, RCC_CR) & RCC_CR_MSIRDY) == 0u) {
    }
    TOL_REG(TOL_RCC_BASE, RCC_CR) &= ~RCC_CR_PLLON;
    while ((TOL_REG(TOL_RCC_BASE, RCC_CR) & RCC_CR_PLLRDY) != 0u) {
    }
    TOL_REG(TOL_RCC_BASE, RCC_PLLCFGR) = RCC_PLLCFGR_SRC_MSI | (0u << RCC_PLLCFGR_M_POS) |
                                         (40u << RCC_PLLCFGR_N_POS) | RCC_PLLCFGR_REN |
                                         (0u << RCC_PLLCFGR_R_POS);
    TOL_REG(TOL_RCC_BASE, RCC_CR) |= RCC_CR_PLLON;
    while ((TOL_REG(TOL_RCC_BASE, RCC_CR) & RCC_CR_PLLRDY) == 0u) {
    }
    uint32_t cfgr = TOL_REG(TOL_RCC_BASE, RCC_CFGR);
    TOL_REG(TOL_RCC_BASE, RCC_CFGR) = (cfgr & ~RCC_CFGR_SW_MASK) | RCC_CFGR_SW_PLL;
    while ((TOL_REG(TOL_RCC_BASE, RCC_CFGR) & RCC_CFGR_SWS_MASK) != RCC_CFGR_SWS_PLL) {
    }
    TOL_REG(TOL_SCS_BASE, SYST_RVR) = 0x00FFFFFFu;
    TOL_REG(TOL_SCS_BASE, SYST_CVR) = 0u;
    TOL_REG(TOL_SCS_BASE, SYST_CSR) = 7u; /* processor clock, interrupt, enable */
    while (TOL_REG(TOL_SCS_BASE, SYST_CVR) == 0u) {
    }
}
