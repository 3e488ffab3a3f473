/* tol_learner.c - TinyOL head training with latent replay; see tol_learner.h. */
#include "tol_learner.h"

#include <math.h>
#include <string.h>

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
    s->threshold_k = 3.0f;
    s->ema_alpha = 0.01f;
    s->warmup = 50;
}

static tol_status_t tol_learner_check_settings_(const tol_learner_config_t *cfg,
                                                const tol_learner_settings_t *s)
{
    TOL_CHECK(isfinite(s->lr) && s->lr >= 0.0f, TOL_ERR_ARG);
    TOL_CHECK(isfinite(s->momentum) && s->momentum >= 0.0f && s->momentum < 1.0f, TOL_ERR_ARG);
    TOL_CHECK(s->momentum == 0.0f || !cfg->no_momentum, TOL_ERR_ARG);
    TOL_CHECK(isfinite(s->weight_decay) && s->weight_decay >= 0.0f, TOL_ERR_ARG);
    TOL_CHECK(isfinite(s->clip_norm) && s->clip_norm >= 0.0f, TOL_ERR_ARG);
    TOL_CHECK(s->n_new >= 1u && s->n_new <= cfg->max_new, TOL_ERR_ARG);
    TOL_CHECK(cfg->replay_capacity == 0u ||
                  s->n_old <= TOL_LEARNER_MAX_OLD_EFF(cfg->replay_capacity, cfg->max_old),
              TOL_ERR_ARG);
    TOL_CHECK(s->mode <= (uint8_t)TOL_LEARN_REPLAY, TOL_ERR_ARG);
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
    TOL_TRY(tol_learner_check_settings_(cfg, &cfg->settings));
    const uint16_t d = cfg->latent_dim;
    const uint16_t c = cfg->n_outputs;
    const uint16_t max_batch =
        (uint16_t)(cfg->max_new + TOL_LEARNER_MAX_OLD_EFF(cfg->replay_capacity, cfg->max_old));
    const uint8_t momentum = (uint8_t)(cfg->no_momentum ? 0u : 1u);
    TOL_CHECK(mem_bytes >= TOL_LEARNER_BYTES_EX(d, c, cfg->replay_capacity, cfg->replay_bits,
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
        const size_t rb = TOL_REPLAY_BYTES(cfg->replay_capacity, d, cfg->replay_bits, c);
        TOL_TRY(tol_replay_init(&L->replay, p, rb, cfg->replay_capacity, d, cfg->replay_bits, c,
                                cfg->replay_policy, cfg->latent_scale, cfg->latent_zero_point,
                                &L->prng));
        p += rb;
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
    tol_prng_seed(&L->prng, cfg->seed);
    tol_head_reset(&L->head);
    if (cfg->replay_capacity > 0u) tol_replay_clear(&L->replay);
    tol_anomaly_init(&L->anomaly, L->set.threshold_k, L->set.ema_alpha, L->set.warmup);
    memset(L->class_count, 0, (size_t)cfg->n_outputs * sizeof(uint32_t));
    L->n_pending = 0;
    L->samples_seen = 0;
    L->updates = 0;
    L->rejected = 0;
    L->anomalies = 0;
}

static void tol_learner_dequantize_(const int8_t *q, uint16_t n, float scale, int32_t zp,
                                    float *x)
{
    for (uint16_t j = 0; j < n; j++) x[j] = scale * (float)((int32_t)q[j] - zp);
}

static int tol_learner_all_finite_(const float *x, uint16_t n)
{
    for (uint16_t j = 0; j < n; j++) {
        if (!isfinite(x[j])) return 0;
    }
    return 1;
}

tol_status_t tol_learner_predict_f(tol_learner_t *L, const float *latent, int32_t *label,
                                   float *confidence)
{
    TOL_CHECK(latent != NULL, TOL_ERR_ARG);
    TOL_CHECK(L->cfg.head_kind == (uint8_t)TOL_HEAD_CLASSIFIER, TOL_ERR_UNSUPPORTED);
    TOL_CHECK(tol_learner_all_finite_(latent, L->cfg.latent_dim), TOL_ERR_NONFINITE);
    tol_head_predict(&L->head, latent, label, confidence);
    return TOL_OK;
}

tol_status_t tol_learner_predict(tol_learner_t *L, const int8_t *latent, int32_t *label,
                                 float *confidence)
{
    TOL_CHECK(latent != NULL, TOL_ERR_ARG);
    tol_learner_dequantize_(latent, L->cfg.latent_dim, L->cfg.latent_scale,
                            L->cfg.latent_zero_point, L->x);
    return tol_learner_predict_f(L, L->x, label, confidence);
}

/* One SGD step on the queued samples plus n_old replayed ones. */
static tol_status_t tol_learner_update_(tol_learner_t *L)
{
    tol_head_t *h = &L->head;
    const uint16_t d = L->cfg.latent_dim;
    const int replay = L->set.mode == (uint8_t)TOL_LEARN_REPLAY && L->cfg.replay_capacity > 0u;
    const uint16_t n_old = (replay && L->replay.fill > 0u) ? L->set.n_old : 0u;
    const float weight = 1.0f / (float)(L->n_pending + n_old);
    tol_head_grad_zero(h);
    for (uint16_t i = 0; i < L->n_pending; i++) {
        /* the queued latent already sits in batch slot i */
        TOL_TRY(tol_head_grad_add_ce(h, &h->x[(size_t)i * d], L->pending_labels[i], weight,
                                     NULL));
    }
    for (uint16_t r = 0; r < n_old; r++) {
        uint16_t y;
        float *slot = tol_head_batch_slot(h);
        tol_replay_get(&L->replay, tol_replay_draw(&L->replay), slot, &y);
        tol_head_activate(h, y);
        TOL_TRY(tol_head_grad_add_ce(h, slot, y, weight, NULL));
    }
    const tol_status_t s =
        tol_head_step(h, L->set.lr, L->set.momentum, L->set.weight_decay, L->set.clip_norm);
    if (s != TOL_OK) {
        L->rejected++;
        return s;
    }
    L->updates++;
    if (replay) {
        TOL_TRY(tol_replay_add_batch(&L->replay, h->x, L->pending_labels, L->n_pending));
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
    TOL_CHECK(tol_learner_all_finite_(latent, d), TOL_ERR_NONFINITE);
    if (L->set.mode == (uint8_t)TOL_LEARN_FROZEN) return TOL_OK;
    const int newly = L->head.active[label] ? 0 : 1;
    tol_head_activate(&L->head, label);
    float *slot = tol_learner_queue_slot_(L);
    if (latent != slot) memmove(slot, latent, (size_t)d * sizeof(float));
    L->pending_labels[L->n_pending] = label;
    L->n_pending++;
    L->samples_seen++;
    L->class_count[label]++;
    if (L->n_pending < L->set.n_new) return TOL_OK;
    const tol_status_t s = tol_learner_update_(L);
    L->n_pending = 0;
    if (s == TOL_ERR_DIVERGED && newly) {
        L->head.active[label] = 0u;
        L->head.n_active--;
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
    tol_learner_dequantize_(latent, L->cfg.latent_dim, L->cfg.latent_scale,
                            L->cfg.latent_zero_point, slot);
    return tol_learner_learn_f(L, slot, label);
}

tol_status_t tol_learner_replay_add_f(tol_learner_t *L, const float *latent, uint16_t label)
{
    TOL_CHECK(latent != NULL, TOL_ERR_ARG);
    TOL_CHECK(L->cfg.replay_capacity > 0u, TOL_ERR_UNSUPPORTED);
    TOL_CHECK(label < L->cfg.n_outputs, TOL_ERR_LABEL);
    TOL_CHECK(tol_learner_all_finite_(latent, L->cfg.latent_dim), TOL_ERR_NONFINITE);
    return tol_replay_add_batch(&L->replay, latent, &label, 1);
}

tol_status_t tol_learner_replay_add(tol_learner_t *L, const int8_t *latent, uint16_t label)
{
    TOL_CHECK(latent != NULL, TOL_ERR_ARG);
    tol_learner_dequantize_(latent, L->cfg.latent_dim, L->cfg.latent_scale,
                            L->cfg.latent_zero_point, L->x);
    return tol_learner_replay_add_f(L, L->x, label);
}

static tol_status_t tol_learner_check_ae_(const tol_learner_t *L, const float *latent,
                                          const float *target)
{
    TOL_CHECK(latent != NULL && target != NULL, TOL_ERR_ARG);
    TOL_CHECK(L->cfg.head_kind == (uint8_t)TOL_HEAD_AUTOENCODER, TOL_ERR_UNSUPPORTED);
    TOL_CHECK(tol_learner_all_finite_(latent, L->cfg.latent_dim), TOL_ERR_NONFINITE);
    TOL_CHECK(tol_learner_all_finite_(target, L->cfg.n_outputs), TOL_ERR_NONFINITE);
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

tol_status_t tol_learner_score(tol_learner_t *L, const int8_t *latent, const int8_t *target,
                               float *score, uint8_t *is_anomaly)
{
    TOL_CHECK(latent != NULL && target != NULL, TOL_ERR_ARG);
    TOL_CHECK(L->cfg.head_kind == (uint8_t)TOL_HEAD_AUTOENCODER, TOL_ERR_UNSUPPORTED);
    tol_learner_dequantize_(latent, L->cfg.latent_dim, L->cfg.latent_scale,
                            L->cfg.latent_zero_point, L->x);
    tol_learner_dequantize_(target, L->cfg.n_outputs, L->cfg.target_scale,
                            L->cfg.target_zero_point, L->target);
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
    TOL_TRY(tol_head_grad_add_mse(h, latent, target, 1.0f, NULL));
    const tol_status_t st =
        tol_head_step(h, L->set.lr, L->set.momentum, L->set.weight_decay, L->set.clip_norm);
    if (st != TOL_OK) {
        L->rejected++;
        return st;
    }
    L->updates++;
    return TOL_OK;
}

tol_status_t tol_learner_anomaly(tol_learner_t *L, const int8_t *latent, const int8_t *target,
                                 float *score, uint8_t *is_anomaly)
{
    TOL_CHECK(latent != NULL && target != NULL, TOL_ERR_ARG);
    TOL_CHECK(L->cfg.head_kind == (uint8_t)TOL_HEAD_AUTOENCODER, TOL_ERR_UNSUPPORTED);
    tol_learner_dequantize_(latent, L->cfg.latent_dim, L->cfg.latent_scale,
                            L->cfg.latent_zero_point, L->x);
    tol_learner_dequantize_(target, L->cfg.n_outputs, L->cfg.target_scale,
                            L->cfg.target_zero_point, L->target);
    return tol_learner_anomaly_f(L, L->x, L->target, score, is_anomaly);
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
