/* tol_segs.c - a header + segments byte stream; see tol_segs.h. */
#include "tol_segs.h"

#include <string.h>

uint32_t tol_segs_bytes(const tol_seg_t *seg, uint32_t k)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < k; i++) n += seg[i].n;
    return n;
}

/* Copy between the stream range [offset, offset + n) and the segments (which
 * start at stream byte `at`); to_segs: buf -> segments. */
static void tol_segs_copy_(const tol_seg_t *seg, uint32_t k, uint32_t at, uint32_t offset,
                           uint8_t *buf, uint32_t n, int to_segs)
{
    for (uint32_t i = 0; i < k && n > 0u; i++) {
        const uint32_t end = at + seg[i].n;
        if (offset < end) {
            const uint32_t from = offset - at;
            const uint32_t m = end - offset < n ? end - offset : n;
            if (to_segs) {
                memcpy(seg[i].p + from, buf, m);
            } else {
                memcpy(buf, seg[i].p + from, m);
            }
            buf += m;
            offset += m;
            n -= m;
        }
        at = end;
    }
}

void tol_segs_read(const uint8_t *hdr, uint32_t hdr_n, const tol_seg_t *seg, uint32_t k,
                   uint32_t offset, uint8_t *dst, uint32_t n)
{
    if (offset < hdr_n && n > 0u) {
        const uint32_t m = hdr_n - offset < n ? hdr_n - offset : n;
        memcpy(dst, hdr + offset, m);
        dst += m;
        offset += m;
        n -= m;
    }
    tol_segs_copy_(seg, k, hdr_n, offset, dst, n, 0);
}

void tol_segs_write(const tol_seg_t *seg, uint32_t k, uint32_t hdr_n, uint32_t offset,
                    const uint8_t *src, uint32_t n)
{
    tol_segs_copy_(seg, k, hdr_n, offset, (uint8_t *)(uintptr_t)src, n, 1);
}

void tol_segs_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

void tol_segs_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

void tol_segs_putf(uint8_t *p, float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof(u));
    tol_segs_put32(p, u);
}

uint16_t tol_segs_get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (uint16_t)(p[1] << 8));
}

uint32_t tol_segs_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

float tol_segs_getf(const uint8_t *p)
{
    const uint32_t u = tol_segs_get32(p);
    float v;
    memcpy(&v, &u, sizeof(v));
    return v;
}
