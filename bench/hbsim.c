/* hbsim.c - simulated workers: register them, beat them on a schedule, check them after.
 * See hbsim.h. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hbsim.h"
#include "rpc/rpc.h"
#include "util/proc.h"

#define CALL_MS 5000        /* deadline of one call */
#define LOADED_CALLS 20     /* ClusterStatus calls with all workers registered */
#define LATE_NS 1000000     /* a heartbeat sent more than 1 ms after its slot is late */
#define M_PATH(m) "/tessera.v1.Master/" m

/* ---- ClusterStatus ---- */

ts_status hb_cluster_status(struct ts_rpc_channel *ch, uint32_t max_workers,
                            Tessera__V1__ClusterStatusResponse **r, struct ts_err *err)
{
    Tessera__V1__ClusterStatusRequest req = TESSERA__V1__CLUSTER_STATUS_REQUEST__INIT;

    req.max_workers = max_workers;   /* 0: every worker */
    return ts_rpc_unary(ch, M_PATH("ClusterStatus"), &req.base,
                        &tessera__v1__cluster_status_response__descriptor,
                        (ProtobufCMessage **)r, CALL_MS, err);
}

ts_status hb_time_cluster_status(const char *target, int64_t warmup, int64_t n,
                                 uint32_t max_workers, struct bench_lat *out,
                                 Tessera__V1__ClusterStatusResponse **last, struct ts_err *err)
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
        if ((st = hb_cluster_status(ch, max_workers, &r, err)))
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

ts_status hb_conn_cost(const struct bench_master *m, int64_t n, double *bytes_per_conn,
                       struct ts_err *err)
{
    const struct ts_rpc_channel_opts own = { .own_connection = true };
    struct ts_rpc_channel **ch = calloc((size_t)n, sizeof(*ch));
    uint64_t rss0 = 0, rss1 = 0;
    ts_status st;

    if (!ch)
        return ts_err_set(err, TS_ENOMEM, "out of memory for %" PRId64 " channels", n);
    if ((st = bench_proc_rss(m->pid, &rss0, err)))
        goto out;
    for (int64_t i = 0; i < n && !st; i++) {
        Tessera__V1__ClusterStatusRequest req = TESSERA__V1__CLUSTER_STATUS_REQUEST__INIT;
        Tessera__V1__ClusterStatusResponse *r;
        req.jobs_only = true;
        if (!(st = ts_rpc_channel_create(m->target, &own, &ch[i], err)) &&
            !(st = ts_rpc_unary(ch[i], M_PATH("ClusterStatus"), &req.base,
                                &tessera__v1__cluster_status_response__descriptor,
                                (ProtobufCMessage **)&r, CALL_MS, err)))
            protobuf_c_message_free_unpacked(&r->base, NULL);
    }
    if (!st && !(st = bench_proc_rss(m->pid, &rss1, err)))
        *bytes_per_conn = ((double)rss1 - (double)rss0) / (double)n;
out:
    for (int64_t i = 0; i < n; i++)
        ts_rpc_channel_free(ch[i]);
    free(ch);
    return st;
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
    int64_t errors, late, rest_granted;
    struct ts_err err;        /* the first error */
};

/* Simulated shards vouching for every worker (hb_load.vouch_shards): one thread beats them
 * all, each every third of the lease, until stop. */
struct hb_voucher {
    pthread_t tid;
    struct hb_plan *plan;
    struct ts_rpc_channel *ch;
    uint32_t *shards;
    int64_t nshards, sent, errors;
    atomic_bool stop;
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
    t->rest_granted += r->rest_ms > 0;
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

/* Registers v->nshards simulated shards (addresses nobody listens on: a master without mutual
 * TLS asks none; no data plane). */
static ts_status vouch_register(struct hb_voucher *v, struct ts_err *err)
{
    char addr[32], instance[48];

    for (int64_t i = 0; i < v->nshards; i++) {
        Tessera__V1__RegisterShardRequest req = TESSERA__V1__REGISTER_SHARD_REQUEST__INIT;
        Tessera__V1__RegisterShardResponse *r;
        ts_status st;
        snprintf(addr, sizeof(addr), "127.0.0.1:%" PRId64, 9 + i);
        snprintf(instance, sizeof(instance), "bench-shard-%d-%" PRId64, (int)getpid(), i);
        req.addr = addr;
        req.instance = instance;
        req.lease_ms = v->plan->lease_ms;
        req.secret = (ProtobufCBinaryData){ sizeof(hb_secret), hb_secret };
        if ((st = ts_rpc_unary(v->ch, M_PATH("RegisterShard"), &req.base,
                               &tessera__v1__register_shard_response__descriptor,
                               (ProtobufCMessage **)&r, CALL_MS, err)))
            return st;
        v->shards[i] = r->shard_id;
        protobuf_c_message_free_unpacked(&r->base, NULL);
    }
    return TS_OK;
}

static void *vouch_main(void *arg)
{
    struct hb_voucher *v = arg;
    int64_t period = (int64_t)v->plan->lease_ms * 1000000 / 3, next = ts_now_ns();

    while (!atomic_load(&v->stop)) {
        for (int64_t i = 0; i < v->nshards; i++) {
            Tessera__V1__HeartbeatRequest req = TESSERA__V1__HEARTBEAT_REQUEST__INIT;
            Tessera__V1__HeartbeatResponse *r;
            struct ts_err e = { 0 };
            req.kind = TESSERA__V1__MEMBER_KIND__MEMBER_KIND_SHARD;
            req.id = v->shards[i];
            req.secret = (ProtobufCBinaryData){ sizeof(hb_secret), hb_secret };
            req.vouched = v->plan->ids;
            req.n_vouched = (size_t)v->plan->workers;
            if (ts_rpc_unary(v->ch, M_PATH("Heartbeat"), &req.base,
                             &tessera__v1__heartbeat_response__descriptor,
                             (ProtobufCMessage **)&r, CALL_MS, &e)) {
                if (!v->errors++)
                    v->err = e;
                continue;
            }
            v->sent++;
            protobuf_c_message_free_unpacked(&r->base, NULL);
        }
        next += period;
        while (!atomic_load(&v->stop) && ts_now_ns() < next)
            ts_sleep_ms(10);
    }
    return NULL;
}

/* Workers leave from DEREG_THREADS threads over the HB_THREADS channels, so that many
 * Deregisters are in flight at once, as when the workers of a job end together. */
#define DEREG_THREADS 64

struct hb_leaver {
    pthread_t tid;
    int idx;
    struct hb_plan *plan;
    struct ts_rpc_channel *ch;   /* borrowed from an hb_thread */
    int64_t left, errors;
    struct ts_err err;
};

static void *hb_deregister_main(void *arg)
{
    struct hb_leaver *t = arg;

    for (int64_t w = t->idx; w < t->plan->workers; w += DEREG_THREADS) {
        Tessera__V1__DeregisterRequest req = TESSERA__V1__DEREGISTER_REQUEST__INIT;
        Tessera__V1__DeregisterResponse *r;
        struct ts_err e = { 0 };
        req.kind = TESSERA__V1__MEMBER_KIND__MEMBER_KIND_WORKER;
        req.id = t->plan->ids[w];
        req.reason = "bench_rpc_latency: done";
        req.secret = (ProtobufCBinaryData){ sizeof(hb_secret), hb_secret };
        if (ts_rpc_unary(t->ch, M_PATH("Deregister"), &req.base,
                         &tessera__v1__deregister_response__descriptor, (ProtobufCMessage **)&r,
                         CALL_MS, &e)) {
            if (!t->errors++)
                t->err = e;
            continue;
        }
        t->left++;
        protobuf_c_message_free_unpacked(&r->base, NULL);
    }
    return NULL;
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
        res->rest_granted += th[i].rest_granted;
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
    Tessera__V1__ClusterStatusResponse *r = NULL;
    ts_status st = hb_time_cluster_status(p->target, 1, LOADED_CALLS, 0, &res->loaded, &r,
                                          err);

    if (st || (st = hb_time_cluster_status(p->target, 1, LOADED_CALLS, PAGE_WORKERS,
                                           &res->paged, NULL, err)))
        return st;
    res->loaded_bytes = protobuf_c_message_get_packed_size(&r->base);
    hb_check(p, r, res);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return TS_OK;
}

ts_status hb_bench(const struct hb_load *l, const struct bench_master *m, struct hb_result *res,
                   struct ts_err *err)
{
    struct hb_plan p = { .target = m->target, .workers = l->workers,
                         .interval_ns = l->interval_ms * 1000000, .job = l->job,
                         .lease_ms = (uint32_t)l->lease_ms };
    struct hb_thread th[HB_THREADS];
    struct hb_voucher v = { 0 };
    bool vouching = false;
    ts_status st = TS_OK;
    uint64_t rss0 = 0, rss1 = 0;
    int64_t t0;

    memset(th, 0, sizeof(th));
    res->workers = l->workers;
    res->offered_per_s = (double)l->workers * 1000.0 / (double)l->interval_ms;
    p.nslots = l->seconds * 1000 * l->workers / l->interval_ms;
    p.ids = calloc((size_t)l->workers, sizeof(*p.ids));
    p.acked = calloc((size_t)l->workers, sizeof(*p.acked));
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
    if (l->vouch_shards > 0) {   /* vouching from before the phase, so that it covers it */
        v.plan = &p;
        v.nshards = l->vouch_shards;
        if (!(v.shards = calloc((size_t)v.nshards, sizeof(*v.shards))))
            st = ts_err_set(err, TS_ENOMEM, "out of memory for the shards");
        if (st || (st = ts_rpc_channel_create(m->target, NULL, &v.ch, err)) ||
            (st = vouch_register(&v, err)))
            goto out_free;
        pthread_create(&v.tid, NULL, vouch_main, &v);
        vouching = true;
        ts_sleep_ms(200);
    }
    st = hb_phase(th, &p, m->pid, res, err);
    if (vouching) {
        atomic_store(&v.stop, true);
        pthread_join(v.tid, NULL);
        res->vouches = v.sent;
        res->errors += v.errors;
        if (v.errors && !res->first_error[0])
            snprintf(res->first_error, sizeof(res->first_error), "%s", v.err.msg);
    }
    if (!st && !(st = hb_verify(&p, res, err)) && m->pid &&
        !(st = bench_proc_rss(m->pid, &rss1, err)))
        res->rss_per_worker = ((double)rss1 - (double)rss0) / (double)l->workers;
    if (!st && l->deregister) {
        struct hb_leaver lv[DEREG_THREADS];
        memset(lv, 0, sizeof(lv));
        t0 = ts_now_ns();
        for (int i = 0; i < DEREG_THREADS; i++) {
            lv[i] = (struct hb_leaver){ .idx = i, .plan = &p, .ch = th[i % HB_THREADS].ch };
            pthread_create(&lv[i].tid, NULL, hb_deregister_main, &lv[i]);
        }
        for (int i = 0; i < DEREG_THREADS; i++) {
            pthread_join(lv[i].tid, NULL);
            res->deregistered += lv[i].left;
            if (lv[i].errors && !st)
                st = ts_err_set(err, lv[i].err.code, "Deregister: %s", lv[i].err.msg);
        }
        res->deregister_s = (double)(ts_now_ns() - t0) / 1e9;
    }
out_free:
    ts_rpc_channel_free(v.ch);
    free(v.shards);
    for (int i = 0; i < HB_THREADS; i++)
        ts_rpc_channel_free(th[i].ch);
    free(p.ids);
    free(p.acked);
    free(p.ns);
    return st;
}
