/* hal_shim/stm32l4xx_hal.h - see stm32l4xx_hal_def.h beside it. */
#ifndef TOL_HAL_SHIM_H
#define TOL_HAL_SHIM_H
#include "stm32l4xx_hal_def.h"
#include "stm32l4xx_hal_flash.h"
#endif
