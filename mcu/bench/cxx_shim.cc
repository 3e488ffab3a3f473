// cxx_shim.cc - the few C++ runtime symbols TFLM's code references, so the
// harness links with -nostdlib++ (no libstdc++ for arm-none-eabi needed).
// TFLM never allocates from the heap; reaching any of these is a bug.
#include <cstddef>

#include "bench_rt.h"

void operator delete(void*) noexcept { tol_bench_exit(5); }
void operator delete(void*, std::size_t) noexcept { tol_bench_exit(5); }
extern "C" void __cxa_pure_virtual() { tol_bench_exit(6); }
