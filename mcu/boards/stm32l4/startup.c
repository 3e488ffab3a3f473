/*
 * startup.c - vector table, reset handler and fault report for STM32L4.
 *
 * Reset: enable the FPU, copy .data from flash, zero .bss and .ram2, run
 * main(). NMI: a flash double ECC error in the store is handed to
 * flash_stm32l4.c (tol_flash_nmi), anything else is a fault. Faults: print a "tinyol fault ..." line with the stacked PC/LR and
 * the fault status registers over the console, then tol_hal_exit(3).
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "stm32l4.h"
#include "tol_hal.h"

extern uint32_t _sidata[], _sdata[], _edata[], _sbss[], _ebss[], _sram2[], _eram2[], _sram3[], _eram3[], _estack[];

int tol_server_main(void);
void tol_reset_handler(void) __attribute__((noreturn));
void tol_default_handler(void);
void tol_fault_handler(void);
void tol_fault_report(const uint32_t *frame);
void tol_uart_isr(void);      /* hal_stm32l4.c */
void tol_systick_isr(void);   /* hal_stm32l4.c */
bool tol_flash_nmi(void);     /* flash_stm32l4.c: a double ECC error in the store, handled */
void tol_nmi_handler(void);

typedef void (*tol_vector_t)(void);

/* Every IRQ defaults to tol_default_handler; the console UART entries then
 * override the range (intended, hence the pragma). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverride-init"
__attribute__((section(".isr_vector"), used)) const tol_vector_t tol_vectors[16 + TOL_IRQ_COUNT] = {
    [0] = (tol_vector_t)(uintptr_t)_estack,
    [1] = tol_reset_handler,
    [2] = tol_nmi_handler,            /* NMI */
    [3] = tol_fault_handler,          /* HardFault */
    [4] = tol_fault_handler,          /* MemManage */
    [5] = tol_fault_handler,          /* BusFault */
    [6] = tol_fault_handler,          /* UsageFault */
    [11] = tol_default_handler,       /* SVCall */
    [12] = tol_default_handler,       /* DebugMon */
    [14] = tol_default_handler,       /* PendSV */
    [15] = tol_systick_isr,
    [16 + 0 ... 16 + TOL_IRQ_COUNT - 1] = tol_default_handler,
    /* the console's interrupt; whichever U(S)ART the board uses is the only one enabled */
    [16 + TOL_USART1_IRQN] = tol_uart_isr,
    [16 + TOL_USART2_IRQN] = tol_uart_isr,
    [16 + TOL_USART3_IRQN] = tol_uart_isr,
    [16 + TOL_LPUART1_IRQN] = tol_uart_isr,
};
#pragma GCC diagnostic pop

void tol_reset_handler(void)
{
    /* CP10/CP11 full access before any floating-point instruction runs */
    TOL_REG(TOL_SCS_BASE, SCB_CPACR) |= (0xFu << 20);
    __asm volatile("dsb\n isb" ::: "memory");
    size_t data_bytes = (size_t)((uintptr_t)_edata - (uintptr_t)_sdata);
    memcpy(_sdata, _sidata, data_bytes);
    memset(_sbss, 0, (size_t)((uintptr_t)_ebss - (uintptr_t)_sbss));
    memset(_sram2, 0, (size_t)((uintptr_t)_eram2 - (uintptr_t)_sram2));
    memset(_sram3, 0, (size_t)((uintptr_t)_eram3 - (uintptr_t)_sram3));
    (void)tol_server_main();
    tol_hal_exit(0);
}

/* NMI: a double ECC error while the store reads flash is the store's business (a
 * torn double-word: that slot is invalid); anything else is reported as a fault. */
void tol_nmi_handler(void)
{
    if (!tol_flash_nmi()) tol_fault_report(0);
}

void tol_default_handler(void)
{
    tol_fault_report(0);
}

/* Find the stacked exception frame (MSP or PSP) and hand it to the C reporter. */
__attribute__((naked)) void tol_fault_handler(void)
{
    __asm volatile(
        "tst lr, #4\n"
        "ite eq\n"
        "mrseq r0, msp\n"
        "mrsne r0, psp\n"
        "b tol_fault_report\n");
}

static char *tol_hex32(char *p, const char *label, uint32_t v)
{
    static const char hex[] = "0123456789abcdef";
    while (*label != '\0') *p++ = *label++;
    *p++ = '0';
    *p++ = 'x';
    for (int shift = 28; shift >= 0; shift -= 4) *p++ = hex[(v >> (unsigned)shift) & 0xFu];
    return p;
}

void tol_fault_report(const uint32_t *frame)
{
    __asm volatile("cpsid i" ::: "memory");
    uint32_t ipsr;
    __asm volatile("mrs %0, ipsr" : "=r"(ipsr));
    char line[160];
    char *p = line;
    const char *head = "tinyol fault";
    while (*head != '\0') *p++ = *head++;
    p = tol_hex32(p, " exc=", ipsr & 0x1FFu);
    p = tol_hex32(p, " pc=", frame != 0 ? frame[6] : 0u);
    p = tol_hex32(p, " lr=", frame != 0 ? frame[5] : 0u);
    p = tol_hex32(p, " cfsr=", TOL_REG(TOL_SCS_BASE, SCB_CFSR));
    p = tol_hex32(p, " hfsr=", TOL_REG(TOL_SCS_BASE, SCB_HFSR));
    p = tol_hex32(p, " bfar=", TOL_REG(TOL_SCS_BASE, SCB_BFAR));
    *p++ = '\r';
    *p++ = '\n';
    *p++ = '\0'; /* the frame delimiter: clients see a text line, not a frame */
    tol_hal_uart_write((const uint8_t *)line, (size_t)(p - line));
    tol_hal_uart_flush();
    tol_hal_exit(3);
}
