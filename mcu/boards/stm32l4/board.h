/*
 * board.h - what differs between the supported STM32L4 boards.
 *
 * Each board_<env>.c defines one `tol_board` descriptor; the build links exactly
 * one of them (chosen by file, never by #ifdef). The shared code in
 * hal_stm32l4.c reads everything board-specific from it.
 */
#ifndef TOL_BOARD_H
#define TOL_BOARD_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    uint32_t gpio_base;    /* port of the pin */
    uint8_t pin;           /* 0..15 */
    uint8_t af;            /* alternate function number */
} tol_pin_t;

typedef struct {
    const char *name;          /* PlatformIO environment name */
    uint32_t uart_base;        /* console U(S)ART */
    uint8_t uart_irqn;         /* its NVIC interrupt number */
    bool uart_is_lpuart;       /* LPUART1: BRR = 256 * f / baud */
    uint32_t uart_enr_offset;  /* RCC enable register offset (APB1ENR1/APB1ENR2/APB2ENR) */
    uint32_t uart_enr_bit;
    uint32_t gpio_enr_bits;    /* RCC_AHB2ENR bits of the ports used */
    bool needs_vddio2;         /* port G on L4R5 is powered by VDDIO2 (PWR_CR2.IOSV) */
    tol_pin_t tx;
    tol_pin_t rx;
} tol_board_t;

extern const tol_board_t tol_board;

#endif /* TOL_BOARD_H */
