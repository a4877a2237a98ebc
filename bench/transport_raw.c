/* transport_raw.c - bench_transport_raw: how fast do the data-plane backends move big frames?
 *
 * Why: the shm backend exists to beat TCP loopback between processes on one host, and TCP's
 * socket buffer sizing is a guess until measured. This probe forks a peer process (killed by
 * the kernel if this one dies: PR_SET_PDEATHSIG) that connects over each configuration, then
 * times 64 MiB messages through the raw ops (ts_tp_send/ts_tp_recv, no framing):
 *   one way     the parent sends N messages, the peer receives them and acknowledges the last;
 *   round trip  the parent sends one message, the peer sends it back; N times;
 *   framed      one way again through ts_frame_send/ts_frame_recv, to show the XXH3 cost.
 * Each figure is the median of --runs runs after one warm-up run, the configurations taking
 * turns within each run (fair to all when the load of the machine changes): tcp with the
 * kernel's buffer autotuning, tcp with fixed 4 MiB socket buffers (TESSERA_TCP_SOCKBUF), shm.
 * Output: a table, and JSON whose headline is shm one way against tcp one way. */
#include <errno.h>
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
#include "transport/frame.h"
#include "transport/transport.h"
#include "util/flags.h"
#include "util/json.h"
#include "util/proc.h"

#define MAX_RUNS 50
#define WAIT_MS 30000

enum op { OP_EXIT = 0, OP_SINK = 1, OP_ECHO = 2, OP_FRAMES = 3 };

struct cmd {                  /* parent -> peer, 24 bytes, same host: no byte-order concern */
    uint64_t op, size, count;
};

struct opts {
    int64_t mib, runs, count;
    const char *out, *only;
};

struct config {
    const char *label, *transport;
    int sockbuf;              /* TESSERA_TCP_SOCKBUF; 0: unset */
    struct ts_conn *c;        /* to the peer process */
    pid_t pid;
    double one_way[MAX_RUNS], round_trip[MAX_RUNS], framed[MAX_RUNS];
    double one_way_med, round_trip_med, framed_med;
    char error[256];
};

/* ---- the peer process ---- */

static int peer_serve(struct ts_conn *c, uint8_t *buf, size_t cap)
{
    struct ts_err err = { 0 };
    struct ts_frame_hdr h;
    struct cmd m;
    uint8_t ack = 1;

    for (;;) {
        /* Forever: the other configurations run meanwhile; the parent's close ends this. */
        if (ts_tp_recv(c, &m, sizeof(m), -1, &err))
            break;
        if (m.op == OP_EXIT)
            return 0;
        if (m.size > cap)
            break;
        for (uint64_t i = 0; i < m.count; i++) {
            if (m.op == OP_FRAMES ? ts_frame_recv(c, &h, buf, cap, WAIT_MS, &err)
                                  : ts_tp_recv(c, buf, m.size, WAIT_MS, &err))
                goto out;
            if (m.op == OP_ECHO && ts_tp_send(c, buf, m.size, NULL, 0, &err))
                goto out;
        }
        if (m.op != OP_ECHO && ts_tp_send(c, &ack, 1, NULL, 0, &err))
            break;
    }
out:
    fprintf(stderr, "bench_transport_raw: peer: %s\n", err.msg);
    return 1;
}

static void peer_main(const struct ts_transport_ops *t, const struct ts_blob *addr, size_t cap)
{
    struct ts_err err = { 0 };
    struct ts_conn *c = NULL;
    uint8_t *buf = malloc(cap);
    int rc;

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1)
        _exit(1);
    if (!buf || ts_tp_connect(t, addr, 5000, &c, &err)) {
        fprintf(stderr, "bench_transport_raw: peer connect: %s\n", err.msg);
        _exit(1);
    }
    memset(buf, 0, cap);
    rc = peer_serve(c, buf, cap);
    ts_tp_close(c);
    free(buf);
    _exit(rc);
}

/* ---- the measuring side ---- */

static ts_status send_cmd(struct ts_conn *c, enum op op, size_t size, int64_t count,
                          struct ts_err *err)
{
    struct cmd m = { op, size, (uint64_t)count };

    return ts_tp_send(c, &m, sizeof(m), NULL, 0, err);
}

/* One timed run of op; GB/s (1e9 bytes/s) of payload, both directions counted for echo. */
static ts_status run_once(struct ts_conn *c, enum op op, uint8_t *buf, size_t size,
                          int64_t count, double *gbps, struct ts_err *err)
{
    struct ts_frame_hdr h = { .type = TS_FRAME_PUSH };
    int64_t t0;
    ts_status st;
    uint8_t ack;

    if ((st = send_cmd(c, op, size, count, err)))
        return st;
    t0 = ts_now_ns();
    for (int64_t i = 0; i < count; i++) {
        st = op == OP_FRAMES ? ts_frame_send(c, &h, buf, size, err)
                             : ts_tp_send(c, buf, size, NULL, 0, err);
        if (!st && op == OP_ECHO)
            st = ts_tp_recv(c, buf, size, WAIT_MS, err);
        if (st)
            return st;
    }
    if (op != OP_ECHO && (st = ts_tp_recv(c, &ack, 1, WAIT_MS, err)))
        return st;
    *gbps = (double)size * (double)count * (op == OP_ECHO ? 2 : 1) /
            (double)(ts_now_ns() - t0);
    return TS_OK;
}

/* Connects cf to a fresh peer process. */
static ts_status peer_start(const struct opts *o, struct config *cf, struct ts_err *err)
{
    const struct ts_transport_ops *t = ts_transport_find(cf->transport);
    struct ts_listener *l = NULL;
    struct ts_blob addr = { 0 };
    char sb[32];
    ts_status st;

    if ((st = t->probe(err)))
        return st;
    snprintf(sb, sizeof(sb), "%d", cf->sockbuf);
    if (cf->sockbuf)
        setenv("TESSERA_TCP_SOCKBUF", sb, 1);     /* read at listen and connect; inherited */
    else
        unsetenv("TESSERA_TCP_SOCKBUF");
    if ((st = ts_tp_listen(t, "127.0.0.1", &l, &addr, err)))
        return st;
    fflush(NULL);
    if ((cf->pid = fork()) < 0) {
        cf->pid = 0;
        ts_tp_unlisten(l);
        return ts_err_set(err, TS_EIO, "fork: %s", strerror(errno));
    }
    if (cf->pid == 0)
        peer_main(t, &addr, (size_t)o->mib << 20);
    st = ts_tp_accept(l, 10000, &cf->c, err);
    ts_tp_unlisten(l);
    return st;
}

/* Ends cf's peer by pid (SIGKILL if it failed); false if it did not exit cleanly. */
static bool peer_stop(struct config *cf, bool failed)
{
    struct ts_err err = { 0 };
    int status = 0;

    if (cf->c && !failed && send_cmd(cf->c, OP_EXIT, 0, 0, &err))
        failed = true;
    ts_tp_close(cf->c);
    cf->c = NULL;
    if (cf->pid <= 0)
        return !failed;
    if (failed)
        kill(cf->pid, SIGKILL);
    while (waitpid(cf->pid, &status, 0) < 0 && errno == EINTR)
        ;
    cf->pid = 0;
    return !failed && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* One run of every figure for cf; run -1 warms up caches and the ring and is not kept. */
static ts_status measure(const struct opts *o, struct config *cf, int r, uint8_t *buf,
                         struct ts_err *err)
{
    size_t size = (size_t)o->mib << 20;
    double warm;
    ts_status st;

    if ((st = run_once(cf->c, OP_SINK, buf, size, o->count, r < 0 ? &warm : &cf->one_way[r],
                       err)) ||
        (st = run_once(cf->c, OP_ECHO, buf, size, o->count, r < 0 ? &warm : &cf->round_trip[r],
                       err)))
        return st;
    return run_once(cf->c, OP_FRAMES, buf, size, o->count, r < 0 ? &warm : &cf->framed[r],
                    err);
}

/* All configurations, interleaved run by run, so that a change in the machine's load during
 * the benchmark touches each of them alike. A failed configuration is dropped, not fatal. */
static bool bench_all(const struct opts *o, struct config *cf, int n, uint8_t *buf)
{
    struct ts_err err = { 0 };
    bool ok = true;

    for (int i = 0; i < n; i++) {
        ts_err_clear(&err);
        if (o->only && strcmp(o->only, cf[i].transport) != 0) {
            snprintf(cf[i].error, sizeof(cf[i].error), "skipped (--only %s)", o->only);
            continue;
        }
        if (peer_start(o, &cf[i], &err)) {
            snprintf(cf[i].error, sizeof(cf[i].error), "failed: %.240s", err.msg);
            peer_stop(&cf[i], true);
            ok = false;
        }
    }
    for (int r = -1; r < o->runs; r++) {
        fprintf(stderr, r < 0 ? "warm-up run...\n" : "run %d of %d...\n", r + 1,
                (int)o->runs);
        for (int i = 0; i < n; i++) {
            ts_err_clear(&err);
            if (cf[i].error[0] || !measure(o, &cf[i], r, buf, &err))
                continue;
            snprintf(cf[i].error, sizeof(cf[i].error), "failed: %.240s", err.msg);
            peer_stop(&cf[i], true);
            ok = false;
        }
    }
    for (int i = 0; i < n; i++) {
        if (!cf[i].error[0] && !peer_stop(&cf[i], false)) {
            snprintf(cf[i].error, sizeof(cf[i].error), "peer process did not exit cleanly");
            ok = false;
        }
        if (cf[i].error[0])
            continue;
        cf[i].one_way_med = bench_median(cf[i].one_way, (size_t)o->runs);
        cf[i].round_trip_med = bench_median(cf[i].round_trip, (size_t)o->runs);
        cf[i].framed_med = bench_median(cf[i].framed, (size_t)o->runs);
    }
    return ok;
}

/* ---- report ---- */

static double r2(double x)
{
    return (double)(int64_t)(x * 100 + 0.5) / 100;
}

static void print_table(const struct opts *o, const struct config *cf, int n, const char *mach)
{
    printf("\nbench_transport_raw: %" PRId64 " MiB messages, %" PRId64 " per run, median of %"
           PRId64 " runs; %s\n\n", o->mib, o->count, o->runs, mach);
    printf("%-28s %12s %14s %14s\n", "transport", "one way", "round trip", "framed 1-way");
    printf("%-28s %12s %14s %14s\n", "", "GB/s", "GB/s (both)", "GB/s (XXH3)");
    for (int i = 0; i < n; i++) {
        if (cf[i].error[0])
            printf("%-28s %s\n", cf[i].label, cf[i].error);
        else
            printf("%-28s %12.2f %14.2f %14.2f\n", cf[i].label, cf[i].one_way_med,
                   cf[i].round_trip_med, cf[i].framed_med);
    }
    printf("\nround trip: a message there and back, both directions' bytes over the time.\n");
}

static void json_runs(struct ts_json *j, const char *key, const double *v, int n)
{
    ts_json_arr(j, key);
    for (int i = 0; i < n; i++)
        ts_json_num(j, NULL, r2(v[i]));
    ts_json_end(j);
}

static ts_status write_json(const struct opts *o, const struct config *cf, int n,
                            const char *mach, bool ok, struct ts_err *err)
{
    double ours = cf[n - 1].one_way_med, base = cf[0].one_way_med;
    struct ts_json j;

    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "name", "transport_raw");
    ts_json_str(&j, "machine", mach);
    ts_json_bool(&j, "ok", ok);
    ts_json_int(&j, "message_mib", o->mib);
    ts_json_int(&j, "messages_per_run", o->count);
    ts_json_int(&j, "runs", o->runs);
    ts_json_arr(&j, "results");
    for (int i = 0; i < n; i++) {
        ts_json_obj(&j, NULL);
        ts_json_str(&j, "label", cf[i].label);
        ts_json_str(&j, "transport", cf[i].transport);
        ts_json_int(&j, "tcp_sockbuf", cf[i].sockbuf);
        if (cf[i].error[0]) {
            ts_json_str(&j, "error", cf[i].error);
        } else {
            ts_json_num(&j, "one_way_gbps", r2(cf[i].one_way_med));
            ts_json_num(&j, "round_trip_gbps", r2(cf[i].round_trip_med));
            ts_json_num(&j, "framed_one_way_gbps", r2(cf[i].framed_med));
            json_runs(&j, "one_way_runs", cf[i].one_way, (int)o->runs);
            json_runs(&j, "round_trip_runs", cf[i].round_trip, (int)o->runs);
        }
        ts_json_end(&j);
    }
    ts_json_end(&j);
    ts_json_obj(&j, "headline");
    ts_json_num(&j, "ours", r2(ours));
    ts_json_num(&j, "baseline", r2(base));
    ts_json_str(&j, "unit", "GB/s (64 MiB messages one way, shm vs tcp loopback)");
    ts_json_num(&j, "ratio", base > 0 ? r2(ours / base) : 0);
    ts_json_end(&j);
    return bench_write_json(&j, o->out, err);
}

int main(int argc, char **argv)
{
    static const char about[] =
        "Forks a peer process and measures GB/s of big messages over loopback:\n"
        "one way, round trip and framed (XXH3 both sides), for tcp with kernel\n"
        "buffer autotuning, tcp with 4 MiB socket buffers, and shm. Prints a\n"
        "table and writes JSON whose headline is shm against tcp, one way.";
    struct opts o = { 0 };
    const struct ts_flag flags[] = {
        { "mib", TS_FLAG_INT, &o.mib, "N", "message size in MiB (default 64)", 1, 256 },
        { "runs", TS_FLAG_INT, &o.runs, "N", "timed runs per figure; the median is shown "
                                             "(default 5)", 1, MAX_RUNS },
        { "count", TS_FLAG_INT, &o.count, "N", "messages per run (default 4)", 1, 1000 },
        { "out", TS_FLAG_STR, &o.out, "FILE", "results (default "
                                              "bench/results/transport_raw.json)", 0, 0 },
        { "only", TS_FLAG_STR, &o.only, "NAME", "measure only this transport (tcp or shm; "
                                                "the headline then has no ratio)", 0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    struct config cf[] = {
        { .label = "tcp (kernel autotuning)", .transport = "tcp" },
        { .label = "tcp (4 MiB socket buffers)", .transport = "tcp", .sockbuf = 4 << 20 },
        { .label = "shm", .transport = "shm" },
    };
    int n = (int)(sizeof(cf) / sizeof(cf[0])), done;
    struct ts_err err = { 0 };
    char mach[192];
    uint8_t *buf;
    bool ok;

    if ((done = ts_flags_program("bench_transport_raw", NULL, about, flags, argc, argv)) >= 0)
        return done;
    o.mib = o.mib ? o.mib : 64;
    o.runs = o.runs ? o.runs : 5;
    o.count = o.count ? o.count : 4;
    o.out = o.out ? o.out : "bench/results/transport_raw.json";
    signal(SIGPIPE, SIG_IGN);
    bench_machine_desc(mach, sizeof(mach));
    if (!(buf = malloc((size_t)o.mib << 20))) {
        fprintf(stderr, "bench_transport_raw: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < (size_t)o.mib << 20; i++)
        buf[i] = (uint8_t)(i * 131 + 17);
    if (o.only && !ts_transport_find(o.only)) {
        fprintf(stderr, "bench_transport_raw: --only %s: want tcp or shm\n", o.only);
        return 2;
    }
    ok = bench_all(&o, cf, n, buf);
    free(buf);
    print_table(&o, cf, n, mach);
    if (write_json(&o, cf, n, mach, ok, &err)) {
        fprintf(stderr, "bench_transport_raw: %s\n", err.msg);
        return 1;
    }
    printf("wrote %s%s\n", o.out, ok ? "" : " (marked \"ok\": false: see the errors above)");
    return ok ? 0 : 1;
}
