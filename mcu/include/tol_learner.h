/*
 * tol_learner.h - the on-device learner: TinyOL last-layer SGD (classifier
 * with growing classes, or autoencoder anomaly detector) plus latent replay.
 *
 * One instance = one tol_learner_t (state, owned by the app layer) + one
 * byte buffer of TOL_LEARNER_BYTES_EX(...) (caller-owned, 4-byte aligned, e.g.
 * `static _Alignas(4) uint8_t mem[TOL_LEARNER_BYTES_EX(...)]`). No malloc, no
 * globals, no registers. Float32 arithmetic in a fixed order that
 * host/tinyol/learn/learner.py reproduces (docs/learner.md).
 *
 * Classifier, per sample (prequential): tol_learner_predict(), then
 * tol_learner_learn(). learn() queues the sample; once n_new samples are
 * queued it makes one SGD step on the mini-batch {n_new fresh} + {n_old drawn
 * uniformly, with replacement, from the replay buffer} (mode REPLAY only),
 * gradient averaged over the batch, then offers the fresh samples to the
 * replay buffer. A label seen for the first time activates its output row
 * (zero weights).
 * Autoencoder (anomaly), per sample: tol_learner_anomaly() scores, flags and
 * (for normal samples, or always during warm-up) trains.
 *
 * Latents arrive as int8 in the backbone's output quantization
 * (x = latent_scale * (q - latent_zero_point)); the _f variants take floats.
 */
#ifndef TOL_LEARNER_H
#define TOL_LEARNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tol_anomaly.h"
#include "tol_head.h"
#include "tol_online.h"
#include "tol_prng.h"
#include "tol_replay.h"
#include "tol_state.h"
#include "tol_status.h"

typedef enum {
    TOL_LEARN_FROZEN = 0, /* predict / score only, never update */
    TOL_LEARN_SGD = 1,    /* TinyOL: fresh samples only, no replay */
    TOL_LEARN_REPLAY = 2, /* fresh + replayed latents; buffer updated */
} tol_learn_mode_t;

typedef enum {
    TOL_HEAD_CLASSIFIER = 0, /* softmax + cross-entropy (config.h TOL_HEAD_MODE 0) */
    TOL_HEAD_AUTOENCODER = 1 /* linear output + MSE (TOL_HEAD_MODE 1) */
} tol_head_kind_t;

/* Run-time settings (get/set at any time; set discards queued samples). */
typedef struct {
    float lr;              /* learning rate, >= 0 */
    float momentum;        /* [0, 1); > 0 needs momentum buffers (config no_momentum 0) */
    float weight_decay;    /* L2 on W (not b), >= 0 */
    float clip_norm;       /* global gradient-norm clip, 0 = off */
    uint16_t n_new;        /* fresh samples per update, 1..config max_new */
    uint16_t n_old;        /* replayed samples per update, 0..max_old (unused without buffer) */
    uint8_t mode;          /* tol_learn_mode_t */
    uint8_t train_anomalies; /* autoencoder: also train on flagged samples */
    uint8_t rehearse;      /* classifier: idle rehearsal steps per idle period, 0 = off
                              (tol_learner_rehearse, tol_stage_rehearse) */
    uint8_t replay_policy; /* tol_replay_policy_t of later offers to the buffer; the slots already
                              stored stay. init/reset take the config's replay_policy (this
                              field of cfg.settings is ignored) */
    float threshold_k;     /* autoencoder: threshold = mean + k*std, >= 0 */
    float ema_alpha;       /* autoencoder: score EMA factor after warm-up, (0, 1] */
    uint32_t warmup;       /* autoencoder: scores that all train before flagging */
} tol_learner_settings_t;

/* Fixed at init. Typical firmware values come from the model's config.h:
 *   head_kind = TOL_HEAD_MODE, latent_dim = TOL_LATENT_DIM,
 *   n_outputs = TOL_HEAD_MAX_CLASSES (classifier) or TOL_HEAD_OUT_DIM,
 *   init_classes = TOL_HEAD_INIT_CLASSES, init_weight/bias = tol_head_init_*,
 *   latent_scale/zero_point = TOL_LATENT_SCALE/ZERO_POINT,
 *   target_scale/zero_point = TOL_INPUT_SCALE/ZERO_POINT,
 *   replay_capacity = TOL_REPLAY_CAPACITY, replay_bits = TOL_REPLAY_BITS,
 *   max_new = TOL_REPLAY_N_NEW, max_old = TOL_REPLAY_N_OLD (or 0 = automatic),
 *   no_momentum = 1 when TOL_MOMENTUM is 0 (saves the momentum buffers),
 *   seed = TOL_SEED, settings from TOL_LR, TOL_MOMENTUM, ...
 * A zeroed config plus the fields above is valid (zero = the defaults). */
typedef struct {
    uint8_t head_kind;          /* tol_head_kind_t */
    uint8_t replay_bits;        /* 32, 8, 7, 4 or TOL_REPLAY_PQ(sub) (4, PQ: replay_codec) */
    uint8_t replay_policy;      /* tol_replay_policy_t at reset; then the setting set.replay_policy */
    uint8_t no_momentum;        /* 1: no momentum buffers (momentum must stay 0) */
    uint16_t latent_dim;        /* D >= 1 */
    uint16_t n_outputs;         /* C_max or OUT, >= 1 */
    uint16_t init_classes;      /* rows active after reset (autoencoder: ignored, all) */
    uint16_t replay_capacity;   /* 0 = no buffer */
    uint16_t max_new;           /* largest n_new, 1..TOL_REPLAY_MAX_BATCH */
    uint16_t max_old;           /* largest n_old, <= TOL_LEARNER_MAX_OLD; 0 = automatic:
                                   TOL_LEARNER_DEFAULT_MAX_OLD with a buffer, else 0 */
    const float *init_weight;   /* [n_outputs][latent_dim], const, not owned */
    const float *init_bias;     /* [n_outputs] */
    float latent_scale;         /* > 0 */
    int32_t latent_zero_point;  /* -128..127 */
    float target_scale;         /* autoencoder int8 target dequantization */
    int32_t target_zero_point;
    uint32_t seed;              /* PRNG seed */
    tol_learner_settings_t settings; /* initial settings */
    const tol_replay_codec_t *replay_codec; /* replay_bits 4 or PQ: the codec (const, not owned) */
    uint8_t *replay_mem;        /* NULL: the replay buffer is part of init's mem; else its own
                                   block (caller-owned, 4-byte aligned, replay_mem_bytes >=
                                   TOL_REPLAY_BYTES(replay_capacity, latent_dim, replay_bits,
                                   n_outputs)), e.g. in another RAM region, and init's mem needs
                                   that many bytes less (TOL_LEARNER_REPLAY_BYTES) */
    size_t replay_mem_bytes;
} tol_learner_config_t;

/* Largest max_old, and the value max_old = 0 stands for when there is a buffer. */
#define TOL_LEARNER_MAX_OLD 1024u
#define TOL_LEARNER_DEFAULT_MAX_OLD 16u

/* The max_old a config really gets. */
#define TOL_LEARNER_MAX_OLD_EFF(replay_capacity, max_old) \
    ((size_t)((max_old) > 0 ? (max_old) : ((replay_capacity) > 0 ? TOL_LEARNER_DEFAULT_MAX_OLD : 0u)))

/* Caller memory for one learner: head (weights, optional momentum, gradient
 * factors for max_new + max_old samples, which also queue the fresh
 * latents), replay buffer, latent/target scratch, per-class counters. */
#define TOL_LEARNER_BYTES_EX(dim, n_outputs, replay_capacity, replay_bits, max_new, max_old,   \
                             no_momentum)                                                     \
    (TOL_HEAD_BYTES(dim, n_outputs,                                                           \
                    (size_t)(max_new) + TOL_LEARNER_MAX_OLD_EFF(replay_capacity, max_old),     \
                    !(no_momentum)) +                                                         \
     ((replay_capacity) > 0 ? TOL_REPLAY_BYTES(replay_capacity, dim, replay_bits, n_outputs)   \
                            : (size_t)0u) +                                                  \
     (size_t)4u * ((size_t)(dim) + 2u * (size_t)(n_outputs)) +                               \
     TOL_ALIGN4((size_t)2u * (size_t)(max_new)))

/* The replay buffer's part of TOL_LEARNER_BYTES_EX (0 without a buffer): what init's mem may
 * be smaller by when the config gives the buffer its own block (replay_mem). */
#define TOL_LEARNER_REPLAY_BYTES(dim, n_outputs, replay_capacity, replay_bits) \
    ((replay_capacity) > 0 ? TOL_REPLAY_BYTES(replay_capacity, dim, replay_bits, n_outputs) : (size_t)0u)

/* The same for max_old = 0 (automatic) and momentum buffers allocated. */
#define TOL_LEARNER_BYTES(dim, n_outputs, replay_capacity, replay_bits, max_new) \
    TOL_LEARNER_BYTES_EX(dim, n_outputs, replay_capacity, replay_bits, max_new, 0u, 0u)

typedef struct {
    uint32_t samples_seen;   /* accepted learn()/anomaly() samples */
    uint32_t updates;        /* SGD steps committed */
    uint32_t rejected;       /* steps refused as diverged */
    uint32_t anomalies;      /* samples flagged (autoencoder) */
    uint16_t n_active;       /* active output rows */
    uint16_t n_outputs;      /* length of class_count */
    uint16_t replay_fill;
    uint16_t replay_capacity;
    const uint32_t *class_count; /* [n_outputs] learned samples per class (classifier) */
    float threshold;         /* autoencoder: current threshold (+inf in warm-up) */
    float score_mean;        /* autoencoder: the threshold's score statistics (0 for a classifier) */
    float score_std;
    const uint16_t *replay_count; /* [n_outputs] replay slots holding each class; NULL: no buffer */
} tol_learner_stats_t;

typedef struct {
    tol_learner_config_t cfg;
    tol_learner_settings_t set;
    tol_head_t head;
    tol_replay_t replay;
    tol_anomaly_t anomaly;
    tol_prng_t prng;
    float *x;                /* [dim] scratch */
    float *target;           /* [n_outputs] scratch */
    uint32_t *class_count;   /* [n_outputs] */
    uint16_t *pending_labels;/* [max_new] */
    uint16_t n_pending;      /* queued fresh latents, in head.x[0..n_pending-1] */
    uint8_t rehearsed;       /* idle rehearsal steps since the last learned sample */
    uint32_t samples_seen, updates, rejected, anomalies;
} tol_learner_t;

/* Settings used when nothing else is given (the study's choice, docs/study.md). */
void tol_learner_settings_default(tol_learner_settings_t *s);

/* The checks every classifier learner (the head's, the stage's) makes of its settings against
 * its configuration's bounds: lr, momentum (0 without momentum buffers), weight decay, clip
 * norm, 1 <= n_new <= max_new, n_old <= TOL_LEARNER_MAX_OLD_EFF(replay_capacity, max_old) when
 * there is a replay buffer (max_old as configured: 0 = automatic), mode. TOL_ERR_ARG when one
 * fails. */
tol_status_t tol_learner_settings_check(const tol_learner_settings_t *s, uint16_t max_new, uint16_t max_old,
                                        uint16_t replay_capacity, uint8_t no_momentum);

/* The classifier settings in a state header (the learner's and the stage's): 21 bytes at p,
 * lr, momentum, weight_decay, clip_norm (float32 LE), n_new, n_old (uint16 LE), mode.
 * unpack sets only those fields of *s. */
#define TOL_LEARNER_SETTINGS_PACKED 21u
void tol_learner_settings_pack(const tol_learner_settings_t *s, uint8_t *p);
void tol_learner_settings_unpack(const uint8_t *p, tol_learner_settings_t *s);

/* What both learners (this one and tol_stage) do with a latent: dequantize it,
 * x[i] = scale * (q[i] - zero_point) in float32 (q int8_t[n] in, x float[n] out), and check
 * that x[0..n) is finite (1) or not (0). */
void tol_learner_dequantize(const int8_t *q, uint32_t n, float scale, int32_t zero_point, float *x);
int tol_learner_finite(const float *x, uint32_t n);

/* The online-learner calls (tol_online.h describes them): tol_learner_init, _reset, _predict,
 * _predict_f, _predict_result, _learn, _learn_f, _learn_result, _rehearse, _replay_add,
 * _replay_add_f, _get_settings, _set_settings, _get_stats, _state_stream, _state_begin,
 * _state_end. Particular to the head:
 * - init: mem_bytes >= TOL_LEARNER_BYTES_EX(...); reset also clears the anomaly threshold.
 * - predict: TOL_ERR_UNSUPPORTED in autoencoder mode (see tol_learner_score).
 * - learn: on TOL_ERR_DIVERGED a newly activated row is deactivated again (and the sample
 *   counts nowhere, tol_online.h); in mode FROZEN it only validates.
 * - rehearse: the step's samples use the batch slots after the max_new queue slots
 *   (head.x[max_new ..]), so the queued fresh samples stay untouched and no memory is added.
 * - replay_add: TOL_ERR_UNSUPPORTED without a buffer. */
TOL_ONLINE_LEARNER_API(tol_learner, tol_learner_t, tol_learner_config_t);

/* Autoencoder, predict only (the PREDICT message): score and is_anomaly as
 * tol_learner_anomaly() computes them, but change nothing (no training, no
 * threshold statistics, no counters). Outputs may be NULL.
 * TOL_ERR_UNSUPPORTED for a classifier. */
tol_status_t tol_learner_score(tol_learner_t *L, const int8_t *latent, const int8_t *target,
                               float *score, uint8_t *is_anomaly);
tol_status_t tol_learner_score_f(tol_learner_t *L, const float *latent, const float *target,
                                 float *score, uint8_t *is_anomaly);

/* Autoencoder: score = MSE(W x + b, target); is_anomaly = score > threshold
 * (never during warm-up); then train on it unless flagged (or
 * train_anomalies), and absorb the score into the threshold statistics
 * unless flagged. latent int8_t[dim]; target int8_t[n_outputs] in the
 * target quantization (e.g. the model input). Outputs may be NULL.
 * TOL_ERR_DIVERGED: the head and the sample's counts unchanged (samples_seen,
 * anomalies, threshold statistics: it counts nowhere; rejected counts it).
 * TOL_ERR_UNSUPPORTED in classifier mode. */
tol_status_t tol_learner_anomaly(tol_learner_t *L, const int8_t *latent, const int8_t *target,
                                 float *score, uint8_t *is_anomaly);
tol_status_t tol_learner_anomaly_f(tol_learner_t *L, const float *latent, const float *target,
                                   float *score, uint8_t *is_anomaly);

/* Autoencoder, as a tol_learn_result_t (r out, not NULL): score `target` from its latent and
 * learn from it (tol_learner_anomaly), or only score (learn = false, tol_learner_score).
 * r: prediction and anomaly (flagged), probability (the score), learned (the head updated),
 * the counters. */
tol_status_t tol_learner_anomaly_result(tol_learner_t *L, const int8_t *latent, const int8_t *target,
                                        bool learn, tol_learn_result_t *r);

/* The head, for dumping weights: h->w [rows][dim], h->b [rows], h->active [rows]. */
const tol_head_t *tol_learner_head(const tol_learner_t *L);

/* Replace the head's parameters (see tol_head_load); momentum cleared. */
tol_status_t tol_learner_load_head(tol_learner_t *L, const float *w, const float *b,
                                   const uint8_t *active);

/* ---- persistence (docs/persistence.md): the learner's state as a byte stream, saved and
 * restored in three steps through the calls tol_state.h describes ("A learner's state API").
 * A fixed header of TOL_LEARNER_STATE_HEADER bytes (format, the configuration it belongs to,
 * settings, PRNG, counters, anomaly statistics) followed by raw arrays: W, b, active, class
 * counts, the queued samples, [momentum buffers], [replay buffer: filled slots only, in their
 * stored 32/8/7-bit form]. Restoring it gives a learner that predicts and keeps learning
 * bit-identically to the one saved. Step 1 also refuses another format (TOL_ERR_ARG); step 3
 * checks finite weights, labels in range and consistent counts, and resets to the exported
 * head on error. */
#define TOL_LEARNER_STATE_HEADER 104u

/* Write one slice of a head row (the SET_HEAD message): w[row][offset..offset+n)
 * from w (float[n], may be NULL when n == 0), the row's bias and active flag
 * (0/1). Clears the row's momentum and the queue. TOL_ERR_RANGE if the slice is
 * outside the head, TOL_ERR_NONFINITE (no change) on NaN/Inf. */
tol_status_t tol_learner_set_head_row(tol_learner_t *L, uint16_t row, uint16_t offset, const float *w,
                                      uint16_t n, float bias, uint8_t active);

#endif /* TOL_LEARNER_H */
