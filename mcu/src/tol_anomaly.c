/* tol_anomaly.c - score statistics and threshold; see tol_anomaly.h. */
#include "tol_anomaly.h"

#include <math.h>

void tol_anomaly_init(tol_anomaly_t *a, float k, float alpha, uint32_t warmup)
{
    a->k = k;
    a->alpha = alpha;
    a->warmup = warmup == 0u ? 1u : warmup;
    tol_anomaly_reset(a);
}

void tol_anomaly_reset(tol_anomaly_t *a)
{
    a->n = 0;
    a->mean = 0.0f;
    a->m2 = 0.0f;
    a->var = 0.0f;
}

int tol_anomaly_warming(const tol_anomaly_t *a)
{
    return a->n < a->warmup ? 1 : 0;
}

float tol_anomaly_threshold(const tol_anomaly_t *a)
{
    if (tol_anomaly_warming(a)) return INFINITY;
    return a->mean + a->k * sqrtf(a->var);
}

void tol_anomaly_update(tol_anomaly_t *a, float score)
{
    if (a->n < a->warmup) {
        a->n++;
        const float d = score - a->mean;
        a->mean += d / (float)a->n;
        a->m2 += d * (score - a->mean);
        a->var = a->m2 / (float)a->n;
        return;
    }
    if (a->n < UINT32_MAX) a->n++;
    const float d = score - a->mean;
    a->mean += a->alpha * d;
    a->var = (1.0f - a->alpha) * (a->var + a->alpha * d * d);
}
