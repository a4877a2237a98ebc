/* pushpull.c - bench_pushpull: how fast does one training step move a tensor through the shards?
 *
 * Why: a data-parallel step through a parameter server is a push of the gradient and a pull of
 * the parameters; the alternative is an all-reduce of the gradient. The issue sets the goals
 * against PyTorch's gloo all_reduce on the same machine: at 64 MiB, the best transport at least
 * 2x gloo's algbw, and TCP at least 0.8x. This program measures both sides:
 *   gloo    bench/pushpull_gloo.py: 2 ranks, all_reduce of a float32 tensor of S bytes;
 *   ours    for each transport T: a tessera-master and 2 tessera-shard --transport T (only that
 *           data plane offered), then per size 2 worker processes (ranks 0 and 1), each this
 *           program re-executed in a hidden worker mode, so that no gRPC state crosses a fork:
 *           tessera_connect (job per size/transport/mode, 2 workers, sgd:lr=1e-9, batch 1),
 *           register one float tensor of S bytes (4 MiB partitions, spread over the shards by
 *           the ring), pull version 0, 2 warm-up steps, then N timed tessera_step calls (push S
 *           bytes of gradient, pull S bytes of parameters). With --exact, again in exact mode
 *           (the gradient travels as int64 fixed point: the push carries 2 S bytes).
 * A step's time is the slower worker's (BSP: each step ends when both are through it); the
 * figure is the median over the timed steps and algbw = S / time (GB/s = 1e9 B/s), the same
 * definition as an all-reduce's algbw. Workers report on a pipe: "ready" after the warm-up (the
 * parent then samples the shards' CPU time), then their step times and CPU time.
 * Every process is stopped by pid at the end, on errors and on signals, and each child gets
 * PR_SET_PDEATHSIG so it cannot outlive us. Output: two tables and bench/results/pushpull.json
 * with the headline "best transport at 64 MiB against gloo at 64 MiB". */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "benchlib.h"
#include "client/master_client.h"
#include "tessera.h"
#include "util/flags.h"
#include "util/json.h"
#include "util/proc.h"

#define WARMUP 2
#define MIB ((uint64_t)1 << 20)
#define MAX_SIZES 8
#define MAX_ITERS 10000
#define NSHARDS 2
#define NWORKERS 2
#define STEP_TIMEOUT_MS 60000      /* a worker stuck on a pull gives up after this */
#define SHARD_WAIT_MS 15000        /* shards must be in the map within this */
#define HEADLINE_MIB 64
/* The issue asked for lr = 0 (parameters that never change); lib/tensor refuses lr <= 0, so the
 * smallest step that is still an SGD step: the apply pass costs the same for any lr. */
#define OPTIMIZER "sgd:lr=1e-9"
#define GOAL_BEST 2.0              /* best transport / gloo at 64 MiB */
#define GOAL_TCP 0.8               /* tcp / gloo at 64 MiB */

struct opts {
    const char *bin, *sizes_s, *transports_s, *out, *python;
    int64_t iters;
    bool exact, quick, phases;
    int64_t sizes[MAX_SIZES];
    int nsizes;
    const char *tp[2];
    int ntp;
};

/* One transport, mode and size. Times are per step in ms; CPU is summed over the processes. */
struct run {
    const char *transport;
    bool exact, done;
    int64_t size_mib;
    double med_ms, min_ms, max_ms, gbs, push_ms, worker_cpu_ms, shard_cpu_ms, other_cpu_ms;
};

struct gloo {
    int64_t size_mib;
    double med_ms, gbs;
};

struct results {
    char machine[192];
    struct run runs[2 * 2 * MAX_SIZES];
    int nruns;
    struct gloo gloo[MAX_SIZES];
    int ngloo;
    char gloo_error[256];
};

struct cluster {
    struct master m;
    pid_t shard[NSHARDS];
};

/* Children other than the master, for the signal handler (benchlib stops the master). */
static volatile pid_t kids[NSHARDS + NWORKERS];

static void on_sig(int sig)
{
    for (size_t i = 0; i < sizeof(kids) / sizeof(kids[0]); i++)
        if (kids[i] > 0)
            kill(kids[i], SIGTERM);
    on_signal(sig);
}

/* ---- the worker (hidden mode: bench_pushpull --worker ...) ---- */

struct wopts {
    const char *master, *job, *transport;
    int64_t rank, bytes, iters;
    bool exact, phases;
};

static int werr(const struct wopts *w, const char *what, const struct tessera_error *e)
{
    fprintf(stderr, "bench_pushpull worker %" PRId64 ": %s: %s\n", w->rank, what, e->message);
    return 1;
}

/* One step: tessera_step, or with --phases the same frames as tessera_push then tessera_pull,
 * timing the push (which ends when this worker's pushes are acknowledged) on its own. */
static int one_step(tessera *t, const struct wopts *w, int id, uint64_t s,
                    const void *const *grads, float *const *params, int64_t *push_ns,
                    struct tessera_error *e)
{
    int64_t t0 = now_ns();
    int rc;

    if (!w->phases)
        return tessera_step(t, s, grads, params, e);
    if ((rc = tessera_push(t, id, s, grads[0], e)))
        return rc;
    *push_ns = now_ns() - t0;
    return tessera_pull(t, id, s + 1, params[0], e);
}

/* Connects, registers, warms up, says "ready", times the steps, prints one line:
 * "TRANSPORT CPU_NS NS1 .. NSn", followed with --phases by the n push times. */
static int worker_run(const struct wopts *w, float *params, void *grad, int64_t *ns)
{
    struct tessera_options to = { .master = w->master, .job = w->job, .rank = (unsigned)w->rank,
                                  .workers = NWORKERS, .exact = w->exact,
                                  .optimizer = OPTIMIZER, .batch = 1,
                                  .transport = w->transport, .timeout_ms = STEP_TIMEOUT_MS };
    uint64_t shape[1] = { (uint64_t)w->bytes / sizeof(float) };
    const void *grads[1] = { grad };
    float *pp[1] = { params };
    struct tessera_error e;
    int64_t cpu0 = 0, t0, push_ns = 0;
    tessera *t;
    int id, rc = 0;

    if (tessera_connect(&to, &t, &e))
        return werr(w, "connect", &e);
    if (tessera_register(t, "x", shape, 1, "zeros", 1, 0, 0, 0, &id, &e) ||
        tessera_pull(t, id, 0, params, &e)) {
        rc = werr(w, "register/pull version 0", &e);
        goto out_close;
    }
    for (int64_t s = 0; s < WARMUP + w->iters; s++) {
        if (s == WARMUP) {
            printf("ready\n");
            fflush(stdout);
            cpu0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
        }
        t0 = now_ns();
        if (one_step(t, w, id, (uint64_t)s, grads, pp, &push_ns, &e)) {
            rc = werr(w, "step", &e);
            goto out_close;
        }
        if (s >= WARMUP) {
            ns[s - WARMUP] = now_ns() - t0;
            ns[w->iters + s - WARMUP] = push_ns;
        }
    }
    printf("%s %" PRId64, tessera_transport(t), clock_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu0);
    for (int64_t i = 0; i < (w->phases ? 2 : 1) * w->iters; i++)
        printf(" %" PRId64, ns[i]);
    printf("\n");
    fflush(stdout);
out_close:
    tessera_close(t);
    return rc;
}

static int worker_main(int argc, char **argv)
{
    struct wopts w = { 0 };
    const struct ts_flag flags[] = {
        { "master", TS_FLAG_STR, &w.master, "ADDR", "master", 0, 0 },
        { "job", TS_FLAG_STR, &w.job, "ID", "job id", 0, 0 },
        { "transport", TS_FLAG_STR, &w.transport, "NAME", "shm or tcp", 0, 0 },
        { "rank", TS_FLAG_INT, &w.rank, "R", "rank", 0, NWORKERS - 1 },
        { "bytes", TS_FLAG_INT, &w.bytes, "S", "tensor bytes", 4, INT64_MAX },
        { "iters", TS_FLAG_INT, &w.iters, "N", "timed steps", 1, MAX_ITERS },
        { "exact", TS_FLAG_BOOL, &w.exact, NULL, "exact mode", 0, 0 },
        { "phases", TS_FLAG_BOOL, &w.phases, NULL, "push and pull timed apart", 0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    struct tessera_error e = { 0 };
    struct ts_err err = { 0 };
    size_t n, gsize;
    int64_t *ns;
    float *params, *g;
    void *grad;
    int npos = 0, rc;
    bool help;

    if (ts_flags_parse(flags, argc, argv, NULL, &npos, &help, &err) || help || !w.master ||
        !w.job || !w.iters || !w.bytes) {
        fprintf(stderr, "bench_pushpull --worker: %s\n", err.msg[0] ? err.msg : "bad arguments");
        return 2;
    }
    n = (size_t)w.bytes / sizeof(float);
    gsize = w.exact ? sizeof(int64_t) : sizeof(float);
    params = malloc(n * sizeof(float));
    grad = malloc(n * gsize);
    g = w.exact ? malloc(n * sizeof(float)) : grad;
    ns = calloc((size_t)(2 * w.iters), sizeof(*ns));
    if (!params || !grad || !g || !ns) {
        fprintf(stderr, "bench_pushpull worker: out of memory for %" PRId64 " bytes\n", w.bytes);
        return 1;
    }
    /* The value does not matter (lr = 0); what matters is that every page is touched. The
     * exact gradient is converted once here: conversion is the trainer's work, not the step's. */
    for (size_t i = 0; i < n; i++)
        g[i] = 1e-3f * (float)(i % 7);
    if (w.exact && tessera_to_fixed(g, n, grad, &e))
        return werr(&w, "to_fixed", &e);
    rc = worker_run(&w, params, grad, ns);
    if (g != grad)
        free(g);
    free(params);
    free(grad);
    free(ns);
    return rc;
}

/* ---- the cluster: a master and NSHARDS shards offering one transport ---- */

static ts_status shard_start(const char *bin, const char *master, const char *tp, pid_t *pid,
                             struct ts_err *err)
{
    char exe[PATH_MAX];
    pid_t parent = getpid();

    snprintf(exe, sizeof(exe), "%s/tessera-shard", bin);
    if (access(exe, X_OK) != 0)
        return ts_err_set(err, TS_ENOTFOUND, "--bin: no executable %s (%s)", exe,
                          strerror(errno));
    char *argv[] = { exe, "--master", (char *)master, "--listen", "127.0.0.1:0",
                     "--transport", (char *)tp, "--grace-ms", "1000", NULL };
    if ((*pid = fork()) == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        execv(exe, argv);
        _exit(127);
    }
    if (*pid < 0) {
        *pid = 0;
        return ts_err_set(err, TS_EIO, "fork: %s", strerror(errno));
    }
    return TS_OK;
}

/* SIGTERM, then SIGKILL after 5 s. */
static void child_stop(pid_t *pid)
{
    int64_t until = ts_now_ms() + 5000;
    int status;

    if (*pid <= 0)
        return;
    kill(*pid, SIGTERM);
    while (waitpid(*pid, &status, WNOHANG) == 0) {
        if (ts_now_ms() > until) {
            kill(*pid, SIGKILL);
            waitpid(*pid, &status, 0);
            break;
        }
        ts_sleep_ms(10);
    }
    *pid = 0;
}

static bool map_ready(const Tessera__V1__ShardMap *map, const char *tp)
{
    size_t ok = 0;

    for (size_t i = 0; i < map->n_shards; i++)
        for (size_t k = 0; k < map->shards[i]->n_data_planes; k++)
            if (strcmp(map->shards[i]->data_planes[k]->transport, tp) == 0) {
                ok++;
                break;
            }
    return map->n_shards == NSHARDS && ok == NSHARDS;
}

/* Waits until the master's map holds NSHARDS shards, each offering tp. */
static ts_status wait_shards(const struct cluster *c, const char *tp, struct ts_err *err)
{
    int64_t until = ts_now_ms() + SHARD_WAIT_MS;
    struct ts_master *mc;
    ts_status st;
    bool ready = false;

    if ((st = ts_master_open(c->m.target, &mc, err)))
        return st;
    while (!ready && !st) {
        Tessera__V1__ShardMap *map;
        int status;
        for (int i = 0; i < NSHARDS; i++)
            if (waitpid(c->shard[i], &status, WNOHANG) == c->shard[i])
                st = ts_err_set(err, TS_EUNAVAIL, "tessera-shard --transport %s exited (wait "
                                "status 0x%x); its stderr is above", tp, status);
        if (!st && !ts_master_shard_map(mc, &map, NULL)) {
            ready = map_ready(map, tp);
            tessera__v1__shard_map__free_unpacked(map, NULL);
        }
        if (!st && !ready && ts_now_ms() > until)
            st = ts_err_set(err, TS_ETIMEDOUT, "%d shards offering %s not in the map after %d ms",
                            NSHARDS, tp, SHARD_WAIT_MS);
        if (!st && !ready)
            ts_sleep_ms(50);
    }
    ts_master_close(mc);
    return st;
}

static void cluster_stop(struct cluster *c)
{
    for (int i = 0; i < NSHARDS; i++) {
        child_stop(&c->shard[i]);
        kids[i] = 0;
    }
    master_stop(&c->m);
}

static ts_status cluster_start(const struct opts *o, const char *tp, struct cluster *c,
                               struct ts_err *err)
{
    ts_status st;

    memset(c, 0, sizeof(*c));
    if ((st = master_start(o->bin, &c->m, err)))
        return st;
    for (int i = 0; i < NSHARDS && !st; i++)
        if (!(st = shard_start(o->bin, c->m.target, tp, &c->shard[i], err)))
            kids[i] = c->shard[i];
    return st ? st : wait_shards(c, tp, err);
}

static uint64_t shard_ticks(const struct cluster *c)
{
    uint64_t sum = 0, t;

    for (int i = 0; i < NSHARDS; i++)
        if (!proc_cpu_ticks(c->shard[i], &t, NULL))
            sum += t;
    return sum;
}

/* ---- one measurement: 2 workers against the cluster ---- */

struct wchild {
    pid_t pid;
    FILE *out;                 /* its stdout */
    char line[2 * MAX_ITERS * 21 + 64];
};

/* Forks and re-executes this binary in worker mode, stdout on a pipe. argv is built before the
 * fork: the child only calls async-signal-safe functions before execv. */
static ts_status worker_spawn(const struct opts *o, const struct cluster *c, const struct run *r,
                              int rank, struct wchild *w, struct ts_err *err)
{
    char job[64], rk[8], bytes[24], iters[24], *argv[20];
    pid_t parent = getpid();
    int fds[2], n = 0;

    snprintf(job, sizeof(job), "pp-%d-%s-%" PRId64 "-%s", (int)parent, r->transport,
             r->size_mib, r->exact ? "x" : "f");
    snprintf(rk, sizeof(rk), "%d", rank);
    snprintf(bytes, sizeof(bytes), "%" PRIu64, (uint64_t)r->size_mib * MIB);
    snprintf(iters, sizeof(iters), "%" PRId64, o->iters);
    argv[n++] = "bench_pushpull";
    argv[n++] = "--worker";
    argv[n++] = "--master";
    argv[n++] = (char *)c->m.target;
    argv[n++] = "--job";
    argv[n++] = job;
    argv[n++] = "--rank";
    argv[n++] = rk;
    argv[n++] = "--bytes";
    argv[n++] = bytes;
    argv[n++] = "--iters";
    argv[n++] = iters;
    argv[n++] = "--transport";
    argv[n++] = (char *)r->transport;
    if (r->exact)
        argv[n++] = "--exact";
    if (o->phases)
        argv[n++] = "--phases";
    argv[n] = NULL;
    if (pipe2(fds, O_CLOEXEC) != 0)
        return ts_err_set(err, TS_EIO, "pipe: %s", strerror(errno));
    if ((w->pid = fork()) == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent || dup2(fds[1], STDOUT_FILENO) < 0)
            _exit(1);
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    close(fds[1]);
    if (w->pid < 0) {
        w->pid = 0;
        close(fds[0]);
        return ts_err_set(err, TS_EIO, "fork: %s", strerror(errno));
    }
    if (!(w->out = fdopen(fds[0], "r"))) {
        close(fds[0]);
        return ts_err_set(err, TS_EIO, "fdopen: %s", strerror(errno));
    }
    return TS_OK;
}

static ts_status read_line(struct wchild *w, int rank, const char *what, struct ts_err *err)
{
    if (!fgets(w->line, sizeof(w->line), w->out))
        return ts_err_set(err, TS_EUNAVAIL, "worker %d ended before its %s line (its stderr "
                          "is above)", rank, what);
    return TS_OK;
}

/* Parses "TRANSPORT CPU_NS NS..." into ns[] and *cpu_ns. */
static ts_status parse_result(const struct run *r, const char *line, int64_t n, int64_t *ns,
                              int64_t *cpu_ns, struct ts_err *err)
{
    char tp[16], *end;
    int used = 0;

    if (sscanf(line, "%15s %" SCNd64 "%n", tp, cpu_ns, &used) != 2)
        return ts_err_set(err, TS_ECORRUPT, "worker printed '%.80s'", line);
    if (strcmp(tp, r->transport) != 0)
        return ts_err_set(err, TS_ESTATE, "worker used transport %s, not %s", tp, r->transport);
    line += used;
    for (int64_t i = 0; i < n; i++, line = end)
        if ((ns[i] = strtoll(line, &end, 10)) <= 0 || end == line)
            return ts_err_set(err, TS_ECORRUPT, "worker printed %" PRId64 " of %" PRId64
                              " step times", i, n);
    return TS_OK;
}

static double median_ms(int64_t *ns, int64_t n)
{
    for (int64_t i = 1; i < n; i++) /* insertion sort: n is small */
        for (int64_t k = i; k > 0 && ns[k - 1] > ns[k]; k--) {
            int64_t t = ns[k];
            ns[k] = ns[k - 1];
            ns[k - 1] = t;
        }
    return (n % 2 ? (double)ns[n / 2] : (double)(ns[n / 2 - 1] + ns[n / 2]) / 2) / 1e6;
}

/* Busy CPU time of the whole machine (every CPU), in clock ticks: /proc/stat's first line. */
static uint64_t machine_busy_ticks(void)
{
    unsigned long long v[8] = { 0 };
    FILE *f = fopen("/proc/stat", "r");
    int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                       &v[3], &v[4], &v[5], &v[6], &v[7]) : 0;

    if (f)
        fclose(f);
    if (n != 8)
        return 0;
    return v[0] + v[1] + v[2] + v[5] + v[6] + v[7]; /* all but idle and iowait */
}

/* The median of each step's slower worker: a step ends when both are through it. ns holds
 * NWORKERS series of stride values each; the first n of each are used (and reordered). */
static double slower_median(int64_t *ns, int64_t n, int64_t stride, double *min, double *max)
{
    double med;

    for (int64_t i = 0; i < n; i++)
        for (int k = 1; k < NWORKERS; k++)
            ns[i] = ns[i] > ns[k * stride + i] ? ns[i] : ns[k * stride + i];
    med = median_ms(ns, n);
    if (min)
        *min = (double)ns[0] / 1e6;
    if (max)
        *max = (double)ns[n - 1] / 1e6;
    return med;
}

/* Reads both workers' lines: "ready" (then the CPU clocks are sampled), then the results. */
static ts_status collect(const struct opts *o, const struct cluster *c, struct run *r,
                         struct wchild *w, struct ts_err *err)
{
    int64_t n = o->iters, per = (o->phases ? 2 : 1) * n, cpu = 0, wcpu = 0;
    int64_t *ns = calloc((size_t)(NWORKERS * per), sizeof(*ns));
    double tick_ms = 1e3 / (double)sysconf(_SC_CLK_TCK);
    uint64_t t0 = 0, b0 = 0;
    ts_status st = TS_OK;

    if (!ns)
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    for (int k = 0; k < NWORKERS && !st; k++)
        st = read_line(&w[k], k, "ready", err);
    t0 = shard_ticks(c);
    b0 = machine_busy_ticks();
    for (int k = 0; k < NWORKERS && !st; k++) {
        if (!(st = read_line(&w[k], k, "result", err)))
            st = parse_result(r, w[k].line, per, ns + k * per, &cpu, err);
        wcpu += cpu;
    }
    if (!st) {
        r->shard_cpu_ms = (double)(shard_ticks(c) - t0) * tick_ms / (double)n;
        r->worker_cpu_ms = (double)wcpu / 1e6 / (double)n;
        r->other_cpu_ms = (double)(machine_busy_ticks() - b0) * tick_ms / (double)n -
                          r->shard_cpu_ms - r->worker_cpu_ms;
        if (o->phases) /* before the step times, which the next call reorders */
            r->push_ms = slower_median(ns + n, n, per, NULL, NULL);
        r->med_ms = slower_median(ns, n, per, &r->min_ms, &r->max_ms);
        r->gbs = (double)((uint64_t)r->size_mib * MIB) / (r->med_ms * 1e6);
        r->done = true;
    }
    free(ns);
    return st;
}

static ts_status run_one(const struct opts *o, const struct cluster *c, struct run *r,
                         struct ts_err *err)
{
    static struct wchild w[NWORKERS];   /* big line buffers: not on the stack */
    ts_status st = TS_OK;
    int status;

    memset(w, 0, sizeof(w));
    fprintf(stderr, "  %s %s %" PRId64 " MiB: %d + %" PRId64 " steps...\n", r->transport,
            r->exact ? "exact" : "float", r->size_mib, WARMUP, o->iters);
    for (int k = 0; k < NWORKERS && !st; k++)
        if (!(st = worker_spawn(o, c, r, k, &w[k], err)))
            kids[NSHARDS + k] = w[k].pid;
    if (!st)
        st = collect(o, c, r, w, err);
    for (int k = 0; k < NWORKERS; k++) {
        if (st && w[k].pid > 0)
            kill(w[k].pid, SIGTERM); /* the other one would wait for it at the next step */
        if (w[k].out)
            fclose(w[k].out);
    }
    for (int k = 0; k < NWORKERS; k++) {
        if (w[k].pid > 0 && waitpid(w[k].pid, &status, 0) == w[k].pid && !st &&
            (!WIFEXITED(status) || WEXITSTATUS(status)))
            st = ts_err_set(err, TS_EINTERNAL, "worker %d: wait status 0x%x", k, status);
        kids[NSHARDS + k] = 0;
    }
    return st;
}

/* ---- the gloo baseline ---- */

static ts_status find_script(const char *bin, char *buf, size_t n, struct ts_err *err)
{
    const char *slash = strrchr(__FILE__, '/');

    snprintf(buf, n, "%.*s/pushpull_gloo.py", slash ? (int)(slash - __FILE__) : 1,
             slash ? __FILE__ : ".");
    if (access(buf, R_OK) != 0)
        snprintf(buf, n, "%s/../../bench/pushpull_gloo.py", bin);
    if (access(buf, R_OK) != 0)
        snprintf(buf, n, "bench/pushpull_gloo.py");
    if (access(buf, R_OK) != 0)
        return ts_err_set(err, TS_ENOTFOUND, "cannot find pushpull_gloo.py (looked next to %s, "
                          "in %s/../../bench and in ./bench)", __FILE__, bin);
    return TS_OK;
}

static ts_status run_gloo(const struct opts *o, struct results *res, struct ts_err *err)
{
    char script[PATH_MAX], cmd[2 * PATH_MAX + 256], line[512];
    ts_status st;
    FILE *f;
    int rc;

    if ((st = find_script(o->bin, script, sizeof(script), err)))
        return st;
    if (strchr(script, '\'') || strchr(o->python, '\''))
        return ts_err_set(err, TS_EINVAL, "paths with a quote (') are not supported here");
    snprintf(cmd, sizeof(cmd), "'%s' '%s' --sizes %s --iters %" PRId64 " --warmup %d",
             o->python, script, o->sizes_s, o->iters, WARMUP);
    if (!(f = popen(cmd, "r")))
        return ts_err_set(err, TS_EIO, "cannot run %s: %s", o->python, strerror(errno));
    while (fgets(line, sizeof(line), f) && res->ngloo < o->nsizes) {
        struct gloo *g = &res->gloo[res->ngloo];
        double med, mn, mx;
        int64_t it;
        if (sscanf(line, "{\"size_mib\":%" SCNd64 ",\"iters\":%" SCNd64 ",\"median_s\":%lf,"
                   "\"min_s\":%lf,\"max_s\":%lf,\"algbw_gbs\":%lf", &g->size_mib, &it, &med,
                   &mn, &mx, &g->gbs) == 6) {
            g->med_ms = med * 1e3;
            res->ngloo++;
        }
    }
    if ((rc = pclose(f)) != 0)
        return ts_err_set(err, TS_EIO, "%s %s failed (wait status 0x%x; its stderr is above)",
                          o->python, script, rc);
    if (res->ngloo != o->nsizes)
        return ts_err_set(err, TS_ECORRUPT, "pushpull_gloo.py printed %d of %d result lines",
                          res->ngloo, o->nsizes);
    return TS_OK;
}

/* ---- report ---- */

static const struct run *find_run(const struct results *res, const char *tp, bool exact,
                                  int64_t mib)
{
    for (int i = 0; i < res->nruns; i++) {
        const struct run *r = &res->runs[i];
        if (r->done && r->exact == exact && r->size_mib == mib && strcmp(r->transport, tp) == 0)
            return r;
    }
    return NULL;
}

static double gloo_gbs(const struct results *res, int64_t mib)
{
    for (int i = 0; i < res->ngloo; i++)
        if (res->gloo[i].size_mib == mib)
            return res->gloo[i].gbs;
    return 0;
}

/* The headline size: 64 MiB if measured, else the largest. */
static int64_t headline_mib(const struct opts *o)
{
    int64_t best = 0;

    for (int i = 0; i < o->nsizes; i++) {
        if (o->sizes[i] == HEADLINE_MIB)
            return HEADLINE_MIB;
        best = o->sizes[i] > best ? o->sizes[i] : best;
    }
    return best;
}

/* The best float-mode transport's run at mib, or NULL. */
static const struct run *best_run(const struct opts *o, const struct results *res, int64_t mib)
{
    const struct run *best = NULL, *r;

    for (int t = 0; t < o->ntp; t++)
        if ((r = find_run(res, o->tp[t], false, mib)) && (!best || r->gbs > best->gbs))
            best = r;
    return best;
}

static void cell(const struct run *r, double base)
{
    char c[32] = "-";

    if (r && base > 0)
        snprintf(c, sizeof(c), "%.2f (%.2fx)", r->gbs, r->gbs / base);
    else if (r)
        snprintf(c, sizeof(c), "%.2f", r->gbs);
    printf(" | %15s", c);
}

static void print_tables(const struct opts *o, const struct results *res)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

    printf("\nbench_pushpull: %s; loopback; %d workers x %d shards; GB/s = algbw = S / step "
           "time (1e9 B/s);\nmedian of %" PRId64 " steps after %d warm-up; (x) = against gloo "
           "all_reduce of S bytes, 2 ranks\n\n%8s | %10s", res->machine, NWORKERS, NSHARDS,
           o->iters, WARMUP, "size", "gloo GB/s");
    for (int m = 0; m < (o->exact ? 2 : 1); m++)
        for (int t = 0; t < o->ntp; t++) {
            char h[32];
            snprintf(h, sizeof(h), "%s%s GB/s", m ? "exact " : "", o->tp[t]);
            printf(" | %15s", h);
        }
    printf("\n");
    for (int i = 0; i < o->nsizes; i++) {
        double g = gloo_gbs(res, o->sizes[i]);
        char gs[16] = "-";
        if (g > 0)
            snprintf(gs, sizeof(gs), "%.2f", g);
        printf("%4" PRId64 " MiB | %10s", o->sizes[i], gs);
        for (int m = 0; m < (o->exact ? 2 : 1); m++)
            for (int t = 0; t < o->ntp; t++)
                cell(find_run(res, o->tp[t], m == 1, o->sizes[i]), g);
        printf("\n");
    }
    printf("\nwhere the time goes, per step (CPU ms summed over processes, %ld cores = %ld CPU "
           "ms per ms;\nother = the rest of the machine: not ours, so a large figure means a "
           "disturbed run)\n%-11s | %8s | %7s | %7s | %7s | %5s | %10s | %9s | %9s\n", ncpu,
           ncpu, "run", "size", "step ms", "min ms", "push ms", "GB/s", "worker CPU", "shard CPU",
           "other CPU");
    for (int i = 0; i < res->nruns; i++) {
        const struct run *r = &res->runs[i];
        char name[32], push[16] = "-";
        snprintf(name, sizeof(name), "%s %s", r->transport, r->exact ? "exact" : "float");
        if (!r->done) {
            printf("%-11s | %4" PRId64 " MiB | failed\n", name, r->size_mib);
            continue;
        }
        if (o->phases)
            snprintf(push, sizeof(push), "%.1f", r->push_ms);
        printf("%-11s | %4" PRId64 " MiB | %7.1f | %7.1f | %7s | %5.2f | %10.1f | %9.1f | %9.1f\n",
               name, r->size_mib, r->med_ms, r->min_ms, push, r->gbs, r->worker_cpu_ms,
               r->shard_cpu_ms, r->other_cpu_ms);
    }
}

static void print_goals(const struct opts *o, const struct results *res)
{
    int64_t mib = headline_mib(o);
    const struct run *best = best_run(o, res, mib), *tcp = find_run(res, "tcp", false, mib);
    double g = gloo_gbs(res, mib);

    printf("\ngoals at %" PRId64 " MiB (gloo %.2f GB/s):\n", mib, g);
    if (best && g > 0)
        printf("  best transport >= %.1fx gloo: %s %.2f GB/s = %.2fx  %s\n", GOAL_BEST,
               best->transport, best->gbs, best->gbs / g,
               best->gbs / g >= GOAL_BEST ? "met" : "NOT met");
    if (tcp && g > 0)
        printf("  tcp >= %.1fx gloo: %.2f GB/s = %.2fx  %s\n", GOAL_TCP, tcp->gbs, tcp->gbs / g,
               tcp->gbs / g >= GOAL_TCP ? "met" : "NOT met");
    printf("\n");
}

static void machine_desc(char *buf, size_t n)
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

static void json_runs(struct ts_json *j, const struct results *res)
{
    ts_json_arr(j, "gloo");
    for (int i = 0; i < res->ngloo; i++) {
        ts_json_obj(j, NULL);
        ts_json_int(j, "size_mib", res->gloo[i].size_mib);
        ts_json_num(j, "median_ms", (double)round_i(res->gloo[i].med_ms * 100) / 100);
        ts_json_num(j, "algbw_gbs", (double)round_i(res->gloo[i].gbs * 1000) / 1000);
        ts_json_end(j);
    }
    ts_json_end(j);
    if (res->gloo_error[0])
        ts_json_str(j, "gloo_error", res->gloo_error);
    ts_json_arr(j, "runs");
    for (int i = 0; i < res->nruns; i++) {
        const struct run *r = &res->runs[i];
        ts_json_obj(j, NULL);
        ts_json_str(j, "transport", r->transport);
        ts_json_bool(j, "exact", r->exact);
        ts_json_int(j, "size_mib", r->size_mib);
        ts_json_bool(j, "ok", r->done);
        if (r->done) {
            ts_json_num(j, "median_ms", (double)round_i(r->med_ms * 100) / 100);
            ts_json_num(j, "min_ms", (double)round_i(r->min_ms * 100) / 100);
            ts_json_num(j, "max_ms", (double)round_i(r->max_ms * 100) / 100);
            ts_json_num(j, "algbw_gbs", (double)round_i(r->gbs * 1000) / 1000);
            ts_json_num(j, "worker_cpu_ms_per_step", round1(r->worker_cpu_ms));
            ts_json_num(j, "shard_cpu_ms_per_step", round1(r->shard_cpu_ms));
            ts_json_num(j, "other_cpu_ms_per_step", round1(r->other_cpu_ms));
            if (r->push_ms > 0)
                ts_json_num(j, "push_ms", (double)round_i(r->push_ms * 100) / 100);
        }
        ts_json_end(j);
    }
    ts_json_end(j);
}

static ts_status make_parent_dirs(const char *path, struct ts_err *err)
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

static ts_status write_json(const struct opts *o, const struct results *res, bool ok,
                            struct ts_err *err)
{
    int64_t mib = headline_mib(o);
    const struct run *best = best_run(o, res, mib);
    double g = gloo_gbs(res, mib), ours = best ? (double)round_i(best->gbs * 1000) / 1000 : 0;
    char unit[128], *text;
    struct ts_json j;
    ts_status st;
    FILE *f;

    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "name", "pushpull");
    ts_json_str(&j, "machine", res->machine);
    ts_json_bool(&j, "ok", ok);
    ts_json_bool(&j, "quick", o->quick);
    ts_json_int(&j, "workers", NWORKERS);
    ts_json_int(&j, "shards", NSHARDS);
    ts_json_int(&j, "warmup", WARMUP);
    ts_json_int(&j, "iters", o->iters);
    ts_json_bool(&j, "phases", o->phases);
    json_runs(&j, res);
    ts_json_obj(&j, "headline");
    snprintf(unit, sizeof(unit), "GB/s algbw, push+pull of %" PRId64 " MiB, %d workers x %d "
             "shards, one host", mib, NWORKERS, NSHARDS);
    ts_json_num(&j, "ours", ours);
    ts_json_num(&j, "baseline", (double)round_i(g * 1000) / 1000);
    ts_json_str(&j, "unit", unit);
    ts_json_num(&j, "ratio", g > 0 ? (double)round_i(ours / g * 1000) / 1000 : 0);
    if (best)
        ts_json_str(&j, "transport", best->transport);
    ts_json_end(&j);
    ts_json_end(&j);
    text = ts_json_take(&j);
    if (!(st = make_parent_dirs(o->out, err))) {
        f = fopen(o->out, "w");
        if (!f || fprintf(f, "%s\n", text) < 0 || fclose(f) != 0)
            st = ts_err_set(err, TS_EIO, "--out %s: %s", o->out, strerror(errno));
    }
    free(text);
    return st;
}

/* ---- main ---- */

/* One cluster per transport; every size (and mode) on it. False if anything failed. */
static bool run_transport(const struct opts *o, const char *tp, struct results *res)
{
    struct ts_err err = { 0 };
    struct cluster c;
    bool ok = true;

    fprintf(stderr, "%s: a master and %d shards --transport %s\n", tp, NSHARDS, tp);
    if (cluster_start(o, tp, &c, &err)) {
        fprintf(stderr, "bench_pushpull: %s\n", err.msg);
        cluster_stop(&c);
        return false;
    }
    for (int i = 0; i < o->nsizes; i++)
        for (int m = 0; m < (o->exact ? 2 : 1); m++) {
            struct run *r = &res->runs[res->nruns++];
            *r = (struct run){ .transport = tp, .exact = m == 1, .size_mib = o->sizes[i] };
            ts_err_clear(&err);
            if (run_one(o, &c, r, &err)) {
                fprintf(stderr, "bench_pushpull: %s %s %" PRId64 " MiB: %s\n", tp,
                        r->exact ? "exact" : "float", r->size_mib, err.msg);
                ok = false;
            }
        }
    cluster_stop(&c);
    return ok;
}

/* Splits "a,b,c" (s is modified) into at most max fields. */
static int split(char *s, const char **out, int max)
{
    int n = 0;

    for (char *tok = strtok(s, ","); tok && n < max; tok = strtok(NULL, ","))
        out[n++] = tok;
    return n;
}

static ts_status parse_lists(struct opts *o, struct ts_err *err)
{
    static char sz[128], tps[64];
    const char *f[MAX_SIZES + 1];
    int n;

    snprintf(sz, sizeof(sz), "%s", o->sizes_s);
    n = split(sz, f, MAX_SIZES + 1);
    if (n < 1 || n > MAX_SIZES)
        return ts_err_set(err, TS_EINVAL, "--sizes %s: 1 to %d sizes in MiB", o->sizes_s,
                          MAX_SIZES);
    for (o->nsizes = 0; o->nsizes < n; o->nsizes++) {
        char *end;
        long long v = strtoll(f[o->nsizes], &end, 10);
        if (*end || v < 1 || v > 1024)
            return ts_err_set(err, TS_EINVAL, "--sizes: '%s' is not 1..1024 (MiB)",
                              f[o->nsizes]);
        o->sizes[o->nsizes] = v;
    }
    snprintf(tps, sizeof(tps), "%s", o->transports_s);
    o->ntp = split(tps, o->tp, 2);
    for (int i = 0; i < o->ntp; i++)
        if (strcmp(o->tp[i], "shm") && strcmp(o->tp[i], "tcp"))
            return ts_err_set(err, TS_EINVAL, "--transports: '%s' is not shm or tcp", o->tp[i]);
    if (!o->ntp)
        return ts_err_set(err, TS_EINVAL, "--transports: shm, tcp or both");
    return TS_OK;
}

int main(int argc, char **argv)
{
    struct opts o = { 0 };
    const struct ts_flag flags[] = {
        { "bin", TS_FLAG_STR, &o.bin, "DIR", "where tessera-master and tessera-shard are "
                                             "(default: this program's directory)", 0, 0 },
        { "sizes", TS_FLAG_STR, &o.sizes_s, "LIST", "tensor sizes in MiB (default 4,64,256)",
          0, 0 },
        { "iters", TS_FLAG_INT, &o.iters, "N", "timed steps after 2 warm-up (default 10)", 1,
          MAX_ITERS },
        { "transports", TS_FLAG_STR, &o.transports_s, "LIST", "data planes to measure "
                                                              "(default shm,tcp)", 0, 0 },
        { "exact", TS_FLAG_BOOL, &o.exact, NULL, "also measure exact mode (int64 gradients)",
          0, 0 },
        { "out", TS_FLAG_STR, &o.out, "FILE", "results (default bench/results/pushpull.json)",
          0, 0 },
        { "python", TS_FLAG_STR, &o.python, "PATH", "python3 with torch (default "
                                                    "/usr/bin/python3)", 0, 0 },
        { "phases", TS_FLAG_BOOL, &o.phases, NULL, "time the push apart (tessera_push, then "
                                                   "tessera_pull: the same frames)", 0, 0 },
        { "quick", TS_FLAG_BOOL, &o.quick, NULL, "smoke run: sizes 4,64, 3 steps (explicit "
                                                 "flags still win)", 0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    struct ts_err err = { 0 };
    struct results res = { 0 };
    char exe_dir[PATH_MAX];
    int npos = 0;
    bool help, ok = true;

    if (argc > 1 && strcmp(argv[1], "--worker") == 0)
        return worker_main(argc - 2, argv + 2);
    if (ts_flags_parse(flags, argc - 1, argv + 1, NULL, &npos, &help, &err)) {
        fprintf(stderr, "bench_pushpull: %s\n", err.msg);
        return 2;
    }
    if (help) {
        ts_flags_usage(stdout, "bench_pushpull [options]",
                       "Push+pull of one tensor through 2 shards by 2 worker processes\n"
                       "(tessera_step), per transport, against gloo all_reduce of the same\n"
                       "bytes between 2 ranks (bench/pushpull_gloo.py). Prints tables and\n"
                       "writes JSON whose headline is the best transport against gloo at 64 MiB.",
                       flags);
        return 0;
    }
    o.sizes_s = o.sizes_s ? o.sizes_s : o.quick ? "4,64" : "4,64,256";
    o.iters = o.iters ? o.iters : o.quick ? 3 : 10;
    o.transports_s = o.transports_s ? o.transports_s : "shm,tcp";
    o.out = o.out ? o.out : "bench/results/pushpull.json";
    o.python = o.python ? o.python : "/usr/bin/python3";
    if (parse_lists(&o, &err)) {
        fprintf(stderr, "bench_pushpull: %s\n", err.msg);
        return 2;
    }
    if (!o.bin) {
        if (ts_proc_exe_dir(exe_dir, sizeof(exe_dir), &err)) {
            fprintf(stderr, "bench_pushpull: %s\n", err.msg);
            return 1;
        }
        o.bin = exe_dir;
    }
    signal(SIGINT, on_sig);
    signal(SIGTERM, on_sig);
    signal(SIGHUP, on_sig);
    signal(SIGPIPE, SIG_IGN);
    machine_desc(res.machine, sizeof(res.machine));
    fprintf(stderr, "gloo all_reduce, 2 ranks, sizes %s MiB...\n", o.sizes_s);
    if (run_gloo(&o, &res, &err)) {
        fprintf(stderr, "bench_pushpull: gloo: %s\n", err.msg);
        snprintf(res.gloo_error, sizeof(res.gloo_error), "%s", err.msg);
        ok = false;
    }
    for (int t = 0; t < o.ntp; t++)
        ok = run_transport(&o, o.tp[t], &res) && ok;
    print_tables(&o, &res);
    print_goals(&o, &res);
    ts_err_clear(&err);
    if (write_json(&o, &res, ok, &err)) {
        fprintf(stderr, "bench_pushpull: %s\n", err.msg);
        return 1;
    }
    printf("wrote %s%s\n", o.out, ok ? "" : " (marked \"ok\": false: see the errors above)");
    return ok ? 0 : 1;
}
