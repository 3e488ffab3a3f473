/*
 * i2c_stm32l4.c - polled I2C master and the user button of the STM32L4 boards (tol_i2c.h).
 * The B-L475E-IOT01A's on-board sensors (LSM6DSL, HTS221, LPS22HB, LIS3MDL) sit on I2C2:
 * PB10 SCL, PB11 SDA, alternate function 4 (UM2153, RM0351 / datasheet DS10969).
 */
#include "tol_i2c.h"

#include "stm32l4.h"

#define I2C_CR1 0x00u
#define I2C_CR1_PE (1u << 0)
#define I2C_CR2 0x04u
#define I2C_CR2_RD_WRN (1u << 10)
#define I2C_CR2_START (1u << 13)
#define I2C_CR2_STOP (1u << 14)
#define I2C_CR2_NBYTES_POS 16u
#define I2C_CR2_AUTOEND (1u << 25)
#define I2C_TIMINGR 0x10u
#define I2C_ISR 0x18u
#define I2C_ISR_TXIS (1u << 1)
#define I2C_ISR_RXNE (1u << 2)
#define I2C_ISR_NACKF (1u << 4)
#define I2C_ISR_STOPF (1u << 5)
#define I2C_ISR_TC (1u << 6)
#define I2C_ICR 0x1Cu
#define I2C_ICR_ALL 0x3F38u   /* ADDRCF NACKCF STOPCF BERRCF ARLOCF OVRCF PECCF TIMOUTCF ALERTCF */
#define I2C_RXDR 0x24u
#define I2C_TXDR 0x28u

#define RCC_APB1ENR1_I2C2EN (1u << 22)
#define RCC_AHB2ENR_GPIOBEN (1u << 1)
#define RCC_AHB2ENR_GPIOCEN (1u << 2)
#define GPIO_OTYPER 0x04u
#define GPIO_IDR 0x10u

#define WAIT_POLLS 200000u   /* > 20 ms at 80 MHz: a 255-byte transfer at 100 kHz takes 23 ms */

static void pin_mode(uint32_t port, uint32_t pin, uint32_t mode, uint32_t af, uint32_t pull)
{
    const uint32_t s2 = 2u * pin;
    TOL_REG(port, GPIO_MODER) = (TOL_REG(port, GPIO_MODER) & ~(3u << s2)) | (mode << s2);
    TOL_REG(port, GPIO_PUPDR) = (TOL_REG(port, GPIO_PUPDR) & ~(3u << s2)) | (pull << s2);
    if (mode == 2u) {
        const uint32_t off = pin < 8u ? GPIO_AFRL : GPIO_AFRH;
        const uint32_t s4 = 4u * (pin & 7u);
        TOL_REG(port, off) = (TOL_REG(port, off) & ~(0xFu << s4)) | (af << s4);
        TOL_REG(port, GPIO_OTYPER) |= 1u << pin;   /* open drain */
    }
}

void tol_i2c_init(const tol_i2c_t *bus)
{
    TOL_REG(TOL_RCC_BASE, RCC_AHB2ENR) |= RCC_AHB2ENR_GPIOBEN;
    TOL_REG(TOL_RCC_BASE, RCC_APB1ENR1) |= RCC_APB1ENR1_I2C2EN;
    (void)TOL_REG(TOL_RCC_BASE, RCC_APB1ENR1);
    pin_mode(TOL_GPIOB_BASE, 10u, 2u, 4u, 1u);
    pin_mode(TOL_GPIOB_BASE, 11u, 2u, 4u, 1u);
    TOL_REG(bus->base, I2C_CR1) = 0u;
    TOL_REG(bus->base, I2C_TIMINGR) = bus->timingr;
    TOL_REG(bus->base, I2C_CR1) = I2C_CR1_PE;
}

/* Wait for `flag`; TOL_ERR_IO on NACK or when it does not come. */
static tol_status_t wait_flag(const tol_i2c_t *bus, uint32_t flag)
{
    for (uint32_t i = 0; i < WAIT_POLLS; i++) {
        const uint32_t isr = TOL_REG(bus->base, I2C_ISR);
        if ((isr & flag) != 0u) return TOL_OK;
        if ((isr & I2C_ISR_NACKF) != 0u) break;
    }
    /* end the transfer: a STOP (ignored by an idle controller), then clear every flag */
    TOL_REG(bus->base, I2C_CR2) |= I2C_CR2_STOP;
    TOL_REG(bus->base, I2C_ICR) = I2C_ICR_ALL;
    return TOL_ERR_IO;
}

static uint32_t cr2(uint8_t addr, size_t n)
{
    return ((uint32_t)addr << 1) | ((uint32_t)n << I2C_CR2_NBYTES_POS) | I2C_CR2_START;
}

tol_status_t tol_i2c_write(const tol_i2c_t *bus, uint8_t addr, uint8_t reg, const uint8_t *data, size_t n)
{
    TOL_CHECK(n <= 254u && (n == 0u || data != NULL), TOL_ERR_ARG);
    TOL_REG(bus->base, I2C_ICR) = I2C_ICR_ALL;
    TOL_REG(bus->base, I2C_CR2) = cr2(addr, n + 1u) | I2C_CR2_AUTOEND;
    TOL_TRY(wait_flag(bus, I2C_ISR_TXIS));
    TOL_REG(bus->base, I2C_TXDR) = reg;
    for (size_t i = 0; i < n; i++) {
        TOL_TRY(wait_flag(bus, I2C_ISR_TXIS));
        TOL_REG(bus->base, I2C_TXDR) = data[i];
    }
    TOL_TRY(wait_flag(bus, I2C_ISR_STOPF));
    TOL_REG(bus->base, I2C_ICR) = I2C_ICR_ALL;
    return TOL_OK;
}

tol_status_t tol_i2c_read(const tol_i2c_t *bus, uint8_t addr, uint8_t reg, uint8_t *data, size_t n)
{
    TOL_CHECK(n >= 1u && n <= 255u && data != NULL, TOL_ERR_ARG);
    TOL_REG(bus->base, I2C_ICR) = I2C_ICR_ALL;
    TOL_REG(bus->base, I2C_CR2) = cr2(addr, 1u);          /* write the register address, no stop */
    TOL_TRY(wait_flag(bus, I2C_ISR_TXIS));
    TOL_REG(bus->base, I2C_TXDR) = reg;
    TOL_TRY(wait_flag(bus, I2C_ISR_TC));
    TOL_REG(bus->base, I2C_CR2) = cr2(addr, n) | I2C_CR2_RD_WRN | I2C_CR2_AUTOEND;  /* repeated start */
    for (size_t i = 0; i < n; i++) {
        TOL_TRY(wait_flag(bus, I2C_ISR_RXNE));
        data[i] = (uint8_t)TOL_REG(bus->base, I2C_RXDR);
    }
    TOL_TRY(wait_flag(bus, I2C_ISR_STOPF));
    TOL_REG(bus->base, I2C_ICR) = I2C_ICR_ALL;
    return TOL_OK;
}

void tol_button_init(void)
{
    TOL_REG(TOL_RCC_BASE, RCC_AHB2ENR) |= RCC_AHB2ENR_GPIOCEN;
    (void)TOL_REG(TOL_RCC_BASE, RCC_AHB2ENR);
    pin_mode(TOL_GPIOC_BASE, 13u, 0u, 0u, 0u);   /* input; the board pulls PC13 up */
}

int tol_button_down(void)
{
    return (TOL_REG(TOL_GPIOC_BASE, GPIO_IDR) & (1u << 13)) == 0u;
}
