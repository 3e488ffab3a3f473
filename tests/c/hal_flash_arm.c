/*
 * hal_flash_arm.c - entry points that drive ST's own HAL flash driver (stm32l4xx_hal_flash*.c
 * from ../shared/stm32) as Cortex-M4 code under Unicorn against the strict flash model
 * (tests/host/test_flash_hal.py): the vendor's unlock, erase, program and cache sequences must run
 * cleanly on it, and the errors the model raises must come out as the HAL's error codes.
 */
#include "stm32l4xx_hal.h"

extern FLASH_ProcessTypeDef pFlash;
static uint32_t hal_ticks;

uint32_t HAL_GetTick(void) { return hal_ticks++; }

/* Erase n pages from `page` of `bank` (FLASH_BANK_1/2); out[0] = PageError, out[1] = ErrorCode. */
int hal_erase(uint32_t bank, uint32_t page, uint32_t n, uint32_t *out)
{
    FLASH_EraseInitTypeDef e = {FLASH_TYPEERASE_PAGES, bank, page, n};
    HAL_StatusTypeDef st = HAL_FLASH_Unlock();
    if (st == HAL_OK) st = HAL_FLASHEx_Erase(&e, &out[0]);
    out[1] = pFlash.ErrorCode;
    (void)HAL_FLASH_Lock();
    return (int)st;
}

/* Program n double-words from data at addr; out[1] = ErrorCode. */
int hal_program(uint32_t addr, const uint64_t *data, uint32_t n, uint32_t *out)
{
    HAL_StatusTypeDef st = HAL_FLASH_Unlock();
    for (uint32_t i = 0; st == HAL_OK && i < n; i++) {
        st = HAL_FLASH_Program(FLASH_TYPEPROGRAM_DOUBLEWORD, addr + 8u * i, data[i]);
    }
    out[1] = pFlash.ErrorCode;
    (void)HAL_FLASH_Lock();
    return (int)st;
}
