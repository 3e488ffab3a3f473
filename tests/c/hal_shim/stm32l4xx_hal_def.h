/* hal_shim/stm32l4xx_hal_def.h - the few definitions ST's HAL flash driver needs from the rest
 * of the HAL, written for tests/host/test_flash_hal.py (ST's own driver, not ours, runs against the
 * strict flash model). Not part of the firmware. */
#ifndef TOL_HAL_SHIM_DEF_H
#define TOL_HAL_SHIM_DEF_H
#define HAL_FLASH_MODULE_ENABLED
#include <stddef.h>
#include "stm32l4xx.h"

typedef enum { HAL_OK = 0x00U, HAL_ERROR = 0x01U, HAL_BUSY = 0x02U, HAL_TIMEOUT = 0x03U } HAL_StatusTypeDef;
typedef enum { HAL_UNLOCKED = 0x00U, HAL_LOCKED = 0x01U } HAL_LockTypeDef;
#define HAL_MAX_DELAY 0xFFFFFFFFU
#define UNUSED(X) (void)(X)
#define __HAL_LOCK(h) do { if ((h)->Lock == HAL_LOCKED) return HAL_BUSY; (h)->Lock = HAL_LOCKED; } while (0)
#define __HAL_UNLOCK(h) do { (h)->Lock = HAL_UNLOCKED; } while (0)
#define assert_param(expr) ((void)0U)
#define __RAM_FUNC HAL_StatusTypeDef
#define __weak __attribute__((weak))
#define PWR_REGULATOR_VOLTAGE_SCALE2 (0x2U << 9) /* unused by the tests (L4P5/Q5 LVE only) */
static inline uint32_t HAL_PWREx_GetVoltageRange(void) { return 0u; }
uint32_t HAL_GetTick(void);
#endif
