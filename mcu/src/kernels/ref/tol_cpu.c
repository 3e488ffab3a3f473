/* tol_cpu.c (reference build) - the boot self-test (tol_cpu.h) of what this build executes
 * beyond plain integer C: the learner's VMLA/VMLS. The reference kernels use no DSP
 * instruction, so their checks are not run and no kernel path changes. */
#include "tol_cpu.h"

#include "../../tol_fmac.h"
#include "tol_acle.h"
/* after the helpers its checks call */
#include "../tol_cpu_run.h"

uint32_t tol_cpu_use(uint32_t faults)
{
    (void)faults;
    return 0u;
}

uint32_t tol_cpu_faults(void)
{
    return 0u;
}

void tol_cpu_selftest(tol_cpu_report_t *r)
{
    r->checked = TOL_CPU_LEARNER_CHECKS;
    r->faults = tol_cpu_run_(r->checked);
    r->fallbacks = 0u;
}
