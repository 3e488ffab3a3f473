/*
 * learner_stream.c - the C learner on the Cortex-M4F (QEMU), fed a whole stream
 * (tests/device/test_learner_m4.py): the case header defines the configuration, the
 * initial head and the int8 stream; the final weights and biases are printed in
 * hex for a bit-exact comparison with host/tinyol/learn/learner.py. Exercises the
 * VMLA/VLDM paths of tol_fmac.h that a host build never compiles. Test only.
 */
#include <stdint.h>
#include <string.h>

#include "bench_rt.h"
#include "learner_case.h"
#include "tol_learner.h"

static _Alignas(4) uint8_t tol_ls_mem[TOL_LEARNER_BYTES_EX(LC_D, LC_C, LC_CAP, LC_BITS, 1u, LC_MAX_OLD,
                                                           LC_NO_MOMENTUM)];
static tol_learner_t tol_ls;

int tol_bench_main(void)
{
    tol_learner_config_t c;
    memset(&c, 0, sizeof c);
    c.head_kind = LC_KIND;
    c.replay_bits = LC_BITS;
    c.replay_policy = 0u;
    c.no_momentum = LC_NO_MOMENTUM;
    c.latent_dim = LC_D;
    c.n_outputs = LC_C;
    c.init_classes = LC_INIT;
    c.replay_capacity = LC_CAP;
    c.max_new = 1u;
    c.max_old = LC_MAX_OLD;
    c.init_weight = lc_w;
    c.init_bias = lc_b;
    c.latent_scale = LC_SCALE;
    c.latent_zero_point = LC_ZP;
    c.target_scale = LC_TSCALE;
    c.target_zero_point = LC_TZP;
    c.seed = 7u;
    tol_learner_settings_default(&c.settings);
    c.settings.lr = LC_LR;
    c.settings.momentum = LC_MOMENTUM;
    c.settings.weight_decay = LC_WD;
    c.settings.clip_norm = LC_CLIP;
    c.settings.n_old = LC_N_OLD;
    c.settings.mode = LC_MODE;
    if (tol_learner_init(&tol_ls, tol_ls_mem, sizeof tol_ls_mem, &c) != TOL_OK) return 2;
    for (uint32_t i = 0; i < LC_N; i++) {
        if (LC_KIND == 0u) {
            (void)tol_learner_learn(&tol_ls, lc_q[i], lc_y[i]);
        } else {
            float score;
            uint8_t flag;
            (void)tol_learner_anomaly(&tol_ls, lc_q[i], lc_t[i], &score, &flag);
        }
    }
    const tol_head_t *h = tol_learner_head(&tol_ls);
    tol_bench_hex("w", (const int8_t *)(const void *)h->w, 4u * LC_C * LC_D);
    tol_bench_hex("b", (const int8_t *)(const void *)h->b, 4u * LC_C);
    tol_bench_puts("done\n");
    return 0;
}
