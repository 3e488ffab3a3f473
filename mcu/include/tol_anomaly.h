/*
 * tol_anomaly.h - adaptive threshold for the anomaly (autoencoder) mode.
 *
 * Tracks the mean and variance of reconstruction scores of samples judged
 * normal. During the first `warmup` scores the statistics are exact (Welford)
 * and nothing is flagged; afterwards they follow an exponential moving
 * average with factor alpha:
 *   d = s - mean;  mean += alpha * d;  var = (1 - alpha) * (var + alpha * d * d)
 * threshold = mean + k * sqrt(var). A score above the threshold is anomalous.
 */
#ifndef TOL_ANOMALY_H
#define TOL_ANOMALY_H

#include <stdint.h>

typedef struct {
    float k;         /* threshold in standard deviations (default 3) */
    float alpha;     /* EMA factor after warm-up, (0, 1] */
    uint32_t warmup; /* scores before the threshold applies (>= 1) */
    uint32_t n;      /* scores absorbed so far (saturates) */
    float mean, m2, var;
} tol_anomaly_t;

/* Set parameters and reset the statistics. warmup 0 is treated as 1. */
void tol_anomaly_init(tol_anomaly_t *a, float k, float alpha, uint32_t warmup);

/* Forget the statistics (keeps k, alpha, warmup). */
void tol_anomaly_reset(tol_anomaly_t *a);

/* 1 while fewer than warmup scores have been absorbed. */
int tol_anomaly_warming(const tol_anomaly_t *a);

/* Current threshold (+INFINITY during warm-up). */
float tol_anomaly_threshold(const tol_anomaly_t *a);

/* Absorb one score of a sample judged normal. */
void tol_anomaly_update(tol_anomaly_t *a, float score);

#endif /* TOL_ANOMALY_H */
