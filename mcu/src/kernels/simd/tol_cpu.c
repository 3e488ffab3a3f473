/* tol_cpu.c (SIMD build) - the boot self-test of every instruction the SIMD kernels and the
 * learner rely on (tol_cpu.h); a failed SSUB8/SEL switches MAX_POOL_2D to its portable path. */
#include "tol_cpu.h"

#include "../../tol_fmac.h"
#include "tol_acle.h"
/* after the helpers its checks call */
#include "../tol_cpu_run.h"

static uint32_t tol_cpu_faults_; /* the faults the kernels route around (tol_cpu_faults) */

uint32_t tol_cpu_use(uint32_t faults)
{
    tol_cpu_faults_ = faults & TOL_CPU_FALLBACK_CHECKS;
    return tol_cpu_faults_;
}

uint32_t tol_cpu_faults(void)
{
    return tol_cpu_faults_;
}

void tol_cpu_selftest(tol_cpu_report_t *r)
{
    r->checked = (1u << TOL_CPU_N_CHECKS) - 1u;
    r->faults = tol_cpu_run_(r->checked);
    r->fallbacks = tol_cpu_use(r->faults);
}
