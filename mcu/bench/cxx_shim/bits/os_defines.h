/* Bench-only configuration shim (tinyol): lets arm-none-eabi-g++ use the host's
 * header-only parts of libstdc++ (<cstdint>, <algorithm>, <type_traits>, ...)
 * when no libstdc++ for arm-none-eabi is installed. Bare metal + newlib: no OS. */
#ifndef _GLIBCXX_OS_DEFINES
#define _GLIBCXX_OS_DEFINES 1
#endif
