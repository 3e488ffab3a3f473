/* tol_native.h - options of the native target (see hal_native.c). */
#ifndef TOL_NATIVE_H
#define TOL_NATIVE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    const char *host;       /* listen address, default 127.0.0.1 */
    uint16_t port;          /* TCP port, 0 = any free port */
    bool pty;               /* use a pseudo-terminal instead of TCP */
    const char *state_dir;  /* persistent state (boot counter, flash image); NULL = none */
    const char *board;      /* board name reported by INFO, default "native" */
    unsigned max_seconds;   /* end the process after this many seconds (SIGALRM); 0 = never */
    bool die_with_parent;   /* end with the parent process (default; --outlive-parent turns it off) */
} tol_native_options_t;

/* Must be called before tol_hal_init(); argv is kept for the reset re-exec. */
void tol_native_configure(const tol_native_options_t *opts, char **argv);

#endif
