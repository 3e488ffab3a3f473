/*
 * tol_i2c.h - polled I2C master on an STM32L4 (board part; mcu/boards/stm32l4/i2c_stm32l4.c).
 *
 * Register transfers as sensors use them: write [reg, data...]; write [reg] then a repeated
 * start and read n bytes. STM32L4 I2C v2 (RM0351 39.7): CR2 SADD/RD_WRN/NBYTES/AUTOEND/START,
 * ISR TXIS/RXNE/TC/STOPF/NACKF. Every wait is bounded: a device that does not acknowledge, a
 * stuck bus or a flag that never comes gives TOL_ERR_IO, never a hang.
 */
#ifndef TOL_I2C_H
#define TOL_I2C_H

#include <stddef.h>
#include <stdint.h>

#include "tol_status.h"

typedef struct {
    uint32_t base;       /* I2Cx registers (TOL_I2C2_BASE) */
    uint32_t timingr;    /* TIMINGR for the bus speed at the kernel clock (PCLK1 = 80 MHz) */
} tol_i2c_t;

/* Clock, pins (board's SCL/SDA, open drain, alternate function) and the controller on. */
void tol_i2c_init(const tol_i2c_t *bus);

/* Write n (<= 254) bytes starting at register `reg` of the 7-bit address `addr`. */
tol_status_t tol_i2c_write(const tol_i2c_t *bus, uint8_t addr, uint8_t reg, const uint8_t *data, size_t n);

/* Read n (1..255) bytes starting at register `reg` (out: data[n]). */
tol_status_t tol_i2c_read(const tol_i2c_t *bus, uint8_t addr, uint8_t reg, uint8_t *data, size_t n);

/* The board's user button (B-L475E-IOT01A: B1 on PC13, low while pressed): configured as input. */
void tol_button_init(void);
/* true while the button is held down */
int tol_button_down(void);

#endif /* TOL_I2C_H */
