/* tol_stage.c - the adaptive stage (several float32 layers trained by
 * backprop); see tol_stage.h. Reference C, float32, fixed loop order. */
#include "tol_stage.h"

#include <math.h>
#include <string.h>

#include "tol_fmac.h"
#include "tol_segs.h"
#include "tol_state.h"

/* ---- shapes and memory ------------------------------------------------------------ */

static uint32_t tol_stage_in_size_(const tol_stage_layer_t *l)
{
    return (uint32_t)l->in_h * l->in_w * l->in_c;
}

static uint32_t tol_stage_out_size_(const tol_stage_layer_t *l)
{
    return (uint32_t)l->out_h * l->out_w * l->out_c;
}

static uint32_t tol_stage_n_weights_(const tol_stage_layer_t *l)
{
    switch (l->kind) {
    case TOL_STAGE_DENSE: return (uint32_t)l->out_c * tol_stage_in_size_(l);
    case TOL_STAGE_CONV: return (uint32_t)l->out_c * l->kh * l->kw * l->in_c;
    case TOL_STAGE_DWCONV: return (uint32_t)l->kh * l->kw * l->out_c;
    default: return 0u;
    }
}

/* 1 for the layers with parameters (DENSE, CONV, DWCONV). */
static int tol_stage_linear_(const tol_stage_layer_t *l)
{
    return l->kind == TOL_STAGE_DENSE || l->kind == TOL_STAGE_CONV || l->kind == TOL_STAGE_DWCONV;
}

uint32_t tol_stage_layer_params(const tol_stage_layer_t *l)
{
    return tol_stage_linear_(l) ? tol_stage_n_weights_(l) + l->out_c : 0u;
}

uint32_t tol_stage_params(const tol_stage_layer_t *layers, uint8_t n_layers)
{
    uint32_t p = 0;
    for (uint8_t i = 0; i < n_layers; i++) p += tol_stage_layer_params(&layers[i]);
    return p;
}

uint32_t tol_stage_layer_trained(const tol_stage_layer_t *l)
{
    if (!tol_stage_linear_(l) || l->train == (uint8_t)TOL_STAGE_TRAIN_FROZEN) return 0u;
    return l->train == (uint8_t)TOL_STAGE_TRAIN_BIAS ? l->out_c : tol_stage_layer_params(l);
}

uint32_t tol_stage_trained(const tol_stage_layer_t *layers, uint8_t n_layers)
{
    uint32_t t = 0;
    for (uint8_t i = 0; i < n_layers; i++) t += tol_stage_layer_trained(&layers[i]);
    return t;
}

/* 1 if layer l is well formed (output shape from input shape and kernel). */
static int tol_stage_layer_ok_(const tol_stage_layer_t *l)
{
    if (l->in_h == 0u || l->in_w == 0u || l->in_c == 0u || l->out_c == 0u) return 0;
    if (l->train > (uint8_t)TOL_STAGE_TRAIN_FROZEN || (l->train != 0u && !tol_stage_linear_(l))) return 0;
    if (l->act > (uint8_t)TOL_STAGE_ACT_RELU6) return 0;
    if (l->wq > 0 || l->bq > 0 || l->wq < TOL_STAGE_Q_MIN || l->bq < TOL_STAGE_Q_MIN) return 0;
    switch (l->kind) {
    case TOL_STAGE_DENSE:
        return l->out_h == 1u && l->out_w == 1u;
    case TOL_STAGE_GAP:
    case TOL_STAGE_GMAXPOOL:
        return l->out_h == 1u && l->out_w == 1u && l->out_c == l->in_c && l->act == 0u;
    case TOL_STAGE_MAXPOOL:
    case TOL_STAGE_AVGPOOL:
    case TOL_STAGE_CONV:
    case TOL_STAGE_DWCONV:
        if (l->kh == 0u || l->kw == 0u || l->sh == 0u || l->sw == 0u) return 0;
        if (l->kind == TOL_STAGE_DWCONV && (l->out_c % l->in_c) != 0u) return 0;
        if ((l->kind == TOL_STAGE_MAXPOOL || l->kind == TOL_STAGE_AVGPOOL) &&
            (l->out_c != l->in_c || l->act != 0u)) {
            return 0; /* a window over each channel, no activation */
        }
        if (l->pt >= l->kh || l->pl >= l->kw || l->out_h == 0u || l->out_w == 0u) return 0;
        /* every output window starts inside the padded input */
        return (uint32_t)(l->out_h - 1u) * l->sh < (uint32_t)l->in_h + l->pt &&
               (uint32_t)(l->out_w - 1u) * l->sw < (uint32_t)l->in_w + l->pl;
    default:
        return 0;
    }
}

/* 1 if any layer keeps its trained parameters in int16 (an int16 stage). */
static int tol_stage_q16_(const tol_stage_layer_t *layers, uint8_t n)
{
    for (uint8_t i = 0; i < n; i++) {
        if (layers[i].wq != 0 || layers[i].bq != 0) return 1;
    }
    return 0;
}

/* An int16 stage: exactly the trained tensors have exponents (weights of ALL layers, biases
 * of ALL and BIAS layers). A float stage: none. */
static int tol_stage_q_ok_(const tol_stage_layer_t *l, int q16)
{
    const int lin = tol_stage_linear_(l);
    const int tw = lin && l->train == (uint8_t)TOL_STAGE_TRAIN_ALL;
    const int tb = lin && l->train != (uint8_t)TOL_STAGE_TRAIN_FROZEN;
    if (!q16) return l->wq == 0 && l->bq == 0;
    return (l->wq != 0) == tw && (l->bq != 0) == tb;
}

static int tol_stage_chain_ok_(const tol_stage_layer_t *layers, uint8_t n)
{
    if (layers == NULL || n == 0u || n > TOL_STAGE_MAX_LAYERS) return 0;
    const int q16 = tol_stage_q16_(layers, n);
    for (uint8_t i = 0; i < n; i++) {
        if (!tol_stage_layer_ok_(&layers[i]) || !tol_stage_q_ok_(&layers[i], q16)) return 0;
        if (i > 0u && tol_stage_in_size_(&layers[i]) != tol_stage_out_size_(&layers[i - 1u])) return 0;
    }
    const tol_stage_layer_t *last = &layers[n - 1u];
    return last->kind == TOL_STAGE_DENSE && last->act == 0u && last->train == 0u &&
           tol_stage_in_size_(&layers[0]) <= 0xFFFFu;
}

size_t tol_stage_bytes(const tol_stage_config_t *cfg)
{
    if (!tol_stage_chain_ok_(cfg->layers, cfg->n_layers)) return 0u;
    const uint8_t n = cfg->n_layers;
    const size_t p = tol_stage_trained(cfg->layers, n);
    size_t acts = 0, maxsz = 0;
    for (uint8_t i = 0; i < n; i++) {
        const size_t in = tol_stage_in_size_(&cfg->layers[i]);
        const size_t out = tol_stage_out_size_(&cfg->layers[i]);
        acts += out;
        if (in > maxsz) maxsz = in;
        if (out > maxsz) maxsz = out;
    }
    const size_t rows = cfg->layers[n - 1u].out_c;
    const size_t d = tol_stage_in_size_(&cfg->layers[0]);
    const int q16 = tol_stage_q16_(cfg->layers, n);
    const size_t floats = (q16 ? 0u : (cfg->no_momentum ? 2u : 3u) * p) + acts + 2u * maxsz + rows +
                          (size_t)cfg->max_new * d + d;
    return 4u * floats + (q16 ? TOL_ALIGN4(2u * p) : (size_t)0u) + 4u * rows + TOL_ALIGN4(2u * (size_t)cfg->max_new) + TOL_ALIGN4(rows) +
           (cfg->replay_capacity > 0u && cfg->replay_mem == NULL
                ? TOL_REPLAY_BYTES(cfg->replay_capacity, d, cfg->replay_bits, rows)
                : (size_t)0u);
}

/* ---- settings ------------------------------------------------------------------------ */

static tol_status_t tol_stage_check_settings_(const tol_stage_config_t *cfg,
                                              const tol_learner_settings_t *s)
{
    /* an int16 stage has no batch gradient to clip */
    TOL_CHECK(s->clip_norm == 0.0f || !tol_stage_q16_(cfg->layers, cfg->n_layers), TOL_ERR_ARG);
    return tol_learner_settings_check(s, cfg->max_new, cfg->max_old, cfg->replay_capacity, cfg->no_momentum);
}

void tol_stage_get_settings(const tol_stage_t *S, tol_learner_settings_t *s)
{
    *s = S->set;
}

tol_status_t tol_stage_set_settings(tol_stage_t *S, const tol_learner_settings_t *s)
{
    TOL_CHECK(s != NULL, TOL_ERR_ARG);
    TOL_TRY(tol_stage_check_settings_(&S->cfg, s));
    S->set = *s;
    S->n_pending = 0;
    if (S->cfg.replay_capacity > 0u) S->replay.policy = s->replay_policy; /* stored slots stay */
    return TOL_OK;
}

/* ---- init / reset ---------------------------------------------------------------------- */

tol_status_t tol_stage_init(tol_stage_t *S, uint8_t *mem, size_t mem_bytes,
                            const tol_stage_config_t *cfg)
{
    TOL_CHECK(S != NULL && mem != NULL && cfg != NULL, TOL_ERR_ARG);
    TOL_CHECK(((uintptr_t)mem & 3u) == 0u, TOL_ERR_ARG);
    TOL_CHECK(tol_stage_chain_ok_(cfg->layers, cfg->n_layers), TOL_ERR_ARG);
    TOL_CHECK(cfg->max_new >= 1u && cfg->max_new <= TOL_REPLAY_MAX_BATCH, TOL_ERR_ARG);
    TOL_CHECK(cfg->max_old <= TOL_LEARNER_MAX_OLD, TOL_ERR_ARG);
    TOL_CHECK(isfinite(cfg->latent_scale) && cfg->latent_scale > 0.0f, TOL_ERR_ARG);
    const tol_stage_layer_t *last = &cfg->layers[cfg->n_layers - 1u];
    TOL_CHECK(cfg->init_classes <= last->out_c, TOL_ERR_ARG);
    TOL_CHECK(cfg->replay_policy <= (uint8_t)TOL_REPLAY_AR1, TOL_ERR_ARG);
    TOL_CHECK(isfinite(cfg->stage_lr_scale) && cfg->stage_lr_scale >= 0.0f, TOL_ERR_ARG);
    const int q16 = tol_stage_q16_(cfg->layers, cfg->n_layers);
    TOL_CHECK(!q16 || cfg->no_momentum, TOL_ERR_ARG); /* an int16 stage has no momentum buffers */
    tol_learner_settings_t s0 = cfg->settings;
    s0.replay_policy = cfg->replay_policy; /* the config's policy is the setting's start */
    TOL_TRY(tol_stage_check_settings_(cfg, &s0));
    TOL_CHECK(mem_bytes >= tol_stage_bytes(cfg), TOL_ERR_OVERFLOW);
    /* parameters that do not train are read from the export */
    TOL_CHECK(cfg->init_params != NULL ||
                  tol_stage_trained(cfg->layers, cfg->n_layers) == tol_stage_params(cfg->layers, cfg->n_layers),
              TOL_ERR_ARG);
    S->cfg = *cfg;
    S->n_params = tol_stage_trained(cfg->layers, cfg->n_layers);
    S->latent = tol_stage_in_size_(&cfg->layers[0]);
    S->rows = last->out_c;
    size_t acts = 0, maxsz = 0;
    for (uint8_t i = 0; i < cfg->n_layers; i++) {
        const size_t in = tol_stage_in_size_(&cfg->layers[i]);
        const size_t out = tol_stage_out_size_(&cfg->layers[i]);
        acts += out;
        if (in > maxsz) maxsz = in;
        if (out > maxsz) maxsz = out;
    }
    float *f = (float *)(void *)mem;
    S->params = S->grads = S->mom = NULL;
    S->q = NULL;
    if (q16) {
        S->q = (int16_t *)(void *)mem;
        f = (float *)(void *)(mem + TOL_ALIGN4(2u * (size_t)S->n_params));
    } else {
        S->params = f;
        f += S->n_params;
        S->grads = f;
        f += S->n_params;
        if (!cfg->no_momentum) {
            S->mom = f;
            f += S->n_params;
        }
    }
    S->acts = f;
    f += acts;
    S->delta[0] = f;
    f += maxsz;
    S->delta[1] = f;
    f += maxsz;
    S->probs = f;
    f += S->rows;
    S->queue = f;
    f += (size_t)cfg->max_new * S->latent;
    S->x = f;
    f += S->latent;
    S->class_count = (uint32_t *)(void *)f;
    uint8_t *p = (uint8_t *)(void *)(S->class_count + S->rows);
    S->pending_labels = (uint16_t *)(void *)p;
    p += TOL_ALIGN4(2u * (size_t)cfg->max_new);
    S->active = p;
    p += TOL_ALIGN4(S->rows);
    if (cfg->replay_capacity > 0u) {
        const size_t rb = TOL_REPLAY_BYTES(cfg->replay_capacity, S->latent, cfg->replay_bits, S->rows);
        TOL_CHECK(cfg->replay_mem == NULL || (((uintptr_t)cfg->replay_mem & 3u) == 0u), TOL_ERR_ARG);
        TOL_CHECK(cfg->replay_mem == NULL || cfg->replay_mem_bytes >= rb, TOL_ERR_OVERFLOW);
        TOL_TRY(tol_replay_init(&S->replay, cfg->replay_mem != NULL ? cfg->replay_mem : p, rb,
                                cfg->replay_capacity, (uint16_t)S->latent,
                                cfg->replay_bits, S->rows, cfg->replay_policy, cfg->latent_scale,
                                cfg->latent_zero_point, &S->prng));
        if (cfg->replay_bits == 4u || cfg->replay_bits > 128u) {
            TOL_TRY(tol_replay_set_codec(&S->replay, cfg->replay_codec));
        }
    }
    tol_stage_reset(S);
    return TOL_OK;
}

/* Offset of the last layer's parameters in params[] (it trains all of them). */
static uint32_t tol_stage_last_offset_(const tol_stage_t *S)
{
    return tol_stage_trained(S->cfg.layers, (uint8_t)(S->cfg.n_layers - 1u));
}

/* Layer l's weights and biases: trained ones in params[] at *toff, the others in the
 * export at *poff; both offsets move past the layer. */
static void tol_stage_wb_(const tol_stage_t *S, const tol_stage_layer_t *l, uint32_t *poff,
                          uint32_t *toff, const float **w, const float **b)
{
    const uint32_t nw = tol_stage_n_weights_(l);
    const float *exp = S->cfg.init_params != NULL ? S->cfg.init_params + *poff : NULL;
    switch (l->train) {
    case TOL_STAGE_TRAIN_BIAS:
        *w = exp;
        *b = &S->params[*toff];
        break;
    case TOL_STAGE_TRAIN_FROZEN:
        *w = exp;
        *b = exp != NULL ? exp + nw : NULL;
        break;
    default:
        *w = &S->params[*toff];
        *b = *w + nw;
        break;
    }
    *poff += tol_stage_layer_params(l);
    *toff += tol_stage_layer_trained(l);
}

/* 2^e as a float (exact for the exponents of tol_stage.h). */
static float tol_stage_pow2_(int8_t e)
{
    return ldexpf(1.0f, (int)e);
}

/* The exponent of trained parameter k (0..) of layer l: wq for its weights, else bq. */
static int8_t tol_stage_qexp_(const tol_stage_layer_t *l, uint32_t k)
{
    return (l->train == (uint8_t)TOL_STAGE_TRAIN_ALL && k < tol_stage_n_weights_(l)) ? l->wq : l->bq;
}

/* An int16 stage's q[] from the export: each trained value / 2^e rounded to nearest (even),
 * clamped to +-TOL_STAGE_Q_MAX (an export made for int16 is exact: q * 2^e). */
static void tol_stage_q_reset_(tol_stage_t *S)
{
    const tol_stage_config_t *c = &S->cfg;
    uint32_t poff = 0, toff = 0;
    for (uint8_t i = 0; i < c->n_layers; i++) {
        const tol_stage_layer_t *l = &c->layers[i];
        const uint32_t np = tol_stage_layer_params(l), nt = tol_stage_layer_trained(l);
        for (uint32_t k = 0; k < nt; k++) {
            float v = 0.0f;
            if (c->init_params != NULL) {
                v = rintf(c->init_params[poff + np - nt + k] * tol_stage_pow2_((int8_t)-tol_stage_qexp_(l, k)));
            }
            if (!(v == v)) v = 0.0f;
            if (v > (float)TOL_STAGE_Q_MAX) v = (float)TOL_STAGE_Q_MAX;
            if (v < -(float)TOL_STAGE_Q_MAX) v = -(float)TOL_STAGE_Q_MAX;
            S->q[toff + k] = (int16_t)v;
        }
        poff += np;
        toff += nt;
    }
}

void tol_stage_reset(tol_stage_t *S)
{
    const tol_stage_config_t *c = &S->cfg;
    S->set = c->settings;
    S->set.replay_policy = c->replay_policy;
    tol_prng_seed(&S->prng, c->seed);
    if (S->q != NULL) {
        tol_stage_q_reset_(S);
    } else if (c->init_params != NULL) {
        /* the trained parts of the export, layer after layer */
        uint32_t poff = 0, toff = 0;
        for (uint8_t i = 0; i < c->n_layers; i++) {
            const tol_stage_layer_t *l = &c->layers[i];
            const uint32_t np = tol_stage_layer_params(l), nt = tol_stage_layer_trained(l);
            memcpy(&S->params[toff], &c->init_params[poff + np - nt], (size_t)nt * sizeof(float));
            poff += np;
            toff += nt;
        }
    } else {
        memset(S->params, 0, (size_t)S->n_params * sizeof(float));
    }
    /* rows beyond the exported classes start at zero */
    const uint32_t d = tol_stage_in_size_(&c->layers[c->n_layers - 1u]);
    const size_t wo = tol_stage_last_offset_(S), bo = wo + (size_t)S->rows * d;
    for (uint16_t r = c->init_classes; r < S->rows; r++) {
        if (S->q != NULL) {
            memset(&S->q[wo + (size_t)r * d], 0, (size_t)d * sizeof(int16_t));
            S->q[bo + r] = 0;
        } else {
            memset(&S->params[wo + (size_t)r * d], 0, (size_t)d * sizeof(float));
            S->params[bo + r] = 0.0f;
        }
    }
    if (S->mom != NULL) memset(S->mom, 0, (size_t)S->n_params * sizeof(float));
    for (uint16_t r = 0; r < S->rows; r++) S->active[r] = (uint8_t)(r < c->init_classes ? 1u : 0u);
    S->n_active = c->init_classes;
    memset(S->class_count, 0, (size_t)S->rows * sizeof(uint32_t));
    memset(S->probs, 0, (size_t)S->rows * sizeof(float));
    if (c->replay_capacity > 0u) {
        tol_replay_clear(&S->replay);
        S->replay.policy = c->replay_policy;
    }
    S->n_pending = 0;
    S->rehearsed = 0;
    S->push_fill = 0;
    S->samples_seen = 0;
    S->updates = 0;
    S->rejected = 0;
}

/* Activate last-layer row r: zero its weights, bias, momentum. */
static void tol_stage_activate_(tol_stage_t *S, uint16_t r)
{
    if (r >= S->rows || S->active[r]) return;
    const uint32_t off = tol_stage_last_offset_(S);
    const uint32_t d = tol_stage_in_size_(&S->cfg.layers[S->cfg.n_layers - 1u]);
    const size_t wi = off + (size_t)r * d;
    const size_t bi = off + (size_t)S->rows * d + r;
    if (S->q != NULL) {
        memset(&S->q[wi], 0, (size_t)d * sizeof(int16_t));
        S->q[bi] = 0;
        S->active[r] = 1u;
        S->n_active++;
        return;
    }
    memset(&S->params[wi], 0, (size_t)d * sizeof(float));
    S->params[bi] = 0.0f;
    if (S->mom != NULL) {
        memset(&S->mom[wi], 0, (size_t)d * sizeof(float));
        S->mom[bi] = 0.0f;
    }
    S->active[r] = 1u;
    S->n_active++;
}

/* ---- forward / backward ---------------------------------------------------------------- */

static float tol_stage_act_(uint8_t act, float v)
{
    if (act == (uint8_t)TOL_STAGE_ACT_NONE) return v;
    v = v > 0.0f ? v : 0.0f;
    if (act == (uint8_t)TOL_STAGE_ACT_RELU6 && v > 6.0f) v = 6.0f;
    return v;
}

/* The float loops below use tol_fmac.h's multiply-adds (VMLA on the M4F: the product rounded,
 * then the sum, exactly the separate `acc += a * b`), with VLDM blocks of 8 where the data
 * is contiguous; every sum keeps the order of tol_stage.h. */

/* acc + w[0] x[0] + ... + w[n-1] x[n-1], left to right. */
static float tol_stage_dot_(float acc, const float *w, const float *x, uint32_t n)
{
    if (n >= 8u) acc = tol_fmac_dot8_(acc, &w, &x, n >> 3);
    for (uint32_t i = 0; i < (n & 7u); i++) acc = tol_fmac_mla(acc, w[i], x[i]);
    return acc;
}

/* z[r] += sum_i w[r stride + i] x[i] (i ascending) for the four rows r = 0..3. */
static void tol_stage_dot4_(float *z, const float *w, uint32_t stride, const float *x, uint32_t n)
{
    const uint32_t n8 = n >> 3;
    if (n8 > 0u) tol_fmac_dot4x8_(z, w, stride, x, n8);
    for (uint32_t r = 0; r < 4u; r++) {
        const float *wr = w + (size_t)r * stride;
        for (uint32_t i = 8u * n8; i < n; i++) z[r] = tol_fmac_mla(z[r], wr[i], x[i]);
    }
}

/* y[i] = y[i] + a x[i], i < n. */
static void tol_stage_axpy_(float *y, float a, const float *x, uint32_t n)
{
    const uint32_t n8 = n >> 3;
    if (n8 > 0u) {
        tol_fmac_axpy8_(y, a, x, n8);
        y += 8u * n8;
        x += 8u * n8;
    }
    for (uint32_t i = 0; i < (n & 7u); i++) y[i] = tol_fmac_mla(y[i], a, x[i]);
}

/* The kernel taps [*k0, *k1) whose input index o*s - p + k lies in [0, n): the taps the
 * reference loop would not skip as padding. */
static void tol_stage_taps_(uint32_t o, uint8_t s, uint8_t p, uint8_t k, uint16_t n, uint32_t *k0,
                            uint32_t *k1)
{
    const int32_t start = (int32_t)o * s - p;
    const int32_t lo = start < 0 ? -start : 0;
    const int32_t hi = (int32_t)n - start < (int32_t)k ? (int32_t)n - start : (int32_t)k;
    *k0 = (uint32_t)lo;
    *k1 = (uint32_t)(hi > lo ? hi : lo);
}

/* The window of output (oy, ox) of a CONV, DWCONV or pooling layer: taps [ky0, ky1) x
 * [kx0, kx1) inside the input, and the input position of tap (ky0, kx0). Every loop over
 * output positions takes its window from here: its rows once per output row
 * (tol_stage_win_row_), its columns per output position (tol_stage_win_col_). */
typedef struct {
    uint32_t ky0, ky1, kx0, kx1, iy0, ix0;
} tol_stage_win_t;

static void tol_stage_win_row_(const tol_stage_layer_t *l, uint32_t oy, tol_stage_win_t *w)
{
    tol_stage_taps_(oy, l->sh, l->pt, l->kh, l->in_h, &w->ky0, &w->ky1);
    w->iy0 = oy * l->sh + w->ky0 - l->pt;
}

static void tol_stage_win_col_(const tol_stage_layer_t *l, uint32_t ox, tol_stage_win_t *w)
{
    tol_stage_taps_(ox, l->sw, l->pl, l->kw, l->in_w, &w->kx0, &w->kx1);
    w->ix0 = ox * l->sw + w->kx0 - l->pl;
}

/* What the CONV and DWCONV loops derive from a layer: depthwise or not, the depth multiplier
 * (out_c / in_c for DWCONV, 1 for CONV), the channels, and the floats of one output channel's
 * kernel (CONV: kh * kw * in_c). */
typedef struct {
    int dw;
    uint32_t mult, cin, cout, wrow;
} tol_stage_conv_t;

static tol_stage_conv_t tol_stage_conv_(const tol_stage_layer_t *l)
{
    tol_stage_conv_t c;
    c.dw = l->kind == TOL_STAGE_DWCONV;
    c.mult = c.dw ? (uint32_t)l->out_c / l->in_c : 1u;
    c.cin = l->in_c;
    c.cout = l->out_c;
    c.wrow = (uint32_t)l->kh * l->kw * c.cin;
    return c;
}

/* ---- pooling (no parameters; windows placed as a convolution's, padded taps skipped) ---- */

/* Index in x of the first largest tap of channel c in window w (strictly larger replaces). */
static size_t tol_stage_argmax_(const tol_stage_layer_t *l, const tol_stage_win_t *w,
                                const float *x, uint32_t c)
{
    size_t best = ((size_t)w->iy0 * l->in_w + w->ix0) * l->in_c + c;
    for (uint32_t iy = w->iy0; iy < w->iy0 + (w->ky1 - w->ky0); iy++) {
        for (uint32_t ix = w->ix0; ix < w->ix0 + (w->kx1 - w->kx0); ix++) {
            const size_t k = ((size_t)iy * l->in_w + ix) * l->in_c + c;
            if (x[k] > x[best]) best = k;
        }
    }
    return best;
}

/* MAXPOOL / AVGPOOL forward (back = 0), or backward (back = 1: dx += the share of d). */
static void tol_stage_pool_(const tol_stage_layer_t *l, const float *x, float *y, const float *d,
                            float *dx, int back)
{
    const uint32_t cn = l->in_c;
    const int avg = l->kind == TOL_STAGE_AVGPOOL;
    for (uint32_t oy = 0; oy < l->out_h; oy++) {
        tol_stage_win_t w;
        tol_stage_win_row_(l, oy, &w);
        for (uint32_t ox = 0; ox < l->out_w; ox++) {
            tol_stage_win_col_(l, ox, &w);
            const size_t o = ((size_t)oy * l->out_w + ox) * cn;
            const float n = (float)((w.ky1 - w.ky0) * (w.kx1 - w.kx0));
            for (uint32_t c = 0; c < cn; c++) {
                if (!avg) {
                    const size_t k = tol_stage_argmax_(l, &w, x, c);
                    if (back) {
                        dx[k] += d[o + c];
                    } else {
                        y[o + c] = x[k];
                    }
                    continue;
                }
                const float g = back ? d[o + c] / n : 0.0f;
                float sum = 0.0f;
                for (uint32_t iy = w.iy0; iy < w.iy0 + (w.ky1 - w.ky0); iy++) {
                    for (uint32_t ix = w.ix0; ix < w.ix0 + (w.kx1 - w.kx0); ix++) {
                        const size_t k = ((size_t)iy * l->in_w + ix) * cn + c;
                        if (back) {
                            dx[k] += g;
                        } else {
                            sum += x[k];
                        }
                    }
                }
                if (!back) y[o + c] = sum / n;
            }
        }
    }
}

/* GMAXPOOL: index in x of channel c's first largest value. */
static size_t tol_stage_gargmax_(const tol_stage_layer_t *l, const float *x, uint32_t c)
{
    const uint32_t np = (uint32_t)l->in_h * l->in_w;
    size_t best = c;
    for (uint32_t p = 1; p < np; p++) {
        const size_t k = (size_t)p * l->in_c + c;
        if (x[k] > x[best]) best = k;
    }
    return best;
}

static void tol_stage_layer_forward_(const tol_stage_layer_t *l, const float *w, const float *b,
                                     const float *x, float *y)
{
    switch (l->kind) {
    case TOL_STAGE_DENSE: {
        const uint32_t n = tol_stage_in_size_(l);
        uint32_t o = 0;
        for (; o + 4u <= l->out_c; o += 4u) {
            float z[4] = {b[o], b[o + 1u], b[o + 2u], b[o + 3u]};
            tol_stage_dot4_(z, &w[(size_t)o * n], n, x, n);
            for (uint32_t r = 0; r < 4u; r++) y[o + r] = tol_stage_act_(l->act, z[r]);
        }
        for (; o < l->out_c; o++) y[o] = tol_stage_act_(l->act, tol_stage_dot_(b[o], &w[(size_t)o * n], x, n));
        break;
    }
    case TOL_STAGE_CONV:
    case TOL_STAGE_DWCONV: {
        const tol_stage_conv_t cv = tol_stage_conv_(l);
        for (uint32_t oy = 0; oy < l->out_h; oy++) {
            tol_stage_win_t win;
            tol_stage_win_row_(l, oy, &win);
            for (uint32_t ox = 0; ox < l->out_w; ox++) {
                tol_stage_win_col_(l, ox, &win);
                float *yo = &y[((size_t)oy * l->out_w + ox) * cv.cout];
                if (cv.dw && cv.mult == 1u) {
                    /* one channel per input channel: the channels of a tap are contiguous in x
                     * and in W, so eight channels' sums run side by side over the whole window
                     * (tol_fmac_dwwin8_), each in (ky, kx) order; the channels past the last
                     * eight one by one */
                    const uint32_t c8 = cv.cout & ~7u;
                    const uint32_t nk = win.kx1 - win.kx0, nky = win.ky1 - win.ky0;
                    const float *w0 = &w[((size_t)win.ky0 * l->kw + win.kx0) * cv.cout];
                    const float *x0 = &x[((size_t)win.iy0 * l->in_w + win.ix0) * cv.cin];
                    const uint32_t wky = (uint32_t)l->kw * cv.cout, xky = (uint32_t)l->in_w * cv.cin; /* one kernel row on */
                    for (uint32_t co = 0; co < cv.cout; co++) {
                        if (co < c8 && nk > 0u && nky > 0u) {
                            tol_fmac_dwwin8_(&yo[co], &b[co], &w0[co], cv.cout, wky, &x0[co], cv.cin, xky, nk, nky);
                            co += 7u;
                            continue;
                        }
                        float acc = b[co];
                        for (uint32_t r = 0; r < nky; r++) {
                            for (uint32_t t = 0; t < nk; t++) {
                                acc = tol_fmac_mla(acc, w0[(size_t)r * wky + (size_t)t * cv.cout + co],
                                                   x0[(size_t)r * xky + (size_t)t * cv.cin + co]);
                            }
                        }
                        yo[co] = acc;
                    }
                    for (uint32_t co = 0; co < cv.cout; co++) yo[co] = tol_stage_act_(l->act, yo[co]);
                    continue;
                }
                if (cv.dw) {
                    /* every channel's sum in its own slot of yo, taps in (ky, kx) order */
                    for (uint32_t co = 0; co < cv.cout; co++) yo[co] = b[co];
                    for (uint32_t ky = win.ky0; ky < win.ky1; ky++) {
                        for (uint32_t kx = win.kx0; kx < win.kx1; kx++) {
                            const float *xi = &x[((size_t)(win.iy0 + ky - win.ky0) * l->in_w + (win.ix0 + kx - win.kx0)) * cv.cin];
                            const float *wk = &w[((size_t)ky * l->kw + kx) * cv.cout];
                            if (cv.mult == 1u) {
                                for (uint32_t co = 0; co < cv.cout; co++) yo[co] = tol_fmac_mla(yo[co], wk[co], xi[co]);
                            } else {
                                for (uint32_t co = 0; co < cv.cout; co++) {
                                    yo[co] = tol_fmac_mla(yo[co], wk[co], xi[co / cv.mult]);
                                }
                            }
                        }
                    }
                    for (uint32_t co = 0; co < cv.cout; co++) yo[co] = tol_stage_act_(l->act, yo[co]);
                    continue;
                }
                /* taps kx0..kx1-1 of one kernel row are contiguous in x and in W, in the
                 * (kx, ci) order of the sum: one run of `run` floats per kernel row */
                const uint32_t run = (win.kx1 - win.kx0) * cv.cin;
                for (uint32_t co = 0; co < cv.cout; co += 4u) {
                    const uint32_t nr = cv.cout - co < 4u ? cv.cout - co : 4u;
                    float z[4];
                    for (uint32_t r = 0; r < nr; r++) z[r] = b[co + r];
                    if (nr == 4u && run > 0u && (run & 7u) == 0u && win.ky1 > win.ky0) {
                        /* every kernel row's run in blocks of 8: all rows in one call */
                        tol_fmac_dot4x8_rows_(z, &w[(size_t)co * cv.wrow + ((size_t)win.ky0 * l->kw + win.kx0) * cv.cin], cv.wrow,
                                              (uint32_t)l->kw * cv.cin, &x[((size_t)win.iy0 * l->in_w + win.ix0) * cv.cin],
                                              (uint32_t)l->in_w * cv.cin, run >> 3, win.ky1 - win.ky0);
                        for (uint32_t r = 0; r < 4u; r++) yo[co + r] = tol_stage_act_(l->act, z[r]);
                        continue;
                    }
                    for (uint32_t ky = win.ky0; ky < win.ky1; ky++) {
                        const float *xr = &x[((size_t)(win.iy0 + ky - win.ky0) * l->in_w + win.ix0) * cv.cin];
                        const float *wr = &w[(size_t)co * cv.wrow + ((size_t)ky * l->kw + win.kx0) * cv.cin];
                        if (nr == 4u) {
                            tol_stage_dot4_(z, wr, cv.wrow, xr, run);
                        } else {
                            for (uint32_t r = 0; r < nr; r++) {
                                z[r] = tol_stage_dot_(z[r], wr + (size_t)r * cv.wrow, xr, run);
                            }
                        }
                    }
                    for (uint32_t r = 0; r < nr; r++) yo[co + r] = tol_stage_act_(l->act, z[r]);
                }
            }
        }
        break;
    }
    case TOL_STAGE_GAP: {
        const uint32_t np = (uint32_t)l->in_h * l->in_w;
        const float inv = 1.0f / (float)np;
        const uint16_t c8 = (uint16_t)(l->in_c & ~7u);
        /* eight channels' sums side by side (each from 0.0f over p ascending), then the rest */
        for (uint16_t c = 0; c < c8; c = (uint16_t)(c + 8u)) tol_fmac_colsum8_(&y[c], &x[c], l->in_c, np);
        for (uint16_t c = c8; c < l->in_c; c++) {
            float s = 0.0f;
            for (uint32_t p = 0; p < np; p++) s += x[(size_t)p * l->in_c + c];
            y[c] = s;
        }
        for (uint16_t c = 0; c < l->in_c; c++) y[c] = y[c] * inv;
        break;
    }
    case TOL_STAGE_MAXPOOL:
    case TOL_STAGE_AVGPOOL:
        tol_stage_pool_(l, x, y, NULL, NULL, 0);
        break;
    case TOL_STAGE_GMAXPOOL:
        for (uint32_t c = 0; c < l->in_c; c++) y[c] = x[tol_stage_gargmax_(l, x, c)];
        break;
    default:
        break;
    }
}

/* d (the layer's output delta, in place) through the activation, given its output y. */
static void tol_stage_act_backward_(uint8_t act, const float *y, float *d, uint32_t n)
{
    if (act == (uint8_t)TOL_STAGE_ACT_NONE) return;
    for (uint32_t i = 0; i < n; i++) {
        const int pass = y[i] > 0.0f && (act != (uint8_t)TOL_STAGE_ACT_RELU6 || y[i] < 6.0f);
        if (!pass) d[i] = 0.0f;
    }
}

/* 1 if every one of the n floats is finite with |v| < 2^65 (tol_fmac_big_). */
static int tol_stage_moderate_(const float *v, uint32_t n)
{
    return (tol_fmac_big_(v, n, 0u) & 0x40000000u) == 0u;
}

/* DWCONV backward with one output channel per input channel (multiplier 1), eight channels
 * at a time (tol_fmac_vmla8_): per output position, per tap, g[k] += d x and dx += d W over
 * the channels of the tap, which are contiguous in W, x and dx. Every gW, gb and dx element
 * still takes its terms in (oy, ox) order, one per position. Zero deltas are not skipped
 * here: their terms are d * x = +-0 and d * W = +-0, which leave the sums (started at +0.0f,
 * never -0) unchanged, provided x and W are finite: the caller checks x (W always is). */
static void tol_stage_dw_backward8_(const tol_stage_layer_t *l, const float *w, const float *x,
                                    const float *d, float *g, float *gb, float *dx)
{
    const uint32_t c = l->out_c;
    const uint32_t c8 = c & ~7u;
    for (uint32_t oy = 0; oy < l->out_h; oy++) {
        tol_stage_win_t win;
        tol_stage_win_row_(l, oy, &win);
        for (uint32_t ox = 0; ox < l->out_w; ox++) {
            tol_stage_win_col_(l, ox, &win);
            const float *dp = &d[((size_t)oy * l->out_w + ox) * c];
            if (gb != NULL) {
                for (uint32_t co = 0; co < c8; co += 8u) tol_fmac_vadd8_(&gb[co], &dp[co]);
                for (uint32_t co = c8; co < c; co++) gb[co] += dp[co];
            }
            if (g == NULL && dx == NULL) continue;
            for (uint32_t ky = win.ky0; ky < win.ky1; ky++) {
                for (uint32_t kx = win.kx0; kx < win.kx1; kx++) {
                    const size_t k = ((size_t)ky * l->kw + kx) * c;
                    const size_t xo = ((size_t)(win.iy0 + ky - win.ky0) * l->in_w + (win.ix0 + kx - win.kx0)) * c;
                    for (uint32_t co = 0; co < c8; co += 8u) {
                        if (g != NULL) tol_fmac_vmla8_(&g[k + co], &dp[co], &x[xo + co]);
                        if (dx != NULL) tol_fmac_vmla8_(&dx[xo + co], &dp[co], &w[k + co]);
                    }
                    for (uint32_t co = c8; co < c; co++) {
                        if (g != NULL) g[k + co] = tol_fmac_mla(g[k + co], dp[co], x[xo + co]);
                        if (dx != NULL) dx[xo + co] = tol_fmac_mla(dx[xo + co], dp[co], w[k + co]);
                    }
                }
            }
        }
    }
}

/* Add this sample's gradient to g (weights, NULL if they do not train) and gb
 * (biases, NULL if they do not train), and, if dx != NULL, write the input delta dx
 * from the output delta d. x: the layer's input. Output elements whose delta is zero
 * (ReLU-masked, inactive rows) are skipped: their terms are +-0, which leave sums that
 * start at +0.0f unchanged. */
static void tol_stage_layer_backward_(const tol_stage_layer_t *l, const float *w, const float *x,
                                      const float *d, float *g, float *gb, float *dx)
{
    if (dx != NULL && l->kind != TOL_STAGE_GAP) { /* GAP writes every element of dx */
        memset(dx, 0, (size_t)tol_stage_in_size_(l) * sizeof(float));
    }
    switch (l->kind) {
    case TOL_STAGE_DENSE: {
        const uint32_t n = tol_stage_in_size_(l);
        for (uint32_t o = 0; o < l->out_c; o++) {
            const float dv = d[o];
            if (dv == 0.0f) continue;
            if (g != NULL) tol_stage_axpy_(&g[(size_t)o * n], dv, x, n);
            if (gb != NULL) gb[o] += dv;
            if (dx != NULL) tol_stage_axpy_(dx, dv, &w[(size_t)o * n], n);
        }
        break;
    }
    case TOL_STAGE_CONV:
    case TOL_STAGE_DWCONV: {
        const tol_stage_conv_t cv = tol_stage_conv_(l);
        if (cv.dw && cv.mult == 1u && tol_stage_moderate_(x, tol_stage_in_size_(l))) {
            tol_stage_dw_backward8_(l, w, x, d, g, gb, dx);
            break;
        }
        for (uint32_t oy = 0; oy < l->out_h; oy++) {
            tol_stage_win_t win;
            tol_stage_win_row_(l, oy, &win);
            for (uint32_t ox = 0; ox < l->out_w; ox++) {
                tol_stage_win_col_(l, ox, &win);
                const float *dp = &d[((size_t)oy * l->out_w + ox) * cv.cout];
                const uint32_t run = (win.kx1 - win.kx0) * cv.cin;
                for (uint32_t co = 0; co < cv.cout; co++) {
                    const float dv = dp[co];
                    if (dv == 0.0f) continue;
                    if (gb != NULL) gb[co] += dv;
                    if (g == NULL && dx == NULL) continue;
                    for (uint32_t ky = win.ky0; ky < win.ky1; ky++) {
                        const size_t xrow = ((size_t)(win.iy0 + ky - win.ky0) * l->in_w + win.ix0) * cv.cin;
                        if (cv.dw) {
                            const uint32_t ci = co / cv.mult;
                            for (uint32_t kx = win.kx0; kx < win.kx1; kx++) {
                                const size_t k = ((size_t)ky * l->kw + kx) * cv.cout + co;
                                const size_t xo = xrow + (size_t)(kx - win.kx0) * cv.cin + ci;
                                if (g != NULL) g[k] = tol_fmac_mla(g[k], dv, x[xo]);
                                if (dx != NULL) dx[xo] = tol_fmac_mla(dx[xo], dv, w[k]);
                            }
                        } else {
                            /* one contiguous run per kernel row (each gW and dx element
                             * takes one term from this output element: order-free) */
                            const size_t k = (size_t)co * cv.wrow + ((size_t)ky * l->kw + win.kx0) * cv.cin;
                            if (g != NULL) tol_stage_axpy_(&g[k], dv, &x[xrow], run);
                            if (dx != NULL) tol_stage_axpy_(&dx[xrow], dv, &w[k], run);
                        }
                    }
                }
            }
        }
        break;
    }
    case TOL_STAGE_GAP: {
        if (dx == NULL) break;
        const uint32_t np = (uint32_t)l->in_h * l->in_w;
        const float inv = 1.0f / (float)np;
        const uint16_t cn = l->in_c;
        const uint16_t c8 = (uint16_t)(cn & ~7u);
        /* every position gets the same d[c] * inv: computed once (position 0), then copied */
        for (uint16_t c = 0; c < cn; c++) dx[c] = d[c] * inv;
        for (uint32_t p = 1; p < np; p++) {
            float *row = &dx[(size_t)p * cn];
            for (uint16_t c = 0; c < c8; c = (uint16_t)(c + 8u)) tol_fmac_copy8_(&row[c], &dx[c]);
            for (uint16_t c = c8; c < cn; c++) row[c] = dx[c];
        }
        break;
    }
    case TOL_STAGE_MAXPOOL:
    case TOL_STAGE_AVGPOOL:
        if (dx != NULL) tol_stage_pool_(l, x, NULL, d, dx, 1);
        break;
    case TOL_STAGE_GMAXPOOL:
        if (dx == NULL) break;
        for (uint32_t c = 0; c < l->in_c; c++) dx[tol_stage_gargmax_(l, x, c)] += d[c];
        break;
    default:
        break;
    }
}

/* ---- the int16 stage (tol_stage.h "Lean trained weights"): reference loops in the order
 * of tol_stage.h, each weight read as (float)q * 2^e (exact) or from the export ---------- */

/* One tensor: int16 values with their scale, or float32 ones (the export). */
typedef struct {
    const float *f;
    int16_t *q;
    float s;
} tol_stage_wv_t;

static float tol_stage_wv_(const tol_stage_wv_t *a, size_t k)
{
    return a->q != NULL ? (float)a->q[k] * a->s : a->f[k];
}

/* Layer l's weights and biases (trained: in q at *toff; the others: the export at *poff). */
static void tol_stage_wbq_(tol_stage_t *S, const tol_stage_layer_t *l, uint32_t *poff, uint32_t *toff,
                           tol_stage_wv_t *w, tol_stage_wv_t *b)
{
    const uint32_t nw = tol_stage_n_weights_(l);
    const float *exp = S->cfg.init_params != NULL ? S->cfg.init_params + *poff : NULL;
    *w = (tol_stage_wv_t){exp, NULL, 0.0f};
    *b = (tol_stage_wv_t){exp != NULL ? exp + nw : NULL, NULL, 0.0f};
    if (l->train == (uint8_t)TOL_STAGE_TRAIN_ALL && tol_stage_linear_(l)) {
        *w = (tol_stage_wv_t){NULL, &S->q[*toff], tol_stage_pow2_(l->wq)};
        *b = (tol_stage_wv_t){NULL, &S->q[*toff + nw], tol_stage_pow2_(l->bq)};
    } else if (l->train == (uint8_t)TOL_STAGE_TRAIN_BIAS) {
        *b = (tol_stage_wv_t){NULL, &S->q[*toff], tol_stage_pow2_(l->bq)};
    }
    *poff += tol_stage_layer_params(l);
    *toff += tol_stage_layer_trained(l);
}

/* Index in W of CONV / DWCONV tap (ky, kx, ci) of output channel co. */
static size_t tol_stage_widx_(const tol_stage_layer_t *l, uint32_t co, uint32_t ky, uint32_t kx, uint32_t ci)
{
    if (l->kind == TOL_STAGE_DWCONV) return ((size_t)ky * l->kw + kx) * l->out_c + co;
    return (((size_t)co * l->kh + ky) * l->kw + kx) * l->in_c + ci;
}

/* A linear layer's forward pass with tensors w, b. */
static void tol_stage_forward16_(const tol_stage_layer_t *l, const tol_stage_wv_t *w,
                                 const tol_stage_wv_t *b, const float *x, float *y)
{
    if (l->kind == TOL_STAGE_DENSE) {
        const uint32_t n = tol_stage_in_size_(l);
        for (uint32_t o = 0; o < l->out_c; o++) {
            float acc = tol_stage_wv_(b, o);
            if (w->q != NULL) {
                const int16_t *qr = &w->q[(size_t)o * n];
                for (uint32_t i = 0; i < n; i++) acc += ((float)qr[i] * w->s) * x[i];
            } else {
                const float *fr = &w->f[(size_t)o * n];
                for (uint32_t i = 0; i < n; i++) acc += fr[i] * x[i];
            }
            y[o] = tol_stage_act_(l->act, acc);
        }
        return;
    }
    const tol_stage_conv_t cv = tol_stage_conv_(l);
    for (uint32_t oy = 0; oy < l->out_h; oy++) {
        tol_stage_win_t win;
        tol_stage_win_row_(l, oy, &win);
        for (uint32_t ox = 0; ox < l->out_w; ox++) {
            tol_stage_win_col_(l, ox, &win);
            for (uint32_t co = 0; co < cv.cout; co++) {
                float acc = tol_stage_wv_(b, co);
                for (uint32_t ky = win.ky0; ky < win.ky1; ky++) {
                    for (uint32_t kx = win.kx0; kx < win.kx1; kx++) {
                        const size_t xi = ((size_t)(win.iy0 + ky - win.ky0) * l->in_w + (win.ix0 + kx - win.kx0)) * cv.cin;
                        if (cv.dw) {
                            acc += tol_stage_wv_(w, tol_stage_widx_(l, co, ky, kx, 0u)) * x[xi + co / cv.mult];
                        } else {
                            const size_t k0 = tol_stage_widx_(l, co, ky, kx, 0u);
                            const float *xr = &x[xi];
                            if (w->q != NULL) {
                                const int16_t *qr = &w->q[k0];
                                for (uint32_t ci = 0; ci < cv.cin; ci++) acc += ((float)qr[ci] * w->s) * xr[ci];
                            } else {
                                const float *fr = &w->f[k0];
                                for (uint32_t ci = 0; ci < cv.cin; ci++) acc += fr[ci] * xr[ci];
                            }
                        }
                    }
                }
                y[((size_t)oy * l->out_w + ox) * cv.cout + co] = tol_stage_act_(l->act, acc);
            }
        }
    }
}

/* A linear layer's input delta dx (from 0.0f; per output element in (oy, ox, co) order, per
 * tap: dx += d W; zero deltas skipped) with the weights before this sample's update. */
static void tol_stage_dx16_(const tol_stage_layer_t *l, const tol_stage_wv_t *w, const float *d, float *dx)
{
    memset(dx, 0, (size_t)tol_stage_in_size_(l) * sizeof(float));
    if (l->kind == TOL_STAGE_DENSE) {
        const uint32_t n = tol_stage_in_size_(l);
        for (uint32_t o = 0; o < l->out_c; o++) {
            if (d[o] == 0.0f) continue;
            for (uint32_t i = 0; i < n; i++) dx[i] += d[o] * tol_stage_wv_(w, (size_t)o * n + i);
        }
        return;
    }
    const tol_stage_conv_t cv = tol_stage_conv_(l);
    for (uint32_t oy = 0; oy < l->out_h; oy++) {
        tol_stage_win_t win;
        tol_stage_win_row_(l, oy, &win);
        for (uint32_t ox = 0; ox < l->out_w; ox++) {
            tol_stage_win_col_(l, ox, &win);
            for (uint32_t co = 0; co < cv.cout; co++) {
                const float dv = d[((size_t)oy * l->out_w + ox) * cv.cout + co];
                if (dv == 0.0f) continue;
                for (uint32_t ky = win.ky0; ky < win.ky1; ky++) {
                    for (uint32_t kx = win.kx0; kx < win.kx1; kx++) {
                        const size_t xi = ((size_t)(win.iy0 + ky - win.ky0) * l->in_w + (win.ix0 + kx - win.kx0)) * cv.cin;
                        if (cv.dw) {
                            dx[xi + co / cv.mult] += dv * tol_stage_wv_(w, tol_stage_widx_(l, co, ky, kx, 0u));
                        } else {
                            for (uint32_t ci = 0; ci < cv.cin; ci++) {
                                dx[xi + ci] += dv * tol_stage_wv_(w, tol_stage_widx_(l, co, ky, kx, ci));
                            }
                        }
                    }
                }
            }
        }
    }
}

/* lowbias32 (an integer hash: every output bit depends on every input bit). */
static uint32_t tol_stage_hash32_(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* One int16 parameter's update from its gradient g (w: its value, decay: add wd w; with
 * wd = 0 the sum is g itself, w being finite), key: its hash input. The step in int16 units,
 * delta = -(lr g) 2^-e, is rounded stochastically on its own (so that its fraction keeps its
 * precision whatever q is): r = floor(delta + u); q + r clamped. delta == 0 leaves q as it is
 * (floor(u) = 0: the hash is not needed); a NaN delta too. */
static int16_t tol_stage_q_step_(int16_t q, float g, float w, int decay, float wd, float lr, float inv,
                                 uint32_t key)
{
    if (decay && wd != 0.0f) g = g + wd * w;
    const float delta = -((lr * g) * inv);
    if (delta == 0.0f || !(delta == delta)) return q;
    const float v = delta + (float)(tol_stage_hash32_(key) >> 8) * 0x1p-24f;
    if (v >= 65535.0f) return (int16_t)TOL_STAGE_Q_MAX;
    if (v <= -65535.0f) return (int16_t)-TOL_STAGE_Q_MAX;
    int32_t r = (int32_t)v; /* toward zero, then down: floor */
    if ((float)r > v) r--;
    int32_t n = (int32_t)q + r;
    if (n > (int32_t)TOL_STAGE_Q_MAX) n = (int32_t)TOL_STAGE_Q_MAX;
    if (n < -(int32_t)TOL_STAGE_Q_MAX) n = -(int32_t)TOL_STAGE_Q_MAX;
    return (int16_t)n;
}

/* Layer l's trained parameters (q[toff ..]) updated from this sample: x its input, d its
 * output delta; each gradient from 0.0f over the output positions in (oy, ox) order. */
static void tol_stage_update16_(tol_stage_t *S, const tol_stage_layer_t *l, const tol_stage_wv_t *w,
                                const float *x, const float *d, uint32_t toff, float lr, uint32_t base)
{
    const float wd = S->set.weight_decay;
    const uint32_t nw = l->train == (uint8_t)TOL_STAGE_TRAIN_ALL ? tol_stage_n_weights_(l) : 0u;
    const float winv = tol_stage_pow2_((int8_t)-l->wq), binv = tol_stage_pow2_((int8_t)-l->bq);
    int16_t *qw = &S->q[toff], *qb = &S->q[toff + nw];
    if (l->kind == TOL_STAGE_DENSE) {
        const uint32_t n = tol_stage_in_size_(l);
        for (uint32_t o = 0; o < l->out_c && nw > 0u; o++) {
            if (d[o] == 0.0f && wd == 0.0f) continue; /* every step of the row is 0: q stays */
            for (uint32_t i = 0; i < n; i++) {
                const size_t k = (size_t)o * n + i;
                float g = 0.0f;
                g += d[o] * x[i];
                qw[k] = tol_stage_q_step_(qw[k], g, tol_stage_wv_(w, k), 1, wd, lr, winv,
                                          base + toff + (uint32_t)k);
            }
        }
        for (uint32_t o = 0; o < l->out_c; o++) {
            float g = 0.0f;
            g += d[o];
            qb[o] = tol_stage_q_step_(qb[o], g, 0.0f, 0, wd, lr, binv,
                                      base + toff + nw + o);
        }
        return;
    }
    const tol_stage_conv_t cv = tol_stage_conv_(l);
    const uint32_t nci = cv.dw ? 1u : cv.cin;
    for (uint32_t co = 0; co < cv.cout && nw > 0u; co++) {
        for (uint32_t ky = 0; ky < l->kh; ky++) {
            for (uint32_t kx = 0; kx < l->kw; kx++) {
                for (uint32_t c = 0; c < nci; c++) {
                    const uint32_t ci = cv.dw ? co / cv.mult : c;
                    const size_t k = tol_stage_widx_(l, co, ky, kx, ci);
                    float g = 0.0f;
                    for (uint32_t oy = 0; oy < l->out_h; oy++) {
                        const int32_t iy = (int32_t)(oy * l->sh + ky) - (int32_t)l->pt;
                        if (iy < 0 || iy >= (int32_t)l->in_h) continue;
                        for (uint32_t ox = 0; ox < l->out_w; ox++) {
                            const int32_t ix = (int32_t)(ox * l->sw + kx) - (int32_t)l->pl;
                            if (ix < 0 || ix >= (int32_t)l->in_w) continue;
                            g += d[((size_t)oy * l->out_w + ox) * cv.cout + co] *
                                 x[((size_t)iy * l->in_w + (uint32_t)ix) * cv.cin + ci];
                        }
                    }
                    qw[k] = tol_stage_q_step_(qw[k], g, tol_stage_wv_(w, k), 1, wd, lr, winv,
                                              base + toff + (uint32_t)k);
                }
            }
        }
    }
    const uint32_t np = (uint32_t)l->out_h * l->out_w;
    for (uint32_t co = 0; co < cv.cout; co++) {
        float g = 0.0f;
        for (uint32_t p = 0; p < np; p++) g += d[(size_t)p * cv.cout + co];
        qb[co] = tol_stage_q_step_(qb[co], g, 0.0f, 0, wd, lr, binv, base + toff + nw + co);
    }
}

/* The learning rate of layer i: lr, or lr * stage_lr_scale below the classifier. */
static float tol_stage_lr_(const tol_stage_t *S, uint8_t i)
{
    const float sc = S->cfg.stage_lr_scale;
    return (i + 1u < S->cfg.n_layers && sc > 0.0f) ? S->set.lr * sc : S->set.lr;
}

/* Forward x (float[latent]) through every layer; the logits end in the last
 * layer's slot of acts. Returns them. */
static float *tol_stage_forward_(tol_stage_t *S, const float *x)
{
    const float *in = x;
    uint32_t poff = 0, toff = 0;
    float *out = S->acts;
    for (uint8_t i = 0; i < S->cfg.n_layers; i++) {
        const tol_stage_layer_t *l = &S->cfg.layers[i];
        if (S->q != NULL) {
            tol_stage_wv_t wv, bv;
            tol_stage_wbq_(S, l, &poff, &toff, &wv, &bv);
            if (tol_stage_linear_(l)) {
                tol_stage_forward16_(l, &wv, &bv, in, out);
            } else {
                tol_stage_layer_forward_(l, NULL, NULL, in, out);
            }
            in = out;
            out += tol_stage_out_size_(l);
            continue;
        }
        const float *w, *b;
        tol_stage_wb_(S, l, &poff, &toff, &w, &b);
        tol_stage_layer_forward_(l, w, b, in, out);
        in = out;
        out += tol_stage_out_size_(l);
    }
    return (float *)(uintptr_t)in;
}

/* probs <- softmax(z) over the active rows (tol_head_softmax's order). */
static void tol_stage_softmax_(tol_stage_t *S, const float *z)
{
    float zmax = -INFINITY;
    for (uint16_t r = 0; r < S->rows; r++) {
        if (S->active[r] && z[r] > zmax) zmax = z[r];
    }
    float sum = 0.0f;
    for (uint16_t r = 0; r < S->rows; r++) {
        if (S->active[r]) {
            S->probs[r] = tol_head_expf(z[r] - zmax);
            sum += S->probs[r];
        } else {
            S->probs[r] = 0.0f;
        }
    }
    for (uint16_t r = 0; r < S->rows; r++) {
        if (S->active[r]) S->probs[r] = S->probs[r] / sum;
    }
}

/* One sample's cross-entropy gradient (weight w) added into S->grads. */
static void tol_stage_grad_add_(tol_stage_t *S, const float *x, uint16_t label, float weight)
{
    const uint8_t n = S->cfg.n_layers;
    const float *z = tol_stage_forward_(S, x);
    tol_stage_softmax_(S, z);
    float *d = S->delta[0];
    for (uint16_t r = 0; r < S->rows; r++) {
        const float t = (r == label) ? 1.0f : 0.0f;
        d[r] = S->active[r] ? (S->probs[r] - t) * weight : 0.0f;
    }
    /* each layer's weights and biases (trained or exported), its trained offset, its
     * output's offset; backward ends at the first layer that trains (sparse update) */
    const float *ws[TOL_STAGE_MAX_LAYERS], *bs[TOL_STAGE_MAX_LAYERS];
    uint32_t toffs[TOL_STAGE_MAX_LAYERS];
    uint32_t poff = 0, toff = 0;
    uint8_t first = (uint8_t)(n - 1u);
    size_t aoff = 0;
    for (uint8_t i = 0; i < n; i++) {
        const tol_stage_layer_t *l = &S->cfg.layers[i];
        toffs[i] = toff;
        if (tol_stage_layer_trained(l) > 0u && i < first) first = i;
        tol_stage_wb_(S, l, &poff, &toff, &ws[i], &bs[i]);
        aoff += tol_stage_out_size_(l);
    }
    int cur = 0;
    for (uint8_t i = n; i-- > first;) {
        const tol_stage_layer_t *l = &S->cfg.layers[i];
        aoff -= tol_stage_out_size_(l);
        const float *y = &S->acts[aoff];
        const float *in = i > 0u ? &S->acts[aoff - tol_stage_in_size_(l)] : x;
        tol_stage_act_backward_(l->act, y, S->delta[cur], tol_stage_out_size_(l));
        float *dx = i > first ? S->delta[1 - cur] : NULL;
        float *g = &S->grads[toffs[i]];
        const int all = l->train == (uint8_t)TOL_STAGE_TRAIN_ALL;
        float *gw = all ? g : NULL;
        float *gb = !tol_stage_linear_(l) || l->train == (uint8_t)TOL_STAGE_TRAIN_FROZEN
                        ? NULL
                        : (all ? g + tol_stage_n_weights_(l) : g);
        tol_stage_layer_backward_(l, ws[i], in, S->delta[cur], gw, gb, dx);
        cur = 1 - cur;
    }
}

/* An int16 stage: one sample's gradient (weight w, place j in its batch) applied at once,
 * layer after layer from the last (tol_stage.h "Lean trained weights"). */
static void tol_stage_learn_q16_(tol_stage_t *S, const float *x, uint16_t label, float weight, uint32_t j)
{
    const uint8_t n = S->cfg.n_layers;
    const float *z = tol_stage_forward_(S, x);
    tol_stage_softmax_(S, z);
    float *d = S->delta[0];
    for (uint16_t r = 0; r < S->rows; r++) {
        const float t = (r == label) ? 1.0f : 0.0f;
        d[r] = S->active[r] ? (S->probs[r] - t) * weight : 0.0f;
    }
    tol_stage_wv_t ws[TOL_STAGE_MAX_LAYERS], bs[TOL_STAGE_MAX_LAYERS];
    uint32_t toffs[TOL_STAGE_MAX_LAYERS];
    uint32_t poff = 0, toff = 0;
    uint8_t first = (uint8_t)(n - 1u);
    size_t aoff = 0;
    for (uint8_t i = 0; i < n; i++) {
        const tol_stage_layer_t *l = &S->cfg.layers[i];
        toffs[i] = toff;
        if (tol_stage_layer_trained(l) > 0u && i < first) first = i;
        tol_stage_wbq_(S, l, &poff, &toff, &ws[i], &bs[i]);
        aoff += tol_stage_out_size_(l);
    }
    const uint32_t base = tol_stage_hash32_(S->cfg.seed + 0x9E3779B9u * ((S->updates << 10) + j));
    int cur = 0;
    for (uint8_t i = n; i-- > first;) {
        const tol_stage_layer_t *l = &S->cfg.layers[i];
        aoff -= tol_stage_out_size_(l);
        const float *y = &S->acts[aoff];
        const float *in = i > 0u ? &S->acts[aoff - tol_stage_in_size_(l)] : x;
        tol_stage_act_backward_(l->act, y, S->delta[cur], tol_stage_out_size_(l));
        float *dx = i > first ? S->delta[1 - cur] : NULL;
        if (tol_stage_linear_(l)) {
            if (dx != NULL) tol_stage_dx16_(l, &ws[i], S->delta[cur], dx);
            if (tol_stage_layer_trained(l) > 0u) {
                tol_stage_update16_(S, l, &ws[i], in, S->delta[cur], toffs[i], tol_stage_lr_(S, i), base);
            }
        } else {
            tol_stage_layer_backward_(l, NULL, in, S->delta[cur], NULL, NULL, dx);
        }
        cur = 1 - cur;
    }
}

/* The SGD update of params [0, n): g (+ wd W if decay) -> v (+ mu v_old with momentum
 * buffers) -> W - lr v, in the order of tol_stage.h (the tol_fmac.h blocks compute exactly
 * that). Returns chk + 0 * every new value: NaN if any is not finite. A non-finite v always
 * makes the new weight non-finite (W - lr v with W finite), so checking the new weights is
 * the reference's check of v and W. commit: store v and W. */
static float tol_stage_sgd_(float *w, float *v, const float *g, uint32_t n, float lr, float mu,
                            float wd, int decay, float chk, int commit)
{
    uint32_t k = 0;
    if (decay && n >= 8u) {
        const uint32_t n8 = n >> 3;
        chk = v != NULL ? tol_fmac_sgd8_vw_(w, v, g, n8, lr, mu, wd, chk, commit)
                        : tol_fmac_sgd8_(w, g, n8, lr, wd, chk, commit);
        k = 8u * n8;
    }
    for (; k < n; k++) {
        chk = tol_fmac_sgd1_(&w[k], v != NULL ? &v[k] : NULL, g[k], lr, mu, wd, decay, chk, commit);
    }
    return chk;
}

static tol_status_t tol_stage_step_(tol_stage_t *S)
{
    const float mu = S->set.momentum, wd = S->set.weight_decay;
    const float clip = S->set.clip_norm;
    if (clip > 0.0f) {
        const float norm = sqrtf(tol_stage_dot_(0.0f, S->grads, S->grads, S->n_params));
        if (!isfinite(norm)) return TOL_ERR_DIVERGED;
        if (norm > clip) {
            /* scale once in place (the gradient buffer is scratch until the next update) */
            const float sc = clip / norm;
            for (uint32_t k = 0; k < S->n_params; k++) S->grads[k] = S->grads[k] * sc;
        }
    }
    /* pass 0 checks every new value, pass 1 commits them all */
    for (int commit = 0; commit < 2; commit++) {
        float chk = 0.0f;
        uint32_t off = 0;
        for (uint8_t i = 0; i < S->cfg.n_layers; i++) {
            const tol_stage_layer_t *l = &S->cfg.layers[i];
            const uint32_t np = tol_stage_layer_trained(l);
            /* the trained weights (decayed) then biases */
            const uint32_t nw = l->train == (uint8_t)TOL_STAGE_TRAIN_ALL ? tol_stage_n_weights_(l) : 0u;
            float *mom = S->mom != NULL ? &S->mom[off] : NULL;
            const float lri = tol_stage_lr_(S, i);
            chk = tol_stage_sgd_(&S->params[off], mom, &S->grads[off], nw, lri, mu, wd, 1, chk, commit);
            chk = tol_stage_sgd_(&S->params[off + nw], mom != NULL ? mom + nw : NULL, &S->grads[off + nw],
                                 np - nw, lri, mu, wd, 0, chk, commit);
            off += np;
        }
        if (!commit && !isfinite(chk)) return TOL_ERR_DIVERGED;
    }
    return TOL_OK;
}

/* ---- learner calls ---------------------------------------------------------------------- */

static void tol_stage_dequantize_(const tol_stage_t *S, const int8_t *q, float *x)
{
    tol_learner_dequantize(q, S->latent, S->cfg.latent_scale, S->cfg.latent_zero_point, x);
}

tol_status_t tol_stage_predict_f(tol_stage_t *S, const float *latent, int32_t *label,
                                 float *confidence)
{
    TOL_CHECK(latent != NULL, TOL_ERR_ARG);
    TOL_CHECK(tol_learner_finite(latent, S->latent), TOL_ERR_NONFINITE);
    S->push_fill = 0; /* the forward pass overwrites the staging buffers */
    int32_t best = -1;
    float conf = 0.0f;
    const float *z = tol_stage_forward_(S, latent);
    for (uint16_t r = 0; r < S->rows; r++) {
        if (S->active[r] && (best < 0 || z[r] > z[best])) best = (int32_t)r;
    }
    if (best >= 0) {
        tol_stage_softmax_(S, z);
        conf = S->probs[best];
    } else {
        memset(S->probs, 0, (size_t)S->rows * sizeof(float));
    }
    if (label != NULL) *label = best;
    if (confidence != NULL) *confidence = conf;
    return TOL_OK;
}

tol_status_t tol_stage_predict(tol_stage_t *S, const int8_t *latent, int32_t *label,
                               float *confidence)
{
    TOL_CHECK(latent != NULL, TOL_ERR_ARG);
    tol_stage_dequantize_(S, latent, S->x);
    return tol_stage_predict_f(S, S->x, label, confidence);
}

static tol_status_t tol_stage_update_(tol_stage_t *S)
{
    const int replay = S->set.mode == (uint8_t)TOL_LEARN_REPLAY && S->cfg.replay_capacity > 0u;
    const uint16_t n_old = (replay && S->replay.fill > 0u) ? S->set.n_old : 0u;
    const float weight = 1.0f / (float)(S->n_pending + n_old);
    if (S->q != NULL) { /* an int16 stage: every sample updates at once, nothing is rejected */
        for (uint16_t i = 0; i < S->n_pending; i++) {
            tol_stage_learn_q16_(S, &S->queue[(size_t)i * S->latent], S->pending_labels[i], weight, i);
        }
        for (uint16_t r = 0; r < n_old; r++) {
            uint16_t y;
            tol_replay_get(&S->replay, tol_replay_draw(&S->replay), S->x, &y);
            tol_stage_activate_(S, y);
            tol_stage_learn_q16_(S, S->x, y, weight, (uint32_t)S->n_pending + r);
        }
        S->updates++;
        if (replay) TOL_TRY(tol_replay_add_batch(&S->replay, S->queue, S->pending_labels, S->n_pending));
        return TOL_OK;
    }
    memset(S->grads, 0, (size_t)S->n_params * sizeof(float));
    for (uint16_t i = 0; i < S->n_pending; i++) {
        tol_stage_grad_add_(S, &S->queue[(size_t)i * S->latent], S->pending_labels[i], weight);
    }
    for (uint16_t r = 0; r < n_old; r++) {
        uint16_t y;
        tol_replay_get(&S->replay, tol_replay_draw(&S->replay), S->x, &y);
        tol_stage_activate_(S, y);
        tol_stage_grad_add_(S, S->x, y, weight);
    }
    const tol_status_t s = tol_stage_step_(S);
    if (s != TOL_OK) {
        S->rejected++;
        return s;
    }
    S->updates++;
    if (replay) TOL_TRY(tol_replay_add_batch(&S->replay, S->queue, S->pending_labels, S->n_pending));
    return TOL_OK;
}

tol_status_t tol_stage_learn_f(tol_stage_t *S, const float *latent, uint16_t label)
{
    TOL_CHECK(latent != NULL, TOL_ERR_ARG);
    TOL_CHECK(label < S->rows, TOL_ERR_LABEL);
    TOL_CHECK(tol_learner_finite(latent, S->latent), TOL_ERR_NONFINITE);
    if (S->set.mode == (uint8_t)TOL_LEARN_FROZEN) return TOL_OK;
    S->push_fill = 0;
    const int newly = S->active[label] ? 0 : 1;
    const uint8_t rehearsed = S->rehearsed;
    tol_stage_activate_(S, label);
    float *slot = &S->queue[(size_t)S->n_pending * S->latent];
    if (latent != slot) memmove(slot, latent, (size_t)S->latent * sizeof(float));
    S->pending_labels[S->n_pending] = label;
    S->n_pending++;
    S->samples_seen++;
    S->class_count[label]++;
    S->rehearsed = 0; /* a new idle period begins after this sample */
    if (S->n_pending < S->set.n_new) return TOL_OK;
    const tol_status_t s = tol_stage_update_(S);
    S->n_pending = 0;
    if (s == TOL_ERR_DIVERGED) {
        /* the sample that met a diverged step counts nowhere (issue 34): not in samples_seen,
         * not in its class, no new idle period; its row is inactive again if it was new */
        S->samples_seen--;
        S->class_count[label]--;
        S->rehearsed = rehearsed;
        if (newly) {
            S->active[label] = 0u;
            S->n_active--;
        }
    }
    return s;
}

tol_status_t tol_stage_learn(tol_stage_t *S, const int8_t *latent, uint16_t label)
{
    TOL_CHECK(latent != NULL, TOL_ERR_ARG);
    TOL_CHECK(label < S->rows, TOL_ERR_LABEL);
    if (S->set.mode == (uint8_t)TOL_LEARN_FROZEN) return TOL_OK;
    float *slot = &S->queue[(size_t)S->n_pending * S->latent];
    tol_stage_dequantize_(S, latent, slot);
    return tol_stage_learn_f(S, slot, label);
}

/* ---- the calls with their result (tol_online.h's tol_learn_result_t) ----------------- */

static void tol_stage_result_counters_(const tol_stage_t *S, tol_learn_result_t *r)
{
    r->samples_seen = S->samples_seen;
    r->updates = S->updates;
    r->n_active = S->n_active;
}

tol_status_t tol_stage_predict_result(tol_stage_t *S, const int8_t *latent, tol_learn_result_t *r)
{
    memset(r, 0, sizeof(*r));
    r->prediction = -1;
    TOL_TRY(tol_stage_predict(S, latent, &r->prediction, &r->probability));
    tol_stage_result_counters_(S, r);
    return TOL_OK;
}

tol_status_t tol_stage_learn_result(tol_stage_t *S, const int8_t *latent, uint16_t label,
                                    tol_learn_result_t *r)
{
    /* the probabilities of the last predict (on this latent) */
    r->label_probability = label < S->rows && S->active[label] ? S->probs[label] : 0.0f;
    const uint32_t seen = S->samples_seen;
    const uint16_t active = S->n_active;
    const tol_status_t st = tol_stage_learn(S, latent, label);
    r->learned = S->samples_seen != seen; /* counted once it passed the checks; a diverged one is not */
    r->new_class = S->n_active > active;  /* a diverged step deactivated the label's new row */
    tol_stage_result_counters_(S, r);
    return st;
}

tol_status_t tol_stage_rehearse(tol_stage_t *S)
{
    TOL_CHECK(S->push_fill == 0u, TOL_ERR_BUSY); /* the staged image lives in grads */
    const uint16_t n_old = S->set.n_old;
    TOL_CHECK(S->rehearsed < S->set.rehearse && S->set.mode == (uint8_t)TOL_LEARN_REPLAY &&
                  S->cfg.replay_capacity > 0u && S->replay.fill > 0u && n_old > 0u,
              TOL_ERR_UNSUPPORTED);
    S->rehearsed++;
    const float weight = 1.0f / (float)n_old;
    if (S->q != NULL) {
        for (uint16_t r = 0; r < n_old; r++) {
            uint16_t y;
            tol_replay_get(&S->replay, tol_replay_draw(&S->replay), S->x, &y);
            tol_stage_activate_(S, y);
            tol_stage_learn_q16_(S, S->x, y, weight, r);
        }
        S->updates++;
        return TOL_OK;
    }
    memset(S->grads, 0, (size_t)S->n_params * sizeof(float));
    for (uint16_t r = 0; r < n_old; r++) {
        uint16_t y;
        tol_replay_get(&S->replay, tol_replay_draw(&S->replay), S->x, &y);
        tol_stage_activate_(S, y);
        tol_stage_grad_add_(S, S->x, y, weight);
    }
    if (tol_stage_step_(S) == TOL_OK) {
        S->updates++;
    } else {
        S->rejected++;
    }
    return TOL_OK;
}

tol_status_t tol_stage_replay_add_f(tol_stage_t *S, const float *latent, uint16_t label)
{
    TOL_CHECK(latent != NULL, TOL_ERR_ARG);
    TOL_CHECK(S->cfg.replay_capacity > 0u, TOL_ERR_UNSUPPORTED);
    TOL_CHECK(label < S->rows, TOL_ERR_LABEL);
    TOL_CHECK(tol_learner_finite(latent, S->latent), TOL_ERR_NONFINITE);
    return tol_replay_add_batch(&S->replay, latent, &label, 1);
}

tol_status_t tol_stage_replay_add(tol_stage_t *S, const int8_t *latent, uint16_t label)
{
    TOL_CHECK(latent != NULL, TOL_ERR_ARG);
    tol_stage_dequantize_(S, latent, S->x);
    return tol_stage_replay_add_f(S, S->x, label);
}

void tol_stage_get_stats(const tol_stage_t *S, tol_learner_stats_t *st)
{
    memset(st, 0, sizeof(*st));
    st->samples_seen = S->samples_seen;
    st->updates = S->updates;
    st->rejected = S->rejected;
    st->n_active = S->n_active;
    st->n_outputs = S->rows;
    st->replay_fill = S->cfg.replay_capacity > 0u ? S->replay.fill : 0u;
    st->replay_capacity = S->cfg.replay_capacity;
    st->class_count = S->class_count;
    st->threshold = INFINITY;
    st->replay_count = S->cfg.replay_capacity > 0u ? S->replay.count : NULL;
}

/* ---- persistence ------------------------------------------------------------------------- */

#define TOL_STAGE_STATE_MAGIC 0x31475453u /* "STG1" */

/* Where the header keeps the counters (40), the queue length (38) and the replay buffer's
 * fill and counters (56, 60, 64). */
static const tol_state_layout_t tol_stage_layout_ = {40u, 38u, 56u};

uint32_t tol_stage_hash(const tol_stage_layer_t *layers, uint8_t n_layers)
{
    uint32_t h = 2166136261u;
    for (uint8_t i = 0; i < n_layers; i++) {
        const tol_stage_layer_t *l = &layers[i];
        const uint32_t f[17] = {l->kind, l->act, l->kh, l->kw, l->sh, l->sw, l->pt, l->pl,
                                l->in_h, l->in_w, l->in_c, l->out_h, l->out_w, l->out_c, l->train,
                                (uint32_t)(int32_t)l->wq, (uint32_t)(int32_t)l->bq};
        const int nf = (l->wq != 0 || l->bq != 0) ? 17 : (l->train != 0u ? 15 : 14);
        for (int k = 0; k < nf; k++) {
            for (int b = 0; b < 4; b++) {
                h ^= (uint8_t)(f[k] >> (8 * b));
                h *= 16777619u;
            }
        }
    }
    return h;
}

static uint8_t tol_stage_parts_(const tol_stage_t *S, uint8_t parts)
{
    return tol_state_parts(parts, S->cfg.replay_capacity, S->mom != NULL);
}

/* Header: 0 magic, 4 parts, 5 replay_bits, 6 replay_policy (the setting in use; the config's
 * in states saved before it was a setting), 7 n_layers, 8 layer hash,
 * 12 n_params, 16 lr, 20 momentum, 24 weight_decay, 28 clip_norm, 32 n_new:u16,
 * 34 n_old:u16, 36 mode, 37 rehearse (0 before idle rehearsal), 38 n_pending:u16, 40 prng, 44 samples_seen, 48 updates,
 * 52 rejected, 56 replay fill:u16, 58 replay capacity:u16, 60 replay seen,
 * 64 replay batches, 68 max_new:u16, 70 rows:u16 */
static void tol_stage_header_(const tol_stage_t *S, uint8_t parts, uint8_t *p)
{
    const tol_stage_config_t *c = &S->cfg;
    memset(p, 0, TOL_STAGE_STATE_HEADER);
    tol_segs_put32(p, TOL_STAGE_STATE_MAGIC);
    p[4] = parts;
    p[5] = c->replay_bits;
    p[6] = S->set.replay_policy;
    p[7] = c->n_layers;
    tol_segs_put32(p + 8, tol_stage_hash(c->layers, c->n_layers));
    tol_segs_put32(p + 12, S->n_params);
    tol_learner_settings_pack(&S->set, p + 16);
    p[37] = S->set.rehearse;
    tol_state_put_core(p, &tol_stage_layout_, S->prng.state, S->samples_seen, S->updates, S->rejected,
                       S->n_pending, (parts & TOL_STATE_REPLAY) ? &S->replay : NULL);
    tol_segs_put16(p + 58, c->replay_capacity);
    tol_segs_put16(p + 68, c->max_new);
    tol_segs_put16(p + 70, S->rows);
}

void tol_stage_state_stream(const tol_stage_t *S, uint8_t parts, uint8_t *hdr, tol_state_t *s)
{
    parts = tol_stage_parts_(S, parts);
    if (hdr != NULL) tol_stage_header_(S, parts, hdr);
    tol_state_init(s, hdr, TOL_STAGE_STATE_HEADER);
    if (S->q != NULL) {
        tol_state_add(s, S->q, 2u * S->n_params);
    } else {
        tol_state_add(s, S->params, 4u * S->n_params);
    }
    tol_state_add(s, S->active, S->rows);
    tol_state_add(s, S->class_count, 4u * S->rows);
    tol_state_add_queue(s, S->queue, S->latent, S->n_pending, S->pending_labels);
    if (parts & TOL_STATE_MOMENTUM) tol_state_add(s, S->mom, 4u * S->n_params);
    tol_state_add_replay(s, parts, &S->replay);
}

tol_status_t tol_stage_state_begin(tol_stage_t *S, const uint8_t *header, uint32_t n,
                                   uint8_t *parts, uint32_t *total)
{
    TOL_CHECK(header != NULL && n >= TOL_STAGE_STATE_HEADER, TOL_ERR_ARG);
    const uint8_t *p = header;
    const tol_stage_config_t *c = &S->cfg;
    TOL_CHECK(tol_segs_get32(p) == TOL_STAGE_STATE_MAGIC, TOL_ERR_MODEL);
    TOL_CHECK(p[5] == c->replay_bits && p[7] == c->n_layers &&
                  tol_segs_get32(p + 8) == tol_stage_hash(c->layers, c->n_layers) &&
                  tol_segs_get32(p + 12) == S->n_params &&
                  tol_segs_get16(p + 58) == c->replay_capacity &&
                  tol_segs_get16(p + 68) == c->max_new && tol_segs_get16(p + 70) == S->rows,
              TOL_ERR_MODEL);
    const uint8_t pt = p[4];
    TOL_CHECK(pt == tol_stage_parts_(S, pt), TOL_ERR_MODEL);
    tol_learner_settings_t s = S->set;
    tol_learner_settings_unpack(p + 16, &s);
    s.rehearse = p[37];
    s.replay_policy = p[6];
    TOL_TRY(tol_stage_check_settings_(c, &s));
    TOL_TRY(tol_state_check_core(p, &tol_stage_layout_, s.n_new, c->replay_capacity));
    /* checked: apply */
    S->set = s;
    S->rehearsed = 0;
    tol_state_get_core(p, &tol_stage_layout_, pt, &S->prng.state, &S->samples_seen, &S->updates, &S->rejected,
                       &S->n_pending, c->replay_capacity > 0u ? &S->replay : NULL);
    if (c->replay_capacity > 0u) S->replay.policy = s.replay_policy;
    if (!(pt & TOL_STATE_MOMENTUM) && S->mom != NULL) {
        memset(S->mom, 0, (size_t)S->n_params * sizeof(float));
    }
    *parts = pt;
    tol_state_t st;
    tol_stage_state_stream(S, pt, NULL, &st);
    *total = tol_state_bytes(&st);
    return TOL_OK;
}

static tol_status_t tol_stage_state_check_(tol_stage_t *S, uint8_t parts)
{
    if (S->q != NULL) {
        for (uint32_t k = 0; k < S->n_params; k++) TOL_CHECK(S->q[k] >= -TOL_STAGE_Q_MAX, TOL_ERR_RANGE);
    } else {
        TOL_CHECK(tol_learner_finite(S->params, S->n_params), TOL_ERR_RANGE);
    }
    TOL_CHECK(S->mom == NULL || tol_learner_finite(S->mom, S->n_params), TOL_ERR_RANGE);
    uint16_t active = 0;
    for (uint16_t r = 0; r < S->rows; r++) {
        TOL_CHECK(S->active[r] <= 1u, TOL_ERR_RANGE);
        active = (uint16_t)(active + S->active[r]);
    }
    S->n_active = active;
    return tol_state_check_queue(S->queue, S->latent, S->n_pending, S->pending_labels, S->rows, parts,
                                 &S->replay);
}

tol_status_t tol_stage_state_end(tol_stage_t *S, uint8_t parts)
{
    const tol_status_t s = tol_stage_state_check_(S, tol_stage_parts_(S, parts));
    if (s != TOL_OK) tol_stage_reset(S);
    return s;
}

/* ---- the stage image ------------------------------------------------------------------ */

uint32_t tol_stage_image_bytes(const tol_stage_t *S)
{
    if (S->q != NULL) return 0u; /* an int16 stage has no image (tol_stage.h) */
    return 4u * S->n_params + S->rows;
}

/* The image as two segments: parameters (float32) then the active flags. */
static void tol_stage_image_segs_(const tol_stage_t *S, float *params, uint8_t *flags, tol_seg_t *seg)
{
    seg[0] = (tol_seg_t){(uint8_t *)(void *)params, 4u * S->n_params};
    seg[1] = (tol_seg_t){flags, S->rows};
}

tol_status_t tol_stage_image_read(const tol_stage_t *S, uint32_t offset, uint8_t *dst, uint32_t n)
{
    TOL_CHECK(S->q == NULL, TOL_ERR_UNSUPPORTED);
    const uint32_t total = tol_stage_image_bytes(S);
    TOL_CHECK(offset <= total && n <= total - offset, TOL_ERR_RANGE);
    TOL_CHECK(n == 0u || dst != NULL, TOL_ERR_ARG);
    tol_seg_t seg[2];
    tol_stage_image_segs_(S, S->params, S->active, seg);
    tol_segs_read(NULL, 0u, seg, 2u, offset, dst, n);
    return TOL_OK;
}

tol_status_t tol_stage_push_write(tol_stage_t *S, uint32_t offset, const uint8_t *src, uint32_t n)
{
    TOL_CHECK(S->q == NULL, TOL_ERR_UNSUPPORTED);
    const uint32_t total = tol_stage_image_bytes(S);
    TOL_CHECK(n == 0u || src != NULL, TOL_ERR_ARG);
    TOL_CHECK(offset == 0u || offset == S->push_fill, TOL_ERR_RANGE);
    TOL_CHECK(n <= total - offset, TOL_ERR_RANGE);
    tol_seg_t seg[2];
    tol_stage_image_segs_(S, S->grads, (uint8_t *)(void *)S->delta[0], seg);
    tol_segs_write(seg, 2u, 0u, offset, src, n);
    S->push_fill = offset + n;
    return TOL_OK;
}

tol_status_t tol_stage_push_commit(tol_stage_t *S)
{
    TOL_CHECK(S->q == NULL, TOL_ERR_UNSUPPORTED);
    TOL_CHECK(S->push_fill == tol_stage_image_bytes(S), TOL_ERR_RANGE);
    const uint8_t *flags = (const uint8_t *)(const void *)S->delta[0];
    uint16_t active = 0;
    for (uint16_t r = 0; r < S->rows; r++) {
        TOL_CHECK(flags[r] <= 1u, TOL_ERR_RANGE);
        active = (uint16_t)(active + flags[r]);
    }
    TOL_CHECK(tol_learner_finite(S->grads, S->n_params), TOL_ERR_NONFINITE);
    memcpy(S->params, S->grads, (size_t)S->n_params * sizeof(float));
    memcpy(S->active, flags, S->rows);
    S->n_active = active;
    if (S->mom != NULL) memset(S->mom, 0, (size_t)S->n_params * sizeof(float));
    S->n_pending = 0;
    S->push_fill = 0;
    return TOL_OK;
}
