/* benchlib.c - what the benchmarks share: clocks, percentiles, CPU ticks, baselines, the
 * results file. The cluster a benchmark measures is benchcluster.c's. See benchlib.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "benchlib.h"
#include "util/json.h"
#include "util/proc.h"

/* ---- time and statistics ---- */

void bench_sleep_until_ns(int64_t t)
{
    struct timespec ts = { .tv_sec = t / 1000000000, .tv_nsec = t % 1000000000 };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest rank: the smallest sample with at least p% of the samples at or below it. Integer
 * arithmetic, as this target does not link libm. */
static double pct_us(const int64_t *sorted, size_t n, unsigned p)
{
    size_t rank = (p * n + 99) / 100;
    return (double)sorted[rank ? rank - 1 : 0] / 1000.0;
}

/* Sorts ns in place and fills l. */
void bench_lat_from_ns(int64_t *ns, size_t n, struct bench_lat *l)
{
    memset(l, 0, sizeof(*l));
    if (!n)
        return;
    qsort(ns, n, sizeof(*ns), cmp_i64);
    l->p50 = pct_us(ns, n, 50);
    l->p90 = pct_us(ns, n, 90);
    l->p99 = pct_us(ns, n, 99);
    l->max = (double)ns[n - 1] / 1000.0;
    l->n = (int64_t)n;
}

int64_t bench_round_i(double x) { return (int64_t)(x < 0 ? x - 0.5 : x + 0.5); }
double bench_round1(double x) { return (double)bench_round_i(x * 10) / 10; }

/* utime + stime of pid in clock ticks: fields 14 and 15 of /proc/PID/stat. The command name
 * (field 2) is "tessera-master", so "%*[^)]" skips it safely. */
ts_status bench_proc_cpu_ticks(pid_t pid, uint64_t *ticks, struct ts_err *err)
{
    unsigned long long ut = 0, st = 0;
    char path[64];
    FILE *f;
    int n;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (!(f = fopen(path, "r")))
        return ts_err_set(err, TS_EIO, "%s: %s", path, strerror(errno));
    n = fscanf(f, "%*d (%*[^)]) %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st);
    fclose(f);
    if (n != 2)
        return ts_err_set(err, TS_EIO, "%s: unexpected format", path);
    *ticks = ut + st;
    return TS_OK;
}

ts_status bench_proc_rss(pid_t pid, uint64_t *bytes, struct ts_err *err)
{
    char path[64], line[256];
    unsigned long long kb = 0;
    bool found = false;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if (!(f = fopen(path, "r")))
        return ts_err_set(err, TS_EIO, "%s: %s", path, strerror(errno));
    while (!found && fgets(line, sizeof(line), f))
        found = sscanf(line, "VmRSS: %llu kB", &kb) == 1;
    fclose(f);
    if (!found)
        return ts_err_set(err, TS_EIO, "%s: no VmRSS line", path);
    *bytes = kb * 1024;
    return TS_OK;
}

void bench_machine_desc(char *buf, size_t n)
{
    char line[256], *model = NULL;
    FILE *f = fopen("/proc/cpuinfo", "r");

    while (f && !model && fgets(line, sizeof(line), f))
        if (strncmp(line, "model name", 10) == 0 && (model = strchr(line, ':')))
            model[strcspn(model, "\n")] = '\0';
    if (f)
        fclose(f);
    snprintf(buf, n, "%ld cpus, %s", sysconf(_SC_NPROCESSORS_ONLN), model ? model + 2 : "?");
}

ts_status bench_make_parent_dirs(const char *path, struct ts_err *err)
{
    char d[PATH_MAX];

    snprintf(d, sizeof(d), "%s", path);
    for (char *p = d + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(d, 0755) != 0 && errno != EEXIST)
            return ts_err_set(err, TS_EIO, "--out: mkdir %s: %s", d, strerror(errno));
        *p = '/';
    }
    return TS_OK;
}

ts_status bench_write_json(struct ts_json *j, const char *path, struct ts_err *err)
{
    char *text;
    FILE *f;
    ts_status st;

    ts_json_end(j); /* the top-level object */
    text = ts_json_take(j);
    if (!(st = bench_make_parent_dirs(path, err))) {
        f = fopen(path, "w");
        if (!f || fprintf(f, "%s\n", text) < 0 || fclose(f) != 0)
            st = ts_err_set(err, TS_EIO, "--out %s: %s", path, strerror(errno));
    }
    free(text);
    return st;
}

int bench_run(const struct bench_phases *ph, void *arg, const char *out)
{
    struct ts_err err = { 0 };
    ts_status st = ph->prepare(arg, &err);

    if (st == TS_OK)
        st = ph->measure(arg, &err);
    if (st == TS_OK) {
        ph->table(arg);
        st = ph->json(arg, &err);
    }
    ph->release(arg);
    if (st != TS_OK) {
        fprintf(stderr, "%s: %s\n", ph->prog, err.msg);
        return 1;
    }
    printf("wrote %s\n", out);
    return 0;
}

static int cmp_double(const void *pa, const void *pb)
{
    double a = *(const double *)pa, b = *(const double *)pb;

    return (a > b) - (a < b);
}

uint64_t bench_rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int bench_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

void bench_sorted_ids(uint64_t *seed, uint64_t below, size_t n, uint64_t *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = bench_rng_next(seed) % below;
    qsort(out, n, sizeof(*out), bench_cmp_u64);
    for (size_t i = 1; i < n; i++)
        if (out[i] <= out[i - 1])
            out[i] = out[i - 1] + 1;
}

double bench_median(const double *v, size_t n)
{
    double *s = malloc(n * sizeof(double)), m;

    if (!s)
        return v[0];
    memcpy(s, v, n * sizeof(double));
    qsort(s, n, sizeof(double), cmp_double);
    m = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    free(s);
    return m;
}

double bench_gbps(size_t bytes, int64_t ns)
{
    return ns > 0 ? (double)bytes / (double)ns : 0;
}

struct stream_writer {
    int fd;
    const unsigned char *buf;
    size_t bytes;
    int reps;
};

static void *stream_write(void *arg)
{
    struct stream_writer *w = arg;

    for (int k = 0; k < w->reps; k++)
        for (size_t done = 0; done < w->bytes;) {
            ssize_t n = send(w->fd, w->buf + done, w->bytes - done, MSG_NOSIGNAL);
            if (n <= 0)
                return NULL;   /* the reader sees the stream end */
            done += (size_t)n;
        }
    return NULL;
}

/* A connected pair of loopback TCP sockets in fds (the second end accepted). */
static bool loopback_pair(int fds[2])
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof(a);
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool ok;

    fds[0] = fds[1] = -1;
    ok = l >= 0 && bind(l, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(l, 1) == 0 &&
         getsockname(l, (struct sockaddr *)&a, &al) == 0 &&
         (fds[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0 &&
         connect(fds[0], (struct sockaddr *)&a, sizeof(a)) == 0 &&
         (fds[1] = accept4(l, NULL, NULL, SOCK_CLOEXEC)) >= 0;
    if (l >= 0)
        close(l);
    return ok;
}

/* The least a stream carries in all, so that its CPU per byte is not lost in the start. */
#define STREAM_MIN_TOTAL ((size_t)256 << 20)

double bench_tcp_stream_gbps(size_t bytes, int reps, double *cpu_ns_per_byte)
{
    int runs = reps > 0 && bytes > 0 && (size_t)reps * bytes < STREAM_MIN_TOTAL
                ? (int)((STREAM_MIN_TOTAL + bytes - 1) / bytes)
                : reps;
    unsigned char *src = malloc(bytes), *dst = malloc(bytes);
    double *g = calloc((size_t)(runs > 0 ? runs : 1), sizeof(double)), m = 0;
    struct stream_writer w = { -1, src, bytes, runs };
    int fds[2] = { -1, -1 }, k = 0;
    int64_t cpu0 = 0;
    pthread_t th;

    if (cpu_ns_per_byte)
        *cpu_ns_per_byte = 0;
    if (src && dst && g && runs > 0 && loopback_pair(fds)) {
        memset(src, 0x5a, bytes);
        memset(dst, 0, bytes);   /* both buffers touched: page faults are not the stream's */
        w.fd = fds[0];
        cpu0 = ts_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
        if (pthread_create(&th, NULL, stream_write, &w) == 0) {
            for (; k < runs; k++) {
                int64_t t0 = ts_now_ns();
                size_t done = 0;
                ssize_t n = 1;
                while (done < bytes && (n = recv(fds[1], dst + done, bytes - done, 0)) > 0)
                    done += (size_t)n;
                if (done < bytes)
                    break;
                g[k] = bench_gbps(bytes, ts_now_ns() - t0);
            }
            shutdown(fds[1], SHUT_RDWR);   /* a writer still blocked gives up */
            pthread_join(th, NULL);
            m = k == runs ? bench_median(g, (size_t)runs) : 0;
            if (m > 0 && cpu_ns_per_byte)   /* both threads, the whole stream */
                *cpu_ns_per_byte = (double)(ts_clock_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu0) /
                                   ((double)bytes * runs);
        }
    }
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(src);
    free(dst);
    free(g);
    return m;
}

double bench_memcpy_gbps(void *dst, const void *src, size_t bytes, int reps)
{
    static volatile unsigned char sink; /* keeps the copies alive */
    double *g = malloc((size_t)(reps > 0 ? reps : 1) * sizeof(double)), m;

    if (!g)
        return 0;
    for (int k = 0; k < reps; k++) {
        int64_t t0 = ts_now_ns();

        memcpy(dst, src, bytes);
        g[k] = bench_gbps(bytes, ts_now_ns() - t0);
        sink = sink + ((unsigned char *)dst)[(size_t)k % bytes];
    }
    m = bench_median(g, (size_t)(reps > 0 ? reps : 1));
    free(g);
    return m;
}

