/* nomodel.c - model glue for a firmware without a model (see tol_model.h). */
#include "tol_model.h"

tol_status_t tol_model_init(void)
{
    return TOL_OK;
}

tol_status_t tol_model_handle(uint8_t type, const uint8_t *req, uint16_t req_len, uint8_t *reply,
                              uint16_t reply_cap, uint16_t *reply_len)
{
    (void)type, (void)req, (void)req_len, (void)reply, (void)reply_cap;
    *reply_len = 0u;
    return TOL_ERR_UNSUPPORTED;
}

uint16_t tol_model_stats(uint8_t *out, uint16_t cap)
{
    (void)out, (void)cap;
    return 0u;
}

tol_status_t tol_model_bench(uint8_t region, uint32_t *cycles)
{
    (void)region;
    *cycles = 0u;
    return TOL_ERR_UNSUPPORTED;
}

tol_store_status_t tol_model_store_status(void)
{
    tol_store_status_t none = {(uint8_t)TOL_STORE_NONE, 0u, 0u};
    return none;
}

const tol_model_if_t tol_model_glue = {tol_model_init, tol_model_handle, tol_model_stats, tol_model_bench,
                                       tol_model_store_status, NULL, NULL};
