/*
 * learner_stage.c - model_learner.h for the adaptive stage (tol_stage.h): the
 * learner of a model exported with an early `--split` (its directory has
 * stage_init.c; docs/adaptive.md). The backbone's int8 output feeds several
 * float32 layers trained by backprop. SAVE/LOAD move the whole stage (its
 * STG1 state); GET_STAGE / SET_STAGE its image (every parameter + active flags).
 */
#include <string.h>

#include "model_learner.h"
#include "tol_proto.h"
#include "tol_stage.h"

#ifndef TOL_REPLAY_POLICY
#define TOL_REPLAY_POLICY TOL_REPLAY_RESERVOIR
#endif
#ifndef TOL_REHEARSE /* exports before idle rehearsal: off */
#define TOL_REHEARSE 0u
#endif
_Static_assert(TOL_REHEARSE <= 255u, "rehearsal steps per idle period: 0..255");

_Static_assert(TOL_HEAD_MODE == 0, "an adaptive stage needs a classifier head");
_Static_assert(TOL_STAGE_LAYERS >= 1 && TOL_STAGE_LAYERS <= TOL_STAGE_MAX_LAYERS, "stage layers");
/* tol_stage_bytes(), computed by the exporter's memory model (host/tinyol/memory.py) and
 * checked again by tol_stage_init */
_Static_assert(TOL_MODEL_LEARNER_BYTES == TOL_STAGE_MEM_BYTES,
               "config.h's learner budget (host/tinyol/memory.py) disagrees with TOL_STAGE_MEM_BYTES");
_Static_assert(TOL_STAGE_STATE_REPLAY == TOL_LEARNER_STATE_REPLAY &&
                   TOL_STAGE_STATE_MOMENTUM == TOL_LEARNER_STATE_MOMENTUM,
               "SAVE reports the parts with the learner's bits");

#ifndef TOL_STAGE_TRAINED /* exports before the lean stage: every parameter trains */
#define TOL_STAGE_TRAINED TOL_STAGE_PARAMS
#endif
_Static_assert(TOL_STAGE_TRAINED <= TOL_STAGE_PARAMS, "trained parameters");

extern const tol_stage_layer_t tol_stage_layers[TOL_STAGE_LAYERS];
extern const float tol_stage_init_params[TOL_STAGE_PARAMS];

static tol_stage_t tol_stage;

const uint8_t tol_model_learner_get_msg = (uint8_t)TOL_MSG_GET_STAGE;
const uint8_t tol_model_learner_set_msg = (uint8_t)TOL_MSG_SET_STAGE;

tol_status_t tol_model_learner_init(uint8_t *mem, size_t bytes)
{
    tol_stage_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.layers = tol_stage_layers;
    cfg.n_layers = (uint8_t)TOL_STAGE_LAYERS;
    cfg.replay_bits = (uint8_t)TOL_REPLAY_BITS;
    cfg.replay_policy = (uint8_t)TOL_REPLAY_POLICY;
    cfg.no_momentum = (uint8_t)(TOL_MOMENTUM == 0.0f ? 1u : 0u); /* as the exporter's memory model */
    cfg.init_params = tol_stage_init_params;
    cfg.init_classes = (uint16_t)TOL_HEAD_INIT_CLASSES;
    cfg.replay_capacity = (uint16_t)TOL_REPLAY_CAPACITY;
    cfg.max_new = (uint16_t)TOL_REPLAY_N_NEW;
    cfg.latent_scale = TOL_LATENT_SCALE;
    cfg.latent_zero_point = TOL_LATENT_ZERO_POINT;
    cfg.seed = TOL_SEED;
    tol_learner_settings_default(&cfg.settings);
    cfg.settings.lr = TOL_LR;
    cfg.settings.momentum = TOL_MOMENTUM;
    cfg.settings.weight_decay = TOL_WEIGHT_DECAY;
    cfg.settings.n_new = (uint16_t)TOL_REPLAY_N_NEW;
    cfg.settings.n_old = (uint16_t)TOL_REPLAY_N_OLD;
    cfg.settings.mode = (uint8_t)(TOL_REPLAY_CAPACITY > 0 ? TOL_LEARN_REPLAY : TOL_LEARN_SGD);
    cfg.settings.rehearse = (uint8_t)TOL_REHEARSE;
    return tol_stage_init(&tol_stage, mem, bytes, &cfg);
}

tol_status_t tol_model_learner_predict(const int8_t *latent, int32_t *label, float *confidence)
{
    return tol_stage_predict(&tol_stage, latent, label, confidence);
}

float tol_model_learner_prob(uint16_t label)
{
    return label < tol_stage.rows && tol_stage.active[label] ? tol_stage.probs[label] : 0.0f;
}

tol_status_t tol_model_learner_learn(const int8_t *latent, uint16_t label)
{
    return tol_stage_learn(&tol_stage, latent, label);
}

tol_status_t tol_model_learner_anomaly(const int8_t *latent, const int8_t *input, bool learn, float *score,
                                       uint8_t *is_anomaly)
{
    (void)latent;
    (void)input;
    (void)learn;
    (void)score;
    (void)is_anomaly;
    return TOL_ERR_UNSUPPORTED; /* classifier stages only */
}

tol_status_t tol_model_learner_replay_add(const int8_t *latent, uint16_t label)
{
    return tol_stage_replay_add(&tol_stage, latent, label);
}

void tol_model_learner_reset(void)
{
    tol_stage_reset(&tol_stage); /* drops a staged image too */
}

void tol_model_learner_get_stats(tol_learner_stats_t *st)
{
    tol_stage_get_stats(&tol_stage, st);
}

void tol_model_learner_get_settings(tol_learner_settings_t *s)
{
    tol_stage_get_settings(&tol_stage, s);
}

tol_status_t tol_model_learner_set_settings(const tol_learner_settings_t *s)
{
    return tol_stage_set_settings(&tol_stage, s);
}

tol_status_t tol_model_learner_rehearse(void)
{
    return tol_stage_rehearse(&tol_stage);
}

uint8_t tol_model_learner_rehearsed(void)
{
    return tol_stage.rehearsed;
}

/* Largest stage state (header, params, active, counts, a full queue, momentum, a full
 * replay buffer) plus the record header: the store's slot size. */
uint32_t tol_model_learner_record_max(void)
{
    return TOL_STORE_HEADER_BYTES + TOL_STAGE_STATE_HEADER + 8u * (uint32_t)TOL_STAGE_TRAINED +
           5u * (uint32_t)TOL_HEAD_MAX_CLASSES + (4u * TOL_LATENT_DIM + 2u) * (uint32_t)TOL_REPLAY_N_NEW +
           (uint32_t)TOL_REPLAY_CAPACITY * ((uint32_t)TOL_REPLAY_ROW_BYTES(TOL_LATENT_DIM, TOL_REPLAY_BITS) + 2u) +
           6u * (uint32_t)TOL_HEAD_MAX_CLASSES;
}

uint32_t tol_model_learner_state_bytes(void)
{
    return tol_stage_state_bytes(&tol_stage, TOL_STAGE_STATE_REPLAY);
}

tol_status_t tol_model_learner_save(tol_store_t *s, bool no_replay, uint8_t *parts_out, uint32_t *payload)
{
    tol_learner_settings_t set;
    tol_stage_get_settings(&tol_stage, &set);
    uint8_t parts = (uint8_t)(no_replay ? 0u : TOL_STAGE_STATE_REPLAY);
    if (set.momentum != 0.0f) parts |= (uint8_t)TOL_STAGE_STATE_MOMENTUM;
    uint32_t total = tol_stage_state_bytes(&tol_stage, parts);
    if (total > tol_store_capacity(s) && (parts & TOL_STAGE_STATE_REPLAY)) {
        parts &= (uint8_t)~TOL_STAGE_STATE_REPLAY; /* too big for a slot: the stage still fits */
        total = tol_stage_state_bytes(&tol_stage, parts);
    }
    TOL_TRY(tol_store_begin(s, total));
    uint8_t buf[64];
    for (uint32_t at = 0; at < total; at += sizeof(buf)) {
        uint32_t n = total - at < sizeof(buf) ? total - at : (uint32_t)sizeof(buf);
        tol_stage_state_read(&tol_stage, parts, at, buf, n);
        TOL_TRY(tol_store_append(s, buf, n));
    }
    TOL_TRY(tol_store_commit(s));
    *parts_out = parts;
    *payload = total;
    return TOL_OK;
}

tol_status_t tol_model_learner_load(tol_store_t *s, tol_store_record_t *rec)
{
    TOL_TRY(tol_store_newest(s, rec));
    uint8_t buf[TOL_STAGE_STATE_HEADER];
    TOL_CHECK(rec->payload_len >= sizeof(buf), TOL_ERR_MODEL);
    TOL_TRY(tol_store_read(s, rec, 0u, buf, sizeof(buf)));
    uint8_t parts = 0u;
    uint32_t total = 0u;
    TOL_TRY(tol_stage_state_begin(&tol_stage, buf, sizeof(buf), &parts, &total));
    tol_status_t st = total == rec->payload_len ? TOL_OK : TOL_ERR_MODEL;
    for (uint32_t at = sizeof(buf); st == TOL_OK && at < total; at += sizeof(buf)) {
        uint32_t n = total - at < sizeof(buf) ? total - at : (uint32_t)sizeof(buf);
        st = tol_store_read(s, rec, at, buf, n);
        if (st == TOL_OK) st = tol_stage_state_write(&tol_stage, parts, at, buf, n);
    }
    if (st != TOL_OK) {
        tol_stage_reset(&tol_stage); /* half-applied: back to the exported stage */
        return st;
    }
    TOL_TRY(tol_stage_state_end(&tol_stage, parts));
    tol_stage.push_fill = 0u; /* the loaded state replaces a staged image */
    return TOL_OK;
}

/* GET_STAGE: offset:u32. Reply: offset:u32 total:u32 n:u16 0:u16 bytes[n] of the stage
 * image (tol_stage_image_read: every parameter as f32, then the active flags). */
tol_status_t tol_model_learner_get(const uint8_t *req, uint16_t n, uint8_t *reply, uint16_t cap,
                                   uint16_t *reply_len)
{
    TOL_CHECK(n == 4u, TOL_ERR_LENGTH);
    const uint32_t offset = tol_get_u32(req);
    const uint32_t total = tol_stage_image_bytes(&tol_stage);
    TOL_CHECK(offset <= total, TOL_ERR_RANGE);
    uint32_t count = total - offset;
    if (count > (uint32_t)cap - 12u) count = (uint32_t)cap - 12u;
    TOL_TRY(tol_stage_image_read(&tol_stage, offset, reply + 12, count));
    tol_put_u32(reply, offset);
    tol_put_u32(reply + 4, total);
    tol_put_u16(reply + 8, (uint16_t)count);
    tol_put_u16(reply + 10, 0u);
    *reply_len = (uint16_t)(12u + count);
    return TOL_OK;
}

/* SET_STAGE: offset:u32 bytes[n]: stage image bytes, staged (offset 0 starts a new image,
 * later writes continue where the last ended); the write that completes the image commits
 * it (all or nothing). The fence is up while an image is part way staged; a complete image
 * refused at the commit (NaN, bad flags) leaves the live stage as it was, unfenced.
 * Reply: offset:u32 staged:u32 total:u32 committed:u8 0:u8 n_active:u16 */
tol_status_t tol_model_learner_set(const uint8_t *req, uint16_t n, uint8_t *reply, uint16_t *reply_len,
                                   bool *staged)
{
    TOL_CHECK(n >= 4u, TOL_ERR_LENGTH);
    const uint32_t offset = tol_get_u32(req);
    const uint32_t total = tol_stage_image_bytes(&tol_stage);
    tol_status_t st = tol_stage_push_write(&tol_stage, offset, req + 4, (uint32_t)n - 4u);
    const uint32_t fill = tol_stage.push_fill;
    uint8_t committed = 0u;
    if (st == TOL_OK && fill == total) {
        st = tol_stage_push_commit(&tol_stage);
        committed = st == TOL_OK ? 1u : 0u;
    }
    *staged = fill > 0u && fill < total;
    TOL_TRY(st);
    tol_put_u32(reply, offset);
    tol_put_u32(reply + 4, fill);
    tol_put_u32(reply + 8, total);
    reply[12] = committed;
    reply[13] = 0u;
    tol_put_u16(reply + 14, tol_stage.n_active);
    *reply_len = 16u;
    return TOL_OK;
}

/* INFO's stage block: layers:u8 params:u32 (the trained ones: the image's) bytes:u32 hash:u32 */
uint16_t tol_model_learner_info(uint8_t *out, uint16_t cap)
{
    if (cap < 13u) return 0u;
    out[0] = (uint8_t)TOL_STAGE_LAYERS;
    tol_put_u32(out + 1, (uint32_t)TOL_STAGE_TRAINED);
    tol_put_u32(out + 5, (uint32_t)TOL_MODEL_LEARNER_BYTES);
    tol_put_u32(out + 9, (uint32_t)TOL_STAGE_HASH);
    return 13u;
}
