/* rpc_latency.c - bench_rpc_latency: is the master's control path fast enough?
 *
 * Why: every worker and shard heartbeats the master, and `tessera status` and the SDK call
 * ClusterStatus; the goal (issue "bench/rpc_latency") is a ClusterStatus p99 under 1 ms on
 * loopback. This program measures it end to end through lib/rpc, the client the services use:
 *   1. ClusterStatus from one C channel: 200 warm-up calls, then N sequential calls, on a master
 *      with no members (a reply of a few dozen bytes; with W workers registered the reply grows
 *      by ~45 bytes a worker, so that case is timed on its own at the end);
 *   2. the same from python3-grpcio (bench/rpc_latency_py.py), for context;
 *   3. one master holding W simulated workers: register them, then send each one Heartbeat per
 *      interval on a fixed schedule (open loop: a thread behind schedule sends at once and the
 *      lateness is counted) from HB_THREADS threads with a channel each, while the master's CPU
 *      time is read from /proc/PID/stat. Afterwards every worker must be alive and its clock
 *      must equal the heartbeats acknowledged to it, or the run fails: a benchmark that loses
 *      members is wrong.
 * It starts its own tessera-master on an ephemeral port and stops it by pid on every exit path
 * (and the kernel sends the master SIGTERM should this process die first: PR_SET_PDEATHSIG).
 * Output: a table on stdout and a JSON file whose headline is the C p99 against the 1 ms goal. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "benchlib.h"
#include "rpc/rpc.h"
#include "tessera/v1/master.pb-c.h"
#include "util/flags.h"
#include "util/json.h"
#include "util/proc.h"

#define WARMUP 200          /* calls before measuring, C and Python alike */
#define HB_THREADS 4        /* heartbeat client threads, one channel each */
#define CALL_MS 5000        /* deadline of one call */
#define LOADED_CALLS 20     /* ClusterStatus calls with all workers registered */
#define LATE_NS 1000000     /* a heartbeat sent more than 1 ms after its slot is late */
#define GOAL_MS 1.0
#define PAGE_WORKERS 50     /* a ClusterStatus page, as `tessera status` asks */
#define SWEEP_MAX 16
#define M_PATH(m) "/tessera.v1.Master/" m

struct opts {
    const char *bin, *out, *python, *job, *sweep, *master;
    int64_t calls, workers, seconds, interval_ms, lease_ms, rate;
    bool quick;
};

struct hb_result {
    int64_t workers, calls, errors, late, alive, clock_mismatch;
    double offered_per_s, achieved_per_s, master_cpu_pct, client_cpu_pct, register_s;
    struct bench_lat lat;
    struct bench_lat loaded;        /* ClusterStatus with all workers registered */
    struct bench_lat paged;         /* the same, a page of PAGE_WORKERS of them */
    size_t loaded_bytes;
    double rss_per_worker;          /* the master's resident bytes a worker, registered */
    char first_error[256];
};

struct results {
    char machine[192];
    struct bench_lat c, py;
    char py_error[256];       /* empty when the Python run worked */
    struct hb_result hb;
};


/* ---- ClusterStatus from C ---- */

static ts_status cluster_status(struct ts_rpc_channel *ch, uint32_t max_workers,
                                Tessera__V1__ClusterStatusResponse **r, struct ts_err *err)
{
    Tessera__V1__ClusterStatusRequest req = TESSERA__V1__CLUSTER_STATUS_REQUEST__INIT;

    req.max_workers = max_workers;   /* 0: every worker */
    return ts_rpc_unary(ch, M_PATH("ClusterStatus"), &req.base,
                        &tessera__v1__cluster_status_response__descriptor,
                        (ProtobufCMessage **)r, CALL_MS, err);
}

/* warmup calls, then n timed ones on one channel, each listing max_workers (0: all). With
 * last, *last is the final reply (the caller frees it with protobuf_c_message_free_unpacked). */
static ts_status time_cluster_status(const char *target, int64_t warmup, int64_t n,
                                     uint32_t max_workers, struct bench_lat *out,
                                     Tessera__V1__ClusterStatusResponse **last,
                                     struct ts_err *err)
{
    Tessera__V1__ClusterStatusResponse *r;
    int64_t *ns = calloc((size_t)n, sizeof(*ns));
    struct ts_rpc_channel *ch = NULL;
    ts_status st;

    if (!ns)
        return ts_err_set(err, TS_ENOMEM, "out of memory for %" PRId64 " samples", n);
    if ((st = ts_rpc_channel_create(target, NULL, &ch, err)))
        goto out_free_ns;
    for (int64_t i = -warmup; i < n; i++) {
        int64_t t0 = ts_now_ns();
        if ((st = cluster_status(ch, max_workers, &r, err)))
            goto out_free_ch;
        if (i >= 0)
            ns[i] = ts_now_ns() - t0;
        if (last && i == n - 1)
            *last = r;
        else
            protobuf_c_message_free_unpacked(&r->base, NULL);
    }
    bench_lat_from_ns(ns, (size_t)n, out);
out_free_ch:
    ts_rpc_channel_free(ch);
out_free_ns:
    free(ns);
    return st;
}

/* ---- ClusterStatus from python3-grpcio ---- */

/* bench/rpc_latency_py.py: next to this source file, or found from the build or the cwd. */
static ts_status find_py_script(const char *bin, char *buf, size_t n, struct ts_err *err)
{
    const char *slash = strrchr(__FILE__, '/');

    snprintf(buf, n, "%.*s/rpc_latency_py.py", slash ? (int)(slash - __FILE__) : 1,
             slash ? __FILE__ : ".");
    if (access(buf, R_OK) != 0)
        snprintf(buf, n, "%s/../../bench/rpc_latency_py.py", bin);
    if (access(buf, R_OK) != 0)
        snprintf(buf, n, "bench/rpc_latency_py.py");
    if (access(buf, R_OK) != 0)
        return ts_err_set(err, TS_ENOTFOUND, "cannot find rpc_latency_py.py (looked next to "
                          "%s, in %s/../../bench and in ./bench)", __FILE__, bin);
    return TS_OK;
}

/* Runs the script through popen (posix_spawn in glibc, so safe beside gRPC's threads) with
 * BIN/../gen/python in front of PYTHONPATH, and reads its last line. */
static ts_status run_python(const struct opts *o, const char *target, struct bench_lat *l,
                            struct ts_err *err)
{
    char script[PATH_MAX], gen[PATH_MAX], rel[PATH_MAX], cmd[4 * PATH_MAX], line[1024];
    char last[1024] = "";
    double n = 0;
    ts_status st;
    FILE *f;
    int rc;

    snprintf(rel, sizeof(rel), "%s/../gen/python", o->bin);
    if (!realpath(rel, gen))
        return ts_err_set(err, TS_ENOTFOUND, "no Python bindings at %s: build first", rel);
    if ((st = find_py_script(o->bin, script, sizeof(script), err)))
        return st;
    if (strchr(gen, '\'') || strchr(script, '\'') || strchr(o->python, '\''))
        return ts_err_set(err, TS_EINVAL, "paths with a quote (') are not supported here");
    snprintf(cmd, sizeof(cmd), "PYTHONPATH='%s'${PYTHONPATH:+:$PYTHONPATH} '%s' '%s' "
             "--target %s --calls %" PRId64 " --warmup %d", gen, o->python, script, target,
             o->calls, WARMUP);
    if (!(f = popen(cmd, "r")))
        return ts_err_set(err, TS_EIO, "cannot run %s: %s", o->python, strerror(errno));
    while (fgets(line, sizeof(line), f))
        if (line[0] != '\n')
            snprintf(last, sizeof(last), "%s", line);
    if ((rc = pclose(f)) != 0)
        return ts_err_set(err, TS_EIO, "%s %s failed (wait status 0x%x; its stderr is above)",
                          o->python, script, rc);
    /* The script prints its keys in this order, with separators (",", ":"). */
    if (sscanf(last, "{\"p50_us\":%lf,\"p90_us\":%lf,\"p99_us\":%lf,\"max_us\":%lf,"
               "\"calls\":%lf", &l->p50, &l->p90, &l->p99, &l->max, &n) != 5)
        return ts_err_set(err, TS_ECORRUPT, "rpc_latency_py.py printed '%.120s', not its "
                          "JSON line", last);
    l->n = (int64_t)n;
    return TS_OK;
}

/* ---- Heartbeat from W simulated workers ---- */

/* Slot s = k * W + w is worker w's k-th heartbeat, due at t0 + s * interval / W: the load is
 * spread evenly over each interval. Worker w belongs to thread w % HB_THREADS, so every slot
 * and every per-worker counter has one writer. */
struct hb_plan {
    const char *target;
    const char *job;          /* NULL: the workers join no job; else ranks 0..workers-1 of it */
    uint32_t lease_ms;
    int64_t workers, interval_ns, t0, end, nslots;
    uint32_t *ids;            /* [w]: the id the master gave worker w */
    uint32_t *acked;          /* [w]: heartbeats acknowledged; also the clock sent next - 1 */
    int64_t *ns;              /* [slot]: latency, 0 for a slot not sent or failed */
};

struct hb_thread {
    pthread_t tid;
    int idx;
    struct hb_plan *plan;
    struct ts_rpc_channel *ch;
    uint64_t epoch;           /* from RegisterWorker: known_epoch may not be ahead */
    int64_t errors, late;
    struct ts_err err;        /* the first error */
};

/* The simulated workers' secret (RegisterWorkerRequest.secret): one for all, as each sends it
 * with its heartbeats; required under mutual TLS, where the master also checks it. */
static uint8_t hb_secret[32] = "tessera bench rpc_latency secret";

/* Worker w's first heartbeat, at once, as a real worker's (a master holds a registration that
 * has not beaten to its default lease, whatever lease it asked for), clock 0: not one of the
 * schedule's, which count from 1. Nonzero on an error (counted). */
static int hb_first(struct hb_thread *t, int64_t w)
{
    Tessera__V1__HeartbeatRequest req = TESSERA__V1__HEARTBEAT_REQUEST__INIT;
    Tessera__V1__HeartbeatResponse *r;

    req.kind = TESSERA__V1__MEMBER_KIND__MEMBER_KIND_WORKER;
    req.id = t->plan->ids[w];
    req.known_epoch = t->epoch;
    req.secret = (ProtobufCBinaryData){ sizeof(hb_secret), hb_secret };
    if (ts_rpc_unary(t->ch, M_PATH("Heartbeat"), &req.base,
                     &tessera__v1__heartbeat_response__descriptor, (ProtobufCMessage **)&r,
                     CALL_MS, &t->err)) {
        t->errors++;
        return 1;
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return 0;
}

static void *hb_register_main(void *arg)
{
    struct hb_thread *t = arg;
    char instance[48];

    for (int64_t w = t->idx; w < t->plan->workers; w += HB_THREADS) {
        Tessera__V1__RegisterWorkerRequest req = TESSERA__V1__REGISTER_WORKER_REQUEST__INIT;
        Tessera__V1__RegisterWorkerResponse *r;
        snprintf(instance, sizeof(instance), "bench-%d-%" PRId64, (int)getpid(), w);
        req.host = "bench-sim";
        req.pid = (uint32_t)w + 1;
        req.instance = instance;
        req.secret = (ProtobufCBinaryData){ sizeof(hb_secret), hb_secret };
        req.lease_ms = t->plan->lease_ms;
        if (t->plan->job) {
            req.job = (char *)t->plan->job;
            req.rank = (uint32_t)w;
            req.workers = (uint32_t)t->plan->workers;
        }
        if (ts_rpc_unary(t->ch, M_PATH("RegisterWorker"), &req.base,
                         &tessera__v1__register_worker_response__descriptor,
                         (ProtobufCMessage **)&r, CALL_MS, &t->err)) {
            t->errors++;
            return NULL;
        }
        t->plan->ids[w] = r->worker_id;
        t->epoch = r->epoch;
        protobuf_c_message_free_unpacked(&r->base, NULL);
        if (hb_first(t, w))
            return NULL;
    }
    return NULL;
}

static void hb_send(struct hb_thread *t, int64_t w, int64_t slot)
{
    Tessera__V1__HeartbeatRequest req = TESSERA__V1__HEARTBEAT_REQUEST__INIT;
    Tessera__V1__HeartbeatResponse *r;
    struct hb_plan *p = t->plan;
    struct ts_err e = { 0 };
    int64_t t0;

    req.kind = TESSERA__V1__MEMBER_KIND__MEMBER_KIND_WORKER;
    req.id = p->ids[w];
    req.known_epoch = t->epoch;
    req.clock = p->acked[w] + 1;
    req.secret = (ProtobufCBinaryData){ sizeof(hb_secret), hb_secret };
    t0 = ts_now_ns();
    if (ts_rpc_unary(t->ch, M_PATH("Heartbeat"), &req.base,
                     &tessera__v1__heartbeat_response__descriptor, (ProtobufCMessage **)&r,
                     CALL_MS, &e)) {
        if (!t->errors++)
            t->err = e;
        return;
    }
    p->ns[slot] = ts_now_ns() - t0;
    p->acked[w]++;
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

static void *hb_load_main(void *arg)
{
    struct hb_thread *t = arg;
    const struct hb_plan *p = t->plan;

    for (int64_t k = 0;; k++) {
        for (int64_t w = t->idx; w < p->workers; w += HB_THREADS) {
            int64_t slot = k * p->workers + w;
            int64_t due = p->t0 + slot * p->interval_ns / p->workers;
            if (slot >= p->nslots)
                return NULL;
            bench_sleep_until_ns(due);
            if (ts_now_ns() - due > LATE_NS)
                t->late++;
            hb_send(t, w, slot);
        }
    }
}

static void hb_start(struct hb_thread *th, void *(*fn)(void *))
{
    for (int i = 0; i < HB_THREADS; i++)
        pthread_create(&th[i].tid, NULL, fn, &th[i]);
}

/* Joins the threads; returns the first error any of them met. */
static ts_status hb_join(struct hb_thread *th, struct ts_err *err)
{
    ts_status st = TS_OK;

    for (int i = 0; i < HB_THREADS; i++) {
        pthread_join(th[i].tid, NULL);
        if (th[i].errors && !st)
            st = ts_err_set(err, th[i].err.code, "%s", th[i].err.msg);
    }
    return st;
}

/* The paced phase: the master's CPU from /proc, ours from our own clock. Heartbeat errors are
 * counted, not returned: the membership check afterwards says what they cost. */
static ts_status hb_phase(struct hb_thread *th, struct hb_plan *p, pid_t master,
                          struct hb_result *res, struct ts_err *err)
{
    uint64_t tick0, tick1;
    int64_t cpu0, wall;
    size_t n = 0;
    ts_status st;

    p->t0 = ts_now_ns() + 50000000; /* the threads start and wait for their first slot */
    p->end = p->t0 + p->nslots * p->interval_ns / p->workers;
    hb_start(th, hb_load_main);
    bench_sleep_until_ns(p->t0);
    st = master ? bench_proc_cpu_ticks(master, &tick0, err) : TS_OK;   /* 0: not on this host */
    cpu0 = ts_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    hb_join(th, NULL);
    wall = ts_now_ns() - p->t0;
    if (st || (master && (st = bench_proc_cpu_ticks(master, &tick1, err))))
        return st;
    res->client_cpu_pct = 100.0 * (double)(ts_clock_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu0) /
                          (double)wall;
    res->master_cpu_pct = master ? 100.0 * (double)(tick1 - tick0) /
                                   (double)sysconf(_SC_CLK_TCK) / ((double)wall / 1e9) : 0;
    for (int i = 0; i < HB_THREADS; i++) {
        res->errors += th[i].errors;
        res->late += th[i].late;
        if (th[i].errors && !res->first_error[0])
            snprintf(res->first_error, sizeof(res->first_error), "%s", th[i].err.msg);
    }
    for (int64_t s = 0; s < p->nslots; s++) /* compact the acknowledged slots */
        if (p->ns[s] > 0)
            p->ns[n++] = p->ns[s];
    res->calls = (int64_t)n;
    /* The last slot is due just before the end: divide by the phase, not by that instant. */
    if (wall < p->end - p->t0)
        wall = p->end - p->t0;
    res->achieved_per_s = (double)n / ((double)wall / 1e9);
    bench_lat_from_ns(p->ns, n, &res->lat);
    return TS_OK;
}

/* Every worker alive, and its clock equal to the heartbeats acknowledged to it. */
static void hb_check(const struct hb_plan *p, const Tessera__V1__ClusterStatusResponse *r,
                     struct hb_result *res)
{
    uint32_t max_id = 0, *idx;

    for (int64_t w = 0; w < p->workers; w++)
        max_id = p->ids[w] > max_id ? p->ids[w] : max_id;
    if (!(idx = calloc((size_t)max_id + 1, sizeof(*idx))))
        abort();
    for (int64_t w = 0; w < p->workers; w++)
        idx[p->ids[w]] = (uint32_t)w + 1;
    for (size_t i = 0; i < r->n_workers; i++) {
        const Tessera__V1__WorkerInfo *wi = r->workers[i];
        if (wi->id > max_id || !idx[wi->id])
            continue;
        if (wi->state == TESSERA__V1__MEMBER_STATE__MEMBER_STATE_ALIVE)
            res->alive++;
        if (wi->clock != p->acked[idx[wi->id] - 1])
            res->clock_mismatch++;
    }
    free(idx);
}

/* After the phase: ClusterStatus with every worker in it, timed; the last reply is checked. */
static ts_status hb_verify(struct hb_plan *p, struct hb_result *res, struct ts_err *err)
{
    Tessera__V1__ClusterStatusResponse *r;
    ts_status st = time_cluster_status(p->target, 1, LOADED_CALLS, 0, &res->loaded, &r, err);

    if (st || (st = time_cluster_status(p->target, 1, LOADED_CALLS, PAGE_WORKERS, &res->paged,
                                        NULL, err)))
        return st;
    res->loaded_bytes = protobuf_c_message_get_packed_size(&r->base);
    hb_check(p, r, res);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return TS_OK;
}

static ts_status hb_bench(const struct opts *o, const struct bench_master *m, struct hb_result *res,
                          struct ts_err *err)
{
    struct hb_plan p = { .target = m->target, .workers = o->workers,
                         .interval_ns = o->interval_ms * 1000000, .job = o->job,
                         .lease_ms = (uint32_t)o->lease_ms };
    struct hb_thread th[HB_THREADS];
    ts_status st = TS_OK;
    uint64_t rss0 = 0, rss1 = 0;
    int64_t t0;

    memset(th, 0, sizeof(th));
    res->workers = o->workers;
    res->offered_per_s = (double)o->workers * 1000.0 / (double)o->interval_ms;
    p.nslots = o->seconds * 1000 * o->workers / o->interval_ms;
    p.ids = calloc((size_t)o->workers, sizeof(*p.ids));
    p.acked = calloc((size_t)o->workers, sizeof(*p.acked));
    p.ns = calloc((size_t)p.nslots + 1, sizeof(*p.ns));
    if (!p.ids || !p.acked || !p.ns) {
        st = ts_err_set(err, TS_ENOMEM, "out of memory for %" PRId64 " heartbeats", p.nslots);
        goto out_free;
    }
    for (int i = 0; i < HB_THREADS; i++) {
        th[i].idx = i;
        th[i].plan = &p;
        if ((st = ts_rpc_channel_create(m->target, NULL, &th[i].ch, err)))
            goto out_free;
    }
    if (m->pid && (st = bench_proc_rss(m->pid, &rss0, err)))
        goto out_free;
    t0 = ts_now_ns();
    hb_start(th, hb_register_main);
    if ((st = hb_join(th, err)))
        goto out_free;
    res->register_s = (double)(ts_now_ns() - t0) / 1e9;
    if (!(st = hb_phase(th, &p, m->pid, res, err)) && !(st = hb_verify(&p, res, err)) &&
        m->pid && !(st = bench_proc_rss(m->pid, &rss1, err)))
        res->rss_per_worker = ((double)rss1 - (double)rss0) / (double)o->workers;
out_free:
    for (int i = 0; i < HB_THREADS; i++)
        ts_rpc_channel_free(th[i].ch);
    free(p.ids);
    free(p.acked);
    free(p.ns);
    return st;
}

/* ---- report ---- */

/* One table row, "ours" formatted from fmt; ratio < 0 prints "-". */
static void TS_PRINTF(4, 5) row(const char *metric, const char *base, double ratio,
                                const char *fmt, ...)
{
    char ours[32], r[16] = "-";
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(ours, sizeof(ours), fmt, ap);
    va_end(ap);
    if (ratio >= 0)
        snprintf(r, sizeof(r), "%.2f", ratio);
    printf("%-46s | %12s | %18s | %6s\n", metric, ours, base, r);
}

/* C rows compare p99 with the goal; Python rows compare each figure with C's. */
static void print_lat_rows(const char *who, const struct bench_lat *l, const struct bench_lat *c)
{
    const char *name[] = { "p50", "p90", "p99", "max" };
    double v[] = { l->p50, l->p90, l->p99, l->max }, cv[] = { c->p50, c->p90, c->p99, c->max };
    char m[64], b[32];

    for (int i = 0; i < 4; i++) {
        snprintf(m, sizeof(m), "ClusterStatus %s, %s", name[i], who);
        if (l != c)
            snprintf(b, sizeof(b), "C %.0f us", cv[i]);
        else
            snprintf(b, sizeof(b), "%s", i == 2 ? "goal < 1000 us" : "-");
        row(m, b, l != c ? v[i] / cv[i] : i == 2 ? v[i] / 1000 / GOAL_MS : -1, "%.0f us", v[i]);
    }
}

static void print_hb_rows(const struct hb_result *h)
{
    char b[32];

    row("Heartbeat offered rate", "-", -1, "%.0f /s", h->offered_per_s);
    snprintf(b, sizeof(b), "offered %.0f /s", h->offered_per_s);
    row("Heartbeat achieved rate", b, h->achieved_per_s / h->offered_per_s, "%.0f /s",
        h->achieved_per_s);
    row("Heartbeat p50", "-", -1, "%.0f us", h->lat.p50);
    row("Heartbeat p99", "goal < 1000 us", h->lat.p99 / 1000 / GOAL_MS, "%.0f us", h->lat.p99);
    row("Heartbeat max", "-", -1, "%.0f us", h->lat.max);
    row("Heartbeat errors / sent > 1 ms late", "0 / 0", -1, "%" PRId64 " / %" PRId64, h->errors,
        h->late);
    row("master CPU, heartbeat phase (100% = 1 core)", "-", -1, "%.1f %%", h->master_cpu_pct);
    row("bench client CPU, same phase, same machine", "-", -1, "%.1f %%", h->client_cpu_pct);
    snprintf(b, sizeof(b), "%" PRId64, h->workers);
    row("workers alive at end", b, (double)h->alive / (double)h->workers, "%" PRId64, h->alive);
    row("workers whose clock != heartbeats acked", "0", -1, "%" PRId64, h->clock_mismatch);
    row("RegisterWorker, all workers, 4 threads", "-", -1, "%.2f s", h->register_s);
    snprintf(b, sizeof(b), "reply %zu KiB", h->loaded_bytes / 1024);
    row("ClusterStatus p50, C, all workers registered", b, -1, "%.0f us", h->loaded.p50);
}

static void print_table(const struct opts *o, const struct results *r)
{
    printf("\nbench_rpc_latency: %s; loopback; master: 2 CQ threads (its default), lease %d ms\n"
           "ClusterStatus: %d warm-up + %" PRId64 " sequential calls on one channel, master with "
           "0 members (before the workers register)\n", r->machine, (int)o->lease_ms, WARMUP,
           o->calls);
    printf("Heartbeat: %" PRId64 " workers%s%s, one call each per %.1f s, for %" PRId64 " s, "
           "from %d threads\n", o->workers, o->job ? " in job " : "", o->job ? o->job : "",
           (double)o->interval_ms / 1000, o->seconds, HB_THREADS);
    printf("\n%-46s | %12s | %18s | %6s\n", "metric", "ours", "baseline/goal", "ratio");
    printf("%.46s-+-%.12s-+-%.18s-+-%.6s\n", "-----------------------------------------------",
           "-------------", "-------------------", "-------");
    print_lat_rows("C", &r->c, &r->c);
    if (!r->py_error[0])
        print_lat_rows("python3-grpcio", &r->py, &r->c);
    else
        row("ClusterStatus, python3-grpcio", "-", -1, "failed");
    print_hb_rows(&r->hb);
    printf("\n");
}

/* Opens an object named key with the figures of l; the caller may add members and ends it. */
static void json_lat(struct ts_json *j, const char *key, const struct bench_lat *l)
{
    ts_json_obj(j, key);
    ts_json_int(j, "p50", bench_round_i(l->p50));
    ts_json_int(j, "p90", bench_round_i(l->p90));
    ts_json_int(j, "p99", bench_round_i(l->p99));
    ts_json_int(j, "max", bench_round_i(l->max));
    ts_json_int(j, "calls", l->n);
}

static void json_hb(struct ts_json *j, const struct opts *o, const struct hb_result *h)
{
    ts_json_obj(j, "heartbeat");
    ts_json_int(j, "workers", h->workers);
    ts_json_num(j, "rate_per_s", h->offered_per_s);
    ts_json_num(j, "achieved_per_s", bench_round1(h->achieved_per_s));
    ts_json_int(j, "interval_ms", o->interval_ms);
    ts_json_int(j, "lease_ms", o->lease_ms);
    ts_json_str(j, "job", o->job ? o->job : "");
    ts_json_int(j, "seconds", o->seconds);
    ts_json_int(j, "client_threads", HB_THREADS);
    ts_json_num(j, "master_cpu_pct", bench_round1(h->master_cpu_pct));
    ts_json_num(j, "client_cpu_pct", bench_round1(h->client_cpu_pct));
    ts_json_int(j, "p50_us", bench_round_i(h->lat.p50));
    ts_json_int(j, "p99_us", bench_round_i(h->lat.p99));
    ts_json_int(j, "max_us", bench_round_i(h->lat.max));
    ts_json_int(j, "calls", h->calls);
    ts_json_int(j, "errors", h->errors);
    if (h->first_error[0])
        ts_json_str(j, "first_error", h->first_error);
    ts_json_int(j, "late_sends", h->late);
    ts_json_int(j, "alive_at_end", h->alive);
    ts_json_int(j, "clock_mismatches", h->clock_mismatch);
    ts_json_num(j, "register_s", (double)bench_round_i(h->register_s * 1000) / 1000);
    ts_json_end(j);
    json_lat(j, "c_clusterstatus_loaded_us", &h->loaded);
    ts_json_int(j, "workers", h->workers);
    ts_json_uint(j, "reply_bytes", h->loaded_bytes);
    ts_json_end(j);
}

static ts_status write_json(const struct opts *o, const struct results *r, bool ok,
                            struct ts_err *err)
{
    double ours = (double)bench_round_i(r->c.p99) / 1e3;
    struct ts_json j;

    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "name", "rpc_latency");
    ts_json_str(&j, "machine", r->machine);
    ts_json_bool(&j, "ok", ok);
    ts_json_bool(&j, "quick", o->quick);
    json_lat(&j, "c_clusterstatus_us", &r->c);
    ts_json_int(&j, "warmup", WARMUP);
    ts_json_int(&j, "members", 0);
    ts_json_end(&j);
    if (!r->py_error[0]) {
        json_lat(&j, "python_clusterstatus_us", &r->py);
    } else {
        ts_json_obj(&j, "python_clusterstatus_us");
        ts_json_str(&j, "error", r->py_error);
    }
    ts_json_end(&j);
    json_hb(&j, o, &r->hb);
    ts_json_obj(&j, "headline");
    ts_json_num(&j, "ours", ours);
    ts_json_num(&j, "baseline", GOAL_MS);
    ts_json_str(&j, "unit", "ms (ClusterStatus p99, C client, loopback)");
    ts_json_num(&j, "ratio", (double)bench_round_i(ours / GOAL_MS * 1e3) / 1e3);
    ts_json_end(&j);
    return bench_write_json(&j, o->out, err);
}

/* ---- the sweep: one master per N ---- */

/* One row of --sweep: N workers, the interval and lease it ran with, what it measured. */
struct sweep_row {
    int64_t workers, interval_ms, lease_ms;
    struct hb_result hb;
    bool ok;
};

/* Master CPU per heartbeat achieved, in us. */
static double cpu_per_hb_us(const struct hb_result *h)
{
    return h->achieved_per_s > 0 ? h->master_cpu_pct / 100.0 / h->achieved_per_s * 1e6 : 0;
}

/* N of --sweep "100,1000,..." into v (at most SWEEP_MAX); how many, or -1 (err set). */
static int parse_sweep(const char *s, int64_t *v, struct ts_err *err)
{
    int n = 0;

    for (const char *p = s; *p;) {
        char *end;
        long long x = strtoll(p, &end, 10);
        if (end == p || x < 1 || x > 1000000 || (*end && *end != ',') || n == SWEEP_MAX) {
            ts_err_set(err, TS_EINVAL, "--sweep: '%s'; want up to %d worker counts from 1 to "
                       "1000000, comma-separated (e.g. 100,1000,10000,50000)", s, SWEEP_MAX);
            return -1;
        }
        v[n++] = x;
        p = *end ? end + 1 : end;
    }
    return n;
}

/* Each N on a master of its own, at one offered rate (--rate heartbeats/s in all, so that
 * the master's work a second is the same and only the number of workers grows): the
 * interval is N / rate, the lease three intervals at least. */
static bool run_sweep(const struct opts *o, const struct bench_master *proto,
                      struct sweep_row *rows, int n)
{
    bool ok = true;

    for (int i = 0; i < n; i++) {
        struct opts oi = *o;
        struct bench_master m = { .tls_dir = proto->tls_dir };
        struct ts_err e = { 0 };
        struct sweep_row *r = &rows[i];

        r->workers = oi.workers = rows[i].workers;
        r->interval_ms = oi.interval_ms = oi.workers * 1000 / o->rate > 10
                                          ? oi.workers * 1000 / o->rate : 10;
        r->lease_ms = oi.lease_ms = o->lease_ms > 3 * oi.interval_ms ? o->lease_ms
                                                                      : 3 * oi.interval_ms;
        m.lease_ms = (int)oi.lease_ms;
        fprintf(stderr, "sweep: %" PRId64 " workers, one heartbeat each per %" PRId64 " ms, "
                "lease %" PRId64 " ms, %" PRId64 " s...\n", oi.workers, oi.interval_ms,
                oi.lease_ms, oi.seconds);
        if (bench_master_start(o->bin, &m, &e) || hb_bench(&oi, &m, &r->hb, &e)) {
            fprintf(stderr, "bench_rpc_latency: sweep, %" PRId64 " workers: %s\n", oi.workers,
                    e.msg);
            r->ok = false;
        } else {
            r->ok = r->hb.alive == r->hb.workers && !r->hb.clock_mismatch && !r->hb.errors;
        }
        ok = bench_master_stop(&m) && r->ok && ok;
    }
    return ok;
}

static void print_sweep(const struct opts *o, const char *machine, const struct sweep_row *rows,
                        int n)
{
    printf("\nbench_rpc_latency --sweep: %s; loopback; one master per row, %" PRId64
           " heartbeats/s offered in all for %" PRId64 " s, %d client threads; workers "
           "registered as the ranks of one job%s%s\n\n", machine, o->rate, o->seconds,
           HB_THREADS, o->job ? " " : "", o->job ? o->job : " (none: --job ID)");
    printf("%8s | %7s | %8s | %9s | %7s | %9s | %8s | %10s | %10s | %9s | %6s | %8s\n",
           "workers", "beat", "register", "achieved", "master", "CPU/beat", "beat p99",
           "CS all p99", "CS 50 p99", "alive", "errors", "RSS/wkr");
    printf("%8s | %7s | %8s | %9s | %7s | %9s | %8s | %10s | %10s | %9s | %6s | %8s\n",
           "", "ms", "s", "/s", "CPU %", "us", "us", "ms", "us", "", "", "bytes");
    for (int i = 0; i < n; i++) {
        const struct hb_result *h = &rows[i].hb;
        printf("%8" PRId64 " | %7" PRId64 " | %8.2f | %9.0f | %7.1f | %9.1f | %8.0f | %10.1f | "
               "%10.0f | %9" PRId64 " | %6" PRId64 " | %8.0f%s\n", rows[i].workers,
               rows[i].interval_ms, h->register_s, h->achieved_per_s, h->master_cpu_pct,
               cpu_per_hb_us(h), h->lat.p99, h->loaded.p99 / 1000, h->paged.p99, h->alive,
               h->errors, h->rss_per_worker, rows[i].ok ? "" : "  FAILED");
    }
    if (n > 1)
        printf("\nmaster CPU per heartbeat at %" PRId64 " workers / at %" PRId64 ": %.2f "
               "(goal: flat, at most 1.5)\n\n", rows[n - 1].workers, rows[0].workers,
               cpu_per_hb_us(&rows[n - 1].hb) / cpu_per_hb_us(&rows[0].hb));
}

static ts_status write_sweep_json(const struct opts *o, const char *machine,
                                  const struct sweep_row *rows, int n, bool ok,
                                  struct ts_err *err)
{
    double ours = cpu_per_hb_us(&rows[n - 1].hb), base = cpu_per_hb_us(&rows[0].hb);
    struct ts_json j;

    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "name", "rpc_latency_sweep");
    ts_json_str(&j, "machine", machine);
    ts_json_bool(&j, "ok", ok);
    ts_json_int(&j, "rate_per_s", o->rate);
    ts_json_arr(&j, "rows");
    for (int i = 0; i < n; i++) {
        ts_json_obj(&j, NULL);
        ts_json_bool(&j, "ok", rows[i].ok);
        ts_json_int(&j, "lease_ms", rows[i].lease_ms);
        ts_json_num(&j, "master_cpu_per_heartbeat_us",
                    bench_round1(cpu_per_hb_us(&rows[i].hb)));
        ts_json_num(&j, "master_rss_per_worker_bytes", bench_round1(rows[i].hb.rss_per_worker));
        json_lat(&j, "c_clusterstatus_page_us", &rows[i].hb.paged);
        ts_json_int(&j, "max_workers", PAGE_WORKERS);
        ts_json_end(&j);
        json_hb(&j, &(struct opts){ .interval_ms = rows[i].interval_ms,
                                    .lease_ms = rows[i].lease_ms, .seconds = o->seconds,
                                    .job = o->job }, &rows[i].hb);
        ts_json_end(&j);
    }
    ts_json_end(&j);
    ts_json_obj(&j, "headline");
    ts_json_num(&j, "ours", bench_round1(ours));
    ts_json_num(&j, "baseline", bench_round1(base));
    ts_json_str(&j, "unit", "us of master CPU per heartbeat, most workers vs fewest (goal: "
                "ratio at most 1.5)");
    ts_json_num(&j, "ratio", base > 0 ? (double)bench_round_i(ours / base * 1e3) / 1e3 : 0);
    ts_json_end(&j);
    return bench_write_json(&j, o->out, err);
}

/* ---- --master: the heartbeat load on a running cluster ---- */

/* The master's pid if it runs on this host as a tessera-master (its ClusterStatus says which),
 * else 0: its CPU and memory are then not measured. */
static pid_t local_master_pid(const char *target)
{
    Tessera__V1__ClusterStatusResponse *r;
    struct ts_rpc_channel *ch = NULL;
    struct ts_err e = { 0 };
    char path[64], cmd[256] = "";
    pid_t pid = 0;
    FILE *f;

    if (ts_rpc_channel_create(target, NULL, &ch, &e) || cluster_status(ch, 1, &r, &e)) {
        ts_rpc_channel_free(ch);
        return 0;
    }
    pid = (pid_t)r->master_pid;
    protobuf_c_message_free_unpacked(&r->base, NULL);
    ts_rpc_channel_free(ch);
    snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
    if (!pid || !(f = fopen(path, "r")))
        return 0;
    if (!fgets(cmd, sizeof(cmd), f))
        cmd[0] = '\0';
    fclose(f);
    return strstr(cmd, "tessera-master") ? pid : 0;
}

/* The simulated workers against the cluster at o->master (one alive beside them, a training
 * job, say): the heartbeat rows, and JSON whose headline is the workers alive at the end. */
static int run_load(const struct opts *o, struct bench_master *m, const char *machine)
{
    struct hb_result h = { 0 };
    struct ts_err err = { 0 };
    struct ts_json j;
    bool ok;

    snprintf(m->target, sizeof(m->target), "%s", o->master);
    m->pid = local_master_pid(o->master);
    fprintf(stderr, "load on %s: registering %" PRId64 " workers%s%s, then %" PRId64 " s at "
            "%.0f/s...\n", o->master, o->workers, o->job ? " of job " : "", o->job ? o->job : "",
            o->seconds, (double)o->workers * 1000 / (double)o->interval_ms);
    if (hb_bench(o, m, &h, &err))
        fprintf(stderr, "bench_rpc_latency: %s\n", err.msg);
    ok = !err.code && h.alive == h.workers && !h.clock_mismatch && !h.errors;
    printf("\nbench_rpc_latency --master %s: %s\n\n%-46s | %12s | %18s | %6s\n", o->master,
           machine, "metric", "ours", "baseline/goal", "ratio");
    print_hb_rows(&h);
    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "name", "rpc_latency_load");
    ts_json_str(&j, "machine", machine);
    ts_json_bool(&j, "ok", ok);
    if (m->pid)   /* the master's growth over the run, the job beside included */
        ts_json_num(&j, "master_rss_per_worker_bytes", bench_round1(h.rss_per_worker));
    json_hb(&j, o, &h);
    ts_json_obj(&j, "headline");
    ts_json_int(&j, "ours", h.alive);
    ts_json_int(&j, "baseline", h.workers);
    ts_json_str(&j, "unit", "simulated workers alive at the end (all, with no error: ok)");
    ts_json_num(&j, "ratio", h.workers ? (double)h.alive / (double)h.workers : 0);
    ts_json_end(&j);
    if (bench_write_json(&j, o->out, &err)) {
        fprintf(stderr, "bench_rpc_latency: %s\n", err.msg);
        return 1;
    }
    printf("wrote %s%s\n", o->out, ok ? "" : " (marked \"ok\": false: see the errors above)");
    return ok ? 0 : 1;
}

/* ---- main ---- */

/* All three measurements; false if any failed. The C one is the headline: without it, stop. */
static bool run_all(const struct opts *o, const struct bench_master *m, struct results *r,
                    struct ts_err *err)
{
    struct ts_err e = { 0 };
    bool ok = true;

    fprintf(stderr, "C ClusterStatus: %d + %" PRId64 " calls...\n", WARMUP, o->calls);
    if (time_cluster_status(m->target, WARMUP, o->calls, 0, &r->c, NULL, err))
        return false;
    fprintf(stderr, "python3-grpcio ClusterStatus: %d + %" PRId64 " calls...\n", WARMUP,
            o->calls);
    if (run_python(o, m->target, &r->py, &e)) {
        fprintf(stderr, "bench_rpc_latency: python: %s\n", e.msg);
        snprintf(r->py_error, sizeof(r->py_error), "%s", e.msg[0] ? e.msg : "failed");
        ok = false;
    }
    fprintf(stderr, "Heartbeat: registering %" PRId64 " workers, then %" PRId64 " s at %.0f/s"
            "...\n", o->workers, o->seconds, (double)o->workers * 1000 / (double)o->interval_ms);
    ts_err_clear(&e);
    if (hb_bench(o, m, &r->hb, &e)) {
        fprintf(stderr, "bench_rpc_latency: heartbeat phase: %s\n", e.msg);
        ok = false;
    }
    if (r->hb.alive != r->hb.workers || r->hb.clock_mismatch || r->hb.errors) {
        fprintf(stderr, "bench_rpc_latency: membership check FAILED: %" PRId64 " of %" PRId64
                " workers alive, %" PRId64 " clocks wrong, %" PRId64 " heartbeat errors%s%s\n",
                r->hb.alive, r->hb.workers, r->hb.clock_mismatch, r->hb.errors,
                r->hb.first_error[0] ? "; first: " : "", r->hb.first_error);
        ok = false;
    }
    return ok;
}

int main(int argc, char **argv)
{
    static const char about[] =
        "Starts a tessera-master on 127.0.0.1 and measures ClusterStatus latency\n"
        "(C client, then python3-grpcio; 200 warm-up calls each), then Heartbeat\n"
        "latency and master CPU with many simulated workers. Prints a table and\n"
        "writes JSON whose headline is the C p99 against the 1 ms goal.";
    struct opts o = { 0 };
    struct bench_master m = { 0 };
    const struct ts_flag flags[] = {
        { "bin", TS_FLAG_STR, &o.bin, "DIR", "where tessera-master is (default: this "
                                             "program's directory)", 0, 0 },
        { "calls", TS_FLAG_INT, &o.calls, "N", "timed ClusterStatus calls (default 10000)", 1,
          10000000 },
        { "workers", TS_FLAG_INT, &o.workers, "N", "simulated workers (default 10000)", 1,
          1000000 },
        { "seconds", TS_FLAG_INT, &o.seconds, "S", "heartbeat phase length (default 10)", 1,
          3600 },
        { "interval-ms", TS_FLAG_INT, &o.interval_ms, "MS", "each worker's heartbeat interval "
          "(default lease / 3)", 10, 600000 },
        { "lease-ms", TS_FLAG_INT, &o.lease_ms, "MS", "the master's lease, and each simulated "
          "worker's (default 30000)", 100, 600000 },
        { "job", TS_FLAG_STR, &o.job, "ID", "register the simulated workers as ranks 0..N-1 "
          "of one job ID (default: no job)", 0, 0 },
        { "sweep", TS_FLAG_STR, &o.sweep, "N,N,...", "instead: the heartbeat load for each "
          "worker count on a master of its own, at --rate in all, and a table of master CPU "
          "per heartbeat against the first count's (default out: "
          "bench/results/rpc_latency_sweep.json)", 0, 0 },
        { "rate", TS_FLAG_INT, &o.rate, "PER_S", "--sweep: heartbeats a second offered in all "
          "(default 2000)", 1, 1000000 },
        { "master", TS_FLAG_STR, &o.master, "ADDR", "instead: only the heartbeat load, on the "
          "running master at ADDR (beside a real job, say; with --tls DIR for its "
          "certificates); exit 1 unless every worker is alive at the end with no error "
          "(default out: bench/results/rpc_latency_load.json)", 0, 0 },
        { "out", TS_FLAG_STR, &o.out, "FILE", "results (default "
                                              "bench/results/rpc_latency.json)", 0, 0 },
        { "python", TS_FLAG_STR, &o.python, "PATH", "python3 with grpcio (default "
                                                    "/usr/bin/python3)", 0, 0 },
        { "quick", TS_FLAG_BOOL, &o.quick, NULL, "smoke run: 1000 calls, 1000 workers, 2 s "
                                                 "(explicit flags still win)", 0, 0 },
        { "tls", TS_FLAG_STR, &m.tls_dir, "DIR", "mutual TLS: the master with DIR/master.pem, "
          "the clients with DIR/client.pem (`tessera certs init DIR`)", 0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    struct ts_err err = { 0 };
    struct results r = { 0 };
    char exe_dir[PATH_MAX];
    int64_t sweep_n[SWEEP_MAX];
    int done, nsweep = 0;
    bool ok;

    if ((done = ts_flags_program("bench_rpc_latency", NULL, about, flags, argc, argv)) >= 0)
        return done;
    if (o.sweep && (nsweep = parse_sweep(o.sweep, sweep_n, &err)) < 0) {
        fprintf(stderr, "bench_rpc_latency: %s\n", err.msg);
        return 2;
    }
    o.calls = o.calls ? o.calls : o.quick ? 1000 : 10000;
    o.workers = o.workers ? o.workers : o.quick ? 1000 : 10000;
    o.seconds = o.seconds ? o.seconds : o.quick ? 2 : 10;
    o.lease_ms = o.lease_ms ? o.lease_ms : LEASE_MS;
    o.interval_ms = o.interval_ms ? o.interval_ms : o.lease_ms / 3;
    m.lease_ms = (int)o.lease_ms;
    o.out = o.out ? o.out : o.sweep ? "bench/results/rpc_latency_sweep.json"
                          : o.master ? "bench/results/rpc_latency_load.json"
                                     : "bench/results/rpc_latency.json";
    o.rate = o.rate ? o.rate : 2000;
    o.python = o.python ? o.python : "/usr/bin/python3";
    if (m.tls_dir)   /* our C calls and the Python client's (TESSERA_TLS_DIR) */
        setenv("TESSERA_TLS_DIR", m.tls_dir, 1);
    if (!o.bin) {
        if (ts_proc_exe_dir(exe_dir, sizeof(exe_dir), &err)) {
            fprintf(stderr, "bench_rpc_latency: %s\n", err.msg);
            return 1;
        }
        o.bin = exe_dir;
    }
    signal(SIGINT, bench_on_signal);
    signal(SIGTERM, bench_on_signal);
    signal(SIGHUP, bench_on_signal);
    signal(SIGPIPE, SIG_IGN);
    bench_machine_desc(r.machine, sizeof(r.machine));
    if (o.master)
        return run_load(&o, &m, r.machine);
    if (o.sweep) {
        struct sweep_row rows[SWEEP_MAX];
        for (int i = 0; i < nsweep; i++)
            rows[i] = (struct sweep_row){ .workers = sweep_n[i] };
        ok = run_sweep(&o, &m, rows, nsweep);
        print_sweep(&o, r.machine, rows, nsweep);
        if (write_sweep_json(&o, r.machine, rows, nsweep, ok, &err)) {
            fprintf(stderr, "bench_rpc_latency: %s\n", err.msg);
            return 1;
        }
        printf("wrote %s%s\n", o.out, ok ? "" : " (marked \"ok\": false: see the errors above)");
        return ok ? 0 : 1;
    }
    if (bench_master_start(o.bin, &m, &err)) {
        fprintf(stderr, "bench_rpc_latency: %s\n", err.msg);
        bench_master_stop(&m);
        return 1;
    }
    ok = run_all(&o, &m, &r, &err);
    ok = bench_master_stop(&m) && ok;
    if (r.c.n == 0) {
        fprintf(stderr, "bench_rpc_latency: C ClusterStatus: %s\n", err.msg);
        return 1;
    }
    print_table(&o, &r);
    if (write_json(&o, &r, ok, &err)) {
        fprintf(stderr, "bench_rpc_latency: %s\n", err.msg);
        return 1;
    }
    printf("wrote %s%s\n", o.out, ok ? "" : " (marked \"ok\": false: see the errors above)");
    return ok ? 0 : 1;
}
