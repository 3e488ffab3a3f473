/* B-L475E-IOT01A: console on USART1, PB6 (TX) / PB7 (RX), AF7 -> ST-Link VCP. */
#include "board.h"
#include "stm32l4.h"

const tol_board_t tol_board = {
    .name = "disco_l475vg_iot01a",
    .uart_base = TOL_USART1_BASE,
    .uart_irqn = TOL_USART1_IRQN,
    .uart_is_lpuart = false,
    .uart_enr_offset = RCC_APB2ENR,
    .uart_enr_bit = RCC_APB2ENR_USART1EN,
    .gpio_enr_bits = 1u << 1,
    .needs_vddio2 = false,
    .tx = {TOL_GPIOB_BASE, 6, 7},
    .rx = {TOL_GPIOB_BASE, 7, 7},
};
