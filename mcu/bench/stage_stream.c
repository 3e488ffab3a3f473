/*
 * stage_stream.c - the C adaptive stage on the Cortex-M4F (QEMU), fed a whole stream
 * (tests/device/test_stage_m4.py): the case header (stage_case.h) defines the layers, the exported
 * parameters, the configuration, a replay prefill and the int8 stream; each sample is
 * predicted, then learned. Printed in hex for a bit-exact comparison with
 * host/tinyol/learn/stage.py: the final parameters ("p"), the momentum buffers ("m", zeros without
 * them), every prediction's label ("l", int32) and confidence ("c", float32). Exercises the
 * VMLA/VLDM paths of tol_fmac.h that a host build never compiles. Test only.
 */
#include <stdint.h>
#include <string.h>

#include "bench_rt.h"
#include "stage_case.h"
#include "tol_stage.h"

static _Alignas(4) uint8_t tol_ss_mem[SC_MEM];
static tol_stage_t tol_ss;
static int32_t tol_ss_labels[SC_N];
static float tol_ss_conf[SC_N];
static float tol_ss_zero[SC_P];
static const uint32_t tol_ss_prefill = SC_PREFILL; /* may be 0 */

int tol_bench_main(void)
{
    tol_stage_config_t c;
    memset(&c, 0, sizeof c);
    c.layers = sc_layers;
    c.n_layers = (uint8_t)(sizeof sc_layers / sizeof sc_layers[0]);
    c.replay_bits = SC_BITS;
    c.replay_policy = SC_POLICY;
    c.no_momentum = SC_NO_MOMENTUM;
    c.init_params = sc_params;
    c.init_classes = SC_INIT;
    c.replay_capacity = SC_CAP;
    c.max_new = SC_MAX_NEW;
    c.max_old = 0u;
    c.latent_scale = SC_SCALE;
    c.latent_zero_point = SC_ZP;
    c.seed = SC_SEED;
    tol_learner_settings_default(&c.settings);
    c.settings.lr = SC_LR;
    c.settings.momentum = SC_MOMENTUM;
    c.settings.weight_decay = SC_WD;
    c.settings.clip_norm = SC_CLIP;
    c.settings.n_new = SC_N_NEW;
    c.settings.n_old = SC_N_OLD;
    c.settings.mode = SC_MODE;
    if (tol_stage_init(&tol_ss, tol_ss_mem, sizeof tol_ss_mem, &c) != TOL_OK) return 2;
    for (uint32_t i = 0; i < tol_ss_prefill; i++) {
        if (tol_stage_replay_add(&tol_ss, sc_pq[i], sc_py[i]) != TOL_OK) return 3;
    }
    for (uint32_t i = 0; i < SC_N; i++) {
        if (tol_stage_predict(&tol_ss, sc_q[i], &tol_ss_labels[i], &tol_ss_conf[i]) != TOL_OK) return 4;
        (void)tol_stage_learn(&tol_ss, sc_q[i], sc_y[i]); /* ERR_DIVERGED is part of the stream */
    }
    tol_bench_hex("p", (const int8_t *)(const void *)tol_ss.params, 4u * SC_P);
    tol_bench_hex("m", (const int8_t *)(const void *)(tol_ss.mom != NULL ? tol_ss.mom : tol_ss_zero),
                  4u * SC_P);
    tol_bench_hex("l", (const int8_t *)(const void *)tol_ss_labels, 4u * SC_N);
    tol_bench_hex("c", (const int8_t *)(const void *)tol_ss_conf, 4u * SC_N);
    tol_bench_puts("done\n");
    return 0;
}
