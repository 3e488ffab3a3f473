/* tol_cpu.c - the names of the boot self-test's checks (tol_cpu.h); the test itself is the
 * kernels' (mcu/src/kernels/<impl>/tol_cpu.c), the list generated (tol_cpu_checks.h). */
#include "tol_cpu.h"

#include <stddef.h>

#include "tol_cpu_checks.h"

static const char *const tol_cpu_names[] = {
#define TOL_CPU_NAME_(id, bit, name) name,
    TOL_CPU_CHECK_LIST(TOL_CPU_NAME_)
#undef TOL_CPU_NAME_
};

const char *tol_cpu_check_name(uint32_t bit)
{
    return bit < TOL_CPU_N_CHECKS ? tol_cpu_names[bit] : NULL;
}
