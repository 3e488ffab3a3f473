/* NUCLEO-L4R5ZI: console on LPUART1, PG7 (TX) / PG8 (RX), AF8 -> ST-Link VCP.
 * Port G is supplied by VDDIO2, which must be declared valid (PWR_CR2.IOSV). */
#include "board.h"
#include "stm32l4.h"

const tol_board_t tol_board = {
    .name = "nucleo_l4r5zi",
    .uart_base = TOL_LPUART1_BASE,
    .uart_irqn = TOL_LPUART1_IRQN,
    .uart_is_lpuart = true,
    .uart_enr_offset = RCC_APB1ENR2,
    .uart_enr_bit = RCC_APB1ENR2_LPUART1EN,
    .gpio_enr_bits = 1u << 6,
    .needs_vddio2 = true,
    .tx = {TOL_GPIOG_BASE, 7, 8},
    .rx = {TOL_GPIOG_BASE, 8, 8},
};
