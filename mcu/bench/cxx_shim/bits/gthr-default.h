/* Bench-only configuration shim (tinyol): single-threaded bare metal. */
#include <bits/gthr-single.h>
