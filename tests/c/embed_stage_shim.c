/*
 * embed_stage_shim.c - drives tinyol.h's adaptive-stage calls (tinyol_stage_*) from pytest
 * (ctypes): one static tinyol_stage_t and its memory, as a user's firmware holds them.
 */
#include "tinyol.h"

static tinyol_stage_t shim_s;
static _Alignas(8) uint8_t shim_smem[TOL_STAGE_MEM_BYTES];

int shim_stage_init(void) { return (int)tinyol_stage_init(&shim_s, shim_smem, sizeof(shim_smem)); }
int shim_stage_init_small(void)
{
    return (int)tinyol_stage_init(&shim_s, shim_smem, sizeof(shim_smem) - 8u);
}
int shim_stage_predict(const int8_t *x, int32_t *label, float *conf)
{
    return (int)tinyol_stage_predict(&shim_s, x, label, conf);
}
int shim_stage_learn_plain(uint16_t label) { return (int)tinyol_stage_learn(&shim_s, label, NULL); }
/* out[0] prediction, out[1] learned, out[2] new_class, out[3] samples_seen, out[4] updates,
 * out[5] n_active; prob[0] probability, prob[1] label_probability */
static void shim_flat(const tinyol_result_t *r, int32_t *out, float *prob)
{
    out[0] = r->prediction;
    out[1] = r->learned;
    out[2] = r->new_class;
    out[3] = (int32_t)r->samples_seen;
    out[4] = (int32_t)r->updates;
    out[5] = r->n_active;
    prob[0] = r->probability;
    prob[1] = r->label_probability;
}
int shim_stage_learn(uint16_t label, int32_t *out, float *prob)
{
    tinyol_result_t r;
    const int st = (int)tinyol_stage_learn(&shim_s, label, &r);
    shim_flat(&r, out, prob);
    return st;
}
int shim_stage_learn_sample(const int8_t *x, uint16_t label, int32_t *out, float *prob)
{
    tinyol_result_t r;
    const int st = (int)tinyol_stage_learn_sample(&shim_s, x, label, &r);
    shim_flat(&r, out, prob);
    return st;
}
void shim_stage_reset(void) { tinyol_stage_reset(&shim_s); }
uint32_t shim_stage_seen(void)
{
    tol_learner_stats_t s;
    tinyol_stage_stats(&shim_s, &s);
    return s.samples_seen;
}
