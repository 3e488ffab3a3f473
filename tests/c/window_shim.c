/* window_shim.c - drives tol_window over a whole recording for tests/host/test_sensor.py. */
#include <stddef.h>
#include <stdint.h>

#include "tol_window.h"

/* Push rows [n_rows][channels]; write each completed window to out ([max][length][channels]).
 * Returns the number of windows, or -status when init fails. */
int32_t shim_window_run(const int16_t *raw, uint32_t n_rows, uint16_t length, uint16_t stride,
                        uint16_t channels, const int32_t *mul, const int32_t *add, int8_t *ring,
                        uint32_t ring_bytes, int8_t *out, uint32_t max_windows);

int32_t shim_window_run(const int16_t *raw, uint32_t n_rows, uint16_t length, uint16_t stride,
                        uint16_t channels, const int32_t *mul, const int32_t *add, int8_t *ring,
                        uint32_t ring_bytes, int8_t *out, uint32_t max_windows)
{
    tol_window_t w;
    tol_status_t st = tol_window_init(&w, ring, ring_bytes, length, stride, channels, mul, add);
    if (st != TOL_OK) return -(int32_t)st;
    uint32_t n = 0;
    const size_t size = (size_t)length * channels;
    for (uint32_t r = 0; r < n_rows; r++) {
        if (tol_window_push(&w, raw + (size_t)r * channels) && n < max_windows) {
            tol_window_copy(&w, out + (size_t)n * size);
            n++;
        }
    }
    return (int32_t)n;
}
