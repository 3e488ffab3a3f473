/*
 * imu.h - the 6-axis IMU of this firmware: rows of ax ay az gx gy gz (int16 LSB).
 *
 * imu_lsm6dsx.c: the B-L475E-IOT01A's LSM6DSL on I2C2 (or the register-compatible LSM6DSO,
 * told apart by WHO_AM_I), both sensors at 52 Hz into the chip's FIFO, drained by the main loop.
 * imu_file.c (native target): the same rows from a file, in place of the bus.
 */
#ifndef IMU_H
#define IMU_H

#include <stddef.h>
#include <stdint.h>

#include "tol_status.h"

#define IMU_AXES 6

/* Find the chip (WHO_AM_I), set full scales (+-2 g, 250 dps), 52 Hz, FIFO on.
 * out: *who (the WHO_AM_I byte read, 0 if none answered). TOL_ERR_IO when no known chip answers. */
tol_status_t imu_init(uint8_t *who);

/* Empty the chip's FIFO and the pairing queues: the next row read is the next one sampled. */
tol_status_t imu_restart(void);

/* Up to `max` complete rows waiting in the FIFO, oldest first (out: rows[max][IMU_AXES]);
 * returns the number read (0 when none is ready yet). */
size_t imu_read_rows(int16_t (*rows)[IMU_AXES], size_t max);

/* The board's user button: nonzero while held down (0 where there is none). */
int imu_button_down(void);

#endif /* IMU_H */
