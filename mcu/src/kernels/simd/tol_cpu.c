/* tol_cpu.c (SIMD build) - the boot self-test of every instruction the SIMD kernels and the
 * learner rely on (tol_cpu.h); a failed SSUB8/SEL switches MAX_POOL_2D to its portable path. */
#include "tol_cpu.h"

#include "../../tol_fmac.h"
#include "tol_acle.h"
/* after the helpers its checks call */
#include "../tol_cpu_run.h"

static uint16_t tol_cpu_faults_; /* what tol_cpu_selftest found (tol_cpu_faults); 16 bits: TOL_CPU_N_CHECKS <= 16 */

#define TOL_CPU_THIS_BUILD_ ((1u << TOL_CPU_N_CHECKS) - 1u)

void tol_cpu_selftest(void)
{
    tol_cpu_faults_ = (uint16_t)tol_cpu_run_(TOL_CPU_THIS_BUILD_);
}

void tol_cpu_use(uint32_t faults)
{
    tol_cpu_faults_ = (uint16_t)faults;
}

uint32_t tol_cpu_faults(void)
{
    return tol_cpu_faults_;
}

void tol_cpu_report(tol_cpu_report_t *r)
{
    r->checked = TOL_CPU_THIS_BUILD_;
    r->faults = tol_cpu_faults_;
    r->fallbacks = tol_cpu_faults_ & TOL_CPU_FALLBACK_CHECKS;
}
