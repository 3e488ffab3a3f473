/*
 * tol_prng.h - the learner's deterministic pseudo-random generator.
 *
 * xorshift32 (Marsaglia 2003: shifts 13, 17, 5). The numpy reference
 * (host/tinyol/learn/learner.py, class Prng) implements the same generator, and
 * every random choice of the learner and the replay buffer draws from one
 * instance in a fixed, documented order (docs/learner.md), so that a C run and
 * a numpy run of the same stream make the same choices.
 */
#ifndef TOL_PRNG_H
#define TOL_PRNG_H

#include <stdint.h>

typedef struct {
    uint32_t state; /* never 0 */
} tol_prng_t;

/* Seed the generator. Any seed is valid: state = fmix32(seed) (MurmurHash3's
 * finaliser, so that nearby seeds such as 1, 2, 3 give unrelated streams);
 * a resulting 0 (only for seed 0) is replaced by 1. */
void tol_prng_seed(tol_prng_t *p, uint32_t seed);

/* Next 32-bit output (the new state). */
uint32_t tol_prng_next(tol_prng_t *p);

/* Uniform integer in [0, n) by multiply-shift: (next * n) >> 32 (n >= 1;
 * n == 0 returns 0 and draws nothing). Draws exactly one output otherwise. */
uint32_t tol_prng_below(tol_prng_t *p, uint32_t n);

#endif /* TOL_PRNG_H */
