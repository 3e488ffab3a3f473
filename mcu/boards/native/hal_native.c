/*
 * hal_native.c - tol_hal.h for the native target: the firmware core as a
 * Linux process whose serial line is a TCP socket (default) or a pty.
 *
 *   program [--port N] [--host ADDR] [--pty] [--state DIR] [--board NAME]
 *           [--max-seconds S] [--outlive-parent]
 *
 * --port 0 picks a free port. The process prints one line
 * "tinyol native serial: <pyserial URL>" on stdout, then waits for the first
 * client before booting (so the boot banner is never lost). When a client
 * disconnects it waits for the next; a client that connects while another is
 * served gets the line "tinyol busy ..." and is closed (one client at a time).
 * --state DIR (created if missing) keeps the boot counter and the simulated
 * flash (flash.bin, see flash_native.c) across restarts; a reset re-executes
 * the program. One process per DIR: it holds a lock on DIR/lock, a second one
 * refuses to start. State files are replaced by temp-and-rename, never
 * rewritten in place. The process ends with its parent (PR_SET_PDEATHSIG) and
 * after --max-seconds (SIGALRM), so no target outlives the tool that started it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "tol_flash_native.h"
#include "tol_hal.h"
#include "tol_native.h"

static struct {
    int listen_fd;
    int fd;           /* connected client or pty master; -1 when none */
    int refused_fd;   /* a second client told "busy", closed when it hangs up; -1 when none */
    bool pty;
    uint8_t buf[4096];
    size_t len;
    size_t at;
    char **argv;
} tol_nat = {.listen_fd = -1, .fd = -1, .refused_fd = -1};

static tol_hal_info_t tol_info = {.board = "native", .cpu_hz = 1000000000u, .emulated = true};
static tol_native_options_t tol_opts;

static void tol_die(const char *what)
{
    fprintf(stderr, "tinyol native: %s: %s\n", what, strerror(errno));
    exit(2);
}

/* A client connecting while another is served is answered "busy" when it sends its
 * first bytes (a line sent at once could be discarded by the client's own start-up,
 * pyserial empties its input buffer on open) and closed when it hangs up (closing
 * with its request unread would send a TCP reset that discards the line). */
static void tol_refuse_newcomer(void)
{
    int fd = accept(tol_nat.listen_fd, NULL, NULL);
    if (fd < 0) return;
    if (tol_nat.refused_fd >= 0) close(tol_nat.refused_fd);
    tol_nat.refused_fd = fd;
}

static void tol_drain_refused(void)
{
    static const char busy[] = "tinyol busy: another client is connected (one client at a time)\r\n";
    uint8_t sink[256];
    ssize_t r = read(tol_nat.refused_fd, sink, sizeof(sink));
    if (r > 0) {
        (void)!write(tol_nat.refused_fd, busy, sizeof(busy)); /* the line and its 0x00 delimiter */
    } else if (!(r < 0 && (errno == EINTR || errno == EAGAIN))) {
        close(tol_nat.refused_fd);
        tol_nat.refused_fd = -1;
    }
}

static void tol_accept(void)
{
    if (tol_nat.pty) return;
    tol_nat.fd = accept(tol_nat.listen_fd, NULL, NULL);
    if (tol_nat.fd < 0) tol_die("accept");
    int one = 1;
    (void)setsockopt(tol_nat.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void tol_open_line(void)
{
    if (tol_opts.pty) {
        int slave;
        char name[128];
        if (openpty(&tol_nat.fd, &slave, name, NULL, NULL) != 0) tol_die("openpty");
        struct termios t;
        tcgetattr(slave, &t);
        cfmakeraw(&t);
        tcsetattr(slave, TCSANOW, &t);
        tol_nat.pty = true;
        printf("tinyol native serial: %s\n", name);
        fflush(stdout);
        return; /* keep the slave open so the master never sees EOF between clients */
    }
    tol_nat.listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    if (tol_nat.listen_fd < 0) tol_die("socket");
    int one = 1;
    (void)setsockopt(tol_nat.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_port = htons(tol_opts.port);
    if (inet_pton(AF_INET, tol_opts.host, &addr.sin_addr) != 1) {
        fprintf(stderr, "tinyol native: bad --host %s\n", tol_opts.host);
        exit(2);
    }
    if (bind(tol_nat.listen_fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) tol_die("bind");
    if (listen(tol_nat.listen_fd, 1) != 0) tol_die("listen");
    socklen_t alen = sizeof(addr);
    getsockname(tol_nat.listen_fd, (struct sockaddr *)&addr, &alen);
    printf("tinyol native serial: socket://%s:%u\n", tol_opts.host, (unsigned)ntohs(addr.sin_port));
    fflush(stdout);
    tol_accept();
}

/* mkdir -p */
static void tol_mkdirs(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s", dir);
    for (char *p = path + 1; *p != '\0'; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) tol_die(path);
        *p = '/';
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST) tol_die(path);
}

/* Create the state folder (with its parents) and lock it for this process.
 * The lock is a POSIX record lock on DIR/lock: it is kept across the re-exec of a
 * reset (same process; the descriptor is passed on in TINYOL_NATIVE_LOCK_FD) and
 * released by the kernel however the process ends. */
static void tol_state_lock(void)
{
    const char *dir = tol_opts.state_dir;
    tol_mkdirs(dir);
    const char *inherited = getenv("TINYOL_NATIVE_LOCK_FD");
    if (inherited != NULL && fcntl(atoi(inherited), F_GETFD) >= 0) return; /* after a reset */
    char path[4096];
    snprintf(path, sizeof(path), "%s/lock", dir);
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    if (fd < 0) tol_die(path);
    struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(fd, F_SETLK, &lk) != 0) {
        struct flock who = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        long pid = fcntl(fd, F_GETLK, &who) == 0 ? (long)who.l_pid : -1L;
        fprintf(stderr,
                "tinyol native: state folder %s is in use by process %ld; one target per --state folder\n",
                dir, pid);
        exit(3);
    }
    char num[16];
    snprintf(num, sizeof(num), "%d", fd);
    setenv("TINYOL_NATIVE_LOCK_FD", num, 1);
}

/* Replace DIR/name with `text` by temp-and-rename: a kill at any point leaves the
 * old or the new content, never an empty or partial file. */
static void tol_state_write(const char *name, const char *text)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof(path), "%s/%s", tol_opts.state_dir, name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) tol_die(tmp);
    size_t n = strlen(text);
    if (write(fd, text, n) != (ssize_t)n || fsync(fd) != 0) tol_die(tmp);
    close(fd);
    if (rename(tmp, path) != 0) tol_die(path);
}

static uint32_t tol_boot_counter(void)
{
    if (tol_opts.state_dir == NULL) return 1u;
    char path[4096];
    snprintf(path, sizeof(path), "%s/boot_count", tol_opts.state_dir);
    unsigned count = 0;
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        if (fscanf(f, "%u", &count) != 1) count = 0;
        fclose(f);
    }
    count++;
    char text[16];
    snprintf(text, sizeof(text), "%u\n", count);
    tol_state_write("boot_count", text);
    return (uint32_t)count;
}

/* End with the parent (the tool that started us) and after the time limit. */
static void tol_lifetime(void)
{
    pid_t parent = getppid();
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) tol_die("prctl");
    if (getppid() != parent && tol_opts.die_with_parent) exit(2); /* it died before the signal was armed */
    if (!tol_opts.die_with_parent) (void)prctl(PR_SET_PDEATHSIG, 0);
    if (tol_opts.max_seconds > 0u) alarm(tol_opts.max_seconds);
}

void tol_native_configure(const tol_native_options_t *opts, char **argv)
{
    tol_opts = *opts;
    tol_nat.argv = argv;
    if (opts->board != NULL) tol_info.board = opts->board;
}

void tol_hal_init(void)
{
    signal(SIGPIPE, SIG_IGN);
    tol_lifetime();
    if (tol_opts.state_dir != NULL) tol_state_lock();
    tol_flash_native_attach(tol_opts.state_dir); /* <state>/flash.bin: the simulated store region */
    tol_info.boot_count = tol_boot_counter();   /* after: a refused flash.bin counts no boot */
    tol_open_line();
}

const tol_hal_info_t *tol_hal_info(void)
{
    return &tol_info;
}

void tol_hal_uart_write(const uint8_t *data, size_t n)
{
    while (n > 0u && tol_nat.fd >= 0) {
        ssize_t w = write(tol_nat.fd, data, n);
        if (w < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            return; /* client gone: like a UART with nobody listening */
        }
        data += w;
        n -= (size_t)w;
    }
}

bool tol_hal_uart_read(uint8_t *byte)
{
    if (tol_nat.at < tol_nat.len) {
        *byte = tol_nat.buf[tol_nat.at++];
        return true;
    }
    struct pollfd p[3] = {{.fd = tol_nat.fd, .events = POLLIN},
                          {.fd = tol_nat.listen_fd, .events = POLLIN},
                          {.fd = tol_nat.refused_fd, .events = POLLIN}};
    if (poll(p, 3u, 0) <= 0) return false; /* negative fds are ignored; tol_hal_idle waits */
    if (tol_nat.refused_fd >= 0 && (p[2].revents & (POLLIN | POLLHUP | POLLERR)) != 0) tol_drain_refused();
    /* The current client first: when it hung up just before a newcomer connected, both show
     * in one poll, and the newcomer must become the next client, not be refused while the
     * device then waits for yet another one. A newcomer beside a live client stays pending
     * (poll is level-triggered) and is refused on a call with nothing from the client. */
    if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) == 0) {
        if (tol_nat.listen_fd >= 0 && (p[1].revents & POLLIN) != 0) tol_refuse_newcomer();
        return false;
    }
    ssize_t r = read(tol_nat.fd, tol_nat.buf, sizeof(tol_nat.buf));
    if (r <= 0) {
        if (r < 0 && (errno == EINTR || errno == EAGAIN)) return false;
        if (tol_nat.pty) {
            usleep(100000); /* no reader on the pty side yet */
            return false;
        }
        close(tol_nat.fd);
        tol_nat.fd = -1;
        tol_accept(); /* the next client continues the same device session */
        return false;
    }
    tol_nat.len = (size_t)r;
    tol_nat.at = 1;
    *byte = tol_nat.buf[0];
    return true;
}

void tol_hal_idle(void)
{
    /* sleep until something arrives on the line (or 100 ms pass); tol_hal_uart_read reads it.
     * tol_hal_uart_read itself never waits, so the main loop's idle work runs between frames. */
    if (tol_nat.at < tol_nat.len) return;
    struct pollfd p[3] = {{.fd = tol_nat.fd, .events = POLLIN},
                          {.fd = tol_nat.listen_fd, .events = POLLIN},
                          {.fd = tol_nat.refused_fd, .events = POLLIN}};
    (void)poll(p, 3u, 100);
}

uint32_t tol_hal_uart_errors(void)
{
    return 0u;
}

uint32_t tol_hal_cycles(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint32_t)((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
}

uint32_t tol_hal_cycles_epoch(void)
{
    return 0u;
}

void tol_hal_uart_flush(void)
{
}

void tol_hal_reset(void)
{
    /* a reset re-executes the program: state in RAM is gone, --state survives */
    if (tol_nat.fd >= 0) close(tol_nat.fd);
    if (tol_nat.listen_fd >= 0) close(tol_nat.listen_fd);
    fflush(NULL);
    execv("/proc/self/exe", tol_nat.argv);
    tol_die("execv");
    exit(2);
}

void tol_hal_exit(int code)
{
    fflush(NULL);
    exit(code);
}
