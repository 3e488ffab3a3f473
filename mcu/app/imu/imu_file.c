/*
 * imu_file.c - imu.h on the native target: rows from a file in place of the I2C bus.
 * The file ($TINYOL_IMU_FILE) holds rows of 6 little-endian int16 (ax ay az gx gy gz LSB),
 * as `tinyol record-to-resd --raw` writes them. 52 rows (one second at 52 Hz) per call.
 */
#include "imu.h"

#include <stdio.h>
#include <stdlib.h>

static FILE *src;

tol_status_t imu_init(uint8_t *who)
{
    const char *path = getenv("TINYOL_IMU_FILE");
    src = path != NULL ? fopen(path, "rb") : NULL;
    *who = 0u;
    return src != NULL ? TOL_OK : TOL_ERR_IO;
}

tol_status_t imu_restart(void)
{
    if (src == NULL) return TOL_ERR_IO;
    rewind(src);
    return TOL_OK;
}

size_t imu_read_rows(int16_t (*rows)[IMU_AXES], size_t max)
{
    if (src == NULL) return 0u;
    size_t n = 0;
    for (; n < max && n < 52u; n++) {
        uint8_t b[2 * IMU_AXES];
        if (fread(b, 1u, sizeof(b), src) != sizeof(b)) break;
        for (size_t i = 0; i < IMU_AXES; i++) {
            rows[n][i] = (int16_t)(uint16_t)((uint16_t)b[2u * i] | (uint16_t)((uint16_t)b[2u * i + 1u] << 8));
        }
    }
    return n;
}

int imu_button_down(void)
{
    return 0;
}
