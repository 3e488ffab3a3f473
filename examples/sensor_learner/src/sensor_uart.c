/*
 * sensor_uart.c - sensor.h over the board's UART (the stand-in sensor):
 *   'r' <int8>   one sensor reading
 *   'l' <uint8>  the label of the last predicted window
 *   'q'          print statistics
 * The UART driver is tinyol's board support (tol_hal.h); in your firmware it
 * is your HAL's.
 */
#include "sensor.h"

#include "tol_hal.h"

sensor_event_t sensor_poll(int16_t *value)
{
    static uint8_t pending; /* command byte waiting for its argument */
    uint8_t byte;
    while (tol_hal_uart_read(&byte)) {
        if (pending == 0u) {
            if (byte == (uint8_t)'q') return SENSOR_STATS;
            if (byte == (uint8_t)'r' || byte == (uint8_t)'l') pending = byte;
            continue; /* anything else: ignored */
        }
        const uint8_t cmd = pending;
        pending = 0u;
        if (cmd == (uint8_t)'r') {
            *value = (int16_t)(int8_t)byte;
            return SENSOR_READING;
        }
        *value = (int16_t)byte;
        return SENSOR_LABEL;
    }
    return SENSOR_NONE;
}
