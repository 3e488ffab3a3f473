/*
 * tol_online.h - the calls every online learner offers, declared and described once. The
 * one-layer head (tol_learner.h, TinyOL's last layer) and the adaptive stage (tol_stage.h,
 * several layers by backpropagation) each expand TOL_ONLINE_LEARNER_API for their own type;
 * mcu/app/model_learner.h picks one of the two at build time. What is particular to one
 * learner is said in its header, beside the expansion.
 *
 * For a learner X (tol_learner, tol_stage) of type T configured by CFG:
 *
 *   tol_status_t X_init(T *self, uint8_t *mem, size_t mem_bytes, const CFG *cfg);
 *       Set up in caller memory mem[mem_bytes] (X's header says how many bytes it needs),
 *       then X_reset. TOL_ERR_ARG: an invalid configuration or settings; TOL_ERR_OVERFLOW:
 *       mem too small.
 *   void X_reset(T *self);
 *       Back to the exported parameters; clears momentum, the replay buffer, the queue and the
 *       counters; reseeds the PRNG; settings back to cfg's.
 *   tol_status_t X_predict(T *self, const int8_t *latent, int32_t *label, float *confidence);
 *   tol_status_t X_predict_f(T *self, const float *latent, int32_t *label, float *confidence);
 *       Classify a latent (int8 in the latent quantization, or float32; [latent dim]).
 *       label (out): the first index of the largest logit among the active rows, -1 if none;
 *       confidence (out): its softmax probability; either may be NULL. _f: TOL_ERR_NONFINITE
 *       on NaN/Inf.
 *   tol_status_t X_predict_result(T *self, const int8_t *latent, tol_learn_result_t *r);
 *       X_predict, answered as a tol_learn_result_t (r out, not NULL): prediction (-1: no
 *       class active), probability, the counters; every other field zero.
 *   tol_status_t X_learn(T *self, const int8_t *latent, uint16_t label);
 *   tol_status_t X_learn_f(T *self, const float *latent, uint16_t label);
 *       Learn one labelled latent: queue it; every n_new queued, one SGD step on the queue and
 *       n_old replayed latents; a new class activates its row. TOL_ERR_LABEL (label >= the
 *       outputs) and TOL_ERR_NONFINITE change nothing. TOL_ERR_DIVERGED: the step would make
 *       a parameter non-finite: every parameter unchanged, the queued batch dropped (not
 *       stored in the buffer), and this sample counts nowhere (not in samples_seen or its
 *       class count; the queued samples before it, already answered, stay counted).
 *   tol_status_t X_learn_result(T *self, const int8_t *latent, uint16_t label,
 *                               tol_learn_result_t *r);
 *       X_learn of the latent last given to X_predict_result (r in/out, not NULL: its
 *       prediction and probability stay): fills label_probability from that forward pass,
 *       learned, new_class and the counters; returns what X_learn returns.
 *   tol_status_t X_rehearse(T *self);
 *       Idle-time rehearsal (docs/adaptive.md, "Recipe"): one SGD step on n_old latents drawn
 *       from the replay buffer alone, each weighted 1/n_old (their rows activated as in an
 *       update; nothing added to the buffer; the queue untouched), in mode REPLAY with
 *       n_old > 0, a non-empty buffer and fewer than set.rehearse steps since the last learned
 *       sample (self->rehearsed, reset by every learned sample). TOL_OK: a step ran (counted in
 *       updates, or in rejected when it would have diverged: nothing changed then);
 *       TOL_ERR_UNSUPPORTED: nothing to do (budget spent, off, empty buffer). Its twin:
 *       host/tinyol/learn/learner.py OnlineLearner.rehearse.
 *   tol_status_t X_replay_add(T *self, const int8_t *latent, uint16_t label);
 *   tol_status_t X_replay_add_f(T *self, const float *latent, uint16_t label);
 *       Offer a latent to the replay buffer (its policy applies) without training, e.g. to
 *       pre-fill it with the pre-training classes.
 *   void X_get_settings(const T *self, tol_learner_settings_t *s);
 *   tol_status_t X_set_settings(T *self, const tol_learner_settings_t *s);
 *       Validate and apply; TOL_ERR_ARG (no change) if out of range.
 *   void X_get_stats(const T *self, tol_learner_stats_t *st);
 *   X_state_stream, X_state_begin, X_state_end:
 *       the SAVE/LOAD state in three steps (tol_state.h, "A learner's state API").
 */
#ifndef TOL_ONLINE_H
#define TOL_ONLINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tol_state.h"
#include "tol_status.h"

/* What one predict / learn / anomaly call did to one sample, filled by the learner itself
 * (X_predict_result, X_learn_result; tol_learner_anomaly_result). tinyol.h's tinyol_result_t
 * is this struct; the protocol firmware's SAMPLE / PREDICT reply carries its fields
 * (mcu/app/model.c). Its twin: host/tinyol/learn/learner.py Result. */
typedef struct {
    int32_t prediction;      /* classifier: the class predicted before learning (-1: no class
                                active); autoencoder: 1 anomaly, 0 normal */
    float probability;       /* classifier: its softmax probability; autoencoder: the score (MSE) */
    float label_probability; /* classifier: the probability the prediction gave the true label
                                (0 for a class not active yet): the loss is -log of it */
    bool learned;            /* classifier: the sample was accepted (queued for the next step, or
                                stepped); false in mode FROZEN and when its step diverged
                                (TOL_ERR_DIVERGED: it counts nowhere); autoencoder: the head
                                updated on it */
    bool new_class;          /* the call activated an output row (the label's, or a replayed
                                class's during the step) */
    bool anomaly;            /* autoencoder: score above the learned threshold */
    float threshold;         /* autoencoder: the threshold the score was compared with, before
                                this sample updated the statistics (+inf during warm-up) */
    uint32_t samples_seen;   /* counters after the call (tol_learner_stats_t) */
    uint32_t updates;
    uint16_t n_active;
} tol_learn_result_t;

/* tol_learner_settings_t and tol_learner_stats_t (tol_learner.h) must be declared where this
 * expands. */
#define TOL_ONLINE_LEARNER_API(X, T, CFG)                                                         \
    tol_status_t X##_init(T *self, uint8_t *mem, size_t mem_bytes, const CFG *cfg);             \
    void X##_reset(T *self);                                                                    \
    tol_status_t X##_predict(T *self, const int8_t *latent, int32_t *label, float *confidence); \
    tol_status_t X##_predict_f(T *self, const float *latent, int32_t *label, float *confidence); \
    tol_status_t X##_predict_result(T *self, const int8_t *latent, tol_learn_result_t *r);     \
    tol_status_t X##_learn(T *self, const int8_t *latent, uint16_t label);                     \
    tol_status_t X##_learn_result(T *self, const int8_t *latent, uint16_t label,               \
                                  tol_learn_result_t *r);                                       \
    tol_status_t X##_learn_f(T *self, const float *latent, uint16_t label);                    \
    tol_status_t X##_rehearse(T *self);                                                         \
    tol_status_t X##_replay_add(T *self, const int8_t *latent, uint16_t label);                \
    tol_status_t X##_replay_add_f(T *self, const float *latent, uint16_t label);               \
    void X##_get_settings(const T *self, tol_learner_settings_t *s);                            \
    tol_status_t X##_set_settings(T *self, const tol_learner_settings_t *s);                    \
    void X##_get_stats(const T *self, tol_learner_stats_t *st);                                 \
    void X##_state_stream(const T *self, uint8_t parts, uint8_t *hdr, tol_state_t *s);          \
    tol_status_t X##_state_begin(T *self, const uint8_t *header, uint32_t n, uint8_t *parts,    \
                                 uint32_t *total);                                              \
    tol_status_t X##_state_end(T *self, uint8_t parts)

#endif /* TOL_ONLINE_H */
