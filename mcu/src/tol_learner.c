/* tol_learner.c - TinyOL head training with latent replay; see tol_learner.h. */
#include "tol_learner.h"

#include <math.h>
#include <string.h>

#include "tol_segs.h"
#include "tol_state.h"

void tol_learner_settings_default(tol_learner_settings_t *s)
{
    s->lr = 0.03f; /* docs/study.md: best validation accuracy with replay */
    s->momentum = 0.0f;
    s->weight_decay = 0.0f;
    s->clip_norm = 0.0f;
    s->n_new = 1;
    s->n_old = 16;
    s->mode = (uint8_t)TOL_LEARN_REPLAY;
    s->train_anomalies = 0;
    s->rehearse = 0;
    s->replay_policy = (uint8_t)TOL_REPLAY_RESERVOIR;
    s->threshold_k = 3.0f;
    s->ema_alpha = 0.01f;
    s->warmup = 50;
}

tol_status_t tol_learner_settings_check(const tol_learner_settings_t *s, uint16_t max_new, uint16_t max_old,
                                        uint16_t replay_capacity, uint8_t no_momentum)
{
    TOL_CHECK(isfinite(s->lr) && s->lr >= 0.0f, TOL_ERR_ARG);
    TOL_CHECK(isfinite(s->momentum) && s->momentum >= 0.0f && s->momentum < 1.0f, TOL_ERR_ARG);
    TOL_CHECK(s->momentum == 0.0f || !no_momentum, TOL_ERR_ARG);
    TOL_CHECK(isfinite(s->weight_decay) && s->weight_decay >= 0.0f, TOL_ERR_ARG);
    TOL_CHECK(isfinite(s->clip_norm) && s->clip_norm >= 0.0f, TOL_ERR_ARG);
    TOL_CHECK(s->n_new >= 1u && s->n_new <= max_new, TOL_ERR_ARG);
    TOL_CHECK(replay_capacity == 0u || s->n_old <= TOL_LEARNER_MAX_OLD_EFF(replay_capacity, max_old),
              TOL_ERR_ARG);
    TOL_CHECK(s->mode <= (uint8_t)TOL_LEARN_REPLAY, TOL_ERR_ARG);
    TOL_CHECK(s->replay_policy <= (uint8_t)TOL_REPLAY_AR1, TOL_ERR_ARG);
    return TOL_OK;
}

static tol_status_t tol_learner_check_settings_(const tol_learner_config_t *cfg,
                                                const tol_learner_settings_t *s)
{
    TOL_TRY(tol_learner_settings_check(s, cfg->max_new, cfg->max_old, cfg->replay_capacity, cfg->no_momentum));
    TOL_CHECK(isfinite(s->threshold_k) && s->threshold_k >= 0.0f, TOL_ERR_ARG);
    TOL_CHECK(s->ema_alpha > 0.0f && s->ema_alpha <= 1.0f, TOL_ERR_ARG);
    return TOL_OK;
}

tol_status_t tol_learner_init(tol_learner_t *L, uint8_t *mem, size_t mem_bytes,
                              const tol_learner_config_t *cfg)
{
    TOL_CHECK(L != NULL && mem != NULL && cfg != NULL, TOL_ERR_ARG);
    TOL_CHECK(cfg->head_kind <= (uint8_t)TOL_HEAD_AUTOENCODER, TOL_ERR_ARG);
    TOL_CHECK(cfg->latent_dim >= 1u && cfg->n_outputs >= 1u, TOL_ERR_ARG);
    TOL_CHECK(cfg->max_new >= 1u && cfg->max_new <= TOL_REPLAY_MAX_BATCH, TOL_ERR_ARG);
    TOL_CHECK(cfg->max_old <= TOL_LEARNER_MAX_OLD, TOL_ERR_ARG);
    TOL_CHECK(cfg->init_classes <= cfg->n_outputs, TOL_ERR_ARG);
    TOL_CHECK(isfinite(cfg->latent_scale) && cfg->latent_scale > 0.0f, TOL_ERR_ARG);
    TOL_CHECK(((uintptr_t)mem & 3u) == 0u, TOL_ERR_ARG);
    TOL_CHECK(cfg->replay_policy <= (uint8_t)TOL_REPLAY_AR1, TOL_ERR_ARG);
    tol_learner_settings_t s0 = cfg->settings;
    s0.replay_policy = cfg->replay_policy;
    TOL_TRY(tol_learner_check_settings_(cfg, &s0));
    const uint16_t d = cfg->latent_dim;
    const uint16_t c = cfg->n_outputs;
    const uint16_t max_batch =
        (uint16_t)(cfg->max_new + TOL_LEARNER_MAX_OLD_EFF(cfg->replay_capacity, cfg->max_old));
    const uint8_t momentum = (uint8_t)(cfg->no_momentum ? 0u : 1u);
    const size_t rb = TOL_LEARNER_REPLAY_BYTES(d, c, cfg->replay_capacity, cfg->replay_bits);
    const size_t own_rb = cfg->replay_mem != NULL ? 0u : rb; /* the buffer's bytes in mem */
    TOL_CHECK(cfg->replay_mem == NULL || ((uintptr_t)cfg->replay_mem & 3u) == 0u, TOL_ERR_ARG);
    TOL_CHECK(cfg->replay_mem == NULL || cfg->replay_mem_bytes >= rb, TOL_ERR_OVERFLOW);
    TOL_CHECK(mem_bytes + (rb - own_rb) >= TOL_LEARNER_BYTES_EX(d, c, cfg->replay_capacity, cfg->replay_bits,
                                                                cfg->max_new, cfg->max_old, cfg->no_momentum),
              TOL_ERR_OVERFLOW);
    L->cfg = *cfg;
    const uint16_t init_active =
        cfg->head_kind == (uint8_t)TOL_HEAD_AUTOENCODER ? c : cfg->init_classes;
    const size_t hb = TOL_HEAD_BYTES(d, c, max_batch, momentum);
    uint8_t *p = mem;
    TOL_TRY(tol_head_init(&L->head, p, hb, d, c, max_batch, momentum,
                          cfg->init_weight, cfg->init_bias, init_active));
    p += hb;
    if (cfg->replay_capacity > 0u) {
        uint8_t *rmem = cfg->replay_mem != NULL ? cfg->replay_mem : p;
        TOL_TRY(tol_replay_init(&L->replay, rmem, rb, cfg->replay_capacity, d, cfg->replay_bits, c,
                                cfg->replay_policy, cfg->latent_scale, cfg->latent_zero_point,
                                &L->prng));
        if (cfg->replay_bits == 4u || cfg->replay_bits > 128u) {
            TOL_TRY(tol_replay_set_codec(&L->replay, cfg->replay_codec));
        }
        p += own_rb;
    }
    L->x = (float *)(void *)p;
    p += (size_t)4u * d;
    L->target = (float *)(void *)p;
    p += (size_t)4u * c;
    L->class_count = (uint32_t *)(void *)p;
    p += (size_t)4u * c;
    L->pending_labels = (uint16_t *)(void *)p;
    tol_learner_reset(L);
    return TOL_OK;
}

void tol_learner_reset(tol_learner_t *L)
{
    const tol_learner_config_t *cfg = &L->cfg;
    L->set = cfg->settings;
    L->set.replay_policy = cfg->replay_policy;
    tol_prng_seed(&L->prng, cfg->seed);
    tol_head_reset(&L->head);
    if (cfg->replay_capacity > 0u) {
        tol_replay_clear(&L->replay);
        L->replay.policy = cfg->replay_policy;
    }
    tol_anomaly_init(&L->anomaly, L->set.threshold_k, L->set.ema_alpha, L->set.warmup);
    memset(L->class_count, 0, (size_t)cfg->n_outputs * sizeof(uint32_t));
    L->n_pending = 0;
    L->rehearsed = 0;
    L->samples_seen = 0;
    L->updates = 0;
    L->rejected = 0;
    L->anomalies = 0;
}

void tol_learner_dequantize(const int8_t *q, uint32_t n, float scale, int32_t zp, float *x)
{
    uint32_t k = n >> 2;
    while (k-- > 0u) {
        const int32_t a = (int32_t)q[0] - zp;
        const int32_t b = (int32_t)q[1] - zp;
        const int32_t c = (int32_t)q[2] - zp;
        const int32_t d = (int32_t)q[3] - zp;
        x[0] = scale * (float)a;
        x[1] = scale * (float)b;
        x[2] = scale * (float)c;
        x[3] = scale * (float)d;
        q += 4;
        x += 4;
    }
    for (k = n & 3u; k > 0u; k--) *x++ = scale * (float)((int32_t)*q++ - zp);
}

int tol_learner_finite(const float *x, uint32_t n)
{
    for (uint32_t j = 0; j < n; j++) {
        if (!isfinite(x[j])) return 0;
    }
    return 1;
}

tol_status_t tol_learner_predict_f(tol_learner_t *L, const float *latent, int32_t *label,
                                   float *confidence)
{
    TOL_CHECK(latent != NULL, TOL_ERR_ARG);
    TOL_CHECK(L->cfg.head_kind == (uint8_t)TOL_HEAD_CLASSIFIER, TOL_ERR_UNSUPPORTED);
    TOL_CHECK(tol_learner_finite(latent, L->cfg.latent_dim), TOL_ERR_NONFINITE);
    tol_head_predict(&L->head, latent, label, confidence);
    return TOL_OK;
}

/* Every dequantized int8 value is finite when the largest one is: |q - zp| <= 128 + |zp|
 * and rounding is monotonic, so one product stands for all D finite checks. */
static int tol_learner_int8_finite_(float scale, int32_t zp)
{
    if (zp < -65536 || zp > 65536) return 0;
    const int32_t m = 128 + (zp < 0 ? -zp : zp);
    return isfinite(scale * (float)m) ? 1 : 0;
}

tol_status_t tol_learner_predict(tol_learner_t *L, const int8_t *latent, int32_t *label,
                                 float *confidence)
{
    TOL_CHECK(latent != NULL, TOL_ERR_ARG);
    tol_learner_dequantize(latent, L->cfg.latent_dim, L->cfg.latent_scale,
                            L->cfg.latent_zero_point, L->x);
    if (L->cfg.head_kind == (uint8_t)TOL_HEAD_CLASSIFIER &&
        tol_learner_int8_finite_(L->cfg.latent_scale, L->cfg.latent_zero_point)) {
        tol_head_predict(&L->head, L->x, label, confidence);
        return TOL_OK;
    }
    return tol_learner_predict_f(L, L->x, label, confidence);
}

/* One SGD step of the head with the current settings, counted in updates (done) or rejected
 * (refused: the head unchanged). */
static tol_status_t tol_learner_step_(tol_learner_t *L)
{
    const tol_status_t s =
        tol_head_step(&L->head, L->set.lr, L->set.momentum, L->set.weight_decay, L->set.clip_norm);
    if (s != TOL_OK) {
        L->rejected++;
        return s;
    }
    L->updates++;
    return TOL_OK;
}

/* Replayed samples go through the head in chunks (one batched forward each); a chunk
 * also ends before a sample whose class row is still inactive, so that every sample
 * sees the rows active when the one-at-a-time order would reach it. */
#define TOL_LEARNER_CHUNK 16u

/* Add n_old latents drawn from the replay buffer to h's batch (h: the learner's head or a view
 * of it), each with weight; a drawn sample of an inactive class activates its row. */
static tol_status_t tol_learner_add_replayed_(tol_learner_t *L, tol_head_t *h, uint16_t n_old, float weight)
{
    const uint16_t d = L->cfg.latent_dim;
    const tol_replay_t *rb = &L->replay;
    uint16_t labels[TOL_LEARNER_CHUNK];
    uint16_t k = 0;
    for (uint16_t r = 0; r < n_old; r++) {
        uint16_t y;
        float *slot = &h->x[(size_t)(h->n_batch + k) * d];
        const uint16_t idx = tol_replay_draw(&L->replay);
        if (rb->bits == 8u) {
            /* int8 rows: dequantized here (tol_replay_get's formula, unrolled) */
            tol_learner_dequantize((const int8_t *)(const void *)&rb->rows[(size_t)idx * rb->row_bytes], d,
                                    rb->scale, rb->zero_point, slot);
            y = rb->labels[idx];
        } else {
            tol_replay_get(&L->replay, idx, slot, &y);
        }
        TOL_CHECK(y < h->rows, TOL_ERR_LABEL);
        if (!h->active[y]) {
            /* the samples before this one see the row inactive */
            TOL_TRY(tol_head_grad_add_ce_n(h, labels, k, weight)); /* slot is next now */
            k = 0;
            tol_head_activate(h, y);
        }
        labels[k++] = y;
        if (k == TOL_LEARNER_CHUNK) {
            TOL_TRY(tol_head_grad_add_ce_n(h, labels, k, weight));
            k = 0;
        }
    }
    return tol_head_grad_add_ce_n(h, labels, k, weight);
}

/* One SGD step on the queued samples plus n_old replayed ones. */
static tol_status_t tol_learner_update_(tol_learner_t *L)
{
    tol_head_t *h = &L->head;
    const int replay = L->set.mode == (uint8_t)TOL_LEARN_REPLAY && L->cfg.replay_capacity > 0u;
    const uint16_t n_old = (replay && L->replay.fill > 0u) ? L->set.n_old : 0u;
    const float weight = 1.0f / (float)(L->n_pending + n_old);
    tol_head_grad_zero(h);
    /* the queued latents already sit in batch slots 0 .. n_pending-1 */
    TOL_TRY(tol_head_grad_add_ce_n(h, L->pending_labels, L->n_pending, weight));
    TOL_TRY(tol_learner_add_replayed_(L, h, n_old, weight));
    TOL_TRY(tol_learner_step_(L));
    if (replay) {
        TOL_TRY(tol_replay_add_batch(&L->replay, h->x, L->pending_labels, L->n_pending));
    }
    return TOL_OK;
}

tol_status_t tol_learner_rehearse(tol_learner_t *L)
{
    const uint16_t n_old = L->set.n_old;
    TOL_CHECK(L->cfg.head_kind == (uint8_t)TOL_HEAD_CLASSIFIER && L->rehearsed < L->set.rehearse &&
                  L->set.mode == (uint8_t)TOL_LEARN_REPLAY && L->cfg.replay_capacity > 0u &&
                  L->replay.fill > 0u && n_old > 0u,
              TOL_ERR_UNSUPPORTED);
    L->rehearsed++;
    /* slots max_new .. max_new + max_old - 1: never the queue's (n_old <= max_old) */
    tol_head_t v;
    tol_head_view(&L->head, L->cfg.max_new, &v);
    tol_head_grad_zero(&v);
    const tol_status_t s = tol_learner_add_replayed_(L, &v, n_old, 1.0f / (float)n_old);
    const tol_status_t t =
        s == TOL_OK ? tol_head_step(&v, L->set.lr, L->set.momentum, L->set.weight_decay, L->set.clip_norm) : s;
    tol_head_view_end(&L->head, &v);
    if (t == TOL_OK) {
        L->updates++;
    } else if (t == TOL_ERR_DIVERGED) {
        L->rejected++;
    } else {
        return t;
    }
    return TOL_OK;
}

/* Queue slot of the next fresh latent. */
static float *tol_learner_queue_slot_(tol_learner_t *L)
{
    return &L->head.x[(size_t)L->n_pending * L->cfg.latent_dim];
}

tol_status_t tol_learner_learn_f(tol_learner_t *L, const float *latent, uint16_t label)
{
    TOL_CHECK(latent != NULL, TOL_ERR_ARG);
    TOL_CHECK(L->cfg.head_kind == (uint8_t)TOL_HEAD_CLASSIFIER, TOL_ERR_UNSUPPORTED);
    TOL_CHECK(label < L->cfg.n_outputs, TOL_ERR_LABEL);
    const uint16_t d = L->cfg.latent_dim;
    TOL_CHECK(tol_learner_finite(latent, d), TOL_ERR_NONFINITE);
    if (L->set.mode == (uint8_t)TOL_LEARN_FROZEN) return TOL_OK;
    const int newly = L->head.active[label] ? 0 : 1;
    const uint8_t rehearsed = L->rehearsed;
    tol_head_activate(&L->head, label);
    float *slot = tol_learner_queue_slot_(L);
    if (latent != slot) memmove(slot, latent, (size_t)d * sizeof(float));
    L->pending_labels[L->n_pending] = label;
    L->n_pending++;
    L->samples_seen++;
    L->class_count[label]++;
    L->rehearsed = 0; /* a new idle period begins after this sample */
    if (L->n_pending < L->set.n_new) return TOL_OK;
    const tol_status_t s = tol_learner_update_(L);
    L->n_pending = 0;
    if (s == TOL_ERR_DIVERGED) {
        /* the sample that met a diverged step counts nowhere (issue 34): not in samples_seen,
         * not in its class, no new idle period; its row is inactive again if it was new */
        L->samples_seen--;
        L->class_count[label]--;
        L->rehearsed = rehearsed;
        if (newly) {
            L->head.active[label] = 0u;
            L->head.n_active--;
        }
    }
    return s;
}

tol_status_t tol_learner_learn(tol_learner_t *L, const int8_t *latent, uint16_t label)
{
    TOL_CHECK(latent != NULL, TOL_ERR_ARG);
    TOL_CHECK(L->cfg.head_kind == (uint8_t)TOL_HEAD_CLASSIFIER, TOL_ERR_UNSUPPORTED);
    TOL_CHECK(label < L->cfg.n_outputs, TOL_ERR_LABEL);
    if (L->set.mode == (uint8_t)TOL_LEARN_FROZEN) return TOL_OK;
    /* Dequantize straight into the queue slot (learn_f recognises it). */
    float *slot = tol_learner_queue_slot_(L);
    tol_learner_dequantize(latent, L->cfg.latent_dim, L->cfg.latent_scale,
                            L->cfg.latent_zero_point, slot);
    return tol_learner_learn_f(L, slot, label);
}

tol_status_t tol_learner_replay_add_f(tol_learner_t *L, const float *latent, uint16_t label)
{
    TOL_CHECK(latent != NULL, TOL_ERR_ARG);
    TOL_CHECK(L->cfg.replay_capacity > 0u, TOL_ERR_UNSUPPORTED);
    TOL_CHECK(label < L->cfg.n_outputs, TOL_ERR_LABEL);
    TOL_CHECK(tol_learner_finite(latent, L->cfg.latent_dim), TOL_ERR_NONFINITE);
    return tol_replay_add_batch(&L->replay, latent, &label, 1);
}

tol_status_t tol_learner_replay_add(tol_learner_t *L, const int8_t *latent, uint16_t label)
{
    TOL_CHECK(latent != NULL, TOL_ERR_ARG);
    tol_learner_dequantize(latent, L->cfg.latent_dim, L->cfg.latent_scale,
                            L->cfg.latent_zero_point, L->x);
    return tol_learner_replay_add_f(L, L->x, label);
}

static tol_status_t tol_learner_check_ae_(const tol_learner_t *L, const float *latent,
                                          const float *target)
{
    TOL_CHECK(latent != NULL && target != NULL, TOL_ERR_ARG);
    TOL_CHECK(L->cfg.head_kind == (uint8_t)TOL_HEAD_AUTOENCODER, TOL_ERR_UNSUPPORTED);
    TOL_CHECK(tol_learner_finite(latent, L->cfg.latent_dim), TOL_ERR_NONFINITE);
    TOL_CHECK(tol_learner_finite(target, L->cfg.n_outputs), TOL_ERR_NONFINITE);
    return TOL_OK;
}

tol_status_t tol_learner_score_f(tol_learner_t *L, const float *latent, const float *target,
                                 float *score, uint8_t *is_anomaly)
{
    TOL_TRY(tol_learner_check_ae_(L, latent, target));
    const float s = tol_head_mse(&L->head, latent, target);
    if (score != NULL) *score = s;
    if (is_anomaly != NULL) {
        *is_anomaly = (uint8_t)((!tol_anomaly_warming(&L->anomaly) &&
                                 s > tol_anomaly_threshold(&L->anomaly))
                                    ? 1u
                                    : 0u);
    }
    return TOL_OK;
}

/* The autoencoder's int8 calls: latent and target checked, then dequantized into L->x and
 * L->target. */
static tol_status_t tol_learner_dequantize_ae_(tol_learner_t *L, const int8_t *latent,
                                               const int8_t *target)
{
    TOL_CHECK(latent != NULL && target != NULL, TOL_ERR_ARG);
    TOL_CHECK(L->cfg.head_kind == (uint8_t)TOL_HEAD_AUTOENCODER, TOL_ERR_UNSUPPORTED);
    tol_learner_dequantize(latent, L->cfg.latent_dim, L->cfg.latent_scale, L->cfg.latent_zero_point,
                           L->x);
    tol_learner_dequantize(target, L->cfg.n_outputs, L->cfg.target_scale, L->cfg.target_zero_point,
                           L->target);
    return TOL_OK;
}

tol_status_t tol_learner_score(tol_learner_t *L, const int8_t *latent, const int8_t *target,
                               float *score, uint8_t *is_anomaly)
{
    TOL_TRY(tol_learner_dequantize_ae_(L, latent, target));
    return tol_learner_score_f(L, L->x, L->target, score, is_anomaly);
}

tol_status_t tol_learner_anomaly_f(tol_learner_t *L, const float *latent, const float *target,
                                   float *score, uint8_t *is_anomaly)
{
    TOL_TRY(tol_learner_check_ae_(L, latent, target));
    tol_head_t *h = &L->head;
    float s;
    uint8_t flag;
    TOL_TRY(tol_learner_score_f(L, latent, target, &s, &flag));
    if (score != NULL) *score = s;
    if (is_anomaly != NULL) *is_anomaly = flag;
    const tol_anomaly_t before = L->anomaly;
    L->samples_seen++;
    if (flag) {
        L->anomalies++;
    } else if (isfinite(s)) {
        tol_anomaly_update(&L->anomaly, s);
    }
    if (L->set.mode == (uint8_t)TOL_LEARN_FROZEN || (flag && !L->set.train_anomalies)) {
        return TOL_OK;
    }
    tol_head_grad_zero(h);
    /* h->z still holds the forward of `latent` from the score above */
    TOL_TRY(tol_head_grad_add_mse_z(h, latent, target, 1.0f));
    const tol_status_t st = tol_learner_step_(L);
    if (st == TOL_ERR_DIVERGED) {
        /* a sample whose update diverged counts nowhere (issue 34): not in samples_seen,
         * not in the anomalies, not in the score statistics */
        L->samples_seen--;
        if (flag) L->anomalies--;
        L->anomaly = before;
    }
    return st;
}

tol_status_t tol_learner_anomaly(tol_learner_t *L, const int8_t *latent, const int8_t *target,
                                 float *score, uint8_t *is_anomaly)
{
    TOL_TRY(tol_learner_dequantize_ae_(L, latent, target));
    return tol_learner_anomaly_f(L, L->x, L->target, score, is_anomaly);
}

/* ---- the calls with their result (tol_online.h's tol_learn_result_t) ----------------- */

static void tol_learner_result_counters_(const tol_learner_t *L, tol_learn_result_t *r)
{
    r->samples_seen = L->samples_seen;
    r->updates = L->updates;
    r->n_active = L->head.n_active;
}

tol_status_t tol_learner_predict_result(tol_learner_t *L, const int8_t *latent, tol_learn_result_t *r)
{
    memset(r, 0, sizeof(*r));
    r->prediction = -1;
    TOL_TRY(tol_learner_predict(L, latent, &r->prediction, &r->probability));
    tol_learner_result_counters_(L, r);
    return TOL_OK;
}

tol_status_t tol_learner_learn_result(tol_learner_t *L, const int8_t *latent, uint16_t label,
                                      tol_learn_result_t *r)
{
    const tol_head_t *h = &L->head;
    /* the scores of the last predict (on this latent) are its softmax probabilities */
    r->label_probability = label < h->rows && h->active[label] ? h->z[label] : 0.0f;
    const uint32_t seen = L->samples_seen;
    const uint16_t active = h->n_active;
    const tol_status_t st = tol_learner_learn(L, latent, label);
    r->learned = L->samples_seen != seen; /* counted once it passed the checks; a diverged one is not */
    r->new_class = h->n_active > active;  /* a diverged step deactivated the label's new row */
    tol_learner_result_counters_(L, r);
    return st;
}

tol_status_t tol_learner_anomaly_result(tol_learner_t *L, const int8_t *latent, const int8_t *target,
                                        bool learn, tol_learn_result_t *r)
{
    memset(r, 0, sizeof(*r));
    const uint32_t updates = L->updates;
    uint8_t flag = 0u;
    r->threshold = tol_anomaly_threshold(&L->anomaly); /* the one this score meets */
    const tol_status_t st = learn ? tol_learner_anomaly(L, latent, target, &r->probability, &flag)
                                  : tol_learner_score(L, latent, target, &r->probability, &flag);
    r->anomaly = flag != 0u;
    r->prediction = flag;
    r->learned = L->updates != updates;
    tol_learner_result_counters_(L, r);
    return st;
}

void tol_learner_get_settings(const tol_learner_t *L, tol_learner_settings_t *s)
{
    *s = L->set;
}

tol_status_t tol_learner_set_settings(tol_learner_t *L, const tol_learner_settings_t *s)
{
    TOL_CHECK(s != NULL, TOL_ERR_ARG);
    TOL_TRY(tol_learner_check_settings_(&L->cfg, s));
    L->set = *s;
    L->n_pending = 0;
    if (L->cfg.replay_capacity > 0u) L->replay.policy = s->replay_policy; /* stored slots stay */
    L->anomaly.k = s->threshold_k;
    L->anomaly.alpha = s->ema_alpha;
    L->anomaly.warmup = s->warmup == 0u ? 1u : s->warmup;
    return TOL_OK;
}

void tol_learner_get_stats(const tol_learner_t *L, tol_learner_stats_t *st)
{
    st->samples_seen = L->samples_seen;
    st->updates = L->updates;
    st->rejected = L->rejected;
    st->anomalies = L->anomalies;
    st->n_active = L->head.n_active;
    st->n_outputs = L->cfg.n_outputs;
    st->replay_fill = L->cfg.replay_capacity > 0u ? L->replay.fill : 0u;
    st->replay_capacity = L->cfg.replay_capacity;
    st->class_count = L->class_count;
    st->threshold = tol_anomaly_threshold(&L->anomaly);
    const int ae = L->cfg.head_kind == (uint8_t)TOL_HEAD_AUTOENCODER;
    st->score_mean = ae ? L->anomaly.mean : 0.0f;
    st->score_std = ae ? sqrtf(L->anomaly.var > 0.0f ? L->anomaly.var : 0.0f) : 0.0f;
    st->replay_count = L->cfg.replay_capacity > 0u ? L->replay.count : NULL;
}

const tol_head_t *tol_learner_head(const tol_learner_t *L)
{
    return &L->head;
}

tol_status_t tol_learner_load_head(tol_learner_t *L, const float *w, const float *b,
                                   const uint8_t *active)
{
    L->n_pending = 0;
    return tol_head_load(&L->head, w, b, active);
}

/* ---- persistence: the state as a byte stream (see tol_learner.h) ----------------- */

#define TOL_LEARNER_STATE_MAGIC 0x314E524Cu /* "LRN1" */

/* Where the header keeps the counters (52), the queue length (72) and the replay buffer's
 * fill and counters (92, 96, 100). */
static const tol_state_layout_t tol_learner_layout_ = {52u, 72u, 92u};

void tol_learner_settings_pack(const tol_learner_settings_t *s, uint8_t *p)
{
    tol_segs_putf(p, s->lr);
    tol_segs_putf(p + 4, s->momentum);
    tol_segs_putf(p + 8, s->weight_decay);
    tol_segs_putf(p + 12, s->clip_norm);
    tol_segs_put16(p + 16, s->n_new);
    tol_segs_put16(p + 18, s->n_old);
    p[20] = s->mode;
}

void tol_learner_settings_unpack(const uint8_t *p, tol_learner_settings_t *s)
{
    s->lr = tol_segs_getf(p);
    s->momentum = tol_segs_getf(p + 4);
    s->weight_decay = tol_segs_getf(p + 8);
    s->clip_norm = tol_segs_getf(p + 12);
    s->n_new = tol_segs_get16(p + 16);
    s->n_old = tol_segs_get16(p + 18);
    s->mode = p[20];
}

static uint8_t tol_learner_parts_(const tol_learner_t *L, uint8_t parts)
{
    return tol_state_parts(parts, L->cfg.replay_capacity, L->head.vw != NULL);
}

static void tol_learner_state_header_(const tol_learner_t *L, uint8_t parts, uint8_t *p)
{
    const tol_learner_config_t *c = &L->cfg;
    const tol_learner_settings_t *s = &L->set;
    memset(p, 0, TOL_LEARNER_STATE_HEADER);
    tol_segs_put32(p + 0, TOL_LEARNER_STATE_MAGIC);
    p[4] = parts;
    p[5] = c->head_kind;
    p[6] = c->replay_bits;
    p[7] = s->replay_policy; /* the policy in use (the config's until set) */
    tol_segs_put16(p + 8, c->latent_dim);
    tol_segs_put16(p + 10, c->n_outputs);
    tol_segs_put16(p + 12, c->replay_capacity);
    tol_segs_put16(p + 14, c->max_new);
    tol_learner_settings_pack(s, p + 16);
    p[37] = s->train_anomalies;
    p[38] = s->rehearse; /* 0 in states saved before the head's idle rehearsal */
    tol_segs_putf(p + 40, s->threshold_k);
    tol_segs_putf(p + 44, s->ema_alpha);
    tol_segs_put32(p + 48, s->warmup);
    tol_state_put_core(p, &tol_learner_layout_, L->prng.state, L->samples_seen, L->updates, L->rejected,
                       L->n_pending, c->replay_capacity > 0u ? &L->replay : NULL);
    tol_segs_put32(p + 68, L->anomalies);
    tol_segs_put16(p + 74, L->head.n_active);
    tol_segs_put32(p + 76, L->anomaly.n);
    tol_segs_putf(p + 80, L->anomaly.mean);
    tol_segs_putf(p + 84, L->anomaly.m2);
    tol_segs_putf(p + 88, L->anomaly.var);
}

void tol_learner_state_stream(const tol_learner_t *L, uint8_t parts, uint8_t *hdr, tol_state_t *s)
{
    parts = tol_learner_parts_(L, parts);
    const tol_head_t *h = &L->head;
    const uint32_t wn = (uint32_t)h->rows * h->dim;
    if (hdr != NULL) tol_learner_state_header_(L, parts, hdr);
    tol_state_init(s, hdr, TOL_LEARNER_STATE_HEADER);
    tol_state_add(s, h->w, 4u * wn);
    tol_state_add(s, h->b, 4u * h->rows);
    tol_state_add(s, h->active, h->rows);
    tol_state_add(s, L->class_count, 4u * L->cfg.n_outputs);
    tol_state_add_queue(s, h->x, L->cfg.latent_dim, L->n_pending, L->pending_labels);
    if (parts & TOL_STATE_MOMENTUM) {
        tol_state_add(s, h->vw, 4u * wn);
        tol_state_add(s, h->vb, 4u * h->rows);
    }
    tol_state_add_replay(s, parts, &L->replay);
}

tol_status_t tol_learner_state_begin(tol_learner_t *L, const uint8_t *header, uint32_t n,
                                     uint8_t *parts, uint32_t *total)
{
    const tol_learner_config_t *c = &L->cfg;
    const uint8_t *p = header;
    TOL_CHECK(n >= TOL_LEARNER_STATE_HEADER && tol_segs_get32(p) == TOL_LEARNER_STATE_MAGIC, TOL_ERR_ARG);
    /* p[7], the replay policy, is a setting (states saved before it was one carry the
     * config's): checked with the settings below */
    TOL_CHECK(p[5] == c->head_kind && p[6] == c->replay_bits &&
                  tol_segs_get16(p + 8) == c->latent_dim && tol_segs_get16(p + 10) == c->n_outputs &&
                  tol_segs_get16(p + 12) == c->replay_capacity && tol_segs_get16(p + 14) == c->max_new,
              TOL_ERR_MODEL);
    const uint8_t pt = p[4];
    TOL_CHECK(pt == tol_learner_parts_(L, pt), TOL_ERR_ARG);
    tol_learner_settings_t s;
    tol_learner_settings_unpack(p + 16, &s);
    s.train_anomalies = p[37];
    s.rehearse = p[38];
    s.replay_policy = p[7];
    s.threshold_k = tol_segs_getf(p + 40);
    s.ema_alpha = tol_segs_getf(p + 44);
    s.warmup = tol_segs_get32(p + 48);
    TOL_TRY(tol_learner_check_settings_(c, &s));
    TOL_TRY(tol_state_check_core(p, &tol_learner_layout_, s.n_new, c->replay_capacity));
    /* checked: apply */
    L->set = s;
    L->rehearsed = 0;
    tol_state_get_core(p, &tol_learner_layout_, pt, &L->prng.state, &L->samples_seen, &L->updates, &L->rejected,
                       &L->n_pending, c->replay_capacity > 0u ? &L->replay : NULL);
    if (c->replay_capacity > 0u) L->replay.policy = s.replay_policy;
    L->anomalies = tol_segs_get32(p + 68);
    tol_anomaly_init(&L->anomaly, s.threshold_k, s.ema_alpha, s.warmup);
    L->anomaly.n = tol_segs_get32(p + 76);
    L->anomaly.mean = tol_segs_getf(p + 80);
    L->anomaly.m2 = tol_segs_getf(p + 84);
    L->anomaly.var = tol_segs_getf(p + 88);
    if (!(pt & TOL_STATE_MOMENTUM) && L->head.vw != NULL) {
        const size_t wn = (size_t)L->head.rows * L->head.dim;
        memset(L->head.vw, 0, wn * sizeof(float));
        memset(L->head.vb, 0, (size_t)L->head.rows * sizeof(float));
    }
    *parts = pt;
    tol_state_t st;
    tol_learner_state_stream(L, pt, NULL, &st);
    *total = tol_state_bytes(&st);
    return TOL_OK;
}

static tol_status_t tol_learner_state_check_(tol_learner_t *L, uint8_t parts)
{
    tol_head_t *h = &L->head;
    const size_t wn = (size_t)h->rows * h->dim;
    for (size_t i = 0; i < wn; i++) {
        TOL_CHECK(isfinite(h->w[i]) && (h->vw == NULL || isfinite(h->vw[i])), TOL_ERR_RANGE);
    }
    uint16_t active = 0;
    for (uint16_t r = 0; r < h->rows; r++) {
        TOL_CHECK(isfinite(h->b[r]) && (h->vb == NULL || isfinite(h->vb[r])) && h->active[r] <= 1u,
                  TOL_ERR_RANGE);
        active = (uint16_t)(active + h->active[r]);
    }
    h->n_active = active;
    return tol_state_check_queue(h->x, L->cfg.latent_dim, L->n_pending, L->pending_labels, L->cfg.n_outputs,
                                 parts, &L->replay);
}

tol_status_t tol_learner_state_end(tol_learner_t *L, uint8_t parts)
{
    const tol_status_t s = tol_learner_state_check_(L, tol_learner_parts_(L, parts));
    if (s != TOL_OK) tol_learner_reset(L);
    return s;
}

tol_status_t tol_learner_set_head_row(tol_learner_t *L, uint16_t row, uint16_t offset, const float *w,
                                      uint16_t n, float bias, uint8_t active)
{
    tol_head_t *h = &L->head;
    TOL_CHECK(row < h->rows && offset <= h->dim && n <= h->dim - offset && active <= 1u, TOL_ERR_RANGE);
    TOL_CHECK(n == 0u || w != NULL, TOL_ERR_ARG);
    TOL_CHECK(isfinite(bias) && tol_learner_finite(w != NULL ? w : &bias, w != NULL ? n : 1u),
              TOL_ERR_NONFINITE);
    float *dst = &h->w[(size_t)row * h->dim];
    if (n > 0u) memcpy(dst + offset, w, (size_t)n * sizeof(float));
    h->b[row] = bias;
    if (h->vw != NULL) {
        memset(&h->vw[(size_t)row * h->dim], 0, (size_t)h->dim * sizeof(float));
        h->vb[row] = 0.0f;
    }
    h->n_active = (uint16_t)(h->n_active - h->active[row] + active);
    h->active[row] = active;
    L->n_pending = 0;
    return TOL_OK;
}
