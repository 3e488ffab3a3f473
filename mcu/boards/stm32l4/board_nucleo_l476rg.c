/* NUCLEO-L476RG: console on USART2, PA2 (TX) / PA3 (RX), AF7 -> ST-Link VCP. */
#include "board.h"
#include "stm32l4.h"

const tol_board_t tol_board = {
    .name = "nucleo_l476rg",
    .uart_base = TOL_USART2_BASE,
    .uart_irqn = TOL_USART2_IRQN,
    .uart_is_lpuart = false,
    .uart_enr_offset = RCC_APB1ENR1,
    .uart_enr_bit = RCC_APB1ENR1_USART2EN,
    .gpio_enr_bits = 1u << 0,
    .needs_vddio2 = false,
    .tx = {TOL_GPIOA_BASE, 2, 7},
    .rx = {TOL_GPIOA_BASE, 3, 7},
};
