/*
 * stm32l4.h - the STM32L4 registers tinyol touches (RM0351 / RM0432).
 *
 * Our own minimal definitions: no vendor headers. Every register is accessed
 * as a full 32-bit word through TOL_REG(); the L4 USARTs (and QEMU's model of
 * them) reject byte and half-word accesses. Base addresses and IRQ numbers are
 * cross-checked against the .repl files in mcu/renode/ by tests/host/test_renode_static.py, so
 * keep the `#define TOL_<PERIPH>_BASE 0x...u` form.
 */
#ifndef TOL_STM32L4_H
#define TOL_STM32L4_H

#include <stdint.h>

#define TOL_REG(base, offset) (*(volatile uint32_t *)((uintptr_t)(base) + (uintptr_t)(offset)))

/* ---- peripheral base addresses ---------------------------------------- */
#define TOL_USART1_BASE  0x40013800u
#define TOL_USART2_BASE  0x40004400u
#define TOL_USART3_BASE  0x40004800u
#define TOL_LPUART1_BASE 0x40008000u
#define TOL_RCC_BASE     0x40021000u
#define TOL_FLASH_R_BASE 0x40022000u
#define TOL_PWR_BASE     0x40007000u
#define TOL_GPIOA_BASE   0x48000000u
#define TOL_GPIOB_BASE   0x48000400u
#define TOL_GPIOC_BASE   0x48000800u
#define TOL_GPIOD_BASE   0x48000C00u
#define TOL_GPIOE_BASE   0x48001000u
#define TOL_GPIOF_BASE   0x48001400u
#define TOL_GPIOG_BASE   0x48001800u
#define TOL_I2C2_BASE    0x40005800u

/* ---- interrupt numbers (position in the vector table minus 16) --------- */
#define TOL_USART1_IRQN  37
#define TOL_USART2_IRQN  38
#define TOL_USART3_IRQN  39
#define TOL_LPUART1_IRQN 70
#define TOL_IRQ_COUNT    96   /* covers the largest L4 (L4R5: 95 vectors) */

/* ---- RCC ---------------------------------------------------------------- */
#define RCC_CR        0x00u
#define RCC_CR_MSION      (1u << 0)
#define RCC_CR_MSIRDY     (1u << 1)
#define RCC_CR_MSIRGSEL   (1u << 3)
#define RCC_CR_MSIRANGE_POS 4u
#define RCC_CR_HSION      (1u << 8)
#define RCC_CR_HSIRDY     (1u << 10)
#define RCC_CR_PLLON      (1u << 24)
#define RCC_CR_PLLRDY     (1u << 25)
#define RCC_CFGR      0x08u
#define RCC_CFGR_SW_MASK  (3u << 0)
#define RCC_CFGR_SW_PLL   (3u << 0)
#define RCC_CFGR_SWS_MASK (3u << 2)
#define RCC_CFGR_SWS_PLL  (3u << 2)
#define RCC_PLLCFGR   0x0Cu
#define RCC_PLLCFGR_SRC_MSI (1u << 0)
#define RCC_PLLCFGR_M_POS   4u    /* M = field + 1 */
#define RCC_PLLCFGR_N_POS   8u    /* N = field (8..86) */
#define RCC_PLLCFGR_REN     (1u << 24)
#define RCC_PLLCFGR_R_POS   25u   /* R = 2 * (field + 1) */
#define RCC_AHB2ENR   0x4Cu
#define RCC_APB1ENR1  0x58u
#define RCC_APB1ENR1_USART2EN (1u << 17)
#define RCC_APB1ENR1_USART3EN (1u << 18)
#define RCC_APB1ENR1_PWREN    (1u << 28)
#define RCC_APB1ENR2  0x5Cu
#define RCC_APB1ENR2_LPUART1EN (1u << 0)
#define RCC_APB2ENR   0x60u
#define RCC_APB2ENR_USART1EN  (1u << 14)
#define RCC_CSR       0x94u
#define RCC_CSR_MSISRANGE_POS 8u

/* ---- FLASH interface ----------------------------------------------------- */
#define FLASH_ACR     0x00u
#define FLASH_ACR_LATENCY_MASK 0xFu
#define FLASH_ACR_PRFTEN  (1u << 8)
#define FLASH_ACR_ICEN    (1u << 9)
#define FLASH_ACR_DCEN    (1u << 10)

/* ---- PWR ------------------------------------------------------------------- */
#define PWR_CR2       0x04u
#define PWR_CR2_IOSV      (1u << 9)    /* VDDIO2 valid: port G on L4R5 */

/* ---- GPIO ----------------------------------------------------------------- */
#define GPIO_MODER    0x00u
#define GPIO_OSPEEDR  0x08u
#define GPIO_PUPDR    0x0Cu
#define GPIO_AFRL     0x20u
#define GPIO_AFRH     0x24u

/* ---- USART / LPUART (same layout) ---------------------------------------- */
#define USART_CR1     0x00u
#define USART_CR1_UE      (1u << 0)
#define USART_CR1_RE      (1u << 2)
#define USART_CR1_TE      (1u << 3)
#define USART_CR1_RXNEIE  (1u << 5)
#define USART_CR3     0x08u
#define USART_BRR     0x0Cu
#define USART_ISR     0x1Cu
#define USART_ISR_PE      (1u << 0)
#define USART_ISR_FE      (1u << 1)
#define USART_ISR_NE      (1u << 2)
#define USART_ISR_ORE     (1u << 3)
#define USART_ISR_RXNE    (1u << 5)
#define USART_ISR_TC      (1u << 6)
#define USART_ISR_TXE     (1u << 7)
#define USART_ICR     0x20u
#define USART_ICR_ERRORS  0xFu        /* PECF | FECF | NCF | ORECF */
#define USART_RDR     0x24u
#define USART_TDR     0x28u

/* ---- Cortex-M4 system control space ---------------------------------------- */
#define TOL_SCS_BASE  0xE000E000u
#define SYST_CSR      0x010u
#define SYST_RVR      0x014u
#define SYST_CVR      0x018u
#define NVIC_ISER0    0x100u
#define NVIC_IPR0     0x400u
#define SCB_VTOR      0xD08u
#define SCB_AIRCR     0xD0Cu
#define SCB_CFSR      0xD28u
#define SCB_HFSR      0xD2Cu
#define SCB_MMFAR     0xD34u
#define SCB_BFAR      0xD38u
#define SCB_CPACR     0xD88u
#define SCB_DEMCR     0xDFCu
#define SCB_DEMCR_TRCENA  (1u << 24)
#define TOL_DWT_BASE  0xE0001000u
#define DWT_CTRL      0x000u
#define DWT_CYCCNT    0x004u

#endif /* TOL_STM32L4_H */
