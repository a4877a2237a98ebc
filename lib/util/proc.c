/* proc.c - see proc.h. */
#include "util/proc.h"
#include "util/file.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

int64_t ts_clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t ts_now_ns(void) { return ts_clock_ns(CLOCK_MONOTONIC); }
int64_t ts_now_ms(void) { return ts_clock_ns(CLOCK_MONOTONIC) / 1000000; }
int64_t ts_now_us(void) { return ts_clock_ns(CLOCK_MONOTONIC) / 1000; }
int64_t ts_unix_ms(void) { return ts_clock_ns(CLOCK_REALTIME) / 1000000; }

#define FIXED_MALLOC_THRESHOLD (128 * 1024)   /* glibc's starting value of both */

void ts_proc_fix_malloc(void)
{
    mallopt(M_MMAP_THRESHOLD, FIXED_MALLOC_THRESHOLD);
    mallopt(M_TRIM_THRESHOLD, FIXED_MALLOC_THRESHOLD);
}

void ts_sleep_ms(int64_t ms)
{
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000 };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

void ts_abstime_ms(struct timespec *ts, int64_t ms)
{
    int64_t ns = ts_clock_ns(CLOCK_REALTIME) + ms * 1000000;
    ts->tv_sec = ns / 1000000000;
    ts->tv_nsec = ns % 1000000000;
}

static void term_set(sigset_t *s)
{
    sigemptyset(s);
    sigaddset(s, SIGINT);
    sigaddset(s, SIGTERM);
    sigaddset(s, SIGHUP);
}

void ts_proc_block_signals(void)
{
    sigset_t s;
    term_set(&s);
    pthread_sigmask(SIG_BLOCK, &s, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int ts_proc_wait_signal(int ms)
{
    sigset_t s;
    int sig;

    term_set(&s);
    if (ms < 0) {
        while (sigwait(&s, &sig) != 0)
            ;
        return sig;
    }
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };
    sig = sigtimedwait(&s, NULL, &ts);
    return sig < 0 ? 0 : sig;
}

void ts_proc_instance_id(char *buf, size_t n)
{
    unsigned char r[16];
    size_t i;

    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
        uint64_t t = (uint64_t)ts_clock_ns(CLOCK_REALTIME) ^ ((uint64_t)getpid() << 32);
        for (i = 0; i < sizeof(r); i++)
            r[i] = (unsigned char)(t >> (8 * (i % 8))) ^ (unsigned char)i;
    }
    for (i = 0; i < sizeof(r) && 2 * i + 2 < n; i++)
        snprintf(buf + 2 * i, 3, "%02x", r[i]);
}

ts_status ts_proc_exe_dir(char *buf, size_t n, struct ts_err *err)
{
    ssize_t len = readlink("/proc/self/exe", buf, n - 1);
    char *slash;

    if (len <= 0 || (size_t)len >= n - 1)
        return ts_err_set(err, TS_EIO, "cannot read /proc/self/exe: %s", strerror(errno));
    buf[len] = '\0';
    slash = strrchr(buf, '/');
    if (slash)
        *slash = '\0';
    return TS_OK;
}

ts_status ts_port_file_write(const char *path, int port, struct ts_err *err)
{
    char buf[16];
    int n = snprintf(buf, sizeof(buf), "%d\n", port);

    return ts_file_replace(path, buf, (size_t)n, 0644, err);
}

int ts_port_file_read(const char *path)
{
    FILE *f = fopen(path, "r");
    int port = 0;

    if (!f)
        return 0;
    if (fscanf(f, "%d", &port) != 1 || port < 0)
        port = 0;
    fclose(f);
    return port;
}
