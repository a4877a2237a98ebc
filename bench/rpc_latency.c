/* rpc_latency.c - bench_rpc_latency: is the master's control path fast enough?
 *
 * Why: every worker and shard heartbeats the master, and `tessera status` and the SDK call
 * ClusterStatus; the goal (issue "bench/rpc_latency") is a ClusterStatus p99 under 1 ms on
 * loopback. This program measures it end to end through lib/rpc, the client the services use:
 *   1. ClusterStatus from one C channel: 200 warm-up calls, then N sequential calls, on a master
 *      with no members (a reply of a few dozen bytes; with W workers registered the reply grows
 *      by ~45 bytes a worker, so that case is timed on its own at the end);
 *   2. the same from python3-grpcio (bench/rpc_latency_py.py), for context;
 *   3. one master holding W simulated workers (bench/hbsim.c): register them, then send each
 *      one Heartbeat per interval on a fixed schedule (open loop: a thread behind schedule sends
 *      at once and the lateness is counted) from HB_THREADS threads with a channel each, while
 *      the master's CPU time is read from /proc/PID/stat. Afterwards every worker must be alive
 *      and its clock must equal the heartbeats acknowledged to it, or the run fails: a
 *      benchmark that loses members is wrong.
 * It starts its own tessera-master on an ephemeral port and stops it by pid on every exit path
 * (and the kernel sends the master SIGTERM should this process die first: PR_SET_PDEATHSIG).
 * Output: a table on stdout and a JSON file whose headline is the C p99 against the 1 ms goal.
 * Its other modes (--sweep, --master here; --vouch, --conns in rpc_latency_modes.c) measure
 * the master under many workers (docs/scaling.md). */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "benchlib.h"
#include "hbsim.h"
#include "rpc_latency.h"
#include "rpc/rpc.h"
#include "tessera/v1/master.pb-c.h"
#include "util/flags.h"
#include "util/json.h"
#include "util/proc.h"

#define WARMUP 200          /* calls before measuring, C and Python alike */
#define GOAL_MS 1.0
#define SWEEP_MAX 16


struct results {
    char machine[192];
    struct bench_lat c, py;
    char py_error[256];       /* empty when the Python run worked */
    struct hb_result hb;
};

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

/* ---- Heartbeat from W simulated workers (hbsim.c) ---- */

ts_status hb_run(const struct opts *o, const struct bench_master *m, struct hb_result *res,
                 struct ts_err *err)
{
    const struct hb_load l = { .job = o->job, .workers = o->workers, .seconds = o->seconds,
                               .interval_ms = o->interval_ms, .lease_ms = o->lease_ms,
                               .vouch_shards = o->vouch, .deregister = o->master != NULL };

    return hb_bench(&l, m, res, err);
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
    if (h->deregister_s > 0) {
        ts_json_int(j, "deregistered", h->deregistered);
        ts_json_num(j, "deregister_s", (double)bench_round_i(h->deregister_s * 1000) / 1000);
    }
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
        if (bench_master_start(o->bin, &m, &e) || hb_run(&oi, &m, &r->hb, &e)) {
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

    if (ts_rpc_channel_create(target, NULL, &ch, &e) || hb_cluster_status(ch, 1, &r, &e)) {
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
    if (hb_run(o, m, &h, &err))
        fprintf(stderr, "bench_rpc_latency: %s\n", err.msg);
    ok = !err.code && h.alive == h.workers && !h.clock_mismatch && !h.errors &&
         h.deregistered == h.workers;
    printf("\nbench_rpc_latency --master %s: %s\n\n%-46s | %12s | %18s | %6s\n", o->master,
           machine, "metric", "ours", "baseline/goal", "ratio");
    print_hb_rows(&h);
    printf("\nworkers that left at the end (Deregister): %" PRId64 " of %" PRId64 " in %.2f s\n",
           h.deregistered, h.workers, h.deregister_s);
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
    if (hb_time_cluster_status(m->target, WARMUP, o->calls, 0, &r->c, NULL, err))
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
    if (hb_run(o, m, &r->hb, &e)) {
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
        { "vouch", TS_FLAG_INT, &o.vouch, "S", "instead: the master's CPU for --workers "
          "beating every third of --lease-ms (default here 3000), against S simulated shards "
          "vouching for them all and each worker beating every --rest-ms, a master of its "
          "own each (default out: bench/results/rpc_latency_vouch.json)", 1, 64 },
        { "conns", TS_FLAG_INT, &o.conns, "N", "instead: the master's memory for --workers "
          "registered, then for N more connections each of its own, as N worker processes "
          "hold (default out: bench/results/rpc_latency_conns.json)", 1, 100000 },
        { "rest-ms", TS_FLAG_INT, &o.rest_ms, "MS", "--vouch: how often a vouched worker "
          "beats (default 10000, the master's --worker-rest-ms)", 10, 600000 },
        { "master", TS_FLAG_STR, &o.master, "ADDR", "instead: only the heartbeat load, on the "
          "running master at ADDR (beside a real job, say; with --tls DIR for its "
          "certificates), the workers leaving at the end; exit 1 unless every worker is alive "
          "before it and leaves, with no error "
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
    o.lease_ms = o.lease_ms ? o.lease_ms : o.vouch ? 3000 : LEASE_MS;
    o.rest_ms = o.rest_ms ? o.rest_ms : 10000;
    o.interval_ms = o.interval_ms ? o.interval_ms : o.lease_ms / 3;
    m.lease_ms = (int)o.lease_ms;
    o.out = o.out ? o.out : o.conns ? "bench/results/rpc_latency_conns.json"
                          : o.vouch ? "bench/results/rpc_latency_vouch.json"
                          : o.sweep ? "bench/results/rpc_latency_sweep.json"
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
    if (o.vouch)
        return rpc_run_vouch(&o, &m, r.machine);
    if (o.conns)
        return rpc_run_conns(&o, &m, r.machine);
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
