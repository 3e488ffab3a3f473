/*
 * main_native.c - process entry of the native target: parse the command line,
 * then run the same application main as the boards (app/main.c, compiled with
 * main renamed to tol_server_main for this target).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tol_flash_native.h"
#include "tol_native.h"

int tol_server_main(void);

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s [--port N] [--host ADDR] [--pty] [--state DIR] [--board NAME]\n"
            "          [--max-seconds S] [--outlive-parent] [--flash FLASH:STORE:PAGE]\n"
            "  serves the tinyol protocol on a TCP socket (default: a free port on 127.0.0.1)\n"
            "  or a pty; prints the pyserial URL as 'tinyol native serial: URL'\n"
            "  --state DIR: boot counter and flash image (created; one process per DIR)\n"
            "  ends with its parent process unless --outlive-parent; after S seconds if given\n"
            "  --flash: the imitated board's flash, store region and page bytes (default the\n"
            "  NUCLEO-L476RG's, 1048576:131072:2048)\n",
            prog);
}

int main(int argc, char **argv)
{
    tol_native_options_t opts = {.host = "127.0.0.1", .port = 0, .pty = false, .state_dir = NULL,
                                 .board = NULL, .max_seconds = 0u, .die_with_parent = true};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--pty") == 0) {
            opts.pty = true;
        } else if (strcmp(a, "--port") == 0 && v != NULL) {
            long port = strtol(v, NULL, 10);
            if (port < 0 || port > 65535) {
                fprintf(stderr, "tinyol native: --port must be 0..65535\n");
                return 2;
            }
            opts.port = (uint16_t)port;
            i++;
        } else if (strcmp(a, "--host") == 0 && v != NULL) {
            opts.host = v;
            i++;
        } else if (strcmp(a, "--state") == 0 && v != NULL) {
            opts.state_dir = v;
            i++;
        } else if (strcmp(a, "--outlive-parent") == 0) {
            opts.die_with_parent = false;
        } else if (strcmp(a, "--max-seconds") == 0 && v != NULL) {
            long s = strtol(v, NULL, 10);
            if (s < 0 || s > 100000000L) {
                fprintf(stderr, "tinyol native: --max-seconds must be 0..100000000\n");
                return 2;
            }
            opts.max_seconds = (unsigned)s;
            i++;
        } else if (strcmp(a, "--flash") == 0 && v != NULL) {
            unsigned long f = 0, st = 0, pg = 0;
            if (sscanf(v, "%lu:%lu:%lu", &f, &st, &pg) != 3 ||
                tol_flash_native_geometry((uint32_t)f, (uint32_t)st, (uint32_t)pg) != 0) {
                fprintf(stderr, "tinyol native: --flash FLASH:STORE:PAGE: bytes, the store a multiple of "
                                "two pages and at most 1 MB, not %s\n", v);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--board") == 0 && v != NULL) {
            opts.board = v;
            i++;
        } else {
            usage(argv[0]);
            return strcmp(a, "--help") == 0 ? 0 : 2;
        }
    }
    tol_native_configure(&opts, argv);
    return tol_server_main();
}
