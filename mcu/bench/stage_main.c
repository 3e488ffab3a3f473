/*
 * stage_main.c - the adaptive stage's cost per layer type (`tinyol bench`, docs/benchmarks.md):
 * for each stage of the case header (stage_bench_case.h, written by
 * tinyol.bench.tflm_bench.run_stage_profile: one layer type under test followed by the Dense
 * classifier), once training every parameter ("all", the float stage) and once as the lean stage
 * (every layer below the classifier trains its biases only, `--stage-train bias`), the
 * instructions of one prediction and of one training step (1 fresh + 16 replayed latents, 8-bit
 * replay of 32 slots pre-filled, every class active), timed under the counter of bench_rt.c.
 * Parameters and latents come from a fixed xorshift stream, so the run is the same every time.
 * Bench builds only.
 */
#include <stdint.h>
#include <string.h>

#include "bench_rt.h"
#include "stage_bench_case.h"
#include "tol_stage.h"

/* the case header defines: SB_N_CASES, SB_MAX_LAYERS, SB_MAX_PARAMS, SB_MEM, SB_CAP, SB_CLASSES
 * and sb_cases[SB_N_CASES] = {layers, n_layers} */

static _Alignas(4) uint8_t tol_sb_mem[SB_MEM];
__attribute__((section(".ram2"))) static float tol_sb_params[SB_MAX_PARAMS];
static tol_stage_layer_t tol_sb_layers[SB_MAX_LAYERS];
static int8_t tol_sb_q[SB_MAX_LATENT];
static tol_stage_t tol_sb_stage;
static uint32_t tol_sb_rng = 12345u;
static uint64_t tol_sb_overhead;

static uint32_t tol_sb_next(void)
{
    tol_sb_rng ^= tol_sb_rng << 13;
    tol_sb_rng ^= tol_sb_rng >> 17;
    tol_sb_rng ^= tol_sb_rng << 5;
    return tol_sb_rng;
}

static void tol_sb_fill(uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) tol_sb_q[i] = (int8_t)(tol_sb_next() & 0xFFu);
}

/* one case in one train mode: 0 = every layer trains all, 1 = layers below the classifier biases only */
static int tol_sb_run(uint32_t k, uint8_t lean)
{
    const uint8_t n = sb_cases[k].n_layers;
    memcpy(tol_sb_layers, sb_cases[k].layers, n * sizeof(tol_stage_layer_t));
    for (uint8_t i = 0; i + 1u < n; i++) {
        const uint8_t kind = tol_sb_layers[i].kind;
        const int linear = kind == TOL_STAGE_DENSE || kind == TOL_STAGE_CONV || kind == TOL_STAGE_DWCONV;
        if (lean && linear) tol_sb_layers[i].train = (uint8_t)TOL_STAGE_TRAIN_BIAS;
    }
    const uint32_t p = tol_stage_params(tol_sb_layers, n);
    if (p > SB_MAX_PARAMS) return 10;
    /* small uniform weights in [-0.1, 0.1]: activations stay in range, about half the ReLUs pass */
    for (uint32_t i = 0; i < p; i++) {
        tol_sb_params[i] = ((float)(int32_t)(tol_sb_next() % 2001u) - 1000.0f) * 1e-4f;
    }
    tol_stage_config_t c;
    memset(&c, 0, sizeof c);
    c.layers = tol_sb_layers;
    c.n_layers = n;
    c.replay_bits = 8u;
    c.replay_policy = 0u;
    c.no_momentum = 1u;
    c.init_params = tol_sb_params;
    c.init_classes = SB_CLASSES;
    c.replay_capacity = SB_CAP;
    c.max_new = 1u;
    c.max_old = 16u;
    c.latent_scale = 0.05f;
    c.latent_zero_point = -128;
    c.seed = 1u;
    tol_learner_settings_default(&c.settings);
    c.settings.n_old = 16u;
    if (tol_stage_bytes(&c) > sizeof tol_sb_mem) return 11;
    if (tol_stage_init(&tol_sb_stage, tol_sb_mem, sizeof tol_sb_mem, &c) != TOL_OK) return 12;
    const uint32_t latent = tol_sb_stage.latent;
    if (latent > SB_MAX_LATENT) return 13;
    for (uint32_t i = 0; i < SB_CAP; i++) {
        tol_sb_fill(latent);
        if (tol_stage_replay_add(&tol_sb_stage, tol_sb_q, (uint16_t)(i % SB_CLASSES)) != TOL_OK) return 14;
    }
    for (uint32_t i = 0; i < 3u; i++) {
        tol_sb_fill(latent);
        (void)tol_stage_learn(&tol_sb_stage, tol_sb_q, (uint16_t)(i % SB_CLASSES));
    }
    int32_t label;
    float conf;
    tol_sb_fill(latent);
    char key[24];
    const char *mode = lean ? "bias" : "all";
    uint64_t t0 = tol_bench_ticks();
    (void)tol_stage_predict(&tol_sb_stage, tol_sb_q, &label, &conf);
    uint64_t t1 = tol_bench_ticks();
    /* "s<k>_<mode>_predict" */
    key[0] = 's';
    key[1] = (char)('a' + k);
    key[2] = '_';
    size_t m = strlen(mode);
    memcpy(&key[3], mode, m);
    memcpy(&key[3 + m], "_predict", 9);
    tol_bench_kv(key, t1 - t0 - tol_sb_overhead);
    const uint32_t updates = tol_sb_stage.updates;
    t0 = tol_bench_ticks();
    (void)tol_stage_learn(&tol_sb_stage, tol_sb_q, 3u);
    t1 = tol_bench_ticks();
    if (tol_sb_stage.updates != updates + 1u) return 15;
    memcpy(&key[3 + m], "_step", 6);
    tol_bench_kv(key, t1 - t0 - tol_sb_overhead);
    return 0;
}

int tol_bench_main(void)
{
    const uint64_t r0 = tol_bench_ticks();
    const uint64_t r1 = tol_bench_ticks();
    tol_sb_overhead = r1 - r0;
    for (uint32_t k = 0; k < SB_N_CASES; k++) {
        for (uint8_t lean = 0; lean < 2u; lean++) {
            const int e = tol_sb_run(k, lean);
            if (e != 0) return e;
        }
    }
    tol_bench_puts("done\n");
    return 0;
}
