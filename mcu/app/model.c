/*
 * model.c - model glue of the app layer, a client of tinyol.h: owns the backbone's
 * input/latent buffers and the learner's memory (static, sized by the model's
 * config.h) and turns protocol payloads into backbone and learner calls (see
 * tol_model.h, payload layouts in docs/protocol.md). The learner is behind
 * model_learner.h: learner_head.c (TinyOL's last layer) or learner_stage.c (the
 * adaptive stage of an earlier --split), whichever the builder links, with its
 * pull/push payloads (model_wire.h: wire_head.c or wire_stage.c).
 */
#include <math.h>
#include <string.h>

#include "backbone.h"
#include "config.h"
#include "model_learner.h"
#include "model_wire.h"
#include "tinyol.h"
#include "tol_server.h"
#include "tol_hal.h"
#include "tol_model.h"
#include "tol_proto.h"
#include "tol_store.h"

#define TOL_MODEL_OUTPUTS TINYOL_OUTPUTS
#define TOL_CYCLES_INVALID 0xFFFFFFFFu
/* Auto-save after this many committed updates since the last save (0 = off). */
#ifndef TOL_AUTOSAVE_UPDATES
#define TOL_AUTOSAVE_UPDATES 0u
#endif
#define TOL_SAVE_NO_REPLAY 0x01u /* SAVE option bit: leave the replay buffer out */

/* The learner's memory: TOL_MODEL_LEARNER_BYTES (model_learner.h), the exporter's budget.
 * Where the learner's memory lives: 1 SRAM1, 2 SRAM2, 3 SRAM3. The build decides it from the
 * board and the model (host/tinyol/memory.py, via mcu/platform/common/tinyol_build.py).
 * TOL_LEARNER_REGION's default and the sections are tinyol.h's (the one place they are written). */
/* The replay buffer's region: the learner's (inside tol_learner_mem), or its own block elsewhere
 * when the plan splits them (host/tinyol/memory.py: e.g. the stage in SRAM1, the buffer in SRAM2). */
#if TOL_REPLAY_REGION != TOL_LEARNER_REGION
_Static_assert(TOL_MODEL_REPLAY_BYTES > 0, "a replay region without a replay buffer");
static _Alignas(8) uint8_t tol_replay_mem[TOL_MODEL_REPLAY_BYTES] TINYOL_REPLAY_SECTION;
#define TOL_REPLAY_MEM tol_replay_mem
#define TOL_REPLAY_MEM_BYTES sizeof(tol_replay_mem)
#define TOL_LEARNER_MEM_BYTES (TOL_MODEL_LEARNER_BYTES - TOL_MODEL_REPLAY_BYTES)
#else
#define TOL_REPLAY_MEM NULL
#define TOL_REPLAY_MEM_BYTES 0u
#define TOL_LEARNER_MEM_BYTES TOL_MODEL_LEARNER_BYTES
#endif
static _Alignas(8) uint8_t tol_learner_mem[TOL_LEARNER_MEM_BYTES] TINYOL_LEARNER_SECTION;
static int8_t tol_input[TOL_INPUT_SIZE];
static int8_t tol_latent[TOL_LATENT_DIM];
static struct {
    uint32_t backbone, predict, learn;
} tol_cycles = {TOL_CYCLES_INVALID, TOL_CYCLES_INVALID, TOL_CYCLES_INVALID};

/* Persistence (docs/persistence.md): the store, what happened at boot, the last save. */
static tol_store_t tol_store;
static struct {
    tol_store_status_t boot;  /* reported by INFO and the boot line */
    uint8_t last_status;      /* tol_status_t of the last SAVE/LOAD/auto-save */
    uint32_t seq;             /* seq of the record the learner state matches (saved or loaded) */
    uint32_t record_bytes;    /* last save: header + payload */
    uint16_t pages;           /* last save: pages the record spans (erased per save) */
    uint32_t saved_updates;   /* learner's update counter at the last save/load */
    uint32_t autosave_every;  /* auto-save period in updates (SET key AUTOSAVE), 0 = off */
    bool head_staged;         /* a staged SET_HEAD/SET_STAGE push is not committed: no learning, no save */
    /* the record the learner's state matches (STATS' record block, `tinyol info`) */
    uint8_t rec_from;         /* 0 none, 1 saved since boot, 2 loaded (at boot or by LOAD) */
    uint8_t rec_parts;        /* TOL_STATE_* parts it holds */
    uint8_t rec_slot;
    uint8_t replay_left_out;  /* 1: the last save wanted the replay buffer, a slot could not hold it */
    uint32_t rec_bytes;       /* its size in flash, header included */
} tol_persist = {.autosave_every = TOL_AUTOSAVE_UPDATES};

/* Time stamps that know whether a UART receive disturbed the counter. */
typedef struct {
    uint32_t t;
    uint32_t epoch;
} tol_stamp_t;

static tol_stamp_t tol_now(void)
{
    tol_stamp_t s = {tol_hal_cycles(), tol_hal_cycles_epoch()};
    return s;
}

static uint32_t tol_since(tol_stamp_t s)
{
    uint32_t t = tol_hal_cycles();
    return tol_hal_cycles_epoch() == s.epoch ? t - s.t : TOL_CYCLES_INVALID;
}

static void tol_model_boot_load(void);

tol_status_t tol_model_init(void)
{
    /* first: it chooses the kernels' paths for this core (tol_cpu.h) */
    tol_cpu_selftest();
    TOL_TRY(tol_model_learner_init(tol_learner_mem, sizeof(tol_learner_mem), TOL_REPLAY_MEM, TOL_REPLAY_MEM_BYTES));
    tol_model_boot_load();
    return TOL_OK;
}

static void tol_put_f32(uint8_t *p, float v)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof(bits));
    tol_put_u32(p, bits);
}

static float tol_get_f32(const uint8_t *p)
{
    uint32_t bits = tol_get_u32(p);
    float v;
    memcpy(&v, &bits, sizeof(v));
    return v;
}

/* float32 input payload size; 0 where float inputs are not accepted (> 8 KB) */
#define TOL_FLOAT_REQUEST_BYTES (TOL_SERVER_FLOAT_INPUT ? 1u + 4u * (uint32_t)TOL_INPUT_SIZE : 0u)

/* Read an input (int8 or float32) from a payload into tol_input. */
static tol_status_t tol_model_read_input(const uint8_t *p, uint16_t n)
{
    TOL_CHECK(n >= 1u, TOL_ERR_LENGTH);
    if (p[0] == TOL_INPUT_INT8) {
        TOL_CHECK((uint32_t)n == 1u + (uint32_t)TOL_INPUT_SIZE, TOL_ERR_LENGTH);
        memcpy(tol_input, p + 1, TOL_INPUT_SIZE);
        return TOL_OK;
    }
    TOL_CHECK(p[0] == TOL_INPUT_FLOAT32, TOL_ERR_ARG);
    TOL_CHECK(TOL_SERVER_FLOAT_INPUT, TOL_ERR_UNSUPPORTED);
    TOL_CHECK(n == TOL_FLOAT_REQUEST_BYTES, TOL_ERR_LENGTH);
    const uint8_t *x = p + 1;
    for (uint32_t i = 0; i < TOL_INPUT_SIZE; i++) TOL_CHECK(isfinite(tol_get_f32(x + 4u * i)), TOL_ERR_NONFINITE);
    for (uint32_t i = 0; i < TOL_INPUT_SIZE; i++) tol_input[i] = tinyol_quantize_value(tol_get_f32(x + 4u * i));
    return TOL_OK;
}

/* SAMPLE / PREDICT reply: pred i16, flags u8, rehearsed u8 (idle rehearsal steps since the
 * last learned sample, before this request), value f32, loss f32, seen u32, active u16 */
#define TOL_FLAG_LEARNED 0x01u
#define TOL_FLAG_NEW_CLASS 0x02u
#define TOL_FLAG_ANOMALY 0x04u

static tol_status_t tol_model_sample(const uint8_t *req, uint16_t n, bool learn, uint8_t *reply,
                                     uint16_t *reply_len)
{
    TOL_CHECK(n >= 3u, TOL_ERR_LENGTH);
    uint16_t label = tol_get_u16(req);
    TOL_TRY(tol_model_read_input(req + 2, (uint16_t)(n - 2u)));
    tol_stamp_t s = tol_now();
    TOL_TRY(tol_backbone_invoke(tol_input, tol_latent));
    tol_cycles.backbone = tol_since(s);

    const uint8_t rehearsed = tol_model_learner_rehearsed();
    tinyol_result_t r;
    float loss = 0.0f;
    uint8_t flags = 0u;
    if (TOL_HEAD_MODE == 0) {
        TOL_CHECK(!learn || label < TOL_HEAD_MAX_CLASSES, TOL_ERR_LABEL);
        s = tol_now();
        TOL_TRY(tol_model_learner_predict(tol_latent, &r));
        tol_cycles.predict = tol_since(s);
        if (learn) {
            s = tol_now();
            TOL_TRY(tol_model_learner_learn(tol_latent, label, &r));
            tol_cycles.learn = tol_since(s);
            const float p = r.label_probability;
            loss = -logf(p > 1e-7f ? p : 1e-7f);
        }
    } else {
        s = tol_now();
        TOL_TRY(tol_model_learner_anomaly(tol_latent, tol_input, learn, &r));
        tol_cycles.learn = tol_since(s);
        loss = r.threshold; /* the reply's second float: the threshold the score met */
        if (r.anomaly) flags |= TOL_FLAG_ANOMALY;
    }
    /* learned: the classifier accepted the sample (it may wait in the mini-batch); the
     * autoencoder updated its head (flagged samples are not learned unless train_anomalies) */
    if (learn && r.learned) flags |= TOL_FLAG_LEARNED;
    if (r.new_class) flags |= TOL_FLAG_NEW_CLASS;
    tol_put_u16(reply, (uint16_t)(int16_t)r.prediction);
    reply[2] = flags;
    reply[3] = rehearsed;
    tol_put_f32(reply + 4, r.probability);
    tol_put_f32(reply + 8, loss);
    tol_put_u32(reply + 12, r.samples_seen);
    tol_put_u16(reply + 16, r.n_active);
    *reply_len = 18u;
    return TOL_OK;
}

static tol_status_t tol_model_setting(const uint8_t *req, uint16_t n, bool set, uint8_t *reply,
                                      uint16_t *reply_len)
{
    TOL_CHECK(n == (set ? 5u : 1u), TOL_ERR_LENGTH);
    if (req[0] == (uint8_t)TOL_SET_AUTOSAVE) { /* a device policy, not a learner setting */
        if (set) {
            tol_learner_stats_t ls;
            tol_model_learner_get_stats(&ls);
            tol_persist.autosave_every = tol_get_u32(req + 1);
            tol_persist.saved_updates = ls.updates; /* count the period from now */
        }
        reply[0] = req[0];
        tol_put_u32(reply + 1, tol_persist.autosave_every);
        *reply_len = 5u;
        return TOL_OK;
    }
    tol_learner_settings_t st;
    tol_model_learner_get_settings(&st);
    uint8_t key = req[0];
    float f = set ? tol_get_f32(req + 1) : 0.0f;
    uint32_t u = set ? tol_get_u32(req + 1) : 0u;
    float *fp = NULL;
    uint32_t uv = 0u;
    switch ((tol_setting_t)key) {
    case TOL_SET_LR: fp = &st.lr; break;
    case TOL_SET_MOMENTUM: fp = &st.momentum; break;
    case TOL_SET_WEIGHT_DECAY: fp = &st.weight_decay; break;
    case TOL_SET_CLIP_NORM: fp = &st.clip_norm; break;
    case TOL_SET_THRESHOLD_K: fp = &st.threshold_k; break;
    case TOL_SET_EMA_ALPHA: fp = &st.ema_alpha; break;
    case TOL_SET_N_NEW:
        TOL_CHECK(!set || u <= 0xFFFFu, TOL_ERR_RANGE);
        if (set) st.n_new = (uint16_t)u;
        uv = st.n_new;
        break;
    case TOL_SET_N_OLD:
        TOL_CHECK(!set || u <= 0xFFFFu, TOL_ERR_RANGE);
        if (set) st.n_old = (uint16_t)u;
        uv = st.n_old;
        break;
    case TOL_SET_MODE:
        TOL_CHECK(!set || u <= 0xFFu, TOL_ERR_RANGE);
        if (set) st.mode = (uint8_t)u;
        uv = st.mode;
        break;
    case TOL_SET_TRAIN_ANOMALIES:
        TOL_CHECK(!set || u <= 1u, TOL_ERR_RANGE);
        if (set) st.train_anomalies = (uint8_t)u;
        uv = st.train_anomalies;
        break;
    case TOL_SET_WARMUP:
        if (set) st.warmup = u;
        uv = st.warmup;
        break;
    case TOL_SET_REHEARSE:
        TOL_CHECK(!set || u <= 0xFFu, TOL_ERR_RANGE);
        if (set) st.rehearse = (uint8_t)u;
        uv = st.rehearse;
        break;
    case TOL_SET_REPLAY_POLICY: /* the slots already stored stay; later offers follow it */
        TOL_CHECK(!set || u <= 0xFFu, TOL_ERR_RANGE);
        if (set) st.replay_policy = (uint8_t)u;
        uv = st.replay_policy;
        break;
    default:
        return TOL_ERR_ARG;
    }
    if (fp != NULL) {
        if (set) {
            TOL_CHECK(isfinite(f), TOL_ERR_NONFINITE);
            *fp = f;
        }
        memcpy(&uv, fp, sizeof(uv));
    }
    if (set) TOL_TRY(tol_model_learner_set_settings(&st));
    reply[0] = key;
    tol_put_u32(reply + 1, uv);
    *reply_len = 5u;
    return TOL_OK;
}

/* ---- persistence ------------------------------------------------------------------ */

/* Replace the learner's state with the newest stored record of this model. */
static tol_status_t tol_model_load(tol_store_record_t *rec)
{
    TOL_TRY(tol_model_learner_load(&tol_store, rec));
    tol_learner_stats_t ls;
    tol_model_learner_get_stats(&ls);
    tol_learner_settings_t set;
    tol_model_learner_get_settings(&set);
    tol_persist.seq = rec->seq;
    tol_persist.saved_updates = ls.updates;
    tol_persist.rec_from = 2u;
    tol_persist.rec_slot = rec->slot;
    tol_persist.rec_bytes = TOL_STORE_HEADER_BYTES + rec->payload_len;
    /* the record held the buffer when it is as long as the state with it (the restored fill) */
    tol_persist.rec_parts = (uint8_t)((ls.replay_capacity > 0u && rec->payload_len == tol_model_learner_state_bytes()
                                           ? TOL_STATE_REPLAY
                                           : 0u) |
                                      (set.momentum != 0.0f ? TOL_STATE_MOMENTUM : 0u));
    tol_persist.replay_left_out = 0u;
    return TOL_OK;
}

static void tol_model_boot_load(void)
{
    tol_store_record_t rec;
    /* a (re)started model matches no record until the load below says so */
    tol_persist.seq = 0u;
    tol_persist.rec_from = 0u;
    tol_persist.rec_parts = 0u;
    tol_persist.rec_slot = 0u;
    tol_persist.replay_left_out = 0u;
    tol_persist.rec_bytes = 0u;
    tol_status_t st = tol_store_init(&tol_store, (uint32_t)TOL_MODEL_HASH, tol_model_learner_record_max());
    if (st == TOL_OK) st = tol_model_load(&rec);
    tol_persist.boot.seq = st == TOL_OK ? rec.seq : 0u;
    tol_persist.boot.damaged = tol_store.damaged; /* 0 when the store could not be scanned */
    switch (st) {
    case TOL_OK: tol_persist.boot.state = (uint8_t)TOL_STORE_LOADED; break;
    case TOL_ERR_NO_RECORD: tol_persist.boot.state = (uint8_t)TOL_STORE_EMPTY; break;
    case TOL_ERR_MODEL:
        /* a record of this model hash that does not fit this learner counts as rejected */
        tol_persist.boot.state = (uint8_t)(tol_store_newest(&tol_store, &rec) == TOL_OK ? TOL_STORE_REJECTED
                                                                                     : TOL_STORE_FOREIGN);
        break;
    case TOL_ERR_FLASH:
    case TOL_ERR_UNSUPPORTED: tol_persist.boot.state = (uint8_t)TOL_STORE_UNAVAILABLE; break;
    default: tol_persist.boot.state = (uint8_t)TOL_STORE_REJECTED; break;
    }
    tol_persist.last_status = (uint8_t)st;
}

tol_store_status_t tol_model_store_status(void)
{
    return tol_persist.boot;
}

/* Write the learner's state as a new record. options: TOL_SAVE_NO_REPLAY. */
static tol_status_t tol_model_save(uint8_t options, uint8_t *parts_out)
{
    uint8_t parts = 0u;
    uint32_t total = 0u;
    TOL_TRY(tol_model_learner_save(&tol_store, (options & TOL_SAVE_NO_REPLAY) != 0u, &parts, &total));
    tol_learner_stats_t ls;
    tol_model_learner_get_stats(&ls);
    uint32_t page = tol_store.region.page_bytes;
    tol_persist.seq = tol_store.seq_max;
    tol_persist.record_bytes = TOL_STORE_HEADER_BYTES + total;
    tol_persist.pages = (uint16_t)((tol_persist.record_bytes + page - 1u) / page);
    tol_persist.saved_updates = ls.updates;
    tol_persist.rec_from = 1u;
    tol_persist.rec_parts = parts;
    tol_persist.rec_slot = tol_store.target;
    tol_persist.rec_bytes = tol_persist.record_bytes;
    tol_persist.replay_left_out =
        (uint8_t)((options & TOL_SAVE_NO_REPLAY) == 0u && ls.replay_capacity > 0u && (parts & TOL_STATE_REPLAY) == 0u);
    *parts_out = parts;
    return TOL_OK;
}

/* SAVE: options:u8 (optional). Reply: seq:u32 bytes:u32 slot:u8 parts:u8 pages:u16 cycles:u32 */
static tol_status_t tol_model_on_save(const uint8_t *req, uint16_t n, uint8_t *reply, uint16_t *reply_len)
{
    TOL_CHECK(n <= 1u, TOL_ERR_LENGTH);
    uint8_t parts = 0u;
    tol_stamp_t s = tol_now();
    tol_status_t st = tol_model_save(n == 1u ? req[0] : 0u, &parts);
    uint32_t cycles = tol_since(s);
    tol_persist.last_status = (uint8_t)st;
    TOL_TRY(st);
    tol_put_u32(reply, tol_persist.seq);
    tol_put_u32(reply + 4, tol_persist.record_bytes);
    reply[8] = tol_store.target;
    reply[9] = parts;
    tol_put_u16(reply + 10, tol_persist.pages);
    tol_put_u32(reply + 12, cycles);
    *reply_len = 16u;
    return TOL_OK;
}

/* LOAD: no payload. Reply: seq:u32 bytes:u32 slot:u8 0:u8 n_active:u16 samples_seen:u32 */
static tol_status_t tol_model_on_load(uint16_t n, uint8_t *reply, uint16_t *reply_len)
{
    TOL_CHECK(n == 0u, TOL_ERR_LENGTH);
    tol_store_record_t rec;
    tol_status_t st = tol_model_load(&rec);
    tol_persist.last_status = (uint8_t)st;
    if (st == TOL_OK || st == TOL_ERR_RANGE) tol_persist.head_staged = false; /* head replaced */
    TOL_TRY(st);
    tol_learner_stats_t ls;
    tol_model_learner_get_stats(&ls);
    tol_put_u32(reply, rec.seq);
    tol_put_u32(reply + 4, TOL_STORE_HEADER_BYTES + rec.payload_len);
    reply[8] = rec.slot;
    reply[9] = 0u;
    tol_put_u16(reply + 10, ls.n_active);
    tol_put_u32(reply + 12, ls.samples_seen);
    *reply_len = 16u;
    return TOL_OK;
}

/* Auto-save after a learning request, when configured (TOL_AUTOSAVE_UPDATES). */
static void tol_model_autosave(void)
{
    if (tol_persist.autosave_every == 0u || tol_store.flash != TOL_OK) return;
    tol_learner_stats_t ls;
    tol_model_learner_get_stats(&ls);
    if (ls.updates - tol_persist.saved_updates < tol_persist.autosave_every) return;
    uint8_t parts = 0u;
    tol_persist.last_status = (uint8_t)tol_model_save(0u, &parts);
    if (tol_persist.last_status != (uint8_t)TOL_OK) tol_persist.saved_updates = ls.updates; /* retry later */
}

/* SET_HEAD / SET_STAGE: one slice of a push (model_wire.h). From the first staged slice
 * on, the learner is fenced (SAMPLE, PREDICT, SAVE refused with TOL_ERR_BUSY, no auto-save)
 * until the slice that completes the push commits, or RESET/LOAD replace the state: a cut
 * push never becomes the learned state. */
static tol_status_t tol_model_push(const uint8_t *req, uint16_t n, uint8_t *reply, uint16_t *reply_len)
{
    bool staged = tol_persist.head_staged;
    tol_status_t st = tol_model_wire_set(req, n, reply, reply_len, &staged);
    tol_persist.head_staged = staged;
    return st;
}

/* INFO's stage block (tol_server.c appends it; nothing for the one-layer head) */
uint16_t tol_model_info_stage(uint8_t *out, uint16_t cap)
{
    return tol_model_wire_info(out, cap);
}

tol_status_t tol_model_handle(uint8_t type, const uint8_t *req, uint16_t req_len, uint8_t *reply,
                              uint16_t reply_cap, uint16_t *reply_len)
{
    *reply_len = 0u;
    if (tol_persist.head_staged &&
        (type == (uint8_t)TOL_MSG_SAMPLE || type == (uint8_t)TOL_MSG_PREDICT || type == (uint8_t)TOL_MSG_SAVE)) {
        return TOL_ERR_BUSY;
    }
    switch ((tol_msg_t)type) {
    case TOL_MSG_SAMPLE: {
        tol_status_t st = tol_model_sample(req, req_len, true, reply, reply_len);
        tol_model_autosave();
        return st;
    }
    case TOL_MSG_PREDICT:
        return tol_model_sample(req, req_len, false, reply, reply_len);
    case TOL_MSG_EMBED: {
        TOL_TRY(tol_model_read_input(req, req_len));
        TOL_CHECK(reply_cap >= TOL_LATENT_DIM, TOL_ERR_OVERFLOW);
        tol_stamp_t s = tol_now();
        TOL_TRY(tol_backbone_invoke(tol_input, tol_latent));
        tol_cycles.backbone = tol_since(s);
        memcpy(reply, tol_latent, TOL_LATENT_DIM);
        *reply_len = (uint16_t)TOL_LATENT_DIM;
        return TOL_OK;
    }
    case TOL_MSG_SET:
        return tol_model_setting(req, req_len, true, reply, reply_len);
    case TOL_MSG_GET:
        return tol_model_setting(req, req_len, false, reply, reply_len);
    case TOL_MSG_RESET:
        TOL_CHECK(req_len == 0u, TOL_ERR_LENGTH);
        tol_model_learner_reset();
        {
            tol_learner_stats_t ls;
            tol_model_learner_get_stats(&ls);
            tol_persist.saved_updates = ls.updates; /* the auto-save period counts from the reset */
        }
        tol_persist.head_staged = false;
        return TOL_OK;
    case TOL_MSG_REPLAY_ADD: {
        /* label u16 + input: the backbone's latent goes into the replay buffer
         * through its policy, without training (e.g. pre-training classes) */
        TOL_CHECK(req_len >= 3u, TOL_ERR_LENGTH);
        const uint16_t label = tol_get_u16(req);
        TOL_CHECK(label < TOL_MODEL_OUTPUTS, TOL_ERR_LABEL);
        TOL_TRY(tol_model_read_input(req + 2, (uint16_t)(req_len - 2u)));
        TOL_TRY(tol_backbone_invoke(tol_input, tol_latent));
        TOL_TRY(tol_model_learner_replay_add(tol_latent, label));
        tol_learner_stats_t st;
        tol_model_learner_get_stats(&st);
        tol_put_u16(reply, st.replay_fill);
        tol_put_u16(reply + 2, st.replay_capacity);
        *reply_len = 4u;
        return TOL_OK;
    }
    case TOL_MSG_GET_HEAD:
    case TOL_MSG_GET_STAGE: /* the pair of the learner linked (model_wire.h) */
        TOL_CHECK(type == tol_model_wire_get_msg, TOL_ERR_TYPE);
        return tol_model_wire_get(req, req_len, reply, reply_cap, reply_len);
    case TOL_MSG_SET_HEAD:
    case TOL_MSG_SET_STAGE:
        TOL_CHECK(type == tol_model_wire_set_msg, TOL_ERR_TYPE);
        return tol_model_push(req, req_len, reply, reply_len);
    case TOL_MSG_SAVE:
        return tol_model_on_save(req, req_len, reply, reply_len);
    case TOL_MSG_LOAD:
        return tol_model_on_load(req_len, reply, reply_len);
    default:
        return TOL_ERR_TYPE;
    }
}

uint16_t tol_model_stats(uint8_t *out, uint16_t cap)
{
    tol_learner_stats_t st;
    tol_model_learner_get_stats(&st);
    if (cap < 40u) return 0u;
    tol_put_u32(out + 0, st.samples_seen);
    tol_put_u32(out + 4, st.updates);
    tol_put_u32(out + 8, st.rejected);
    tol_put_u32(out + 12, st.anomalies);
    tol_put_u16(out + 16, st.n_active);
    tol_put_u16(out + 18, st.n_outputs);
    tol_put_u16(out + 20, st.replay_fill);
    tol_put_u16(out + 22, st.replay_capacity);
    tol_put_f32(out + 24, st.threshold);
    tol_put_u32(out + 28, tol_cycles.backbone);
    tol_put_u32(out + 32, tol_cycles.predict);
    tol_put_u32(out + 36, tol_cycles.learn);
    uint16_t at = 40u;
    uint16_t classes = TOL_HEAD_MODE == 0 ? st.n_outputs : 0u;
    for (uint16_t c = 0; c < classes && at + 4u <= cap; c++, at = (uint16_t)(at + 4u)) {
        tol_put_u32(out + at, st.class_count[c]);
    }
    /* persistence and flash wear (docs/protocol.md, STATS) */
    if (at + 32u > cap) return at;
    uint8_t *p = out + at;
    const uint32_t page = tol_store.region.page_bytes;
    const uint32_t pages_per_slot = page > 0u ? tol_store.slot_bytes / page : 0u;
    uint32_t per_save = tol_persist.pages;
    if (per_save == 0u && page > 0u) {
        uint32_t rec = TOL_STORE_HEADER_BYTES + tol_model_learner_state_bytes();
        per_save = (rec + page - 1u) / page;
    }
    /* round-robin: a slot's pages are erased once every n_slots saves, so the region is
     * good for rated x n_slots saves; seq counts the saves made so far */
    uint32_t budget = TOL_FLASH_RATED_CYCLES * (uint32_t)tol_store.n_slots;
    uint32_t left = budget > tol_store.seq_max ? budget - tol_store.seq_max : 0u;
    p[0] = tol_persist.boot.state;
    p[1] = tol_persist.last_status;
    tol_put_u16(p + 2, (uint16_t)per_save);
    tol_put_u32(p + 4, tol_persist.seq);
    tol_put_u32(p + 8, tol_store.saves);
    tol_put_u32(p + 12, tol_store.erases);
    tol_put_u16(p + 16, tol_store.n_slots);
    tol_put_u16(p + 18, (uint16_t)pages_per_slot);
    tol_put_u32(p + 20, tol_persist.record_bytes);
    tol_put_u32(p + 24, tol_store.flash == TOL_OK ? left : 0u);
    tol_put_u32(p + 28, tol_persist.autosave_every);
    at = (uint16_t)(at + 32u);
    /* the record block (docs/protocol.md): the record the state matches, what a save writes, the
     * anomaly statistics, the replay buffer per class */
    if (at + 28u + 2u * (uint32_t)classes > cap) return at;
    p = out + at;
    tol_learner_stats_t now;
    tol_model_learner_get_stats(&now);
    p[0] = tol_persist.rec_from;
    p[1] = tol_persist.rec_parts;
    p[2] = tol_persist.rec_slot;
    p[3] = tol_persist.replay_left_out;
    tol_put_u32(p + 4, tol_persist.rec_from != 0u ? tol_persist.rec_bytes : 0u);
    tol_put_u32(p + 8, now.updates - tol_persist.saved_updates);
    tol_put_u32(p + 12, tol_store.flash == TOL_OK ? tol_store.slot_bytes : 0u);
    tol_put_u32(p + 16, TOL_STORE_HEADER_BYTES + tol_model_learner_state_bytes());
    tol_put_f32(p + 20, now.score_mean);
    tol_put_f32(p + 24, now.score_std);
    at = (uint16_t)(at + 28u);
    for (uint16_t c = 0; c < classes; c++, at = (uint16_t)(at + 2u)) {
        tol_put_u16(out + at, now.replay_count != NULL ? now.replay_count[c] : 0u);
    }
    return at;
}

tol_status_t tol_model_bench(uint8_t region, uint32_t *cycles)
{
    TOL_CHECK(!(tol_persist.head_staged && region >= 3u), TOL_ERR_BUSY); /* fenced head: no use */
    tinyol_result_t r;
    memset(&r, 0, sizeof(r));
    tol_stamp_t s = tol_now();
    switch (region) {
    case 2:
        TOL_TRY(tol_backbone_invoke(tol_input, tol_latent));
        break;
    case 3:
        TOL_TRY(TOL_HEAD_MODE == 0 ? tol_model_learner_predict(tol_latent, &r)
                                   : tol_model_learner_anomaly(tol_latent, tol_input, false, &r));
        break;
    case 4:
        TOL_TRY(TOL_HEAD_MODE == 0 ? tol_model_learner_learn(tol_latent, 0u, &r)
                                   : tol_model_learner_anomaly(tol_latent, tol_input, true, &r));
        break;
    default:
        return TOL_ERR_RANGE;
    }
    *cycles = tol_since(s);
    return TOL_OK;
}

/* Idle work (between requests): one rehearsal step of the learner while its budget lasts;
 * none while a push is staged (the fence). */
static bool tol_model_idle(void)
{
    return !tol_persist.head_staged && tol_model_learner_rehearse() == TOL_OK;
}

const tol_model_if_t tol_model_glue = {tol_model_init, tol_model_handle, tol_model_stats, tol_model_bench,
                                       tol_model_store_status, tol_model_info_stage, tol_model_idle,
                                       tol_cpu_report};
