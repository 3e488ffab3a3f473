/* tol_crc32.h - CRC-32 (IEEE 802.3: reflected poly 0xEDB88320, init and xorout 0xFFFFFFFF). */
#ifndef TOL_CRC32_H
#define TOL_CRC32_H

#include <stddef.h>
#include <stdint.h>

#define TOL_CRC32_INIT 0u

/*
 * Continue a CRC over n bytes. Start with crc = TOL_CRC32_INIT; the result of
 * one call can be fed to the next, so tol_crc32(tol_crc32(0, a, n), b, m) is the
 * CRC of a followed by b. "123456789" gives 0xCBF43926.
 */
uint32_t tol_crc32(uint32_t crc, const uint8_t *data, size_t n);

#endif /* TOL_CRC32_H */
