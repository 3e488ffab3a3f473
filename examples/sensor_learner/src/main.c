/*
 * main.c - an example of YOUR firmware using tinyol as a library (tinyol.h).
 *
 * Main loop: poll the sensor; collect readings into a window of
 * TINYOL_INPUT_SIZE values; when the window is full, predict its class and
 * report it; when the true label arrives (UART here; a button or a second
 * sensor in the field), learn the window from it. Nothing of tinyol's own
 * firmware (protocol, main loop) is used: only tinyol.h, plus the board
 * support's UART for printing.
 *
 * Output lines: "boot model=<name> inputs=<n> classes=<n>",
 * "pred <label> <confidence x 1e6>", "learned <label> <samples learned>",
 * "stats <learned> <updates> <active classes> <replay fill>", "error <status>".
 */
#include <stdint.h>
#include <string.h>

#include "sensor.h"
#include "tinyol.h"
#include "tol_hal.h"

int tol_server_main(void);

static tinyol_t learner;
static _Alignas(8) uint8_t learner_mem[TINYOL_MEM_BYTES];
static int8_t window[TINYOL_INPUT_SIZE];

static void print(const char *s)
{
    tol_hal_uart_write((const uint8_t *)s, strlen(s));
}

static void print_int(int32_t v)
{
    char buf[12];
    size_t n = sizeof(buf);
    uint32_t u = v < 0 ? (uint32_t)(-(v + 1)) + 1u : (uint32_t)v;
    do {
        buf[--n] = (char)('0' + (char)(u % 10u));
        u /= 10u;
    } while (u != 0u);
    if (v < 0) buf[--n] = '-';
    tol_hal_uart_write((const uint8_t *)buf + n, sizeof(buf) - n);
}

static void report(const char *what, int32_t a, int32_t b)
{
    print(what);
    print(" ");
    print_int(a);
    print(" ");
    print_int(b);
    print("\n");
}

int tol_server_main(void)
{
    tol_hal_init();
    tol_status_t st = tinyol_init(&learner, learner_mem, sizeof(learner_mem));
    print("boot model=" TOL_MODEL_NAME " inputs=");
    print_int((int32_t)TINYOL_INPUT_SIZE);
    print(" classes=");
    print_int((int32_t)TOL_HEAD_MAX_CLASSES);
    print("\n");
    if (st != TOL_OK) report("error", (int32_t)st, 0);
    size_t fill = 0;
    for (;;) {
        int16_t value = 0;
        switch (sensor_poll(&value)) {
        case SENSOR_READING:
            window[fill++] = (int8_t)value;
            if (fill == TINYOL_INPUT_SIZE) { /* a full window: predict (hop = window) */
                fill = 0;
                int32_t label = -1;
                float confidence = 0.0f;
                st = tinyol_predict(&learner, window, &label, &confidence);
                if (st == TOL_OK) {
                    report("pred", label, (int32_t)(confidence * 1e6f));
                } else {
                    report("error", (int32_t)st, 0);
                }
            }
            break;
        case SENSOR_LABEL: {
            tinyol_result_t r;
            st = tinyol_learn(&learner, (uint16_t)value, &r);
            if (st == TOL_OK) {
                report("learned", value, (int32_t)r.samples_seen);
            } else {
                report("error", (int32_t)st, 0);
            }
            break;
        }
        case SENSOR_STATS: {
            tol_learner_stats_t s;
            tinyol_stats(&learner, &s);
            print("stats ");
            print_int((int32_t)s.samples_seen);
            print(" ");
            print_int((int32_t)s.updates);
            print(" ");
            print_int((int32_t)s.n_active);
            print(" ");
            print_int((int32_t)s.replay_fill);
            print("\n");
            break;
        }
        case SENSOR_NONE:
        default:
            break;
        }
    }
}
