/*
 * config.h for a firmware built without a model (the foundation's bring-up
 * build): INFO, STATS and the link work; SAMPLE/PREDICT/EMBED answer
 * TOL_ERR_UNSUPPORTED. A real model directory (models/<name>/config.h,
 * written by `tinyol export`) replaces this file on the include path.
 */
#ifndef TOL_CONFIG_H
#define TOL_CONFIG_H

#define TOL_HAS_MODEL 0
#define TOL_MODEL_NAME "none"
#define TOL_MODEL_HASH 0u
#define TOL_INPUT_SIZE 0
#define TOL_LATENT_DIM 0
#define TOL_HEAD_MODE 0
#define TOL_HEAD_MAX_CLASSES 0
#define TOL_REPLAY_BITS 0

#endif
