/*
 * hal_stm32l4.c - tol_hal.h for STM32L4 silicon, QEMU and Renode.
 *
 * Clock: MSI 4 MHz -> PLL (M=1, N=40, R=2) -> 80 MHz SYSCLK, flash wait
 * states raised *before* the switch (real silicon requires it; QEMU does not
 * care). Console: the board's U(S)ART at TOL_BAUD, interrupt-driven receive
 * into a ring buffer, polled transmit. Cycles: DWT CYCCNT when it counts
 * (silicon, Renode), else SysTick with a wrap counter (QEMU, where DWT reads 0).
 *
 * QEMU 10.0 receive quirk (design.md): after RDR is read, QEMU polls the
 * chardev only about once a second unless SysTick's CVR is written. Under
 * emulation the ISR writes CVR after each read; that restarts SysTick, so it
 * also bumps the cycle epoch to invalidate measurements spanning a receive.
 */
#include <stdint.h>

#include "board.h"
#include "stm32l4.h"
#include "tol_hal.h"
#include "tol_proto.h"

#ifndef TOL_BAUD
#define TOL_BAUD 115200u
#endif
#define TOL_CPU_HZ 80000000u
/* The clock tree for TOL_CPU_HZ. Overridable only to build deliberately broken firmware
 * for the emulator and `tinyol doctor` tests (a wrong PLLN, too few wait states). */
#ifndef TOL_FLASH_LATENCY
#define TOL_FLASH_LATENCY 4u /* 80 MHz, voltage range 1: RM0351 table 11 (the L4R5 needs 3) */
#endif
#ifndef TOL_PLL_N
#define TOL_PLL_N 40u /* MSI 4 MHz / M 1 * N 40 = VCO 160 MHz; / R 2 = 80 MHz */
#endif
#define TOL_RX_RING_BYTES 2048u /* power of two */
_Static_assert(TOL_RX_RING_BYTES >= TOL_PROTO_RX_AHEAD, "the ring holds what a host may send ahead");

extern uint32_t _sdata[], _enoinit[], _sram2[], _eram2[], _estack[], _sstack[];
extern uint32_t _eflash_used[], _flash_origin[], _flash_length[];
extern uint32_t _ram_origin[], _ram_length[], _ram2_origin[], _ram2_length[];

static struct {
    volatile uint8_t buf[TOL_RX_RING_BYTES];
    volatile uint32_t head; /* written by the ISR */
    volatile uint32_t tail; /* written by the main loop */
    volatile uint32_t errors;
} tol_rx;

static volatile uint32_t tol_systick_wraps;

static volatile uint32_t tol_cycles_epoch_count;
static bool tol_use_dwt;
static tol_hal_info_t tol_info;

/* Survives a warm reset: counts boots since power-on. */
static struct {
    uint32_t magic;
    uint32_t count;
    uint32_t check;
} tol_boot __attribute__((section(".noinit")));
#define TOL_BOOT_MAGIC 0x746F6C62u /* "tolb" */

/* QEMU only: restarting SysTick makes QEMU poll the chardev for the next
 * received byte right away. Invalidates running cycle measurements, hence the
 * epoch. */
static void tol_qemu_kick(void)
{
    TOL_REG(TOL_SCS_BASE, SYST_CVR) = 0u;
    tol_cycles_epoch_count++;
}

static void tol_clock_init(void)
{
    /* 4 wait states are required at 80 MHz in voltage range 1 (RM0351 table 12) */
    uint32_t acr = TOL_REG(TOL_FLASH_R_BASE, FLASH_ACR);
    acr = (acr & ~FLASH_ACR_LATENCY_MASK) | TOL_FLASH_LATENCY | FLASH_ACR_PRFTEN | FLASH_ACR_ICEN | FLASH_ACR_DCEN;
    TOL_REG(TOL_FLASH_R_BASE, FLASH_ACR) = acr;
    /* Silicon applies the latency within a few cycles and reads it back; QEMU
     * does not implement FLASH_ACR (reads 0), hence the bounded wait. */
    for (uint32_t tries = 0; tries < 1000u; tries++) {
        if ((TOL_REG(TOL_FLASH_R_BASE, FLASH_ACR) & FLASH_ACR_LATENCY_MASK) == TOL_FLASH_LATENCY) break;
    }
    /* MSI is the reset clock (4 MHz); make sure it is on and ready */
    TOL_REG(TOL_RCC_BASE, RCC_CR) |= RCC_CR_MSION;
    while ((TOL_REG(TOL_RCC_BASE, RCC_CR) & RCC_CR_MSIRDY) == 0u) {
    }
    TOL_REG(TOL_RCC_BASE, RCC_CR) &= ~RCC_CR_PLLON;
    while ((TOL_REG(TOL_RCC_BASE, RCC_CR) & RCC_CR_PLLRDY) != 0u) {
    }
    /* VCO = 4 MHz / 1 * 40 = 160 MHz; SYSCLK = VCO / 2 = 80 MHz */
    TOL_REG(TOL_RCC_BASE, RCC_PLLCFGR) = RCC_PLLCFGR_SRC_MSI | (0u << RCC_PLLCFGR_M_POS) |
                                         (TOL_PLL_N << RCC_PLLCFGR_N_POS) | RCC_PLLCFGR_REN |
                                         (0u << RCC_PLLCFGR_R_POS);
    TOL_REG(TOL_RCC_BASE, RCC_CR) |= RCC_CR_PLLON;
    while ((TOL_REG(TOL_RCC_BASE, RCC_CR) & RCC_CR_PLLRDY) == 0u) {
    }
    uint32_t cfgr = TOL_REG(TOL_RCC_BASE, RCC_CFGR);
    TOL_REG(TOL_RCC_BASE, RCC_CFGR) = (cfgr & ~RCC_CFGR_SW_MASK) | RCC_CFGR_SW_PLL;
    while ((TOL_REG(TOL_RCC_BASE, RCC_CFGR) & RCC_CFGR_SWS_MASK) != RCC_CFGR_SWS_PLL) {
    }
}

/* SYSCLK as the RCC registers read back (what the silicon runs at, whatever TOL_CPU_HZ
 * says): MSI (range from CR.MSIRANGE or CSR.MSISRANGE), HSI16, or the PLL from MSI/HSI16.
 * 0 when the source is one this firmware never uses (HSE). */
static uint32_t tol_sysclk_readback(void)
{
    static const uint32_t msi_khz[12] = {100u, 200u, 400u, 800u, 1000u, 2000u,
                                         4000u, 8000u, 16000u, 24000u, 32000u, 48000u};
    uint32_t cr = TOL_REG(TOL_RCC_BASE, RCC_CR);
    uint32_t range = (cr & RCC_CR_MSIRGSEL) != 0u ? (cr >> RCC_CR_MSIRANGE_POS) & 0xFu
                                                  : (TOL_REG(TOL_RCC_BASE, RCC_CSR) >> RCC_CSR_MSISRANGE_POS) & 0xFu;
    uint32_t msi = range < 12u ? msi_khz[range] * 1000u : 0u;
    uint32_t sws = (TOL_REG(TOL_RCC_BASE, RCC_CFGR) & RCC_CFGR_SWS_MASK) >> 2;
    if (sws == 0u) return msi;
    if (sws == 1u) return 16000000u;
    if (sws != 3u) return 0u;
    uint32_t pll = TOL_REG(TOL_RCC_BASE, RCC_PLLCFGR);
    uint32_t src = pll & 3u;
    uint32_t in = src == 1u ? msi : (src == 2u ? 16000000u : 0u);
    uint32_t m = ((pll >> RCC_PLLCFGR_M_POS) & 0xFu) + 1u;
    uint32_t n = (pll >> RCC_PLLCFGR_N_POS) & 0x7Fu;
    uint32_t r = 2u * (((pll >> RCC_PLLCFGR_R_POS) & 3u) + 1u);
    return (uint32_t)((uint64_t)in / m * n / r);
}

static void tol_pin_af(const tol_pin_t *pin, bool pull_up)
{
    uint32_t shift2 = 2u * pin->pin;
    uint32_t moder = TOL_REG(pin->gpio_base, GPIO_MODER);
    TOL_REG(pin->gpio_base, GPIO_MODER) = (moder & ~(3u << shift2)) | (2u << shift2);
    uint32_t speed = TOL_REG(pin->gpio_base, GPIO_OSPEEDR);
    TOL_REG(pin->gpio_base, GPIO_OSPEEDR) = speed | (2u << shift2);
    uint32_t pupd = TOL_REG(pin->gpio_base, GPIO_PUPDR) & ~(3u << shift2);
    TOL_REG(pin->gpio_base, GPIO_PUPDR) = pupd | (pull_up ? (1u << shift2) : 0u);
    uint32_t afr_off = pin->pin < 8u ? GPIO_AFRL : GPIO_AFRH;
    uint32_t shift4 = 4u * (pin->pin & 7u);
    uint32_t afr = TOL_REG(pin->gpio_base, afr_off);
    TOL_REG(pin->gpio_base, afr_off) = (afr & ~(0xFu << shift4)) | ((uint32_t)pin->af << shift4);
}

static void tol_uart_init(void)
{
    const tol_board_t *b = &tol_board;
    TOL_REG(TOL_RCC_BASE, RCC_AHB2ENR) |= b->gpio_enr_bits;
    TOL_REG(TOL_RCC_BASE, b->uart_enr_offset) |= b->uart_enr_bit;
    (void)TOL_REG(TOL_RCC_BASE, b->uart_enr_offset); /* read back: clock is on before first access */
    if (b->needs_vddio2) {
        TOL_REG(TOL_RCC_BASE, RCC_APB1ENR1) |= RCC_APB1ENR1_PWREN;
        (void)TOL_REG(TOL_RCC_BASE, RCC_APB1ENR1);
        TOL_REG(TOL_PWR_BASE, PWR_CR2) |= PWR_CR2_IOSV;
    }
    tol_pin_af(&b->tx, false);
    tol_pin_af(&b->rx, true);
    uint32_t brr = b->uart_is_lpuart
                       ? (uint32_t)(((uint64_t)TOL_CPU_HZ * 256u + TOL_BAUD / 2u) / TOL_BAUD)
                       : (TOL_CPU_HZ + TOL_BAUD / 2u) / TOL_BAUD;
    TOL_REG(b->uart_base, USART_BRR) = brr;
    TOL_REG(b->uart_base, USART_CR1) = USART_CR1_UE | USART_CR1_TE | USART_CR1_RE | USART_CR1_RXNEIE;
    uint32_t irq = b->uart_irqn;
    TOL_REG(TOL_SCS_BASE, NVIC_ISER0 + 4u * (irq / 32u)) = 1u << (irq % 32u);
}

static void tol_cycles_init(void)
{
    TOL_REG(TOL_SCS_BASE, SCB_DEMCR) |= SCB_DEMCR_TRCENA;
    TOL_REG(TOL_DWT_BASE, DWT_CYCCNT) = 0u;
    TOL_REG(TOL_DWT_BASE, DWT_CTRL) |= 1u;
    uint32_t a = TOL_REG(TOL_DWT_BASE, DWT_CYCCNT);
    for (volatile int i = 0; i < 16; i++) {
    }
    tol_use_dwt = TOL_REG(TOL_DWT_BASE, DWT_CYCCNT) != a;
    /* SysTick always runs (the fallback counter, and harmless otherwise) */
    TOL_REG(TOL_SCS_BASE, SYST_RVR) = 0x00FFFFFFu;
    TOL_REG(TOL_SCS_BASE, SYST_CVR) = 0u;
    TOL_REG(TOL_SCS_BASE, SYST_CSR) = 7u; /* processor clock, interrupt, enable */
    while (TOL_REG(TOL_SCS_BASE, SYST_CVR) == 0u) {
    }
}

void tol_systick_isr(void)
{
    tol_systick_wraps++;
}

void tol_uart_isr(void)
{
    uint32_t base = tol_board.uart_base;
    uint32_t isr = TOL_REG(base, USART_ISR);
    if ((isr & (USART_ISR_ORE | USART_ISR_FE | USART_ISR_NE | USART_ISR_PE)) != 0u) {
        TOL_REG(base, USART_ICR) = USART_ICR_ERRORS;
        tol_rx.errors++;
    }
    if ((isr & USART_ISR_RXNE) != 0u) {
        uint32_t head = tol_rx.head;
        if (head - tol_rx.tail >= TOL_RX_RING_BYTES) {
            /* Ring full (the main loop is executing a request): leave the byte in RDR and
             * mask the receive interrupt until tol_hal_uart_read makes room. An emulator then
             * holds the rest back (QEMU and Renode deliver the next byte only once RDR is
             * read); silicon overruns (ORE, counted above when the interrupt is back), which
             * only a host that sends ahead no more than TOL_PROTO_RX_AHEAD bytes avoids.
             * Reading RDR and dropping the byte here lost thousands of bytes per large frame
             * in Renode (issue 34). */
            TOL_REG(base, USART_CR1) &= ~USART_CR1_RXNEIE;
            return;
        }
        tol_rx.buf[head & (TOL_RX_RING_BYTES - 1u)] = (uint8_t)TOL_REG(base, USART_RDR);
        tol_rx.head = head + 1u;
        if (!tol_use_dwt) tol_qemu_kick(); /* QEMU receive workaround, see above */
    }
}

void tol_hal_init(void)
{
    tol_clock_init();
    tol_cycles_init();
    tol_uart_init();
    if (tol_boot.magic != TOL_BOOT_MAGIC || tol_boot.check != ~tol_boot.count) {
        tol_boot.magic = TOL_BOOT_MAGIC;
        tol_boot.count = 0u;
    }
    tol_boot.count++;
    tol_boot.check = ~tol_boot.count;

    uintptr_t ram0 = (uintptr_t)_ram_origin;
    tol_info.board = tol_board.name;
    tol_info.boot_count = tol_boot.count;
    tol_info.cpu_hz = TOL_CPU_HZ;
    tol_info.ram_used = (uint32_t)(((uintptr_t)_enoinit - ram0) + ((uintptr_t)_estack - (uintptr_t)_sstack));
    tol_info.ram_total = (uint32_t)(uintptr_t)_ram_length;
    tol_info.ram2_used = (uint32_t)((uintptr_t)_eram2 - (uintptr_t)_sram2);
    tol_info.ram2_total = (uint32_t)(uintptr_t)_ram2_length;
    tol_info.flash_used = (uint32_t)((uintptr_t)_eflash_used - (uintptr_t)_flash_origin);
    tol_info.flash_total = (uint32_t)(uintptr_t)_flash_length;
    tol_info.emulated = !tol_use_dwt;
    /* the console's real baud: the UART's clock (SYSCLK, APB prescalers at 1) over BRR */
    tol_info.sysclk_hz = tol_sysclk_readback();
    uint32_t brr = TOL_REG(tol_board.uart_base, USART_BRR);
    if (brr != 0u) {
        tol_info.uart_baud = tol_board.uart_is_lpuart
                                 ? (uint32_t)(((uint64_t)tol_info.sysclk_hz * 256u + brr / 2u) / brr)
                                 : (tol_info.sysclk_hz + brr / 2u) / brr;
    }
    __asm volatile("cpsie i" ::: "memory");
}

const tol_hal_info_t *tol_hal_info(void)
{
    return &tol_info;
}

void tol_hal_uart_write(const uint8_t *data, size_t n)
{
    uint32_t base = tol_board.uart_base;
    for (size_t i = 0; i < n; i++) {
        while ((TOL_REG(base, USART_ISR) & USART_ISR_TXE) == 0u) {
        }
        TOL_REG(base, USART_TDR) = data[i];
    }
}

void tol_hal_uart_flush(void)
{
    uint32_t base = tol_board.uart_base;
    while ((TOL_REG(base, USART_ISR) & USART_ISR_TC) == 0u) {
    }
}

bool tol_hal_uart_read(uint8_t *byte)
{
    uint32_t tail = tol_rx.tail;
    if (tail == tol_rx.head) {
        return false;
    }
    *byte = tol_rx.buf[tail & (TOL_RX_RING_BYTES - 1u)];
    tol_rx.tail = tail + 1u;
    /* room again: take the byte the ISR left in RDR (the ISR cannot run while its interrupt is
     * masked, so this read-modify-write races with nothing) */
    const uint32_t base = tol_board.uart_base;
    if ((TOL_REG(base, USART_CR1) & USART_CR1_RXNEIE) == 0u) TOL_REG(base, USART_CR1) |= USART_CR1_RXNEIE;
    return true;
}

void tol_hal_idle(void)
{
    /* Interrupts masked between the check and WFI: a byte that arrives in between
     * leaves its interrupt pending, and a pending interrupt ends WFI even while
     * masked; the ISR then runs at cpsie. No byte can wait for the next interrupt. */
    __asm volatile("cpsid i" ::: "memory");
    if (tol_rx.head == tol_rx.tail) __asm volatile("wfi" ::: "memory");
    __asm volatile("cpsie i" ::: "memory");
}

uint32_t tol_hal_uart_errors(void)
{
    return tol_rx.errors;
}

uint32_t tol_hal_cycles(void)
{
    if (tol_use_dwt) return TOL_REG(TOL_DWT_BASE, DWT_CYCCNT);
    uint32_t wraps;
    uint32_t cvr;
    do {
        wraps = tol_systick_wraps;
        cvr = TOL_REG(TOL_SCS_BASE, SYST_CVR);
    } while (wraps != tol_systick_wraps);
    return (wraps << 24) + (0x00FFFFFFu - cvr);
}

uint32_t tol_hal_cycles_epoch(void)
{
    return tol_cycles_epoch_count;
}

void tol_hal_reset(void)
{
    tol_hal_uart_flush();
    TOL_REG(TOL_SCS_BASE, SCB_AIRCR) = (0x05FAu << 16) | (1u << 2); /* VECTKEY | SYSRESETREQ */
    __asm volatile("dsb" ::: "memory");
    for (;;) {
    }
}
