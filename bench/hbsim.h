/* hbsim.h - simulated workers for bench_rpc_latency (bench/ only; not a library of the product).
 *
 * Why a module: the master's heartbeat load is measured with thousands of workers that cost
 * this process little. hb_bench() registers W workers on a running master from HB_THREADS
 * threads (a channel each; worker w belongs to thread w % HB_THREADS) and beats each once at
 * once, as a real worker does; then sends each one Heartbeat per interval on a fixed schedule
 * (open loop: a thread behind schedule sends at once and counts the send late), reading the
 * master's CPU from /proc/PID/stat when it runs on this host; then times ClusterStatus with
 * every worker in it and checks that each worker is alive and that its clock equals the
 * heartbeats acknowledged to it. With hb_load.deregister each worker then leaves (Deregister);
 * else they stay until their lease runs out on the master. The ClusterStatus calls that check makes are here too, for
 * rpc_latency.c to time on their own.
 * Ownership: the pointers a call takes are borrowed for the call and the module keeps none;
 * a ClusterStatus reply it hands back is the caller's (see each call).
 * Threads: call from one thread at a time; hb_bench starts and joins threads of its own. */
#ifndef TS_BENCH_HBSIM_H
#define TS_BENCH_HBSIM_H

#include <stddef.h>
#include <stdint.h>

#include "benchlib.h"
#include "tessera/v1/master.pb-c.h"
#include "util/err.h"

#define HB_THREADS 4        /* heartbeat client threads, one channel each */
#define PAGE_WORKERS 50     /* a ClusterStatus page, as `tessera status` asks */

/* The load hb_bench offers: each of `workers` workers beats once every interval_ms, for
 * `seconds`. */
struct hb_load {
    const char *job;          /* NULL: the workers join no job; else ranks 0..workers-1 of it */
    int64_t workers, seconds, interval_ms;
    int64_t lease_ms;         /* each worker's RegisterWorker lease */
    /* Above 0: that many simulated shards register and each vouches for every worker every
     * third of the lease (HeartbeatRequest.vouched, as real shards do for the workers whose
     * frames they answer), and the workers beat every interval_ms all the same (the caller
     * sets it to the rest the master grants: docs/scaling.md). */
    int64_t vouch_shards;
    bool deregister;          /* at the end, each worker leaves (Deregister), timed */
};

struct hb_result {
    int64_t workers, calls, errors, late, alive, clock_mismatch;
    int64_t rest_granted;           /* heartbeats answered with a rest_ms above 0 */
    int64_t vouches;                /* shard heartbeats sent, each vouching for every worker */
    int64_t deregistered;           /* hb_load.deregister: workers that left, answered OK */
    double deregister_s;
    double offered_per_s, achieved_per_s, master_cpu_pct, client_cpu_pct, register_s;
    struct bench_lat lat;
    struct bench_lat loaded;        /* ClusterStatus with all workers registered */
    struct bench_lat paged;         /* the same, a page of PAGE_WORKERS of them */
    size_t loaded_bytes;
    double rss_per_worker;          /* the master's resident bytes a worker, registered */
    char first_error[256];
};

/* The load l on the master at m->target (m->pid: its CPU and memory are measured; 0: not on
 * this host, not measured), into res, which the caller zeroes first. Heartbeat errors are
 * counted in res, not returned (res->first_error says the first): the caller judges them with
 * res->alive and res->clock_mismatch. Fails on an error of a channel, of RegisterWorker or a
 * worker's first Heartbeat, of ClusterStatus or of reading /proc, or out of memory. */
ts_status hb_bench(const struct hb_load *l, const struct bench_master *m, struct hb_result *res,
                   struct ts_err *err) TS_MUST_CHECK;

/* What a connection costs the master at m: n channels to it, each a connection of its own (as
 * n worker processes hold), each connected by one call; the master's resident bytes grown,
 * per connection, into *bytes_per_conn. Needs m->pid (a master on this host). */
ts_status hb_conn_cost(const struct bench_master *m, int64_t n, double *bytes_per_conn,
                       struct ts_err *err) TS_MUST_CHECK;

/* One ClusterStatus call on ch listing max_workers (0: every worker). On TS_OK the caller owns
 * *r, freed with protobuf_c_message_free_unpacked. */
struct ts_rpc_channel;
ts_status hb_cluster_status(struct ts_rpc_channel *ch, uint32_t max_workers,
                            Tessera__V1__ClusterStatusResponse **r,
                            struct ts_err *err) TS_MUST_CHECK;
/* warmup calls, then n timed ones on one new channel to target, each listing max_workers (0:
 * all), into out. With last, *last is the final reply (the caller frees it with
 * protobuf_c_message_free_unpacked). */
ts_status hb_time_cluster_status(const char *target, int64_t warmup, int64_t n,
                                 uint32_t max_workers, struct bench_lat *out,
                                 Tessera__V1__ClusterStatusResponse **last,
                                 struct ts_err *err) TS_MUST_CHECK;

#endif
