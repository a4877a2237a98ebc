/* cluster.h - talking to the master: status, the shard map, and membership.
 *
 * Why: shards, workers, the CLI and the SDK all join the cluster and follow the shard map the
 * same way; this is that one way. A membership registers a process with the master and keeps
 * its lease alive from a heartbeat thread: when the master says the member was declared dead
 * (or, after a master restart, does not know it), the thread registers again by itself. A
 * cluster handle caches the shard map, builds the same ring as the master, and retries a shard
 * call once the shard answers ABORTED (stale map epoch) after refreshing the map.
 *
 * Ownership: each *_open/_start returns an object the caller frees with the matching
 * *_close/_stop. Responses returned as protobuf-c messages are the caller's, freed with
 * protobuf_c_message_free_unpacked(msg, NULL).
 * Threads: a ts_master and a ts_cluster may be shared between threads; a membership's
 * accessors may be called from any thread while its heartbeat thread runs. */
#ifndef TS_CLUSTER_CLUSTER_H
#define TS_CLUSTER_CLUSTER_H

#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "placement/ring.h"
#include "tessera/v1/master.pb-c.h"
#include "tessera/v1/shard.pb-c.h"
#include "transport/transport.h"
#include "util/err.h"
#include "util/names.h"

/* Deadline of one control call, retries on UNAVAILABLE included: the default of the
 * TESSERA_CALL_TIMEOUT_MS row in util/knobs.c (test_cluster checks that they agree). */
#define TS_MASTER_CALL_MS 5000
/* A control call's deadline unless told otherwise: $TESSERA_CALL_TIMEOUT_MS when it is a
 * positive number of milliseconds, else TS_MASTER_CALL_MS (util/knobs.h: read once). */
int ts_call_ms_default(void);

struct ts_master;
struct ts_membership;
struct ts_cluster;

/* The master address to use: `flag` if set, else $TESSERA_MASTER (util/knobs.h: read once),
 * else 127.0.0.1:7070. */
const char *ts_master_default_addr(const char *flag);

ts_status ts_master_open(const char *addr, struct ts_master **out,
                         struct ts_err *err) TS_MUST_CHECK;
void ts_master_close(struct ts_master *m);
/* The deadline of m's calls that have none of their own (ms <= 0: ts_call_ms_default()), and
 * what it is. */
void ts_master_set_call_ms(struct ts_master *m, int ms);
int ts_master_call_ms(const struct ts_master *m);
const char *ts_master_addr(const struct ts_master *m);

/* ClusterStatus, every shard and worker listed. */
ts_status ts_master_status(struct ts_master *m, int deadline_ms,
                           Tessera__V1__ClusterStatusResponse **out,
                           struct ts_err *err) TS_MUST_CHECK;
/* ClusterStatus as req asks it (a page of the workers, or the jobs alone). */
ts_status ts_master_status_req(struct ts_master *m, int deadline_ms,
                               const Tessera__V1__ClusterStatusRequest *req,
                               Tessera__V1__ClusterStatusResponse **out,
                               struct ts_err *err) TS_MUST_CHECK;
/* ClusterStatus of the jobs alone (jobs_only: no shard, no worker): a worker's poll, which
 * must not cost the master a list of thousands of workers for each of thousands of them. */
ts_status ts_master_jobs(struct ts_master *m, int deadline_ms,
                         Tessera__V1__ClusterStatusResponse **out,
                         struct ts_err *err) TS_MUST_CHECK;
/* Job id as cs lists it, in any state; NULL when it does not (points into cs). */
const Tessera__V1__JobInfo *ts_status_job(const Tessera__V1__ClusterStatusResponse *cs,
                                          const char *id);
/* A JobState as a word: "running", "idle", "finished", "failed", "abandoned", else "unknown". */
const char *ts_job_state_name(int state);
ts_status ts_master_shard_map(struct ts_master *m, Tessera__V1__ShardMap **out,
                              struct ts_err *err) TS_MUST_CHECK;
/* The master's whole shard map, fetched as a delta from held (a whole map this caller got
 * before, read only, not freed; NULL: none) when the master keeps held's epoch
 * (lib/cluster/mapdelta.h); a delta that does not apply is fetched again whole. *out is the
 * caller's (tessera__v1__shard_map__free_unpacked). */
ts_status ts_master_shard_map_update(struct ts_master *m, const Tessera__V1__ShardMap *held,
                                     Tessera__V1__ShardMap **out,
                                     struct ts_err *err) TS_MUST_CHECK;
/* CreateSnapshot and CollectGarbage with the caller's request; *out is the reply (the
 * caller's, freed with protobuf_c_message_free_unpacked). For `tessera snapshot`. */
ts_status ts_master_create_snapshot(struct ts_master *m,
                                    const Tessera__V1__CreateSnapshotRequest *req,
                                    int deadline_ms, Tessera__V1__CreateSnapshotResponse **out,
                                    struct ts_err *err) TS_MUST_CHECK;
ts_status ts_master_collect_garbage(struct ts_master *m,
                                    const Tessera__V1__CollectGarbageRequest *req,
                                    int deadline_ms, Tessera__V1__CollectGarbageResponse **out,
                                    struct ts_err *err) TS_MUST_CHECK;
/* CreateSnapshot of job (NULL or "": the only one) now; hex receives the snapshot's id. For
 * audits of the live job (tessera-verify, tessera verify compare ... live). */
ts_status ts_master_snapshot(struct ts_master *m, const char *job, const char *message,
                             int deadline_ms, char hex[65], struct ts_err *err) TS_MUST_CHECK;
/* CheckData: this worker's data checksums against the job's map (datamap.h). */
ts_status ts_master_check_data(struct ts_master *m, const Tessera__V1__CheckDataRequest *req,
                               Tessera__V1__CheckDataResponse **out,
                               struct ts_err *err) TS_MUST_CHECK;
/* A unary Master call of `method` ("ReportUnreachable", "ReportLost") with req; *out the
 * caller's (freed with protobuf_c_message_free_unpacked). */
ts_status ts_master_call(struct ts_master *m, const char *method, const ProtobufCMessage *req,
                         const ProtobufCMessageDescriptor *rdesc, ProtobufCMessage **out,
                         struct ts_err *err) TS_MUST_CHECK;
#define TS_MEMBER_SECRET_LEN 32

struct ts_membership_cfg {
    Tessera__V1__MemberKind kind;             /* SHARD or WORKER */
    const char *addr;                         /* shards: own gRPC host:port; workers: host */
    const char *instance;                     /* this process start's id; NULL: one is made */
    /* The member's secret (RegisterShardRequest.secret), TS_MEMBER_SECRET_LEN bytes, which a
     * member that keeps its identity across restarts (a shard's --redo-dir) sends again with
     * its instance; NULL: drawn at random. */
    const uint8_t *secret;
    const char *role;                         /* workers: NULL/"" a trainer, "verify" */
    const char *service;                      /* role verify: its gRPC host:port */
    uint32_t lease_ms;                        /* 0: the master's default */
    /* Trainers: the job (NULL or "": none), this rank, the job's worker count, and whether the
     * shards keep the job once every worker finished (docs/operations.md). */
    const char *job;
    uint32_t rank, workers;
    bool keep;
    /* Trainers: the worker takes over dead workers' slots (docs/elastic.md), and the workers
     * the job starts with (0: workers; RegisterWorkerRequest.start_workers). */
    bool elastic;
    uint32_t start_workers;
    bool balance;             /* RegisterWorkerRequest.balance (docs/scheduler.md) */
    /* How many times a supervisor restarted the member this process replaces. */
    uint32_t restarts;
    /* Shards: it keeps a redo log (--redo-dir), so the master holds its place on the ring for
     * its --shard-restart-grace when it stops answering (RegisterShardRequest.redo_log); and
     * this process started from that log, holding what the member held (.resumed). */
    bool redo_log, resumed;
    /* Shards: the data-plane listeners to publish (borrowed until ts_membership_start
     * returns; copied for re-registration). */
    Tessera__V1__DataPlaneEndpoint **endpoints;
    size_t nendpoints;
    /* Called from the heartbeat thread when the map epoch changes. May be NULL. */
    void (*on_epoch)(void *arg, uint64_t epoch);
    /* Shards: called before each heartbeat for the moves left for joining shards and the map
     * epoch they were counted under (HeartbeatRequest.moves_*). May be NULL. */
    uint64_t (*moves)(void *arg, uint64_t *epoch);
    /* Shards: called from the heartbeat thread with each elastic job's roster (HeartbeatResponse
     * .rosters). May be NULL. */
    void (*on_roster)(void *arg, const char *job, uint64_t roster);
    /* Shards: called before each heartbeat for the jobs the shard holds (HeartbeatRequest.jobs;
     * at most max into ids, returns how many), and, when the master answers, with those of
     * them it holds nothing of (HeartbeatResponse.unknown_jobs; n may be 0). Both or neither
     * may be NULL. */
    size_t (*held_jobs)(void *arg, char (*ids)[TS_JOB_ID_MAX + 1], size_t max);
    void (*on_unknown_jobs)(void *arg, char *const *ids, size_t n);
    /* Shards: called before each heartbeat for the workers whose frames the shard answered
     * since the last one and their last pushed steps (at most max into ids and steps;
     * HeartbeatRequest.vouched, vouched_steps). May be NULL. */
    size_t (*vouched)(void *arg, uint32_t *ids, uint64_t *steps, size_t max);
    /* Workers: the monotonic ms of the last reply a shard sent this worker (0: none yet).
     * With HeartbeatResponse.rest_ms, a heartbeat is left out while replies keep coming
     * (docs/scaling.md). May be NULL: every heartbeat is sent. */
    int64_t (*last_reply_ms)(void *arg);
    void *arg;
};

/* Registers (retrying while the master is unavailable, up to deadline_ms) and starts
 * heartbeating. m is borrowed and must outlive the membership. */
ts_status ts_membership_start(struct ts_master *m, const struct ts_membership_cfg *cfg,
                              int deadline_ms, struct ts_membership **out,
                              struct ts_err *err) TS_MUST_CHECK;
/* How this worker's part of its job ended, for the Deregister of ts_membership_stop: failed
 * with a reason, else finished with its final fingerprint (64 hex digits, or ""). Without it a
 * worker leaves finished, without a fingerprint. */
void ts_membership_end(struct ts_membership *ms, bool failed, const char *text);
/* Stops heartbeating; with deregister, tells the master first (a clean leave). */
void ts_membership_stop(struct ts_membership *ms, bool deregister);
uint32_t ts_membership_id(struct ts_membership *ms);
/* How many times this member registered: more than 1 after the master declared it dead (or
 * forgot it, restarting) and it registered again. */
unsigned ts_membership_registrations(struct ts_membership *ms);
/* Workers of an elastic job: the slots this worker owned at the last heartbeat (ascending, at
 * most max into slots) and the job's roster; returns how many (0 before any heartbeat). */
size_t ts_membership_slots(struct ts_membership *ms, uint64_t *roster, uint32_t *slots,
                           size_t max);
/* Workers: priority tasks (SubmitTask, docs/scheduler.md). ts_membership_task gives a task a
 * heartbeat handed this worker, once (false: none new). ts_membership_task_done keeps r (id,
 * state DONE or FAILED and the result; copied) for the heartbeats to send until one is
 * answered. */
struct ts_task {
    uint32_t id;
    int kind;                                 /* Tessera__V1__TaskKind */
};
bool ts_membership_task(struct ts_membership *ms, struct ts_task *out);
void ts_membership_task_done(struct ts_membership *ms, const Tessera__V1__TaskInfo *r);
/* Workers of a dynamic job (ClaimWork, docs/scheduler.md): claims up to want of the job's
 * units at this rank's clock (ssp: the queue bounds staleness), as this registration (worker_id and secret filled in here). A
 * master that is down or restarting is waited for, as every control call is, up to
 * TS_MASTER_CALL_MS; *out is the caller's (tessera__v1__claim_work_response__free_unpacked). */
ts_status ts_membership_claim(struct ts_membership *ms, uint64_t clock, uint32_t want,
                              uint64_t units, bool ssp, uint32_t staleness,
                              Tessera__V1__ClaimWorkResponse **out,
                              struct ts_err *err) TS_MUST_CHECK;
/* A heartbeat now, from the caller's thread (registering again if the master declared this
 * member dead), so that ts_membership_slots and ts_membership_id are fresh. */
ts_status ts_membership_beat(struct ts_membership *ms, struct ts_err *err) TS_MUST_CHECK;
/* Workers of an elastic job: registration number `registration` (ts_membership_registrations)
 * caught up, so it may own slots (docs/elastic.md, "Coming back"); said in every heartbeat of
 * that registration from now on, and in one sent now. Does nothing if the member registered
 * again since: the new registration has not caught up. */
ts_status ts_membership_caught_up(struct ts_membership *ms, unsigned registration,
                                  struct ts_err *err) TS_MUST_CHECK;
uint64_t ts_membership_epoch(struct ts_membership *ms);
/* Workers: the data-plane key of the member's last registration into out (its own key in
 * its job, transport/auth.h); false when the master gave none (it serves plaintext, or TLS
 * without client certificates). */
bool ts_membership_data_key(struct ts_membership *ms, uint8_t out[32]);
/* Shards: job's slot owners, and under mutual TLS its data-plane key (JobAccess), asked as
 * this registration; a master that is down is waited for up to TS_MASTER_CALL_MS. *out is
 * the caller's (tessera__v1__job_access_response__free_unpacked). */
ts_status ts_membership_job_access(struct ts_membership *ms, const char *job,
                                   Tessera__V1__JobAccessResponse **out,
                                   struct ts_err *err) TS_MUST_CHECK;
const char *ts_membership_instance(struct ts_membership *ms);

/* A shard's chains over its jobs, summed from its ShardStatus: partitions it heads, copies it
 * follows, and versions its heads hold back from pulls until their tails acknowledge them.
 * For `tessera status` and the master's status page. */
struct ts_shard_roles {
    uint64_t heads, follows, lag;
    uint64_t tables, table_rows, table_bytes;   /* sparse tables (docs/embeddings.md) */
    double pulled_per_s, pushed_per_s;          /* their rows, over the last heartbeats */
    /* The disk tier, over every table (0 without one): TableStatus's fields, summed. */
    uint64_t tiered, mem_rows, hits, misses, evictions, writeback_rows, disk_bytes;
    /* Row lifetime: the tables that have one, and the rows they dropped. */
    uint64_t ttl_tables, expired;
};

static inline struct ts_shard_roles ts_shard_roles(const Tessera__V1__ShardStatusResponse *v)
{
    struct ts_shard_roles r;

    memset(&r, 0, sizeof(r));

    for (size_t k = 0; k < v->n_jobs; k++) {
        r.heads += v->jobs[k]->partitions;
        r.follows += v->jobs[k]->follows;
        r.lag += v->jobs[k]->lag;
        r.tables += v->jobs[k]->tables;
        r.table_rows += v->jobs[k]->table_rows;
        r.table_bytes += v->jobs[k]->table_bytes;
        for (size_t t = 0; t < v->jobs[k]->n_table_status; t++) {
            const Tessera__V1__TableStatus *ts = v->jobs[k]->table_status[t];

            r.pulled_per_s += ts->pulled_per_s;
            r.pushed_per_s += ts->pushed_per_s;
            r.tiered += ts->tiered;
            r.mem_rows += ts->mem_rows;
            r.hits += ts->hits;
            r.misses += ts->misses;
            r.evictions += ts->evictions;
            r.writeback_rows += ts->writeback_rows;
            r.disk_bytes += ts->disk_bytes;
            r.ttl_tables += ts->ttl_steps || ts->ttl_seconds;
            r.expired += ts->expired;
        }
    }
    return r;
}

/* A shard's data-plane refusals from its ShardStatus (docs/security.md, "Refusals"): their
 * total, and "conflict 2, identity 1" in text (truncated to fit n; "" when none). For
 * `tessera status` and the master's status page. */
static inline uint64_t ts_shard_refusals(const Tessera__V1__ShardStatusResponse *v, char *text,
                                         size_t n)
{
    uint64_t total = 0;
    size_t at = 0;

    if (n)
        text[0] = '\0';
    for (size_t k = 0; k < v->n_refusals; k++) {
        int w = snprintf(text + at, n > at ? n - at : 0, "%s%s %llu", k ? ", " : "",
                         v->refusals[k]->reason, (unsigned long long)v->refusals[k]->count);
        at += w > 0 ? (size_t)w : 0;
        total += v->refusals[k]->count;
    }
    return total;
}

/* A shard's data-plane connections by transport from its ShardStatus, in text: "rdma 2 open
 * (3 in all), tcp 0 open (1 in all)" (truncated to fit n; "" when it listens on none). For
 * `tessera status` and the master's status page. */
static inline void ts_shard_data_conns(const Tessera__V1__ShardStatusResponse *v, char *text,
                                       size_t n)
{
    size_t at = 0;

    if (n)
        text[0] = '\0';
    for (size_t k = 0; k < v->n_data_conns; k++) {
        int w = snprintf(text + at, n > at ? n - at : 0, "%s%s %llu open (%llu in all)",
                         k ? ", " : "", v->data_conns[k]->transport,
                         (unsigned long long)v->data_conns[k]->open,
                         (unsigned long long)v->data_conns[k]->accepted);
        at += w > 0 ? (size_t)w : 0;
    }
}

/* ---- the cached shard map ---- */

ts_status ts_cluster_open(const char *master_addr, struct ts_cluster **out,
                          struct ts_err *err) TS_MUST_CHECK;
void ts_cluster_close(struct ts_cluster *cl);
/* Fetches the map again and rebuilds the ring. */
ts_status ts_cluster_refresh(struct ts_cluster *cl, struct ts_err *err) TS_MUST_CHECK;
uint64_t ts_cluster_epoch(struct ts_cluster *cl);
/* The one rule for a map epoch a caller says it used (the master's for known_epoch, in
 * services/master/members.c, is the same): equal to the current map's is served; older is
 * TS_ESTALE (ABORTED: refresh the map and retry); newer than the cached map makes us fetch the
 * map again, and newer than the master's is TS_EINVAL. want 0 is the caller's to handle. */
ts_status ts_cluster_check_epoch(struct ts_cluster *cl, uint64_t want,
                                 struct ts_err *err) TS_MUST_CHECK;
unsigned ts_cluster_refreshes(struct ts_cluster *cl);   /* how many refreshes so far */
/* Every placement below takes the tensor's placement salt (TensorSpec.placement_salt, fixed
 * when the tensor is first registered; docs/placement.md): the same salt on every shard and
 * worker, or they disagree on where its partitions live. */
/* The shard owning (tensor, partition) under the cached map. TS_EUNAVAIL with no shards. */
ts_status ts_cluster_locate(struct ts_cluster *cl, const char *tensor, uint32_t salt,
                            uint32_t partition, uint32_t *shard_id,
                            struct ts_err *err) TS_MUST_CHECK;
/* The chain of (tensor, partition) under the cached map: the owner first, then its followers
 * (docs/replication.md), then the joining shards that will be in it, copying at its tail
 * ("Joining"); returns how many (0 with no shards). *on_ring (if not NULL): how many of them
 * are on the ring, the rest joining. */
size_t ts_cluster_chain(struct ts_cluster *cl, const char *tensor, uint32_t salt,
                        uint32_t partition, uint32_t out[TS_MAX_CHAIN], size_t *on_ring);
/* ts_ring_choose_salt (TS_RING_SALT_TRIES salts) against the cached map's ring, the shards
 * that serve workers: the salt a worker proposes when it registers the tensor. */
uint32_t ts_cluster_choose_salt(struct ts_cluster *cl, const char *tensor, uint32_t nparts,
                                uint64_t part_bytes, uint64_t last_bytes,
                                struct ts_ring_salt *out);
/* Whether shard id is joining in the cached map. */
bool ts_cluster_is_joining(struct ts_cluster *cl, uint32_t id);
/* The ids of the cached map's joining shards (at most max); returns how many. */
size_t ts_cluster_joining(struct ts_cluster *cl, uint32_t *ids, size_t max);
/* The cached map's chain length (ShardMap.replicas, at least 1). */
uint32_t ts_cluster_replicas(struct ts_cluster *cl);
/* What the master made of a report: the member is out of the map (DEAD: the caller may
 * refresh its map without waiting for the lease), it keeps it (KEPT: it answers, so the link,
 * not the process, failed), or the master could not be told (UNHEARD). */
enum ts_report { TS_REPORT_UNHEARD = -1, TS_REPORT_KEPT = 0, TS_REPORT_DEAD = 1 };
/* Tells the master that shard id could not be reached (ReportUnreachable; reporter: e.g.
 * "worker 2", detail: what it saw, cut to 256 bytes). Errors are logged, not returned: a
 * report only speeds up what the lease does. */
enum ts_report ts_cluster_report_unreachable(struct ts_cluster *cl, uint32_t id,
                                             const char *reporter, const char *detail);
/* Shard `shard` saw worker `worker`'s data-plane connection hang up without a goodbye: the
 * master declares it dead now (docs/elastic.md), unless that shard is out of the map or the
 * connection's HELLO said a map epoch (hello_epoch; 0: not known) older than the shard's
 * latest registration. Logged as above; whether the master heard. */
bool ts_cluster_report_worker(struct ts_cluster *cl, uint32_t worker, uint32_t shard,
                              uint64_t hello_epoch, const char *detail);
/* ReportLost: a partition of job that this shard (shard) heads lost every copy, found when the
 * job had gone back to snapshots `generation` times. Logged, as
 * ts_cluster_report_unreachable; false if the master could not be told (try again). */
bool ts_cluster_report_lost(struct ts_cluster *cl, const char *job, uint32_t shard,
                            uint32_t generation);
/* The first transport of ts_transports[] (or `want` only, if set) that can run here and that
 * shard s published a usable endpoint for: its ops and the endpoint's blob. TS_ENODEV if none. */
ts_status ts_shard_pick_transport(const Tessera__V1__ShardInfo *s, const char *want,
                                  const struct ts_transport_ops **ops, struct ts_blob *blob,
                                  struct ts_err *err) TS_MUST_CHECK;
/* The ids of the cached map's shards on the ring, which serve workers (at most max; joining
 * ones head nothing and are left out); returns how many. */
size_t ts_cluster_shard_ids(struct ts_cluster *cl, uint32_t *ids, size_t max);
/* A ring of its own over the cached map's ring shards, as the cluster's (the same ids and
 * vnodes: the same placement), for a caller that places many keys without the lock (a
 * table's rows, lib/table/batch.h); *epoch: the map's. *out is the caller's (ts_ring_free).
 * TS_EUNAVAIL with no shard on the ring. */
#define TS_CLUSTER_MAX_SHARDS 4096
ts_status ts_cluster_ring_copy(struct ts_cluster *cl, struct ts_ring **out, uint64_t *epoch,
                               struct ts_err *err) TS_MUST_CHECK;
/* The id of the shard of the cached map registered as `instance` and on the ring (not
 * joining), with its registered_epoch; 0 if none. */
uint32_t ts_cluster_instance_id(struct ts_cluster *cl, const char *instance,
                                uint64_t *registered_epoch);
/* Whether shard id is alive in the cached map (joining or not) under the registration it had
 * at epoch `since`: false once the master dropped it, or once it registered again after
 * `since` (a new session, which knows nothing of the old one's connections). */
bool ts_cluster_holds(struct ts_cluster *cl, uint32_t id, uint64_t since);
/* A data-plane connection to shard id of the cached map (a worker to a shard, a shard to its
 * chain successor) over the first transport both can use (`want` only, if set); TS_EUNAVAIL
 * if the map does not list it. *out is the caller's (ts_tp_close). */
ts_status ts_cluster_connect(struct ts_cluster *cl, uint32_t id, const char *want, int ms,
                             struct ts_conn **out, struct ts_err *err) TS_MUST_CHECK;


/* A unary call of `method` on shard id with the cached map epoch written into *epoch_field
 * (a field of req), within ms (0: the cluster's call deadline, ts_cluster_set_call_ms); on
 * ABORTED the map is refreshed and the call retried (up to 3 times). */
ts_status ts_cluster_call(struct ts_cluster *cl, uint32_t id, const char *method,
                          ProtobufCMessage *req, uint64_t *epoch_field,
                          const ProtobufCMessageDescriptor *rdesc, ProtobufCMessage **resp,
                          int ms, struct ts_err *err) TS_MUST_CHECK;
/* The deadline of the control calls this client makes to the shards and the master (its
 * ts_master's too); ms <= 0: ts_call_ms_default(). */
void ts_cluster_set_call_ms(struct ts_cluster *cl, int ms);

/* Reports a worker's progress (its last completed step) in the next heartbeat. */
void ts_membership_set_clock(struct ts_membership *ms, uint64_t clock);
/* What a trainer saw, reported in its next heartbeat (HeartbeatRequest, docs/modes.md). */
struct ts_worker_report {
    uint64_t staleness_last, staleness_max, steps_skipped;
    float loss_scale;
};
void ts_membership_set_report(struct ts_membership *ms, const struct ts_worker_report *r);
/* Workers of an elastic job: the compute seconds per slot measured over steps of `slots`
 * slots, sent with the next heartbeats (HeartbeatRequest.has_speed; docs/scheduler.md). */
void ts_membership_set_speed(struct ts_membership *ms, double slot_s, uint32_t slots);
/* Workers: training progress, sent with the next heartbeats (tessera_report_progress). */
void ts_membership_set_progress(struct ts_membership *ms, double loss, double accuracy,
                                double samples_per_s);

#endif
