/*
 * tol_replay.h - latent replay buffer (Pellegrini et al. 2020, "Latent Replay
 * for Real-Time Continual Learning"): past backbone outputs and their labels,
 * mixed into each head update so that old classes are not forgotten.
 *
 * Storage (bits):
 *   32  float32 as given                       row = 4*dim bytes
 *    8  int8 in the backbone's own latent quantization (scale, zero_point);
 *       an int8 latent is stored as is        row = dim bytes
 *    7  int8 requantized to 7 bits, 8 values in 7 bytes   row = 7*ceil(dim/8)
 *       q7 = round_half_away(q / 2) clipped to [-64, 63]; read back as 2*q7.
 *       Packing: value k of a group of 8 occupies bits 7k..7k+6 of the group's
 *       56-bit little-endian word (two's complement); a short last group is
 *       padded with zeros.
 *    4  4-bit codes with per-channel grids (a tol_replay_codec_t chosen at export from
 *       calibration latents, const, in flash; tol_replay_set_codec): value i belongs to
 *       channel c = i % channels (HWC latents: the last axis); from the int8 latent q,
 *       code = clip(round_half_away((q - lo[c]) / step[c]), 0, 15) in integers, read back
 *       as q' = min(lo[c] + step[c] * code, 127), then dequantized as 8-bit values are.
 *       Two codes per byte, value 2k in the low nibble   row = ceil(dim/2)
 *  PQ  product quantization (LifeLearner, Kwon et al. 2023): bits = TOL_REPLAY_PQ(sub),
 *       the latent cut into dim/sub sub-vectors of sub consecutive values, each stored as
 *       the index of its nearest codeword among 256 (a codebook per sub-vector, k-means on
 *       the calibration latents at export, const, in flash; tol_replay_set_codec). Nearest
 *       = least sum of (q - c)^2 over the int8 latent q and int8 codeword c in integers,
 *       the lowest index on ties; read back as the codeword.   row = dim/sub
 * Labels: uint16_t per slot, < n_classes.
 *
 * Replacement when full (every random draw from the shared tol_prng_t, in
 * the order written here; the numpy reference mirrors it):
 *   RESERVOIR  per sample: seen += 1; if fill < cap append, else
 *              j = below(seen); if j < cap replace slot j.
 *   BALANCED   class-balanced reservoir (CBRS, Chrysakis & Moens 2020), per
 *              sample: seen[y] += 1; if fill < cap append; else if count[y] is
 *              the largest count: j = below(seen[y]), if j < count[y] replace
 *              the j-th slot (ascending) holding y; else evict the k-th slot
 *              (k = below(count[c])) of the largest class c (smallest label on
 *              ties).
 *   AR1        Latent Replay's rule for a batch of n samples (batch index i,
 *              counted from 0 per add call): append while fill < cap; for the
 *              m leftover samples h = min(cap/(i+1), m) slots are replaced:
 *              q = cap / (i+1), r = cap % (i+1); if q >= m: h = m, else
 *              h = q + (below(i+1) < r) (fractional part as a probability).
 *              Then for k < h: pick sample k + below(m-k) (partial Fisher-Yates
 *              over the leftovers) and write it to slot below(cap).
 * Every policy keeps every counter (seen, per-class seen, batches), so that the policy can
 * change at run time (rb->policy, the learners' replay_policy setting): the slots stored stay
 * and the new policy decides the later offers from the buffer's whole history.
 * Drawing for replay: tol_replay_draw() = below(fill), with replacement.
 *
 * Memory: caller owns TOL_REPLAY_BYTES(cap, dim, bits, n_classes) bytes,
 * 4-byte aligned.
 */
#ifndef TOL_REPLAY_H
#define TOL_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include "tol_head.h" /* TOL_ALIGN4 */
#include "tol_prng.h"
#include "tol_status.h"

/* Largest batch tol_replay_add_batch accepts. */
#define TOL_REPLAY_MAX_BATCH 32u

/* The bits code of product-quantized storage with sub-vectors of sub values (1..127,
 * dividing dim): one byte (a codeword index) per sub-vector. */
#define TOL_REPLAY_PQ(sub) (128u + (unsigned)(sub))
/* Codewords per sub-vector of a PQ codebook. */
#define TOL_REPLAY_PQ_CODEWORDS 256u
/* Bytes of a PQ codebook (flash): 256 codewords of sub values for each of dim/sub sub-vectors. */
#define TOL_REPLAY_PQ_CODEBOOK_BYTES(dim) ((size_t)TOL_REPLAY_PQ_CODEWORDS * (size_t)(dim))

/* Bytes of one stored latent. */
#define TOL_REPLAY_ROW_BYTES(dim, bits)                       \
    ((bits) > 128 ? (size_t)(dim) / ((size_t)(bits) - 128u)   \
     : (bits) == 32 ? (size_t)4u * (size_t)(dim)              \
     : (bits) == 8 ? (size_t)(dim)                            \
     : (bits) == 4 ? ((size_t)(dim) + 1u) / 2u                \
                   : (size_t)7u * (((size_t)(dim) + 7u) / 8u))

/* Bytes of caller memory for a buffer: rows + per-class seen counters
 * (uint32) + labels (uint16) + per-class fill counters (uint16). */
#define TOL_REPLAY_BYTES(cap, dim, bits, n_classes)               \
    (TOL_ALIGN4((size_t)(cap) * TOL_REPLAY_ROW_BYTES(dim, bits)) + \
     (size_t)4u * (size_t)(n_classes) + TOL_ALIGN4((size_t)2u * (size_t)(cap)) + \
     TOL_ALIGN4((size_t)2u * (size_t)(n_classes)))

typedef enum {
    TOL_REPLAY_RESERVOIR = 0,
    TOL_REPLAY_BALANCED = 1,
    TOL_REPLAY_AR1 = 2,
} tol_replay_policy_t;

/* A replay codec, const, not owned. 4 bits: per channel the lowest value and the step of a
 * 16-level grid over the int8 latent (export: tinyol.learn.learner.fit_codec4). PQ: lo holds
 * the codebook (export: tinyol.learn.learner.fit_pq), step is NULL and channels 0 (one layout
 * for both, so the 4-bit exports' replay_codec.c stays valid). */
typedef struct {
    const int8_t *lo;    /* 4 bits: [channels]; PQ: the codebook [dim/sub][256][sub] */
    const uint8_t *step; /* 4 bits: [channels], each >= 1; PQ: NULL */
    uint16_t channels;   /* 4 bits: >= 1, divides dim; PQ: 0 */
} tol_replay_codec_t;

typedef struct {
    uint16_t capacity;  /* N slots */
    uint16_t dim;       /* latent size */
    uint16_t n_classes; /* labels are < n_classes */
    uint8_t bits;       /* 32, 8, 7, 4 or TOL_REPLAY_PQ(sub) */
    uint8_t policy;     /* tol_replay_policy_t; may change between add calls */
    uint16_t fill;      /* slots in use, 0..capacity */
    uint32_t seen;      /* samples offered since clear */
    uint32_t batches;   /* add calls since clear (AR1's i) */
    float scale;        /* latent quantization: x = scale * (q - zero_point) */
    int32_t zero_point;
    size_t row_bytes;
    uint8_t *rows;         /* [capacity][row_bytes] */
    uint32_t *class_seen;  /* [n_classes] samples offered per class */
    uint16_t *labels;      /* [capacity] */
    uint16_t *count;       /* [n_classes] slots holding each class */
    tol_prng_t *prng;      /* shared generator (not owned) */
    const tol_replay_codec_t *codec; /* bits 4 or PQ: the codec (not owned); else NULL */
} tol_replay_t;

/* Set up an empty buffer in caller memory. capacity >= 1, dim >= 1,
 * bits in {32, 8, 7, 4, TOL_REPLAY_PQ(sub) with sub dividing dim} (4 and PQ need
 * tol_replay_set_codec before the first add), policy a tol_replay_policy_t, scale > 0 (used for 8/7
 * bits), prng: the generator all draws come from (must outlive rb).
 * TOL_ERR_ARG on bad arguments or alignment, TOL_ERR_OVERFLOW if mem is short. */
tol_status_t tol_replay_init(tol_replay_t *rb, uint8_t *mem, size_t mem_bytes,
                             uint16_t capacity, uint16_t dim, uint8_t bits,
                             uint16_t n_classes, uint8_t policy, float scale,
                             int32_t zero_point, tol_prng_t *prng);

/* Give a 4-bit or PQ buffer its codec (must outlive rb). TOL_ERR_ARG unless bits is 4 and
 * codec has 1 <= channels dividing dim and every step >= 1, or bits is PQ and codec has a
 * codebook (lo) and channels 0. */
tol_status_t tol_replay_set_codec(tol_replay_t *rb, const tol_replay_codec_t *codec);

/* Empty the buffer and zero its counters (does not reseed the prng). */
void tol_replay_clear(tol_replay_t *rb);

/* Offer n (1..TOL_REPLAY_MAX_BATCH) latents x float[n][dim] with labels[n]
 * (< n_classes) according to the policy. TOL_ERR_ARG / TOL_ERR_LABEL on bad
 * input or a 4-bit buffer without codec (nothing stored). */
tol_status_t tol_replay_add_batch(tol_replay_t *rb, const float *x, const uint16_t *labels,
                                  uint16_t n);

/* Random slot for replay: below(fill); fill must be > 0. */
uint16_t tol_replay_draw(tol_replay_t *rb);

/* Read slot idx (< fill) back as float: x float[dim] (out), label (may be NULL). */
void tol_replay_get(const tol_replay_t *rb, uint16_t idx, float *x, uint16_t *label);

/* Check restored contents (a loaded state): every stored label < n_classes and the
 * per-class counts sum to fill. TOL_OK, or TOL_ERR_RANGE. */
tol_status_t tol_replay_check(const tol_replay_t *rb);

/* q[i] = clip(round_half_away(x[i] / scale) + zero_point, -128, 127). */
void tol_replay_quantize(const float *x, uint16_t n, float scale, int32_t zero_point,
                         int8_t *q);

/* 8-bit -> 7-bit: round_half_away(q / 2) clipped to [-64, 63]. */
int8_t tol_replay_requant7(int8_t q);

/* Pack n 7-bit values q7 (each in [-64, 63]) into 7*ceil(n/8) bytes. */
void tol_replay_pack7(const int8_t *q7, uint16_t n, uint8_t *out);

/* Unpack n 7-bit values (sign-extended to int8, [-64, 63]). */
void tol_replay_unpack7(const uint8_t *in, uint16_t n, int8_t *q7);

/* 4-bit code of int8 q on a grid (lo, step): clip(round_half_away((q - lo) / step), 0, 15). */
uint8_t tol_replay_code4(int8_t q, int8_t lo, uint8_t step);

/* The int8 value a 4-bit code reads back as: min(lo + step * code, 127). */
int8_t tol_replay_decode4(uint8_t code, int8_t lo, uint8_t step);

/* PQ: index of the codeword nearest to q[sub] among book[256][sub] (least integer sum of
 * squared differences, the lowest index on ties). */
uint8_t tol_replay_pq_nearest(const int8_t *q, const int8_t *book, uint16_t sub);

#endif /* TOL_REPLAY_H */
