/*
 * bench_rt.c - see bench_rt.h. Register names come from the firmware's own
 * mcu/boards/stm32l4/stm32l4.h (the SysTick and SCB ones are the core's, on any machine);
 * the machine's clock set-up is in bench_clock_<machine>.c, picked by file.
 */
#include "bench_rt.h"

#include <stddef.h>
#include <string.h>

#include "stm32l4.h"

extern uint32_t _sidata[], _sdata[], _edata[], _sbss[], _ebss[], _sram2[], _eram2[], _estack[], _sstack[];

static volatile uint32_t tol_bench_wraps;

static int tol_bench_semi(int op, const void *arg)
{
    register int r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

void tol_bench_exit(int code)
{
    const uint32_t a[2] = {0x20026u, (uint32_t)code};
    (void)tol_bench_semi(0x20, a);
    for (;;) {
    }
}

void tol_bench_puts(const char *s)
{
    (void)tol_bench_semi(0x04, s);
}

static char *tol_bench_utoa(char *p, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + (int)(v % 10u));
        v /= 10u;
    } while (v != 0u);
    while (n > 0) {
        *p++ = tmp[--n];
    }
    return p;
}

void tol_bench_kv(const char *key, uint64_t value)
{
    char line[96];
    size_t k = strlen(key);
    if (k > 64u) {
        k = 64u;
    }
    memcpy(line, key, k);
    char *p = line + k;
    *p++ = ' ';
    p = tol_bench_utoa(p, value);
    *p++ = '\n';
    *p = '\0';
    tol_bench_puts(line);
}

void tol_bench_hex(const char *key, const int8_t *data, uint32_t n)
{
    static char line[160];
    size_t k = strlen(key);
    memcpy(line, key, k);
    line[k] = ' ';
    line[k + 1u] = '\0';
    tol_bench_puts(line);
    uint32_t i = 0;
    while (i < n) {
        uint32_t j = 0;
        for (; j < 64u && i < n; j++, i++) {
            const uint8_t b = (uint8_t)data[i];
            line[2u * j] = "0123456789abcdef"[b >> 4];
            line[2u * j + 1u] = "0123456789abcdef"[b & 15u];
        }
        line[2u * j] = '\0';
        tol_bench_puts(line);
    }
    tol_bench_puts("\n");
}

uint64_t tol_bench_ticks(void)
{
    uint32_t wraps;
    uint32_t cvr;
    do {
        wraps = tol_bench_wraps;
        cvr = TOL_REG(TOL_SCS_BASE, SYST_CVR);
    } while (wraps != tol_bench_wraps);
    return ((uint64_t)wraps << 24) + (0x00FFFFFFu - cvr);
}

#define TOL_BENCH_PAINT 0xC5A5A5C5u

__attribute__((noinline)) uintptr_t tol_bench_stack_paint(void)
{
    uint32_t here;
    __asm__ volatile("mov %0, sp" : "=r"(here));
    /* leave 64 bytes below our own frame untouched */
    for (uint32_t *p = _sstack; (uintptr_t)p < (uintptr_t)here - 64u; p++) {
        *(volatile uint32_t *)p = TOL_BENCH_PAINT;
    }
    return (uintptr_t)here;
}

uint32_t tol_bench_stack_used(uintptr_t sp_ref)
{
    const uint32_t *p = _sstack;
    while ((uintptr_t)p < sp_ref && *p == TOL_BENCH_PAINT) {
        p++;
    }
    return (uint32_t)(sp_ref - (uintptr_t)p);
}

/* C++ static constructors (the TFLM harness has none that matter, but run them) */
extern void (*__init_array_start[])(void);
extern void (*__init_array_end[])(void);

void tol_bench_reset(void) __attribute__((noreturn));
void tol_bench_reset(void)
{
    TOL_REG(TOL_SCS_BASE, SCB_CPACR) |= (0xFu << 20);
    __asm__ volatile("dsb\n isb" ::: "memory");
    memcpy(_sdata, _sidata, (size_t)((uintptr_t)_edata - (uintptr_t)_sdata));
    memset(_sbss, 0, (size_t)((uintptr_t)_ebss - (uintptr_t)_sbss));
    memset(_sram2, 0, (size_t)((uintptr_t)_eram2 - (uintptr_t)_sram2));
    tol_bench_clock_init();
    for (void (**f)(void) = __init_array_start; f < __init_array_end; f++) {
        (*f)();
    }
    tol_bench_exit(tol_bench_main());
}

static void tol_bench_systick(void)
{
    tol_bench_wraps++;
}

static void tol_bench_fault(void)
{
    tol_bench_puts("bench fault\n");
    tol_bench_exit(3);
}

typedef void (*tol_bench_vector_t)(void);
__attribute__((section(".isr_vector"), used)) const tol_bench_vector_t tol_bench_vectors[16] = {
    (tol_bench_vector_t)(uintptr_t)_estack, tol_bench_reset, tol_bench_fault, tol_bench_fault,
    tol_bench_fault, tol_bench_fault, tol_bench_fault, 0, 0, 0, 0,
    tol_bench_fault, tol_bench_fault, 0, tol_bench_fault, tol_bench_systick};
