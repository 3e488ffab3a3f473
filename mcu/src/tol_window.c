/*
 * tol_window.c - sensor rows -> scaled int8 windows (tol_window.h).
 * Twin: host/tinyol/data/sensor.py (scale_raw, windows), checked byte for byte by tests/host/test_sensor.py.
 */
#include "tol_window.h"

#include <string.h>

tol_status_t tol_window_init(tol_window_t *w, int8_t *ring, size_t ring_bytes, uint16_t length,
                             uint16_t stride, uint16_t channels, const int32_t *mul, const int32_t *add)
{
    TOL_CHECK(w != NULL && ring != NULL && mul != NULL && add != NULL, TOL_ERR_ARG);
    TOL_CHECK(length > 0u && stride > 0u && stride <= length, TOL_ERR_ARG);
    TOL_CHECK(channels > 0u && channels <= TOL_WINDOW_MAX_CHANNELS, TOL_ERR_ARG);
    TOL_CHECK(ring_bytes >= TOL_WINDOW_RING_BYTES(length, channels), TOL_ERR_OVERFLOW);
    memset(w, 0, sizeof(*w));
    w->ring = ring;
    w->length = length;
    w->stride = stride;
    w->channels = channels;
    for (uint16_t c = 0; c < channels; c++) {
        w->mul[c] = mul[c];
        w->add[c] = add[c];
    }
    return TOL_OK;
}

void tol_window_reset(tol_window_t *w)
{
    w->head = 0;
    w->rows = 0;
    w->windows = 0;
}

int8_t tol_window_scale(int16_t raw, int32_t mul, int32_t add)
{
    const int64_t acc = (int64_t)raw * mul + add + ((int64_t)1 << (TOL_WINDOW_SHIFT - 1));
    /* floor division by 2^SHIFT: an arithmetic shift (GCC and Clang define >> on negative values so) */
    const int64_t q = acc >> TOL_WINDOW_SHIFT;
    if (q > 127) return 127;
    if (q < -128) return -128;
    return (int8_t)q;
}

bool tol_window_push(tol_window_t *w, const int16_t *raw)
{
    int8_t *row = w->ring + (size_t)w->head * w->channels;
    for (uint16_t c = 0; c < w->channels; c++) row[c] = tol_window_scale(raw[c], w->mul[c], w->add[c]);
    w->head = (uint16_t)(w->head + 1u == w->length ? 0u : w->head + 1u);
    w->rows++;
    if (w->rows < w->length || (w->rows - w->length) % w->stride != 0u) return false;
    w->windows++;
    return true;
}

void tol_window_copy(const tol_window_t *w, int8_t *out)
{
    /* head is the oldest row once the ring is full (a window is only ever complete then) */
    const size_t row = w->channels;
    const size_t older = (size_t)(w->length - w->head) * row;  /* rows head..length-1 */
    memcpy(out, w->ring + (size_t)w->head * row, older);
    memcpy(out + older, w->ring, (size_t)w->head * row);
}
