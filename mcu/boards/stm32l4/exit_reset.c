/* exit_reset.c - tol_hal_exit for release builds: there is nobody to return
 * an exit code to, so the board resets (the boot counter records it). */
#include "tol_hal.h"

void tol_hal_exit(int code)
{
    (void)code;
    tol_hal_reset();
}
