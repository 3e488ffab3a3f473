/*
 * main.c - the firmware's application layer, the same on every target.
 *
 * It owns the one protocol/app instance (static, no heap) and pumps received
 * bytes into it, with the model glue (model.c or nomodel/) as the model behind
 * the protocol. Everything else happens in the portable core (mcu/src) and
 * the board HAL (mcu/boards/<family>).
 */
#include <stdint.h>

#include "tol_server.h"
#include "tol_hal.h"
#include "tol_model.h"

static tol_server_t tol_server;

int tol_server_main(void);

/* Called by the reset handler (boards) or by the native process's main(). */
int tol_server_main(void)
{
    tol_hal_init();
    tol_server_init(&tol_server, &tol_model_glue);
    for (;;) {
        uint8_t byte;
        while (tol_hal_uart_read(&byte)) tol_server_feed(&tol_server, byte);
        if (tol_server_idle_work(&tol_server)) continue; /* idle rehearsal: one step, then poll again */
        tol_hal_idle(); /* sleep until the next interrupt (a received byte, SysTick) */
    }
}
