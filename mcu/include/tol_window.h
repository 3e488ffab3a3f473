/*
 * tol_window.h - a sensor's readings -> the model's int8 inputs (windowing and scaling).
 *
 * A sensor gives rows of `channels` int16 readings (raw LSB, e.g. ax ay az gx gy gz of an IMU).
 * Each reading is scaled to the model's int8 input in integer arithmetic only:
 *
 *     q = clamp(floor((raw * mul[c] + add[c] + 2^(TOL_WINDOW_SHIFT-1)) / 2^TOL_WINDOW_SHIFT), -128, 127)
 *
 * i.e. round-half-up of raw * mul/2^S + add/2^S. The host folds the sensor's sensitivity (unit per
 * LSB), the training-time normalisation (offset, divisor: from the model's manifest) and the
 * model's input quantization (scale, zero point) into mul and add (host/tinyol/data/sensor.py, which
 * also holds this module's twin: the same integers give the same bytes on both sides).
 *
 * Rows go into a ring of `length` rows; a window is complete at rows length, length + stride,
 * length + 2 * stride, ... (windows start at rows 0, stride, 2 * stride, ... as the host's
 * dataset windowing cuts a recording). No float, no heap: the caller owns the ring.
 */
#ifndef TOL_WINDOW_H
#define TOL_WINDOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tol_status.h"

#define TOL_WINDOW_SHIFT 20          /* fixed-point fraction bits of mul and add */
#define TOL_WINDOW_MAX_CHANNELS 8

/* bytes of the ring a window of `length` rows x `channels` needs */
#define TOL_WINDOW_RING_BYTES(length, channels) ((size_t)(length) * (size_t)(channels))

typedef struct {
    int8_t *ring;          /* caller-owned: [length][channels] scaled rows, a ring */
    int32_t mul[TOL_WINDOW_MAX_CHANNELS];
    int32_t add[TOL_WINDOW_MAX_CHANNELS];
    uint16_t length;       /* rows per window (the model's input length) */
    uint16_t stride;       /* rows between window starts (1..length: overlapping or touching) */
    uint16_t channels;     /* readings per row (1..TOL_WINDOW_MAX_CHANNELS) */
    uint16_t head;         /* ring row the next reading goes to */
    uint32_t rows;         /* rows pushed since init/reset */
    uint32_t windows;      /* windows completed since init/reset */
} tol_window_t;

/*
 * Set up `w`. ring (caller-owned, >= TOL_WINDOW_RING_BYTES(length, channels) bytes, lives as long
 * as w); mul, add (in, [channels], Q TOL_WINDOW_SHIFT; copied). TOL_ERR_ARG for a zero length,
 * a stride outside 1..length or a channel count outside 1..TOL_WINDOW_MAX_CHANNELS;
 * TOL_ERR_OVERFLOW when the ring is too small.
 */
tol_status_t tol_window_init(tol_window_t *w, int8_t *ring, size_t ring_bytes, uint16_t length,
                             uint16_t stride, uint16_t channels, const int32_t *mul, const int32_t *add);

/* Forget every row pushed (the next window starts with the next row). */
void tol_window_reset(tol_window_t *w);

/* One reading scaled to the model's int8 (the formula above). */
int8_t tol_window_scale(int16_t raw, int32_t mul, int32_t add);

/*
 * Push one row (in: raw[channels]); true when it completes a window (then tol_window_copy gives
 * it, until the next push).
 */
bool tol_window_push(tol_window_t *w, const int16_t *raw);

/* The last `length` rows, oldest first (out: int8_t[length * channels], row-major [t][c]). */
void tol_window_copy(const tol_window_t *w, int8_t *out);

#endif /* TOL_WINDOW_H */
