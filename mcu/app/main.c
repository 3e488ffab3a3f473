/*
 * main.c - the firmware's application layer, the same on every target.
 *
 * It owns the one protocol/app instance (static, no heap) and pumps received
 * bytes into it, with the model glue (model.c or nomodel/) as the model behind
 * the protocol. Everything else happens in the portable core (mcu/src) and
 * the board HAL (mcu/boards/<family>).
 */
#include <stdint.h>

#include "tol_app.h"
#include "tol_hal.h"
#include "tol_model.h"

static tol_app_t tol_app;

int tol_app_main(void);

/* Called by the reset handler (boards) or by the native process's main(). */
int tol_app_main(void)
{
    tol_hal_init();
    tol_app_init(&tol_app, &tol_model_glue);
    for (;;) {
        uint8_t byte;
        while (tol_hal_uart_read(&byte)) tol_app_feed(&tol_app, byte);
        if (tol_app_idle_work(&tol_app)) continue; /* idle rehearsal: one step, then poll again */
        tol_hal_idle(); /* sleep until the next interrupt (a received byte, SysTick) */
    }
}
