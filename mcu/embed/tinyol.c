/* tinyol.c - what every firmware on tinyol.h shares, whichever learner it links
 * (the head: tinyol_head.c; the adaptive stage: tinyol_stage.c): the model's consistency
 * checks, the learner settings of the export, the input rounding and the parts a save
 * writes. See tinyol.h. */
#include "tinyol.h"

#include <math.h>

#include "backbone.h"

_Static_assert(TOL_BACKBONE_INPUT_SIZE == TOL_INPUT_SIZE, "backbone.h and config.h disagree on the input");
_Static_assert(TOL_BACKBONE_LATENT_SIZE == TOL_LATENT_DIM, "backbone.h and config.h disagree on the latent");
_Static_assert(TOL_HEAD_MODE == 0 || TOL_HEAD_OUT_DIM == TOL_INPUT_SIZE,
               "autoencoder head must reconstruct the model input");
_Static_assert(TOL_REPLAY_POLICY <= 2, "replay policy: 0 reservoir, 1 class-balanced, 2 AR1");
_Static_assert(TOL_REHEARSE <= 255u, "rehearsal steps per idle period: 0..255");

void tinyol_settings(tol_learner_settings_t *s)
{
    tol_learner_settings_default(s);
    s->lr = TOL_LR;
    s->momentum = TOL_MOMENTUM;
    s->weight_decay = TOL_WEIGHT_DECAY;
    s->n_new = (uint16_t)TOL_REPLAY_N_NEW;
    s->n_old = (uint16_t)TOL_REPLAY_N_OLD;
    s->mode = (uint8_t)(TOL_REPLAY_CAPACITY > 0 ? TOL_LEARN_REPLAY : TOL_LEARN_SGD);
    s->rehearse = (uint8_t)TOL_REHEARSE;
}

int8_t tinyol_quantize_value(float x)
{
    float v = roundf(x / TOL_INPUT_SCALE) + (float)TOL_INPUT_ZERO_POINT; /* half away from zero */
    v = v < -128.0f ? -128.0f : (v > 127.0f ? 127.0f : v);
    return (int8_t)v;
}

tol_status_t tinyol_quantize(const float *x, int8_t *q)
{
    TOL_CHECK(x != NULL && q != NULL, TOL_ERR_ARG);
    for (size_t i = 0; i < TINYOL_INPUT_SIZE; i++) TOL_CHECK(isfinite(x[i]), TOL_ERR_NONFINITE);
    for (size_t i = 0; i < TINYOL_INPUT_SIZE; i++) q[i] = tinyol_quantize_value(x[i]);
    return TOL_OK;
}

uint8_t tinyol_save_parts(float momentum, bool no_replay)
{
    uint8_t parts = (uint8_t)(no_replay ? 0u : TOL_STATE_REPLAY);
    if (momentum != 0.0f) parts |= (uint8_t)TOL_STATE_MOMENTUM;
    return parts;
}
