/*
 * main.c - a firmware that learns from the board's own IMU (docs/sensor.md), over tinyol.h.
 *
 * The IMU (imu.h) fills its FIFO at 52 Hz; the main loop drains it, scales each row to the
 * model's int8 input and cuts windows of the model's length every IMU_WINDOW_STRIDE rows
 * (tol_window.h, coefficients from imu_config.h, generated from the model's manifest by
 * `tinyol sensor-header`), predicts each window and learns it when its label is known:
 *   - from a label schedule the host sent before the recording started ('s' commands: from
 *     row R on, label L): a window whose first and last rows have the same label learns it;
 *   - from the host now ('l' <label>: the last predicted window);
 *   - from the user button: a short press selects the next class ("class <k>"), a press held
 *     for a second or more learns the last predicted window as that class.
 * Between FIFO reads the core sleeps (WFI in tol_hal_idle) until the next interrupt.
 *
 * Host -> device (bytes on the console UART):
 *   's' u32 row, u8 label (255: unlabelled)   append a schedule segment   -> "segment <n>"
 *   'g' u32 rows                               restart the FIFO, take `rows` rows (0: no limit)
 *                                                                          -> "go <rows>"
 *   'l' u8 label                               learn the last window now   -> "learned ..."
 *   'q'                                        counters -> "stats <learned> <updates> <classes> <windows>"
 * Device -> host (lines): "boot model=<m> sensor=0x<who> length=<L> stride=<S> channels=<C>
 * rate=<Hz> status=<st>", per window "w <index> <crc32 of its int8 bytes> <label> <conf x 1e6>",
 * "learned <index> <label> <samples learned>", "done <windows>", "error <status>".
 */
#include <stdint.h>
#include <string.h>

#include "imu.h"
#include "imu_config.h"
#include "tinyol.h"
#include "tol_crc32.h"
#include "tol_hal.h"
#include "tol_window.h"

int tol_server_main(void);

_Static_assert(IMU_WINDOW_LENGTH * IMU_CHANNELS == TOL_INPUT_SIZE, "imu_config.h is for another model");
_Static_assert(IMU_CHANNELS == IMU_AXES, "imu_config.h is for another sensor");

#define MAX_SEGMENTS 64u
#define LONG_PRESS_ROWS IMU_RATE_HZ  /* a press held for a second */

static tinyol_t learner;
/* where the build's memory plan puts them (tinyol.h: TINYOL_LEARNER_SECTION, the replay buffer
 * apart when the plan splits it, e.g. the learner in SRAM2 and the buffer in SRAM1) */
static _Alignas(8) uint8_t learner_mem[TINYOL_LEARNER_MEM_BYTES] TINYOL_LEARNER_SECTION;
#if TINYOL_REPLAY_APART
static _Alignas(8) uint8_t replay_mem[TINYOL_REPLAY_MEM_BYTES] TINYOL_REPLAY_SECTION;
#define REPLAY_MEM replay_mem, sizeof(replay_mem)
#else
#define REPLAY_MEM NULL, 0u
#endif
static tol_window_t win;
static int8_t ring[TOL_WINDOW_RING_BYTES(IMU_WINDOW_LENGTH, IMU_CHANNELS)];
static int8_t window[TINYOL_INPUT_SIZE];
static int16_t rows[16][IMU_AXES];
static struct {
    uint32_t row;
    uint8_t label;
} segments[MAX_SEGMENTS];
static uint32_t n_segments;

static void print(const char *s)
{
    tol_hal_uart_write((const uint8_t *)s, strlen(s));
}

static void print_u(uint32_t u)
{
    char buf[11];
    size_t n = sizeof(buf);
    do {
        buf[--n] = (char)('0' + (char)(u % 10u));
        u /= 10u;
    } while (u != 0u);
    tol_hal_uart_write((const uint8_t *)buf + n, sizeof(buf) - n);
}

static void print_i(int32_t v)
{
    if (v < 0) {
        print("-");
        print_u((uint32_t)(-(v + 1)) + 1u);
    } else {
        print_u((uint32_t)v);
    }
}

static void line(const char *what, const int32_t *v, size_t n)
{
    print(what);
    for (size_t i = 0; i < n; i++) {
        print(" ");
        print_i(v[i]);
    }
    print("\n");
}

static uint8_t read_byte(void)
{
    uint8_t b;
    while (!tol_hal_uart_read(&b)) tol_hal_idle(); /* sleep until a byte (or SysTick) */
    return b;
}

static uint32_t read_u32(void)
{
    uint32_t v = 0;
    for (uint32_t i = 0; i < 4u; i++) v |= (uint32_t)read_byte() << (8u * i);
    return v;
}

/* The schedule's label of `row` (255 when none). */
static uint8_t label_at(uint32_t row)
{
    uint8_t label = 255u;
    for (uint32_t i = 0; i < n_segments && segments[i].row <= row; i++) label = segments[i].label;
    return label;
}

static void learn(uint32_t index, uint8_t label)
{
    tinyol_result_t r;
    tol_status_t st = tinyol_learn(&learner, label, &r);
    if (st != TOL_OK) {
        const int32_t v[1] = {(int32_t)st};
        line("error", v, 1);
        return;
    }
    const int32_t v[3] = {(int32_t)index, (int32_t)label, (int32_t)r.samples_seen};
    line("learned", v, 3);
}

/* Predict the window just completed; learn it when the schedule labels it. true: it waits
 * for a label from the host or the button. */
static bool predict_window(void)
{
    const uint32_t index = win.windows - 1u;
    tol_window_copy(&win, window);
    int32_t label = -1;
    float conf = 0.0f;
    const tol_status_t st = tinyol_predict(&learner, window, &label, &conf);
    if (st != TOL_OK) {
        const int32_t e[1] = {(int32_t)st};
        line("error", e, 1);
        return false;
    }
    print("w ");
    print_u(index);
    print(" ");
    print_u(tol_crc32(0u, (const uint8_t *)window, sizeof(window)));
    print(" ");
    print_i(label);
    print(" ");
    print_i((int32_t)(conf * 1e6f));
    print("\n");
    const uint32_t first = index * IMU_WINDOW_STRIDE;
    const uint8_t lab = label_at(first);
    if (lab != 255u && lab == label_at(first + IMU_WINDOW_LENGTH - 1u)) {
        learn(index, lab);
        return false;
    }
    return true;
}

int tol_server_main(void)
{
    tol_hal_init();
    uint8_t who = 0;
    const int32_t mul[IMU_CHANNELS] = IMU_SCALE_MUL;
    const int32_t add[IMU_CHANNELS] = IMU_SCALE_ADD;
    tol_status_t st = tinyol_init_split(&learner, learner_mem, sizeof(learner_mem), REPLAY_MEM);
    if (st == TOL_OK) {
        st = tol_window_init(&win, ring, sizeof(ring), IMU_WINDOW_LENGTH, IMU_WINDOW_STRIDE, IMU_CHANNELS,
                             mul, add);
    }
    if (st == TOL_OK) st = imu_init(&who);
    static const char hex[] = "0123456789abcdef";
    const char who_hex[3] = {hex[who >> 4], hex[who & 15u], 0};
    print("boot model=" TOL_MODEL_NAME " sensor=0x");
    print(who_hex);
    const int32_t v[5] = {IMU_WINDOW_LENGTH, IMU_WINDOW_STRIDE, IMU_CHANNELS, IMU_RATE_HZ, (int32_t)st};
    print(" length=");
    print_i(v[0]);
    print(" stride=");
    print_i(v[1]);
    print(" channels=");
    print_i(v[2]);
    print(" rate=");
    print_i(v[3]);
    print(" status=");
    print_i(v[4]);
    print("\n");

    bool running = false, have_window = false;
    uint32_t limit = 0, taken = 0, pressed = 0;
    uint8_t selected = 0;
    for (;;) {
        const size_t n = imu_read_rows(rows, sizeof(rows) / sizeof(rows[0]));
        for (size_t r = 0; r < n; r++) {
            /* the button, sampled with the rows: short press = next class, long press = learn */
            if (imu_button_down()) {
                pressed++;
            } else if (pressed > 0u) {
                if (pressed < LONG_PRESS_ROWS) {
                    selected = (uint8_t)((selected + 1u) % TOL_HEAD_MAX_CLASSES);
                    const int32_t k[1] = {selected};
                    line("class", k, 1);
                } else if (have_window) {
                    learn(win.windows - 1u, selected);
                    have_window = false;
                }
                pressed = 0;
            }
            if (running && tol_window_push(&win, rows[r])) have_window = predict_window();
            if (running && limit != 0u && ++taken == limit) {
                running = false;
                const int32_t k[1] = {(int32_t)win.windows};
                line("done", k, 1);
            }
        }
        if (n > 0u) continue;  /* drain the sensor first; commands wait in the UART's ring */
        uint8_t cmd;
        while (tol_hal_uart_read(&cmd)) {
            if (cmd == (uint8_t)'s') {
                const uint32_t row = read_u32();
                const uint8_t label = read_byte();
                if (n_segments < MAX_SEGMENTS) {
                    segments[n_segments].row = row;
                    segments[n_segments].label = label;
                    n_segments++;
                }
                const int32_t v1[1] = {(int32_t)n_segments};
                line("segment", v1, 1);
            } else if (cmd == (uint8_t)'g') {
                limit = read_u32();
                st = imu_restart();
                tol_window_reset(&win);
                taken = 0;
                running = st == TOL_OK;
                const int32_t v2[2] = {(int32_t)limit, (int32_t)st};
                line("go", v2, 2);
            } else if (cmd == (uint8_t)'l') {
                const uint8_t label = read_byte();
                if (have_window) learn(win.windows - 1u, label);
                have_window = false;
            } else if (cmd == (uint8_t)'q') {
                tol_learner_stats_t s;
                tinyol_stats(&learner, &s);
                const int32_t v4[4] = {(int32_t)s.samples_seen, (int32_t)s.updates, (int32_t)s.n_active,
                                      (int32_t)win.windows};
                line("stats", v4, 4);
            }
        }
        tol_hal_idle();
    }
}
