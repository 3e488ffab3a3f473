/* tol_prng.c - xorshift32; see tol_prng.h. */
#include "tol_prng.h"

void tol_prng_seed(tol_prng_t *p, uint32_t seed)
{
    /* MurmurHash3's fmix32: nearby seeds give unrelated states. */
    uint32_t h = seed;
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    p->state = (h == 0u) ? 1u : h;
}

uint32_t tol_prng_next(tol_prng_t *p)
{
    uint32_t x = p->state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    p->state = x;
    return x;
}

uint32_t tol_prng_below(tol_prng_t *p, uint32_t n)
{
    if (n == 0u) return 0u;
    return (uint32_t)(((uint64_t)tol_prng_next(p) * (uint64_t)n) >> 32);
}
