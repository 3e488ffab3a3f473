/* tinyol_store.c - tinyol_save/load (see tinyol.h); kept apart from tinyol.c so a
 * firmware without persistence needs no tol_flash.h implementation. */
#include "tinyol.h"

tol_status_t tinyol_store_open(tinyol_t *t, tol_store_t *store)
{
    TOL_CHECK(t != NULL && store != NULL, TOL_ERR_ARG);
    return tol_store_init(store, (uint32_t)TOL_MODEL_HASH, (uint32_t)TINYOL_RECORD_MAX);
}

tol_status_t tinyol_save(tinyol_t *t, tol_store_t *store)
{
    TOL_CHECK(t != NULL && store != NULL, TOL_ERR_ARG);
    tol_learner_settings_t set;
    tol_learner_get_settings(&t->learner, &set);
    uint8_t parts = tinyol_save_parts(set.momentum, false);
    uint32_t bytes = 0u;
    return tol_persist_save(&t->learner, store, parts, &parts, &bytes);
}

tol_status_t tinyol_load(tinyol_t *t, tol_store_t *store)
{
    TOL_CHECK(t != NULL && store != NULL, TOL_ERR_ARG);
    tol_store_record_t rec;
    t->has_latent = false;
    return tol_persist_load(&t->learner, store, &rec);
}
