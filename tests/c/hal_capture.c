/*
 * hal_capture.c - a tol_hal.h for host unit tests: the UART is a pair of
 * memory buffers driven from Python (ctypes). Also owns one tol_server_t.
 */
#include <stdlib.h>
#include <string.h>

#include "tol_server.h"
#include "tol_hal.h"
#include "tol_model.h"

static uint8_t out_buf[1 << 16];
static size_t out_len;
static uint32_t fake_cycles;
static int exit_code = -1;
static tol_hal_info_t info = {.board = "hosttest", .boot_count = 1, .cpu_hz = 80000000u, .emulated = true,
                              .sysclk_hz = 80000000u, .uart_baud = 115200u};
static tol_server_t app;

void tol_hal_init(void) {}
const tol_hal_info_t *tol_hal_info(void) { return &info; }
void tol_hal_uart_write(const uint8_t *data, size_t n)
{
    if (out_len + n > sizeof(out_buf)) n = sizeof(out_buf) - out_len;
    memcpy(out_buf + out_len, data, n);
    out_len += n;
}
bool tol_hal_uart_read(uint8_t *byte) { (void)byte; return false; }
void tol_hal_idle(void)
{
}

uint32_t tol_hal_uart_errors(void) { return 0u; }
uint32_t tol_hal_cycles(void) { return fake_cycles += 3u; }
uint32_t tol_hal_cycles_epoch(void) { return 0u; }
void tol_hal_uart_flush(void) {}
void tol_hal_reset(void) { abort(); }
void tol_hal_exit(int code) { exit_code = code; abort(); }

/* ---- test entry points ---- */
void tol_test_init(void) { out_len = 0; tol_server_init(&app, &tol_model_glue); }

/* The app over the same glue plus a boot self-test verdict (tol_model_if_t.cpu): the BOARD,
 * INFO and boot-line encodings of a core that failed checks. */
static tol_cpu_report_t test_cpu;
static tol_model_if_t glue_with_cpu;
static void test_cpu_report(tol_cpu_report_t *r) { *r = test_cpu; }
void tol_test_init_cpu(uint32_t checked, uint32_t faults, uint32_t fallbacks)
{
    test_cpu.checked = checked;
    test_cpu.faults = faults;
    test_cpu.fallbacks = fallbacks;
    glue_with_cpu = tol_model_glue;
    glue_with_cpu.cpu = test_cpu_report;
    out_len = 0;
    tol_server_init(&app, &glue_with_cpu);
}
void tol_test_feed(const uint8_t *data, size_t n)
{
    for (size_t i = 0; i < n; i++) tol_server_feed(&app, data[i]);
}
size_t tol_test_take(uint8_t *dst, size_t cap)
{
    size_t n = out_len < cap ? out_len : cap;
    memcpy(dst, out_buf, n);
    out_len = 0;
    return n;
}
size_t tol_test_app_bytes(void) { return sizeof(tol_server_t); }
/* the main loop's idle work (mcu/app/main.c): one unit, 1 if it did some */
int tol_test_idle(void) { return tol_server_idle_work(&app) ? 1 : 0; }
