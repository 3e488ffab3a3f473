/*
 * imu_lsm6dsx.c - ST LSM6DSL / LSM6DSO over I2C (imu.h), the B-L475E-IOT01A's IMU on I2C2 at 0x6A.
 *
 * Both chips share WHO_AM_I (0x0F), CTRL1_XL (0x10: ODR_XL[7:4] FS_XL[3:2]), CTRL2_G (0x11:
 * ODR_G[7:4] FS_G[3:2]) and CTRL3_C (0x12: IF_INC, BDU). Set: 52 Hz, +-8 g, 2000 dps (the
 * sensitivities host/tinyol/data/sensor.py folds into imu_config.h). Their FIFOs differ:
 *  - LSM6DSL (WHO_AM_I 0x6A): FIFO_CTRL3 (0x08) decimation per data set, FIFO_CTRL5 (0x0A)
 *    ODR_FIFO[6:3] FIFO_MODE[2:0]; FIFO_STATUS1/2 (0x3A/0x3B) DIFF_FIFO[10:0] in 16-bit words;
 *    FIFO_DATA_OUT_L/H (0x3E/0x3F); words come in the pattern gx gy gz ax ay az.
 *  - LSM6DSO (WHO_AM_I 0x6C): FIFO_CTRL3 (0x09) BDR_GY[7:4] BDR_XL[3:0], FIFO_CTRL4 (0x0A)
 *    FIFO_MODE[2:0]; FIFO_STATUS1/2 (0x3A/0x3B) DIFF_FIFO[9:0] in tagged words; each word is
 *    FIFO_DATA_OUT_TAG (0x78, TAG_SENSOR[7:3]: 1 gyro, 2 accel) + 6 data bytes (0x79..0x7E).
 * Rows pair the n-th accelerometer sample with the n-th gyroscope sample.
 */
#include "imu.h"

#include <string.h>

#include "tol_i2c.h"
#include "stm32l4.h"

#define ADDR 0x6Au
#define WHO_AM_I 0x0Fu
#define WHO_LSM6DSL 0x6Au
#define WHO_LSM6DSO 0x6Cu
#define CTRL1_XL 0x10u
#define CTRL2_G 0x11u
#define CTRL3_C 0x12u
#define ODR_52HZ_FS_MAX 0x3Cu  /* ODR 0011 (52 Hz) in bits 7:4; FS 11: +-8 g / 2000 dps */
#define CTRL3_IF_INC 0x04u
#define CTRL3_BDU 0x40u
#define CTRL3_SW_RESET 0x01u
#define FIFO_STATUS1 0x3Au

static const tol_i2c_t bus = {TOL_I2C2_BASE, 0x10909CECu};  /* 100 kHz at PCLK1 80 MHz */
static uint8_t chip;

/* pairing queues: accelerometer and gyroscope samples not yet in a row */
#define PENDING 8u
static int16_t acc[PENDING][3], gyr[PENDING][3];
static size_t n_acc, n_gyr;

static tol_status_t wr(uint8_t reg, uint8_t v)
{
    return tol_i2c_write(&bus, ADDR, reg, &v, 1u);
}

tol_status_t imu_init(uint8_t *who)
{
    tol_i2c_init(&bus);
    *who = 0u;
    TOL_TRY(tol_i2c_read(&bus, ADDR, WHO_AM_I, who, 1u));
    chip = *who;
    TOL_CHECK(chip == WHO_LSM6DSL || chip == WHO_LSM6DSO, TOL_ERR_IO);
    TOL_TRY(wr(CTRL3_C, CTRL3_IF_INC | CTRL3_BDU));
    TOL_TRY(wr(CTRL1_XL, ODR_52HZ_FS_MAX));
    TOL_TRY(wr(CTRL2_G, ODR_52HZ_FS_MAX));
    if (chip == WHO_LSM6DSO) {
        TOL_TRY(wr(0x09u, 0x33u));           /* FIFO_CTRL3: BDR_GY = BDR_XL = 52 Hz */
        TOL_TRY(wr(0x0Au, 0x06u));           /* FIFO_CTRL4: continuous mode */
    } else {
        TOL_TRY(wr(0x08u, 0x09u));           /* FIFO_CTRL3: gyro and accel, no decimation */
        TOL_TRY(wr(0x0Au, (uint8_t)((3u << 3) | 0x06u)));  /* FIFO_CTRL5: 52 Hz, continuous */
    }
    tol_button_init();
    n_acc = n_gyr = 0u;
    return TOL_OK;
}

tol_status_t imu_restart(void)
{
    /* FIFO_MODE bypass empties the FIFO; then continuous again */
    const uint8_t reg = 0x0Au;   /* FIFO_CTRL4 (LSM6DSO) / FIFO_CTRL5 (LSM6DSL): same address */
    const uint8_t cont = chip == WHO_LSM6DSO ? 0x06u : (uint8_t)((3u << 3) | 0x06u);
    TOL_TRY(wr(reg, (uint8_t)(cont & ~0x07u)));
    TOL_TRY(wr(reg, cont));
    n_acc = n_gyr = 0u;
    return TOL_OK;
}

int imu_button_down(void)
{
    return tol_button_down();
}

static int16_t le16(const uint8_t *p)
{
    return (int16_t)(uint16_t)((uint16_t)p[0] | (uint16_t)((uint16_t)p[1] << 8));
}

static size_t fifo_words(void)
{
    uint8_t st[2];
    if (tol_i2c_read(&bus, ADDR, FIFO_STATUS1, st, 2u) != TOL_OK) return 0u;
    const uint16_t mask = chip == WHO_LSM6DSO ? 0x3FFu : 0x7FFu;
    return (size_t)(((uint16_t)st[0] | (uint16_t)((uint16_t)st[1] << 8)) & mask);
}

static void push3(int16_t (*q)[3], size_t *n, const uint8_t *d)
{
    if (*n == PENDING) return;  /* one side far ahead of the other: drop (never seen with equal ODRs) */
    for (size_t i = 0; i < 3u; i++) q[*n][i] = le16(d + 2u * i);
    (*n)++;
}

static void drain_dso(size_t words)
{
    for (size_t w = 0; w < words && n_acc < PENDING && n_gyr < PENDING; w++) {
        uint8_t b[7];
        if (tol_i2c_read(&bus, ADDR, 0x78u, b, 7u) != TOL_OK) return;
        const uint8_t tag = (uint8_t)(b[0] >> 3);
        if (tag == 0x02u) push3(acc, &n_acc, b + 1);
        else if (tag == 0x01u) push3(gyr, &n_gyr, b + 1);
    }
}

static void drain_dsl(size_t words)
{
    for (; words >= 6u && n_acc < PENDING && n_gyr < PENDING; words -= 6u) {
        uint8_t b[12];
        for (size_t i = 0; i < 6u; i++) {
            if (tol_i2c_read(&bus, ADDR, 0x3Eu, b + 2u * i, 2u) != TOL_OK) return;
        }
        push3(gyr, &n_gyr, b);
        push3(acc, &n_acc, b + 6);
    }
}

size_t imu_read_rows(int16_t (*rows)[IMU_AXES], size_t max)
{
    const size_t words = fifo_words();
    if (chip == WHO_LSM6DSO) drain_dso(words);
    else drain_dsl(words);
    size_t n = 0;
    while (n < max && n < n_acc && n < n_gyr) {
        for (size_t i = 0; i < 3u; i++) {
            rows[n][i] = acc[n][i];
            rows[n][3u + i] = gyr[n][i];
        }
        n++;
    }
    /* shift out the rows taken */
    memmove(acc, acc[n], (n_acc - n) * sizeof(acc[0]));
    memmove(gyr, gyr[n], (n_gyr - n) * sizeof(gyr[0]));
    n_acc -= n;
    n_gyr -= n;
    return n;
}
