/*
 * sensor.h - the sensor interface of this example firmware.
 *
 * A real firmware reads an ADC, an accelerometer over I2C/SPI, ... Here the
 * readings come over the UART (sensor_uart.c), so the same firmware runs in
 * QEMU and natively with a host script playing the sensor.
 */
#ifndef SENSOR_H
#define SENSOR_H

#include <stdbool.h>
#include <stdint.h>

/* Events the firmware's inputs produce. */
typedef enum {
    SENSOR_NONE = 0,
    SENSOR_READING, /* value: one int8 sensor reading */
    SENSOR_LABEL,   /* value: the true class of the last window (button / UART) */
    SENSOR_STATS,   /* a request to print the learner's counters */
} sensor_event_t;

/* Poll the inputs (non-blocking); *value is set for READING and LABEL. */
sensor_event_t sensor_poll(int16_t *value);

#endif /* SENSOR_H */
