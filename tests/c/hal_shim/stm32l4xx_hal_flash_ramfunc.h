/* hal_shim/stm32l4xx_hal_flash_ramfunc.h - not used by the tests (see stm32l4xx_hal_def.h). */
