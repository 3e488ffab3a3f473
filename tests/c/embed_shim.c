/*
 * embed_shim.c - drives the tinyol.h library API from pytest (ctypes): one
 * static tinyol_t, its memory and a store on tests/c/flash_sim.c. Exactly
 * what a user's firmware does, minus the sensor.
 */
#include "tinyol.h"

static tinyol_t shim_t;
static _Alignas(8) uint8_t shim_mem[TINYOL_MEM_BYTES];
static tol_store_t shim_store;

int shim_init(void) { return (int)tinyol_init(&shim_t, shim_mem, sizeof(shim_mem)); }
int shim_init_small(void) { return (int)tinyol_init(&shim_t, shim_mem, sizeof(shim_mem) - 8u); }
uint32_t shim_mem_bytes(void) { return (uint32_t)TINYOL_MEM_BYTES; }
/* tinyol_init_split: the replay buffer in a block of its own (shim_replay; in a firmware, the
 * memory plan's TINYOL_REPLAY_SECTION), the rest in shim_rest; either `short_by` bytes short */
static _Alignas(8) uint8_t shim_rest[TINYOL_MEM_BYTES - TINYOL_REPLAY_MEM_BYTES];
static _Alignas(8) uint8_t shim_replay[TINYOL_REPLAY_MEM_BYTES];
int shim_init_split(uint32_t rest_short_by, uint32_t replay_short_by)
{
    return (int)tinyol_init_split(&shim_t, shim_rest, sizeof(shim_rest) - rest_short_by, shim_replay,
                                  sizeof(shim_replay) - replay_short_by);
}
uint32_t shim_replay_mem_bytes(void) { return (uint32_t)TINYOL_REPLAY_MEM_BYTES; }
uint32_t shim_input_size(void) { return (uint32_t)TINYOL_INPUT_SIZE; }
int shim_predict(const int8_t *x, int32_t *label, float *conf)
{
    return (int)tinyol_predict(&shim_t, x, label, conf);
}
int shim_learn(uint16_t label) { return (int)tinyol_learn(&shim_t, label, NULL); }
int shim_learn_sample(const int8_t *x, uint16_t label)
{
    return (int)tinyol_learn_sample(&shim_t, x, label, NULL);
}
/* tinyol_learn / tinyol_learn_sample with their result, flattened for ctypes: out[0] prediction,
 * out[1] learned, out[2] new_class, out[3] samples_seen, out[4] updates, out[5] n_active;
 * prob[0] probability, prob[1] label_probability */
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
int shim_learn_result(uint16_t label, int32_t *out, float *prob)
{
    tinyol_result_t r;
    const int st = (int)tinyol_learn(&shim_t, label, &r);
    shim_flat(&r, out, prob);
    return st;
}
int shim_learn_sample_result(const int8_t *x, uint16_t label, int32_t *out, float *prob)
{
    tinyol_result_t r;
    const int st = (int)tinyol_learn_sample(&shim_t, x, label, &r);
    shim_flat(&r, out, prob);
    return st;
}
int shim_quantize(const float *x, int8_t *q) { return (int)tinyol_quantize(x, q); }
int shim_anomaly(const int8_t *x) { return (int)tinyol_anomaly(&shim_t, x, true, NULL, NULL); }
void shim_reset(void) { tinyol_reset(&shim_t); }
uint32_t shim_seen(void)
{
    tol_learner_stats_t s;
    tinyol_stats(&shim_t, &s);
    return s.samples_seen;
}
int shim_store_open(void) { return (int)tinyol_store_open(&shim_t, &shim_store); }
int shim_save(void) { return (int)tinyol_save(&shim_t, &shim_store); }
int shim_load(void) { return (int)tinyol_load(&shim_t, &shim_store); }
