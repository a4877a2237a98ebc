/* pushpull.c - bench_pushpull: how fast does one training step move a tensor through the shards?
 *
 * Why: a data-parallel step through a parameter server is a push of the gradient and a pull of
 * the parameters, where the usual alternative is an all-reduce. The issue's goals, at 64 MiB:
 * the best transport at least 2x the algbw of PyTorch's gloo all_reduce on the same machine
 * (bench/pushpull_gloo.py, as many ranks as workers), and TCP at least 0.8x. For each
 * transport T (shm, tcp; rdma on a verbs device, with --host its address: bench/rdma.py):
 * a master and --shards (2) tessera-shard --transport T (only that data plane offered,
 * listening on --host); per size S, --workers (2) workers (this program re-executed in a hidden mode: no
 * gRPC state crosses a fork) register one float tensor of S bytes (--partition-kib, default
 * the SDK's 4 MiB, placed by the ring under the tensor's balancing salt), pull version 0, run 2
 * warm-up steps and N timed tessera_step calls (push S bytes, pull S bytes; --exact also in
 * exact mode: "exact", whose int64 push is 2 S bytes, and "exact-f32", float pushes the shards
 * round to fixed point, S bytes and the same bits). A step takes the slowest worker's time (BSP); the
 * figure is the median, algbw = S / step (GB/s = 1e9 B/s), as for an all-reduce. Workers
 * report on a pipe: "ready PARTITION_BYTES" after the warm-up (the parent then reads the CPU
 * clocks), then step times and CPU time. Every child is stopped by pid at the end, on errors
 * and on signals, and has PR_SET_PDEATHSIG.
 *
 * Buffers: each (transport, mode, size) runs with the worker's own malloc'd buffers ("shm") and
 * with tessera_buffers' ("shm+buffers"; --buffers picks): the gradient is written once into the
 * SDK's buffer, version 0 pulled into its params pointer, and both passed to every step. On shm
 * the shard then reads the gradient in place and the params pages are its own values mapped
 * read-only: a step copies nothing. That is fair against gloo, whose all_reduce is in place on
 * the tensor too: a trainer computes its gradient into that buffer and reads its parameters
 * there (as with BytePS's shared-memory tensors), and every step still pushes a gradient and
 * waits for the next version. Own buffers are what a trainer with its own tensors gets.
 * Output: two tables, and bench/results/pushpull.json whose headline is the best run of either
 * kind vs gloo at 64 MiB, and headline_copy the best own-buffers run. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "benchlib.h"
#include "pushpull.h"
#include "local/local.h"
#include "tessera.h"
#include "util/flags.h"
#include "util/json.h"
#include "util/launch.h"
#include "util/proc.h"

#define MAX_ITERS 10000

struct cluster {
    struct bench_master m;     /* the master and, in m.local, the shards */
    int nshards;
};

/* Children outside the cluster, for the signal handler (benchcluster.c's stops the cluster):
 * workers at KID_WORKER + k, then the gloo script at KID_GLOO. */
#define KID_WORKER 0
#define KID_GLOO PP_MAX_WORKERS
static volatile pid_t kids[KID_GLOO + 1];

static void on_sig(int sig)
{
    for (size_t i = 0; i < sizeof(kids) / sizeof(kids[0]); i++)
        if (kids[i] > 0)
            kill(kids[i], SIGTERM);
    bench_on_signal(sig);
}

/* ---- --metrics-port: a Prometheus-like scrape of each shard every second ---- */

static struct {
    int64_t base;
    int nshards;
    atomic_bool stop;
    atomic_uint_least64_t scrapes;     /* answered with a body */
    pthread_t thread;
} scraper;

/* GET /metrics from 127.0.0.1:port, the whole answer read and dropped; whether one came. */
static bool scrape_once(int port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    static const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
    char buf[65536];
    size_t got = 0;
    ssize_t n;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    if (fd < 0)
        return false;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        write(fd, req, sizeof(req) - 1) == (ssize_t)(sizeof(req) - 1))
        while ((n = read(fd, buf, sizeof(buf))) > 0)
            got += (size_t)n;
    close(fd);
    return got > 0;
}

static void *scrape_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&scraper.stop)) {
        for (int i = 0; i < scraper.nshards; i++)
            if (scrape_once((int)scraper.base + i))
                atomic_fetch_add(&scraper.scrapes, 1);
        for (int k = 0; k < 20 && !atomic_load(&scraper.stop); k++)
            ts_sleep_ms(50);
    }
    return NULL;
}

/* ---- child processes: a master and --shards shards offering one transport, --workers workers ---- */


static void cluster_stop(struct cluster *c)
{
    bench_master_stop(&c->m);
}

/* A master and o->shards shards started with --transport tp and --listen on --host: they offer
 * only tp (the workers check the transport they got); each shard i serves /metrics on
 * --metrics-port + i. */
static ts_status cluster_start(const struct opts *o, const char *tp, struct cluster *c,
                               struct ts_err *err)
{
    char exe[PATH_MAX];
    ts_status st;

    memset(c, 0, sizeof(*c));
    c->m.replicas = (int)o->replicas;
    c->m.tls_dir = o->tls;
    snprintf(exe, sizeof(exe), "%s/tessera-shard", o->bin);
    if (access(exe, X_OK) != 0)
        return ts_err_set(err, TS_ENOTFOUND, "--bin: no executable %s (%s)", exe,
                          strerror(errno));
    if ((st = bench_master_start(o->bin, &c->m, err)))
        return st;
    for (int i = 0; i < (int)o->shards && !st; i++) {
        char port[24], listen[80];
        const char *args[] = { "--transport", tp, "--listen", listen,
                               o->metrics_port ? "--metrics-port" : NULL, port, NULL };

        snprintf(listen, sizeof(listen), "%s:0", o->host);
        snprintf(port, sizeof(port), "%lld", (long long)(o->metrics_port + i));
        if (!(st = ts_local_add_shard(c->m.local, args, NULL, err)))
            c->nshards++;
    }
    return st ? st : ts_local_wait_shards(c->m.local, c->nshards, err);
}

struct wchild {
    pid_t pid;
    FILE *out;                 /* its stdout */
    char line[MAX_ITERS * 21 + 64];
};

/* ts_launch() with the child's stdout on a pipe that *out reads. */
static ts_status spawn_reader(const char *exe, char **argv, pid_t *pid, FILE **out,
                              struct ts_err *err)
{
    int fds[2];
    ts_status st;

    if (pipe2(fds, O_CLOEXEC) != 0)
        return ts_err_set(err, TS_EIO, "pipe: %s", strerror(errno));
    st = ts_launch(exe, argv, NULL, fds[1], pid, err);
    close(fds[1]);
    if (!st && !(*out = fdopen(fds[0], "r")))
        st = ts_err_set(err, TS_EIO, "fdopen: %s", strerror(errno));
    if (!*out)
        close(fds[0]);
    return st;
}

/* Re-executes this binary in worker mode, its stdout on a pipe to w->out. */
static ts_status worker_spawn(const struct opts *o, const struct cluster *c, const struct run *r,
                              int rank, struct wchild *w, struct ts_err *err)
{
    char job[64], rk[8], bytes[24], iters[24], nw[8], pb[24], mode[4];
    char *argv[] = { "bench_pushpull", "--worker", (char *)c->m.target, job,
                     (char *)r->transport, rk, bytes, iters, mode,
                     r->buffers ? "1" : "0", nw, pb, NULL };

    /* One job per run: a job's tensor and its versions start afresh. */
    snprintf(job, sizeof(job), "pp-%d-%s-%" PRId64 "-%s-%s", (int)getpid(), r->transport,
             r->size_mib, pp_mode_name(r->mode), r->buffers ? "b" : "o");
    snprintf(mode, sizeof(mode), "%d", r->mode);
    snprintf(rk, sizeof(rk), "%d", rank);
    snprintf(bytes, sizeof(bytes), "%" PRIu64, (uint64_t)r->size_mib * MIB);
    snprintf(iters, sizeof(iters), "%" PRId64, o->iters);
    snprintf(nw, sizeof(nw), "%" PRId64, o->workers);
    snprintf(pb, sizeof(pb), "%" PRId64, o->partition_kib * 1024);   /* 0: the SDK's (4 MiB here) */
    return spawn_reader("/proc/self/exe", argv, &w->pid, &w->out, err);
}

/* ---- one measurement: --workers workers against the cluster ---- */

/* Reads worker k's next line: with ns, "TRANSPORT CPU_NS NS..." into ns[0..n) and *cpu_ns. */
static ts_status read_line(const struct run *r, struct wchild *w, int k, int64_t n, int64_t *ns,
                           int64_t *cpu_ns, struct ts_err *err)
{
    const char *line = w->line;
    char tp[16], *end;
    int used = 0;

    if (!fgets(w->line, sizeof(w->line), w->out))
        return ts_err_set(err, TS_EUNAVAIL, "worker %d ended before its %s line (its stderr "
                          "is above)", k, ns ? "result" : "ready");
    if (!ns)
        return TS_OK;
    if (sscanf(line, "%15s %" SCNd64 "%n", tp, cpu_ns, &used) != 2)
        return ts_err_set(err, TS_ECORRUPT, "worker printed '%.80s'", line);
    if (strcmp(tp, r->transport) != 0)
        return ts_err_set(err, TS_ESTATE, "worker used transport %s, not %s", tp, r->transport);
    line += used;
    for (int64_t i = 0; i < n; i++, line = end)
        if ((ns[i] = strtoll(line, &end, 10)) <= 0 || end == line)
            return ts_err_set(err, TS_ECORRUPT, "worker printed %" PRId64 " of %" PRId64
                              " times", i, n);
    return TS_OK;
}

/* Busy CPU time of the whole machine, in clock ticks: /proc/stat's first line, all but idle
 * and iowait. */
static uint64_t machine_busy_ticks(void)
{
    unsigned long long v[8] = { 0 };
    FILE *f = fopen("/proc/stat", "r");
    int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                       &v[3], &v[4], &v[5], &v[6], &v[7]) : 0;

    if (f)
        fclose(f);
    return n == 8 ? v[0] + v[1] + v[2] + v[5] + v[6] + v[7] : 0;
}

static uint64_t shard_ticks(const struct cluster *c)
{
    uint64_t sum = 0, t;

    for (int i = 0; i < c->nshards; i++)
        if (!bench_proc_cpu_ticks(ts_local_shard_pid(c->m.local, i), &t, NULL))
            sum += t;
    return sum;
}

/* The median in ms of each step's slowest worker. ns holds `workers` series of n; the first is
 * overwritten and sorted. */
static double slower_median(int64_t *ns, int64_t n, int64_t workers, double *min, double *max)
{
    struct bench_lat l;

    for (int64_t i = 0; i < n; i++)
        for (int64_t k = 1; k < workers; k++)
            ns[i] = ns[i] > ns[k * n + i] ? ns[i] : ns[k * n + i];
    bench_lat_from_ns(ns, (size_t)n, &l); /* sorts */
    *min = (double)ns[0] / 1e6;
    *max = (double)ns[n - 1] / 1e6;
    return (n % 2 ? (double)ns[n / 2] : (double)(ns[n / 2 - 1] + ns[n / 2]) / 2) / 1e6;
}

/* Reads every worker's lines: "ready" (then the CPU clocks are read), then the results. */
static ts_status collect(const struct opts *o, const struct cluster *c, struct run *r,
                         struct wchild *w, struct ts_err *err)
{
    int64_t n = o->iters, cpu = 0, wcpu = 0, *ns = calloc((size_t)(o->workers * n), sizeof(*ns));
    double tick_ms = 1e3 / (double)sysconf(_SC_CLK_TCK);
    uint64_t t0, b0;
    ts_status st = TS_OK;

    if (!ns)
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    for (int k = 0; k < o->workers && !st; k++)
        st = read_line(r, &w[k], k, n, NULL, NULL, err);
    t0 = shard_ticks(c);
    b0 = machine_busy_ticks();
    for (int k = 0; k < o->workers && !st; k++) {
        st = read_line(r, &w[k], k, n, ns + k * n, &cpu, err);
        wcpu += cpu;
    }
    if (!st) {
        r->shard_cpu_ms = (double)(shard_ticks(c) - t0) * tick_ms / (double)n;
        r->worker_cpu_ms = (double)wcpu / 1e6 / (double)n;
        r->other_cpu_ms = (double)(machine_busy_ticks() - b0) * tick_ms / (double)n -
                          r->shard_cpu_ms - r->worker_cpu_ms;
        r->med_ms = slower_median(ns, n, o->workers, &r->min_ms, &r->max_ms);
        r->gbs = (double)((uint64_t)r->size_mib * MIB) / (r->med_ms * 1e6);
        r->done = true;
    }
    free(ns);
    return st;
}

static ts_status run_one(const struct opts *o, const struct cluster *c, struct run *r,
                         struct ts_err *err)
{
    static struct wchild w[PP_MAX_WORKERS];   /* big line buffers: not on the stack */
    ts_status st = TS_OK;
    int status;

    memset(w, 0, sizeof(w));
    fprintf(stderr, "  %s %s %" PRId64 " MiB: %d + %" PRId64 " steps...\n", r->name,
            pp_mode_name(r->mode), r->size_mib, WARMUP, o->iters);
    for (int k = 0; k < o->workers && !st; k++)
        if (!(st = worker_spawn(o, c, r, k, &w[k], err)))
            kids[KID_WORKER + k] = w[k].pid;
    if (!st)
        st = collect(o, c, r, w, err);
    for (int k = 0; k < o->workers; k++) {
        if (st && w[k].pid > 0)
            kill(w[k].pid, SIGTERM); /* the others would wait for it at the next step */
        if (w[k].out)
            fclose(w[k].out);
        if (w[k].pid > 0 && waitpid(w[k].pid, &status, 0) == w[k].pid && !st &&
            (!WIFEXITED(status) || WEXITSTATUS(status)))
            st = ts_err_set(err, TS_EINTERNAL, "worker %d: wait status 0x%x", k, status);
        kids[KID_WORKER + k] = 0;
    }
    return st;
}

/* One cluster per transport; every size, mode and buffers kind on it. False if anything
 * failed. */
static bool run_transport(const struct opts *o, const char *tp, struct results *res)
{
    int per = (o->exact ? PP_MODES : 1) * o->nbuf;   /* runs per size */
    struct ts_err err = { 0 };
    struct cluster c;
    bool ok = true;

    fprintf(stderr, "%s: a master and %" PRId64 " shards --transport %s\n", tp, o->shards, tp);
    if (cluster_start(o, tp, &c, &err)) {
        fprintf(stderr, "bench_pushpull: %s\n", err.msg);
        cluster_stop(&c);
        return false;
    }
    for (int i = 0; i < o->nsizes * per; i++) {
        struct run *r = &res->runs[res->nruns++];
        *r = (struct run){ .transport = tp, .buffers = o->buf[i % o->nbuf],
                           .mode = i % per / o->nbuf, .size_mib = o->sizes[i / per] };
        snprintf(r->name, sizeof(r->name), "%s%s", tp, r->buffers ? "+buffers" : "");
        ts_err_clear(&err);
        if (run_one(o, &c, r, &err)) {
            fprintf(stderr, "bench_pushpull: %s %s %" PRId64 " MiB: %s\n", r->name,
                    pp_mode_name(r->mode), r->size_mib, err.msg);
            ok = false;
        }
    }
    cluster_stop(&c);
    return ok;
}

/* ---- the gloo baseline: bench/pushpull_gloo.py, one JSON line per size ---- */

/* Runs the script (a child like the others: stopped by pid on a signal) and reads its lines. */
static ts_status run_gloo(const struct opts *o, struct results *res, struct ts_err *err)
{
    const char *slash = strrchr(__FILE__, '/');
    char script[PATH_MAX], it[24], wu[8], line[512];
    char world[8];
    char *argv[] = { (char *)o->python, script, "--sizes", (char *)o->sizes_s, "--iters", it,
                     "--warmup", wu, "--world", world, NULL };
    FILE *f = NULL;
    ts_status st;
    double med;
    pid_t pid;
    int status = 0;

    /* Next to this source file, else in ./bench. */
    snprintf(script, sizeof(script), "%.*s/pushpull_gloo.py", slash ? (int)(slash - __FILE__)
             : 1, slash ? __FILE__ : ".");
    if (access(script, R_OK) != 0)
        snprintf(script, sizeof(script), "bench/pushpull_gloo.py");
    if (access(script, R_OK) != 0 || access(o->python, X_OK) != 0)
        return ts_err_set(err, TS_ENOTFOUND, "no pushpull_gloo.py (looked next to %s and in "
                          "./bench) or no --python %s", __FILE__, o->python);
    snprintf(it, sizeof(it), "%" PRId64, o->iters);
    snprintf(wu, sizeof(wu), "%d", WARMUP);
    snprintf(world, sizeof(world), "%" PRId64, o->workers);
    if ((st = spawn_reader(o->python, argv, &pid, &f, err)))
        return st;
    kids[KID_GLOO] = pid;
    while (fgets(line, sizeof(line), f))
        if (res->ngloo < o->nsizes &&
            sscanf(line, "{\"size_mib\":%" SCNd64 ",\"iters\":%*d,\"median_s\":%lf,\"min_s\":"
                   "%*f,\"max_s\":%*f,\"algbw_gbs\":%lf", &res->gloo[res->ngloo].size_mib, &med,
                   &res->gloo[res->ngloo].gbs) == 3)
            res->gloo[res->ngloo++].med_ms = med * 1e3;
    fclose(f);
    waitpid(pid, &status, 0);
    kids[KID_GLOO] = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status))
        return ts_err_set(err, TS_EIO, "%s %s failed (wait status 0x%x; its stderr is above)",
                          o->python, script, status);
    if (res->ngloo != o->nsizes)
        return ts_err_set(err, TS_ECORRUPT, "pushpull_gloo.py printed %d of %d result lines",
                          res->ngloo, o->nsizes);
    return TS_OK;
}

/* ---- the machine's limits ---- */

#define LIMIT_REPS 5

/* res->limit_*: per size, a memcpy and a raw loopback TCP stream of S bytes (medians of
 * LIMIT_REPS), for the transports measured. rdma's limit is the device's: bench/rdma.py
 * measures it with ib_write_bw in the same run. */
static void measure_limits(const struct opts *o, struct results *res)
{
    for (int i = 0; i < o->nsizes; i++) {
        size_t bytes = (size_t)o->sizes[i] * MIB;
        for (int t = 0; t < o->ntp; t++) {
            bool shm = strcmp(o->tp[t], "shm") == 0;
            if (!shm && strcmp(o->tp[t], "tcp") != 0)
                continue;
            char *a = shm ? malloc(bytes) : NULL, *b = shm ? malloc(bytes) : NULL;
            fprintf(stderr, "limit of %s at %" PRId64 " MiB: %s...\n", o->tp[t], o->sizes[i],
                    shm ? "memcpy" : "a loopback tcp stream");
            if (a && b) {
                memset(a, 1, bytes);
                memset(b, 2, bytes);
                res->limit_memcpy[i] = bench_memcpy_gbps(b, a, bytes, LIMIT_REPS);
            }
            if (!shm)
                res->limit_tcp[i] =
                    bench_tcp_stream_gbps(bytes, LIMIT_REPS, &res->limit_tcp_cpu[i]);
            free(a);
            free(b);
        }
    }
}

/* ---- main ---- */

/* s: a comma-separated list of distinct names out of names[0..n): them in order into out,
 * and their count; 0 if s is anything else. */
static int pick_list(const char *s, const char *const *names, int n, const char **out)
{
    int count = 0;

    for (const char *p = s; *p;) {
        size_t len = strcspn(p, ",");
        int k = 0;
        while (k < n && !(strlen(names[k]) == len && strncmp(p, names[k], len) == 0))
            k++;
        if (k == n || count == n)
            return 0;
        for (int j = 0; j < count; j++)
            if (out[j] == names[k])
                return 0;
        out[count++] = names[k];
        p += len;
        if (*p && !*++p)
            return 0;   /* a trailing comma */
    }
    return count;
}

static ts_status parse_lists(struct opts *o, struct ts_err *err)
{
    static const char *const transports[PP_MAX_TRANSPORTS] = { "shm", "tcp", "rdma" };
    static const char *const buffer_kinds[] = { "own", "shared" };
    const char *p = o->sizes_s, *kinds[2];
    char *end;

    for (o->nsizes = 0; *p; p = *end ? end + 1 : end) {
        long long v = strtoll(p, &end, 10);
        if ((*end && *end != ',') || v < 1 || v > 1024 || o->nsizes == MAX_SIZES)
            return ts_err_set(err, TS_EINVAL, "--sizes %s: up to %d sizes of 1..1024 MiB, "
                              "comma-separated", o->sizes_s, MAX_SIZES);
        o->sizes[o->nsizes++] = v;
    }
    if (!(o->ntp = pick_list(o->transports_s, transports, PP_MAX_TRANSPORTS, o->tp)) ||
        !o->nsizes)
        return ts_err_set(err, TS_EINVAL, "--transports %s: some of shm, tcp and rdma, "
                          "comma-separated; --sizes: at least one", o->transports_s);
    if (!(o->nbuf = pick_list(o->buffers_s, buffer_kinds, 2, kinds)))
        return ts_err_set(err, TS_EINVAL, "--buffers %s: own, shared, own,shared or "
                          "shared,own", o->buffers_s);
    for (int i = 0; i < o->nbuf; i++)
        o->buf[i] = strcmp(kinds[i], "shared") == 0;
    return TS_OK;
}

/* --replicas within --shards; a partition no larger than the smallest tensor (else it would be
 * one partition on one shard). */
static ts_status check_counts(const struct opts *o, struct ts_err *err)
{
    int64_t least = o->sizes[0];

    for (int i = 1; i < o->nsizes; i++)
        least = o->sizes[i] < least ? o->sizes[i] : least;
    if (o->replicas > o->shards)
        return ts_err_set(err, TS_EINVAL, "--replicas %" PRId64 ": more than the %" PRId64
                          " shards (--shards)", o->replicas, o->shards);
    if (o->partition_kib > least * 1024)
        return ts_err_set(err, TS_EINVAL, "--partition-kib %" PRId64 ": larger than the %"
                          PRId64 " MiB tensor (--sizes); want at most %" PRId64 " to spread it "
                          "over the %" PRId64 " shards", o->partition_kib, least,
                          least * 1024 / o->shards, o->shards);
    return TS_OK;
}

int main(int argc, char **argv)
{
    static const char about[] =
        "Push+pull of one tensor through --shards shards (2) by --workers\n"
        "worker processes (2; tessera_step), per transport, against gloo\n"
        "all_reduce of the same bytes between as many ranks\n"
        "(bench/pushpull_gloo.py). Each run is done with\n"
        "the worker's own buffers (\"shm\") and with tessera_buffers' zero-copy\n"
        "ones (\"shm+buffers\": the gradient is written there once, the params\n"
        "pointer is the shard's values mapped read-only; like gloo, in place).\n"
        "Prints tables and writes JSON whose headline is the best run against\n"
        "gloo at 64 MiB, and headline_copy the best with own buffers.";
    struct opts o = { 0 };
    const struct ts_flag flags[] = {
        { "bin", TS_FLAG_STR, &o.bin, "DIR", "tessera-master, -shard (default: our dir)", 0, 0 },
        { "sizes", TS_FLAG_STR, &o.sizes_s, "LIST", "MiB (default 4,64,256; 64 is the "
          "headline)", 0, 0 },
        { "iters", TS_FLAG_INT, &o.iters, "N", "timed steps after 2 warm-up (default 10)", 1,
          MAX_ITERS },
        { "transports", TS_FLAG_STR, &o.transports_s, "LIST", "some of shm, tcp, rdma "
          "(default shm,tcp)", 0, 0 },
        { "host", TS_FLAG_STR, &o.host, "ADDR", "the shards listen on ADDR (default "
          "127.0.0.1); rdma needs a verbs device's address (make bench-rdma)", 0, 0 },
        { "buffers", TS_FLAG_STR, &o.buffers_s, "LIST", "own, shared (tessera_buffers) or "
          "both: default own,shared", 0, 0 },
        { "exact", TS_FLAG_BOOL, &o.exact, NULL, "also measure exact mode, with int64 pushes (exact) and float ones (exact-f32)", 0, 0 },
        { "replicas", TS_FLAG_INT, &o.replicas, "R", "the master's --replicas: 2 makes every "
          "partition a chain of 2 shards (default 1; bench/recovery.py compares)", 1,
          PP_MAX_SHARDS },
        { "workers", TS_FLAG_INT, &o.workers, "N", "worker processes, and gloo's ranks "
          "(default 2)", 2, PP_MAX_WORKERS },
        { "shards", TS_FLAG_INT, &o.shards, "N", "shard processes (default 2)", 1,
          PP_MAX_SHARDS },
        { "partition-kib", TS_FLAG_INT, &o.partition_kib, "K", "the tensor's partition size "
          "(default: the SDK's, 4 MiB); at most the smallest size", 1, 131072 },
        { "out", TS_FLAG_STR, &o.out, "FILE", "default bench/results/pushpull.json", 0, 0 },
        { "python", TS_FLAG_STR, &o.python, "PATH", "python3 with torch (/usr/bin/python3)", 0,
          0 },
        { "quick", TS_FLAG_BOOL, &o.quick, NULL, "sizes 4,64, 3 steps (flags given win)", 0, 0 },
        { "tls", TS_FLAG_STR, &o.tls, "DIR", "mutual TLS with the certificates of DIR "
          "(`tessera certs init DIR --shards N`: shard i shows shard-i.pem): every gRPC call, "
          "and the data-plane handshake, with frame MACs on tcp (docs/security.md)", 0, 0 },
        { "no-gloo", TS_FLAG_BOOL, &o.no_gloo, NULL, "Tessera's runs alone, no gloo baseline "
          "(bench/security.py compares two clusters)", 0, 0 },
        { "metrics-port", TS_FLAG_INT, &o.metrics_port, "BASE", "shard i serves Prometheus "
          "metrics on BASE + i, scraped every second while the runs go (bench/metrics.py)", 1,
          65000 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    struct ts_err err = { 0 };
    static struct results res;
    char exe_dir[PATH_MAX];
    int done;
    bool ok = true;

    if (argc > 1 && strcmp(argv[1], "--worker") == 0)
        return pushpull_worker_main(argc - 2, argv + 2);
    if ((done = ts_flags_program("bench_pushpull", NULL, about, flags, argc, argv)) >= 0)
        return done;
    o.sizes_s = o.sizes_s ? o.sizes_s : o.quick ? "4,64" : "4,64,256";
    o.iters = o.iters ? o.iters : o.quick ? 3 : 10;
    o.transports_s = o.transports_s ? o.transports_s : "shm,tcp";
    o.host = o.host ? o.host : "127.0.0.1";
    o.buffers_s = o.buffers_s ? o.buffers_s : "own,shared";
    o.out = o.out ? o.out : "bench/results/pushpull.json";
    o.python = o.python ? o.python : "/usr/bin/python3";
    o.workers = o.workers ? o.workers : 2;
    o.shards = o.shards ? o.shards : 2;
    if (parse_lists(&o, &err) || check_counts(&o, &err)) {
        fprintf(stderr, "bench_pushpull: %s\n", err.msg);
        return 2;
    }
    if (!o.bin && ts_proc_exe_dir(exe_dir, sizeof(exe_dir), &err)) {
        fprintf(stderr, "bench_pushpull: %s\n", err.msg);
        return 1;
    }
    o.bin = o.bin ? o.bin : exe_dir;
    if (o.tls)   /* the workers (and our own calls) show the client certificate */
        setenv("TESSERA_TLS_DIR", o.tls, 1);
    signal(SIGINT, on_sig);
    signal(SIGTERM, on_sig);
    signal(SIGHUP, on_sig);
    signal(SIGPIPE, SIG_IGN);
    bench_machine_desc(res.machine, sizeof(res.machine));
    if (!o.no_gloo)
        fprintf(stderr, "gloo all_reduce, %" PRId64 " ranks, sizes %s MiB...\n", o.workers,
                o.sizes_s);
    if (!o.no_gloo && run_gloo(&o, &res, &err)) {
        fprintf(stderr, "bench_pushpull: gloo: %s\n", err.msg);
        snprintf(res.gloo_error, sizeof(res.gloo_error), "%s", err.msg);
        ok = false;
    }
    scraper.base = o.metrics_port;
    scraper.nshards = (int)o.shards;
    if (o.metrics_port && pthread_create(&scraper.thread, NULL, scrape_main, NULL)) {
        fprintf(stderr, "bench_pushpull: cannot start the scraper thread\n");
        return 1;
    }
    measure_limits(&o, &res);
    for (int t = 0; t < o.ntp; t++)
        ok = run_transport(&o, o.tp[t], &res) && ok;
    if (o.metrics_port) {
        atomic_store(&scraper.stop, true);
        pthread_join(scraper.thread, NULL);
        printf("metrics: %llu scrapes of the shards' /metrics answered during the runs\n",
               (unsigned long long)atomic_load(&scraper.scrapes));
    }
    res.scrapes = atomic_load(&scraper.scrapes);
    pushpull_report(&o, &res);
    ts_err_clear(&err);
    if (pushpull_write_json(&o, &res, ok, &err)) {
        fprintf(stderr, "bench_pushpull: %s\n", err.msg);
        return 1;
    }
    printf("wrote %s%s\n", o.out, ok ? "" : " (marked \"ok\": false: see the errors above)");
    return ok ? 0 : 1;
}
