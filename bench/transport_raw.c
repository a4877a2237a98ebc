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
 * kernel's buffer autotuning, tcp with fixed 4 MiB socket buffers (TESSERA_TCP_SOCKBUF), shm,
 * and rdma where the build has it and --host is an address of an RDMA device's interface
 * (bench/rdma.py runs it so in the Soft-RoCE guest), copying each message into its staging
 * area, and again with the message in pinned memory (ts_tp_pin), written from where it lies. The peer is this program exec'd again
 * (a verbs context does not survive fork). CPU: the seconds both processes spent (user and
 * system) and the whole machine's busy seconds (/proc/stat: the kernel's work for a software
 * device such as rxe is not always charged to a process), per GB moved one way.
 * Output: a table, and JSON whose headline is shm one way against tcp one way. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
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
    const char *out, *only, *host;
    const char *self;         /* the peer is this program exec'd again */
    bool rdma;                /* --host is not loopback: rdma is measured */
};

struct config {
    const char *label, *transport;
    int sockbuf;              /* TESSERA_TCP_SOCKBUF; 0: unset */
    bool pinned;              /* send the message as a body from pinned memory (ts_tp_pin) */
    struct ts_conn *c;        /* to the peer process */
    pid_t pid;
    double one_way[MAX_RUNS], round_trip[MAX_RUNS], framed[MAX_RUNS];
    double cpu[MAX_RUNS], machine[MAX_RUNS];   /* one way: CPU seconds per GB */
    double one_way_med, round_trip_med, framed_med, cpu_med, machine_med;
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

/* The peer process: `bench_transport_raw --peer TRANSPORT BLOB MIB`, exec'd by peer_start. */
static int peer_main(const char *transport, const char *blob, const char *mib)
{
    const struct ts_transport_ops *t = ts_transport_find(transport);
    struct ts_blob addr = { .len = strlen(blob) };
    size_t cap = (size_t)strtoull(mib, NULL, 10) << 20;
    struct ts_err err = { 0 };
    struct ts_conn *c = NULL;
    uint8_t *buf;
    int rc;

    if (getppid() == 1 || !t || addr.len > sizeof(addr.data) || !(buf = malloc(cap)))
        return 1;
    memcpy(addr.data, blob, addr.len);
    if (ts_tp_connect(t, &addr, 30000, &c, &err)) {   /* 30 s: emulated devices are slow */
        fprintf(stderr, "bench_transport_raw: peer connect: %s\n", err.msg);
        free(buf);
        return 1;
    }
    memset(buf, 0, cap);
    rc = peer_serve(c, buf, cap);
    ts_tp_close(c);
    free(buf);
    return rc;
}

/* ---- the measuring side ---- */

static ts_status send_cmd(struct ts_conn *c, enum op op, size_t size, int64_t count,
                          struct ts_err *err)
{
    struct cmd m = { op, size, (uint64_t)count };

    return ts_tp_send(c, &m, sizeof(m), NULL, 0, err);
}

/* CPU seconds this process and pid (user and system) have used, and the machine's busy
 * seconds (every CPU's non-idle time in /proc/stat). */
static void cpu_now(pid_t pid, double *procs, double *machine)
{
    double tick = (double)sysconf(_SC_CLK_TCK);
    unsigned long long v[8] = { 0 }, ut = 0, st = 0;
    struct rusage ru;
    char path[64];
    FILE *f;

    getrusage(RUSAGE_SELF, &ru);
    *procs = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
             (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if ((f = fopen(path, "r"))) {   /* fields 14 and 15, after "(comm)" */
        if (fscanf(f, "%*d (%*[^)]) %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
                   &ut, &st) == 2)
            *procs += (double)(ut + st) / tick;
        fclose(f);
    }
    *machine = 0;
    if ((f = fopen("/proc/stat", "r"))) {   /* cpu user nice system idle iowait irq softirq steal */
        if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]) == 8)
            *machine = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / tick;
        fclose(f);
    }
}

/* One timed run of op; GB/s (1e9 bytes/s) of payload, both directions counted for echo; with
 * cpu, also the CPU seconds per GB of both processes (cpu[0]) and of the machine (cpu[1]). */
static ts_status run_once(struct ts_conn *c, enum op op, uint8_t *buf, size_t size,
                          int64_t count, bool pinned, double *gbps, pid_t peer, double *cpu,
                          struct ts_err *err)
{
    struct ts_frame_hdr h = { .type = TS_FRAME_PUSH };
    double p0 = 0, m0 = 0, p1, m1;
    int64_t t0;
    ts_status st;
    uint8_t ack;

    if ((st = send_cmd(c, op, size, count, err)))
        return st;
    if (cpu)
        cpu_now(peer, &p0, &m0);
    t0 = ts_now_ns();
    for (int64_t i = 0; i < count; i++) {
        st = op == OP_FRAMES ? ts_frame_send(c, &h, buf, size, err)
             : pinned        ? ts_tp_send(c, NULL, 0, buf, size, err)   /* a body: in place */
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
    if (cpu) {
        double gb = (double)size * (double)count / 1e9;
        cpu_now(peer, &p1, &m1);
        cpu[0] = (p1 - p0) / gb;
        cpu[1] = (m1 - m0) / gb;
    }
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

    char blob[TS_BLOB_MAX + 1], mib[24];

    if (!t)
        return ts_err_set(err, TS_ENODEV, "not in this build");
    if ((st = t->probe(err)))
        return st;
    snprintf(sb, sizeof(sb), "%d", cf->sockbuf);
    if (cf->sockbuf)
        setenv("TESSERA_TCP_SOCKBUF", sb, 1);     /* read at listen and connect; inherited */
    else
        unsetenv("TESSERA_TCP_SOCKBUF");
    if ((st = ts_tp_listen(t, o->host, &l, &addr, err)))
        return st;
    memcpy(blob, addr.data, addr.len);
    blob[addr.len] = '\0';
    snprintf(mib, sizeof(mib), "%" PRId64, o->mib);
    fflush(NULL);
    if ((cf->pid = fork()) < 0) {
        cf->pid = 0;
        ts_tp_unlisten(l);
        return ts_err_set(err, TS_EIO, "fork: %s", strerror(errno));
    }
    if (cf->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);   /* kept across exec */
        execl(o->self, o->self, "--peer", cf->transport, blob, mib, (char *)NULL);
        _exit(127);
    }
    st = ts_tp_accept(l, 40000, &cf->c, err);
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

    double cpu[2];

    if ((st = run_once(cf->c, OP_SINK, buf, size, o->count, cf->pinned,
                       r < 0 ? &warm : &cf->one_way[r], cf->pid, cpu, err)) ||
        (st = run_once(cf->c, OP_ECHO, buf, size, o->count, cf->pinned,
                       r < 0 ? &warm : &cf->round_trip[r], cf->pid, NULL, err)))
        return st;
    if (r >= 0) {
        cf->cpu[r] = cpu[0];
        cf->machine[r] = cpu[1];
    }
    return run_once(cf->c, OP_FRAMES, buf, size, o->count, cf->pinned,
                    r < 0 ? &warm : &cf->framed[r], cf->pid, NULL, err);
}

/* Whether name is one of the comma-separated list's items. */
static bool in_list(const char *list, const char *name)
{
    size_t n = strlen(name);

    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == '\0'))
            return true;
    return false;
}

/* All configurations, interleaved run by run, so that a change in the machine's load during
 * the benchmark touches each of them alike. A failed configuration is dropped, not fatal. */
static bool bench_all(const struct opts *o, struct config *cf, int n, uint8_t *buf,
                      uint8_t *pbuf)
{
    struct ts_err err = { 0 };
    bool ok = true;

    for (int i = 0; i < n; i++) {
        ts_err_clear(&err);
        if (o->only && !in_list(o->only, cf[i].transport)) {
            snprintf(cf[i].error, sizeof(cf[i].error), "skipped (--only %s)", o->only);
            continue;
        }
        if (strcmp(cf[i].transport, "rdma") == 0 && !o->rdma) {
            snprintf(cf[i].error, sizeof(cf[i].error), "skipped (give --host, an address of "
                     "an RDMA device's interface; bench/rdma.py does)");
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
            if (cf[i].error[0] || !measure(o, &cf[i], r, cf[i].pinned ? pbuf : buf, &err))
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
        cf[i].cpu_med = bench_median(cf[i].cpu, (size_t)o->runs);
        cf[i].machine_med = bench_median(cf[i].machine, (size_t)o->runs);
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
    printf("%-28s %12s %14s %14s %12s %12s\n", "transport", "one way", "round trip",
           "framed 1-way", "CPU s/GB", "machine");
    printf("%-28s %12s %14s %14s %12s %12s\n", "", "GB/s", "GB/s (both)", "GB/s (XXH3)",
           "(1-way)", "CPU s/GB");
    for (int i = 0; i < n; i++) {
        if (cf[i].error[0])
            printf("%-28s %s\n", cf[i].label, cf[i].error);
        else
            printf("%-28s %12.3f %14.3f %14.3f %12.2f %12.2f\n", cf[i].label, cf[i].one_way_med,
                   cf[i].round_trip_med, cf[i].framed_med, cf[i].cpu_med, cf[i].machine_med);
    }
    printf("\nround trip: a message there and back, both directions' bytes over the time.\n"
           "CPU s/GB: user and system seconds of both processes per GB sent one way; machine:\n"
           "every CPU's busy seconds per GB (the kernel's work for the device included).\n");
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
    double ours = cf[2].one_way_med, base = cf[0].one_way_med;   /* shm, tcp */
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
            ts_json_num(&j, "one_way_gbps_exact", cf[i].one_way_med);
            ts_json_num(&j, "cpu_s_per_gb", r2(cf[i].cpu_med));
            ts_json_num(&j, "machine_cpu_s_per_gb", r2(cf[i].machine_med));
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
        "Starts a peer process and measures GB/s of big messages over loopback\n"
        "(or --host): one way, round trip and framed (XXH3 both sides), for tcp\n"
        "with kernel buffer autotuning, tcp with 4 MiB socket buffers, shm, and\n"
        "rdma with a --host on an RDMA device; and the CPU seconds per GB. Prints\n"
        "a table and writes JSON whose headline is shm against tcp, one way.";
    struct opts o = { 0 };
    const struct ts_flag flags[] = {
        { "mib", TS_FLAG_INT, &o.mib, "N", "message size in MiB (default 64)", 1, 256 },
        { "runs", TS_FLAG_INT, &o.runs, "N", "timed runs per figure; the median is shown "
                                             "(default 5)", 1, MAX_RUNS },
        { "count", TS_FLAG_INT, &o.count, "N", "messages per run (default 4)", 1, 1000 },
        { "out", TS_FLAG_STR, &o.out, "FILE", "results (default "
                                              "bench/results/transport_raw.json)", 0, 0 },
        { "only", TS_FLAG_STR, &o.only, "LIST", "measure only these transports (tcp, shm, "
                                                "rdma, comma-separated; without both tcp and "
                                                "shm the headline has no ratio)", 0, 0 },
        { "host", TS_FLAG_STR, &o.host, "ADDR", "the address listeners bind to (default "
                                                "127.0.0.1; rdma needs an address of an RDMA "
                                                "device's interface)", 0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    struct config cf[] = {
        { .label = "tcp (kernel autotuning)", .transport = "tcp" },
        { .label = "tcp (4 MiB socket buffers)", .transport = "tcp", .sockbuf = 4 << 20 },
        { .label = "shm", .transport = "shm" },
        { .label = "rdma", .transport = "rdma" },
        { .label = "rdma (pinned buffer)", .transport = "rdma", .pinned = true },
    };
    uint64_t pin;
    int n = (int)(sizeof(cf) / sizeof(cf[0])), done;
    struct ts_err err = { 0 };
    char mach[192];
    uint8_t *buf, *pbuf;
    bool ok;

    if (argc == 5 && strcmp(argv[1], "--peer") == 0)   /* what peer_start execs */
        return peer_main(argv[2], argv[3], argv[4]);
    if ((done = ts_flags_program("bench_transport_raw", NULL, about, flags, argc, argv)) >= 0)
        return done;
    o.self = "/proc/self/exe";
    o.host = o.host ? o.host : "127.0.0.1";
    o.rdma = TS_HAVE_RDMA && strcmp(o.host, "127.0.0.1") != 0;
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
    if (o.only && !in_list(o.only, "tcp") && !in_list(o.only, "shm") &&
        !in_list(o.only, "rdma")) {
        fprintf(stderr, "bench_transport_raw: --only %s: want tcp, shm or rdma\n", o.only);
        return 2;
    }
    /* The pinned configuration's messages, from their own pinned copy (the others' frames,
     * sent as bodies, must not find theirs pinned). */
    if (!(pbuf = malloc((size_t)o.mib << 20))) {
        fprintf(stderr, "bench_transport_raw: out of memory\n");
        return 1;
    }
    memcpy(pbuf, buf, (size_t)o.mib << 20);
    pin = ts_tp_pin(pbuf, (size_t)o.mib << 20);
    ok = bench_all(&o, cf, n, buf, pbuf);
    ts_tp_unpin(pin);
    free(pbuf);
    free(buf);
    print_table(&o, cf, n, mach);
    if (write_json(&o, cf, n, mach, ok, &err)) {
        fprintf(stderr, "bench_transport_raw: %s\n", err.msg);
        return 1;
    }
    printf("wrote %s%s\n", o.out, ok ? "" : " (marked \"ok\": false: see the errors above)");
    return ok ? 0 : 1;
}
