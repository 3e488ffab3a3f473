/*
 * learner_main.c - where a training step's instructions go (`tinyol bench`,
 * docs/benchmarks.md): the learner of a digits-like classifier (D = 32,
 * C = 10, 8-bit replay of 200, 1 new + 16 replayed, momentum buffers, momentum 0) and
 * a 640-output autoencoder head (D = 8), timed whole and by part under the
 * counter of bench_rt.c. Inputs come from the learner's own PRNG, so the run is
 * the same every time. Bench builds only.
 */
#include <stdint.h>
#include <string.h>

#include "bench_rt.h"
#include "tol_learner.h"

#define C_D 32u
#define C_C 10u
#define C_CAP 200u
#define A_D 8u
#define A_OUT 640u

/* momentum buffers allocated, momentum 0: the firmware's configuration (mcu/app/model.c) */
__attribute__((section(".ram2"))) static _Alignas(4) uint8_t tol_bench_mem_c[TOL_LEARNER_BYTES_EX(C_D, C_C, C_CAP, 8u, 1u, 16u, 0u)];
static _Alignas(4) uint8_t tol_bench_mem_a[TOL_LEARNER_BYTES_EX(A_D, A_OUT, 0u, 8u, 1u, 0u, 0u)];
__attribute__((section(".ram2"))) static float tol_bench_w_c[C_C * C_D];
static float tol_bench_b_c[C_C];
static float tol_bench_w_a[A_OUT * A_D];
static float tol_bench_b_a[A_OUT];
static tol_learner_t tol_bench_lc;
static tol_learner_t tol_bench_la;
static int8_t tol_bench_q[A_OUT];
static uint32_t tol_bench_rng = 12345u;

static uint32_t tol_bench_next(void)
{
    tol_bench_rng ^= tol_bench_rng << 13;
    tol_bench_rng ^= tol_bench_rng >> 17;
    tol_bench_rng ^= tol_bench_rng << 5;
    return tol_bench_rng;
}

static void tol_bench_fill(int8_t *q, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) q[i] = (int8_t)(tol_bench_next() & 0xFFu);
}

static float tol_bench_small(void)
{
    return (float)(int32_t)(tol_bench_next() % 2001u) * 1e-4f - 0.1f;
}

static uint64_t tol_bench_overhead;

#define TOL_BENCH_TIME(key, stmt)                                 \
    do {                                                          \
        const uint64_t t0_ = tol_bench_ticks();                   \
        stmt;                                                     \
        const uint64_t t1_ = tol_bench_ticks();                   \
        tol_bench_kv(key, t1_ - t0_ - tol_bench_overhead);        \
    } while (0)

int tol_bench_main(void)
{
    const uint64_t r0 = tol_bench_ticks();
    const uint64_t r1 = tol_bench_ticks();
    tol_bench_overhead = r1 - r0;
    for (uint32_t i = 0; i < C_C * C_D; i++) tol_bench_w_c[i] = tol_bench_small();
    for (uint32_t i = 0; i < C_C; i++) tol_bench_b_c[i] = tol_bench_small();
    for (uint32_t i = 0; i < A_OUT * A_D; i++) tol_bench_w_a[i] = tol_bench_small();
    for (uint32_t i = 0; i < A_OUT; i++) tol_bench_b_a[i] = tol_bench_small();

    tol_learner_config_t c;
    memset(&c, 0, sizeof c);
    c.head_kind = (uint8_t)TOL_HEAD_CLASSIFIER;
    c.replay_bits = 8u;
    c.replay_policy = 0u;
    c.no_momentum = 0u;
    c.latent_dim = C_D;
    c.n_outputs = C_C;
    c.init_classes = 5u;
    c.replay_capacity = C_CAP;
    c.max_new = 1u;
    c.max_old = 16u;
    c.init_weight = tol_bench_w_c;
    c.init_bias = tol_bench_b_c;
    c.latent_scale = 0.0668591857f;
    c.latent_zero_point = -128;
    c.target_scale = 1.0f;
    c.seed = 1u;
    tol_learner_settings_default(&c.settings);
    c.settings.lr = 0.03f;
    if (tol_learner_init(&tol_bench_lc, tol_bench_mem_c, sizeof tol_bench_mem_c, &c) != TOL_OK) {
        return 2;
    }
    for (uint32_t i = 0; i < 40u; i++) {
        tol_bench_fill(tol_bench_q, C_D);
        (void)tol_learner_learn(&tol_bench_lc, tol_bench_q, (uint16_t)(i % C_C));
    }
    int32_t label;
    float conf;
    tol_bench_fill(tol_bench_q, C_D);
    TOL_BENCH_TIME("predict", (void)tol_learner_predict(&tol_bench_lc, tol_bench_q, &label, &conf));
    TOL_BENCH_TIME("train_step", (void)tol_learner_learn(&tol_bench_lc, tol_bench_q, 3u));

    /* the same step by part (a copy of tol_learner's update sequence) */
    tol_head_t *h = &tol_bench_lc.head;
    const float w = 1.0f / 17.0f;
    tol_bench_fill(tol_bench_q, C_D);
    /* the timed step left the batch full (n_batch = 17): empty it before taking slot 0,
     * else tol_head_batch_slot returns NULL (on the M4 the part ran on address 0) */
    tol_head_grad_zero(h);
    float *slot = tol_head_batch_slot(h);
    if (slot == NULL) return 4;
    TOL_BENCH_TIME("part_dequantize_new", for (uint32_t j = 0; j < C_D; j++) slot[j] =
                   c.latent_scale * (float)((int32_t)tol_bench_q[j] - c.latent_zero_point));
    TOL_BENCH_TIME("part_forward", tol_head_forward(h, slot));
    TOL_BENCH_TIME("part_softmax", tol_head_softmax(h));
    /* the 16 replayed rows drawn and dequantized into batch slots 1..16 (8-bit rows) */
    uint16_t labels[17];
    labels[0] = 3u;
    uint64_t t_get = 0;
    for (uint32_t r = 0; r < 16u; r++) {
        float *s = slot + (size_t)(r + 1u) * C_D;
        uint64_t t0 = tol_bench_ticks();
        tol_replay_get(&tol_bench_lc.replay, tol_replay_draw(&tol_bench_lc.replay), s, &labels[r + 1u]);
        uint64_t t1 = tol_bench_ticks();
        t_get += t1 - t0 - tol_bench_overhead;
    }
    tol_bench_kv("part_replay_get_x16", t_get);
    /* one sample alone (the fresh one), then the 16 replayed as one batch, as tol_learner does */
    TOL_BENCH_TIME("part_grad_add_ce", (void)tol_head_grad_add_ce_n(h, labels, 1u, w));
    TOL_BENCH_TIME("part_grad_add_x16", (void)tol_head_grad_add_ce_n(h, labels + 1, 16u, w));
    if (h->n_batch != 17u) return 4;
    TOL_BENCH_TIME("part_step", (void)tol_head_step(h, 0.03f, 0.0f, 0.0f, 0.0f));
    uint16_t lab = 3u;
    TOL_BENCH_TIME("part_replay_add", (void)tol_replay_add_batch(&tol_bench_lc.replay, h->x, &lab, 1u));

    tol_learner_config_t a;
    memset(&a, 0, sizeof a);
    a.head_kind = (uint8_t)TOL_HEAD_AUTOENCODER;
    a.replay_bits = 8u;
    a.no_momentum = 0u;
    a.latent_dim = A_D;
    a.n_outputs = A_OUT;
    a.max_new = 1u;
    a.init_weight = tol_bench_w_a;
    a.init_bias = tol_bench_b_a;
    a.latent_scale = 0.05f;
    a.latent_zero_point = 0;
    a.target_scale = 0.01f;
    a.seed = 1u;
    tol_learner_settings_default(&a.settings);
    a.settings.lr = 0.001f;
    if (tol_learner_init(&tol_bench_la, tol_bench_mem_a, sizeof tol_bench_mem_a, &a) != TOL_OK) {
        return 3;
    }
    static int8_t target[A_OUT];
    tol_bench_fill(tol_bench_q, A_D);
    tol_bench_fill(target, A_OUT);
    float score;
    uint8_t flag;
    TOL_BENCH_TIME("ae_step", (void)tol_learner_anomaly(&tol_bench_la, tol_bench_q, target, &score, &flag));
    TOL_BENCH_TIME("ae_score", (void)tol_learner_score(&tol_bench_la, tol_bench_q, target, &score, &flag));
    tol_head_t *ha = &tol_bench_la.head;
    (void)tol_head_grad_add_mse(ha, tol_bench_la.x, tol_bench_la.target, 1.0f, NULL);
    TOL_BENCH_TIME("ae_part_step", (void)tol_head_step(ha, 0.001f, 0.0f, 0.0f, 0.0f));
    tol_bench_puts("done\n");
    return 0;
}
