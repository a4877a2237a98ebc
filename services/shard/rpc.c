/* rpc.c - tessera.v1.Shard handlers. */
#include <inttypes.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shard.h"
#include "tables.h"
#include "util/log.h"
#include "util/names.h"
#include "util/proc.h"

/* The jobs' statuses as JobStatus messages in call's arena. */
static ts_status encode_jobs(struct ts_rpc_call *call, struct shard_params *sp,
                             Tessera__V1__JobStatus ***out, size_t *n, struct ts_err *err)
{
    struct shard_job_status *jobs;
    size_t nj;
    ts_status st = shard_params_jobs(sp, &jobs, &nj, err);

    if (st)
        return st;
    *out = ts_rpc_alloc(call, (nj + 1) * sizeof(**out));
    for (size_t j = 0; j < nj; j++) {
        const struct shard_job_status *s = &jobs[j];
        Tessera__V1__JobStatus *js = ts_rpc_new(call, &tessera__v1__job_status__descriptor);

        js->id = ts_rpc_strdup(call, s->id);
        js->workers = s->workers;
        js->exact = s->exact;
        js->min_version = s->min_version;
        js->max_version = s->max_version;
        js->partitions = s->partitions;
        js->tensors = s->tensors;
        js->armed_step = s->armed_step;
        js->mode = (Tessera__V1__TrainMode)s->mode;
        js->staleness = s->staleness;
        js->steps_skipped = s->ranks.skipped;
        js->follows = s->follows;
        js->lag = s->lag;
        js->tables = s->tables;
        js->table_rows = s->table_rows;
        js->table_bytes = s->table_bytes;
        js->table_status = ts_rpc_alloc(call, (s->tables + 1) * sizeof(*js->table_status));
        for (uint32_t k = 0; k < s->tables; k++) {
            const struct shard_table_status *t = &s->table[k];
            Tessera__V1__TableStatus *ts = ts_rpc_new(call,
                                                      &tessera__v1__table_status__descriptor);
            ts->id = t->id;
            ts->name = ts_rpc_strdup(call, t->name);
            ts->rows = t->rows;
            ts->bytes = t->bytes;
            ts->rows_pulled = t->pulled;
            ts->tiered = t->tiers.tiered;
            ts->mem_rows = t->tiers.resident;
            ts->hits = t->tiers.hits;
            ts->misses = t->tiers.misses;
            ts->evictions = t->tiers.evictions;
            ts->written = t->tiers.written;
            ts->writeback_rows = t->tiers.pending;
            ts->writeback_lag_ms = t->tiers.lag_ms;
            ts->disk_bytes = t->tiers.disk_bytes;
            ts->prefetched = t->tiers.prefetched;
            ts->prefetch_used = t->tiers.prefetch_used;
            ts->prefetch_unused = t->tiers.prefetch_unused;
            ts->ttl_steps = t->ttl_steps;
            ts->ttl_seconds = t->ttl_seconds;
            ts->expired = t->tiers.expired;
            ts->rows_pushed = t->pushed;
            ts->pulled_per_s = t->pulled_per_s;
            ts->pushed_per_s = t->pushed_per_s;
            js->table_status[js->n_table_status++] = ts;
        }
        js->ranks = ts_rpc_alloc(call, (s->ranks.n + 1) * sizeof(*js->ranks));
        for (uint32_t k = 0; k < s->ranks.n; k++) {
            Tessera__V1__RankStatus *rs = ts_rpc_new(call, &tessera__v1__rank_status__descriptor);
            rs->rank = k;
            rs->clock = s->ranks.clock[k];
            rs->staleness_last = s->ranks.stale_last[k];
            rs->staleness_max = s->ranks.stale_max[k];
            js->ranks[js->n_ranks++] = rs;
        }
        (*out)[j] = js;
    }
    *n = nj;
    shard_params_jobs_free(jobs, nj);
    return TS_OK;
}

/* The data plane's refusals by reason, those seen at least once. */
static void encode_refusals(struct ts_rpc_call *call, struct dataplane *dp,
                            Tessera__V1__ShardStatusResponse *resp)
{
    uint64_t n[DP_REFUSED_N];

    dataplane_refusals(dp, n);
    resp->refusals = ts_rpc_alloc(call, (DP_REFUSED_N + 1) * sizeof(*resp->refusals));
    for (int r = 0; r < DP_REFUSED_N; r++) {
        Tessera__V1__Refusal *f;
        if (!n[r])
            continue;
        f = ts_rpc_new(call, &tessera__v1__refusal__descriptor);
        f->reason = (char *)dataplane_refusal_name((enum dp_refusal)r);
        f->count = n[r];
        resp->refusals[resp->n_refusals++] = f;
    }
}

/* The data plane's connections by transport (one entry per listener). */
static void encode_conns(struct ts_rpc_call *call, struct dataplane *dp,
                         Tessera__V1__ShardStatusResponse *resp)
{
    resp->data_conns = ts_rpc_alloc(call, (dp->n + 1) * sizeof(*resp->data_conns));
    for (size_t i = 0; i < dp->n; i++) {
        Tessera__V1__DataConns *d = ts_rpc_new(call, &tessera__v1__data_conns__descriptor);
        d->transport = (char *)ts_tp_listener_name(dp->listeners[i].l);
        dataplane_conns(dp, i, &d->open, &d->accepted);
        resp->data_conns[resp->n_data_conns++] = d;
    }
}

/* The malloc heap, for leak checks: blocks in use (arena and mmapped), and what the heap holds
 * from the system (arenas and mmapped blocks). "In use" includes the freed blocks each
 * thread's cache (glibc's tcache: up to 7 a size class) keeps: it creeps up by about a KiB a
 * job until those caches are full, with nothing of any job in it (docs/operations.md, "Memory
 * over many jobs"). */
static void heap_figures(uint64_t *in_use, uint64_t *held)
{
    struct mallinfo2 mi = mallinfo2();

    *in_use = mi.uordblks + mi.hblkhd;
    *held = mi.arena + mi.hblkhd;
}

static ts_status shard_status(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                              ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__ShardStatusRequest *req = (const void *)rq;
    Tessera__V1__ShardStatusResponse *resp = (void *)rs;
    struct shard *s = ts_rpc_ctx(call);
    ts_status st;

    /* A caller that used an older map may be asking the wrong owner (0: no check). */
    if (req->map_epoch && !s->cluster)
        return ts_err_set(err, TS_EUNAVAIL, "this shard has not joined the cluster yet; retry");
    if (req->map_epoch && (st = ts_cluster_check_epoch(s->cluster, req->map_epoch, err)))
        return st;
    resp->addr = s->addr;
    resp->master = (char *)s->master_addr;
    resp->uptime_ms = ts_now_ms() - s->started_ms;
    if (s->dp.n) {
        dataplane_counters(&s->dp, &resp->frames_in, &resp->frames_refused);
        encode_refusals(call, &s->dp, resp);
        encode_conns(call, &s->dp, resp);
    }
    heap_figures(&resp->heap_in_use, &resp->heap_held);
    resp->pid = (int32_t)getpid();
    pthread_mutex_lock(&s->params.mu);
    resp->partitions = s->params.partitions;
    resp->bytes = s->params.bytes;
    resp->promotions = s->params.promotions;
    resp->partitions_lost = s->params.lost;
    resp->partitions_reseeded = s->params.reseeded;
    resp->copies_pending = s->params.resyncs + s->params.inflight;
    resp->partitions_dropped = s->params.dropped;
    resp->snapshot_arms_expired = s->params.arms_expired;
    resp->orphan_jobs_released = s->params.orphans_released;
    pthread_mutex_unlock(&s->params.mu);
    resp->table_mem_used = ts_table_budget_used(&s->params.tables_budget);
    resp->table_mem_limit = s->params.tables_budget.limit;
    resp->table_index_used = atomic_load(&s->params.tables_budget.index);
    resp->table_index_limit = s->params.tables_budget.index_limit;
    if (s->cluster && s->membership) {
        uint64_t epoch;
        resp->moves_pending = shard_params_moves(&s->params, s->cluster,
                                                 ts_membership_id(s->membership), &epoch);
    }
    resp->copies_sent = atomic_load(&s->params.copies_sent);
    resp->images_from_region = atomic_load(&s->params.images_from_region);
    if ((st = encode_jobs(call, &s->params, &resp->jobs, &resp->n_jobs, err)))
        return st;
    resp->store = (char *)(s->store_dir ? s->store_dir : "");
    resp->restore = s->params.restore_hex;
    resp->instance = s->instance;
    if (s->membership) {
        resp->shard_id = ts_membership_id(s->membership);
        resp->epoch = ts_membership_epoch(s->membership);
        resp->state = TESSERA__V1__MEMBER_STATE__MEMBER_STATE_ALIVE;
    }
    return TS_OK;
}

static ts_status register_tensor(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                                 ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__RegisterTensorRequest *req = (const void *)rq;
    Tessera__V1__RegisterTensorResponse *resp = (void *)rs;
    struct shard *s = ts_rpc_ctx(call);
    uint32_t *owned, nparts;
    size_t n;
    ts_status st;

    if (!s->membership || !s->cluster)
        return ts_err_set(err, TS_EUNAVAIL, "this shard has not joined the cluster yet; retry");
    st = shard_params_register(&s->params, s->cluster, ts_membership_id(s->membership), req,
                               &owned, &n, &nparts, &resp->version, &resp->placement_salt,
                               &resp->partition_bytes, err);
    if (st)
        return st;
    resp->partitions = ts_rpc_alloc(call, (n + 1) * sizeof(uint32_t));
    memcpy(resp->partitions, owned, n * sizeof(uint32_t));
    free(owned);
    resp->n_partitions = n;
    resp->partition_count = nparts;
    return TS_OK;
}

static ts_status register_table(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                                ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__RegisterTableRequest *req = (const void *)rq;
    Tessera__V1__RegisterTableResponse *resp = (void *)rs;
    struct shard *s = ts_rpc_ctx(call);

    if (!s->membership || !s->cluster)
        return ts_err_set(err, TS_EUNAVAIL, "this shard has not joined the cluster yet; retry");
    return shard_params_register_table(&s->params, s->cluster, ts_membership_id(s->membership),
                                       req, &resp->version, &resp->rows, err);
}

static ts_status arm_snapshot(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                              ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__ArmSnapshotRequest *req = (const void *)rq;
    Tessera__V1__ArmSnapshotResponse *resp = (void *)rs;
    struct shard *s = ts_rpc_ctx(call);
    bool armed = false;
    ts_status st = ts_job_id_check("job", req->job, err);

    if (!st)
        st = shard_params_arm(&s->params, req->job, req->step, req->disarm, req->hold_tables,
                              &armed, &resp->min_version, &resp->max_version, err);
    resp->armed = armed;
    return st;
}

static void *arena_alloc(void *call, size_t n)
{
    return ts_rpc_alloc(call, n);
}

static ts_status write_snapshot(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                                ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__WriteSnapshotRequest *req = (const void *)rq;
    Tessera__V1__WriteSnapshotResponse *resp = (void *)rs;
    struct shard *s = ts_rpc_ctx(call);
    struct ts_snap_piece piece;
    uint64_t epoch, now;
    bool ready;
    ts_status st = ts_job_id_check("job", req->job, err);

    if (st)
        return st;
    if (req->wait_ms > 60000)
        return ts_err_set(err, TS_EINVAL, "wait_ms: %u, at most 60000", req->wait_ms);
    ts_snap_piece_init(&piece, arena_alloc, call);
    piece.shard = ts_membership_id(s->membership);
    /* Behind the master's map (its heartbeat has not told it yet, or it is slow to follow):
     * follow it now, so that the piece holds what this shard heads under the master's map. */
    if (req->map_epoch > atomic_load(&s->params.rechained))
        shard_follow_map(s);
    epoch = atomic_load(&s->params.rechained);
    st = shard_params_write(&s->params, req->job, req->step, (int)req->wait_ms, &piece, &ready,
                            &resp->min_version, err);
    if (st || !ready)
        return st;
    /* The piece holds what this shard headed under one map, or it says nothing. */
    if ((now = atomic_load(&s->params.rechained)) != epoch)
        return ts_err_set(err, TS_ESTALE, "the shard map moved from epoch %" PRIu64 " to %"
                          PRIu64 " while this shard wrote its piece of step %" PRIu64 "; take "
                          "the snapshot again", epoch, now, req->step);
    resp->map_epoch = epoch;
    resp->ready = true;
    resp->tensors = piece.tensors;
    resp->n_tensors = piece.n_tensors;
    resp->tables = piece.tables;
    resp->n_tables = piece.n_tables;
    resp->job = (Tessera__V1__JobSpec *)piece.job;
    resp->chunk_bytes = piece.chunk_bytes;
    resp->bytes_written = piece.bytes_written;
    return TS_OK;
}

static ts_status release_job(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                             ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__ReleaseJobRequest *req = (const void *)rq;
    Tessera__V1__ReleaseJobResponse *resp = (void *)rs;
    struct shard *s = ts_rpc_ctx(call);
    bool held;
    ts_status st = ts_job_id_check("job", req->job, err);

    if (!st && s->dp.n)
        dataplane_end_job(&s->dp, req->job);
    if (!st)
        st = shard_params_release(&s->params, req->job, &held, &resp->bytes_freed, err);
    resp->held = !st && held;
    return st;
}

static ts_status partition_digests(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                                   ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__PartitionDigestsRequest *req = (const void *)rq;
    Tessera__V1__PartitionDigestsResponse *resp = (void *)rs;
    struct shard *s = ts_rpc_ctx(call);
    struct shard_part_digest *d = NULL;
    size_t n = 0;
    ts_status st;

    if ((st = ts_job_id_check("job", req->job, err)) ||
        (st = shard_params_digests(&s->params, req->job, &d, &n, err)))
        return st;
    resp->shard_id = s->membership ? ts_membership_id(s->membership) : 0;
    resp->partitions = ts_rpc_alloc(call, (n + 1) * sizeof(*resp->partitions));
    for (size_t i = 0; i < n; i++) {
        Tessera__V1__PartitionDigest *pd = ts_rpc_new(call,
                                                      &tessera__v1__partition_digest__descriptor);
        pd->tensor_id = d[i].tensor_id;
        pd->tensor = ts_rpc_strdup(call, d[i].tensor);
        pd->partition = d[i].partition;
        pd->version = d[i].version;
        pd->follower = d[i].follows;
        pd->next = d[i].next;
        pd->sha256.data = ts_rpc_alloc(call, sizeof(d[i].sha256));
        memcpy(pd->sha256.data, d[i].sha256, sizeof(d[i].sha256));
        pd->sha256.len = sizeof(d[i].sha256);
        resp->partitions[resp->n_partitions++] = pd;
    }
    free(d);
    return TS_OK;
}

static ts_status rollback_job(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                              ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__RollbackJobRequest *req = (const void *)rq;
    Tessera__V1__RollbackJobResponse *resp = (void *)rs;
    struct shard *s = ts_rpc_ctx(call);
    uint32_t me;
    ts_manifest *m = NULL;
    ts_status st;

    if ((st = ts_job_id_check("job", req->job, err)))
        return st;
    if (!s->membership || !s->cluster)
        return ts_err_set(err, TS_EUNAVAIL, "this shard has not joined the cluster yet; retry");
    if (!req->generation)
        return ts_err_set(err, TS_EINVAL, "generation: required (1 for the job's first "
                          "rollback)");
    if (req->open)
        return shard_params_reopen(&s->params, req->job, req->generation, err);
    if (!req->snapshot_id[0])
        return ts_err_set(err, TS_EINVAL, "snapshot_id: required");
    if (!req->map_epoch)
        return ts_err_set(err, TS_EINVAL, "map_epoch: required (the chains to restore)");
    if ((st = ts_cluster_check_epoch(s->cluster, req->map_epoch, err)))
        return st;
    s->dp.remap(s->dp.remap_ctx);   /* this shard's roles under that map */
    /* Everything that can be known before is checked before the fence: a refused request
     * leaves the job training as it was (issue 41). */
    me = ts_membership_id(s->membership);
    if ((st = shard_params_rollback_check(&s->params, s->cluster, me, req->job,
                                          req->snapshot_id, req->step, &m, err)) || req->check)
        goto out;
    if ((st = shard_params_fence(&s->params, req->job, req->step, err)))
        goto out;
    if (s->dp.n)
        dataplane_end_job(&s->dp, req->job);   /* its waiting pulls hear of the fence */
    st = shard_params_rollback(&s->params, s->cluster, me, req->job, m, req->snapshot_id,
                               req->step, req->generation, &resp->partitions, err);
out:
    ts_manifest_free(m);
    if (st && st != TS_ENOTFOUND)   /* in this shard's log too: the master retries and may
                                     * report only the last attempt */
        ts_log(TS_WARN, "shard", "job %s: rollback to step %" PRIu64 " of snapshot %.12s (%s): "
               "%s", req->job, req->step, req->snapshot_id, req->check ? "check" : "restore",
               err ? err->msg : "");
    return st;
}

static ts_status move_tables(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                             ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__MoveTablesRequest *req = (const void *)rq;
    Tessera__V1__MoveTablesResponse *resp = (void *)rs;
    struct shard *s = ts_rpc_ctx(call);
    ts_status st;

    if ((st = ts_job_id_check("job", req->job, err)))
        return st;
    if (!s->membership || !s->cluster)
        return ts_err_set(err, TS_EUNAVAIL, "this shard has not joined the cluster yet; retry");
    if (!req->snapshot_id[0])
        return ts_err_set(err, TS_EINVAL, "snapshot_id: required");
    if (!req->map_epoch)
        return ts_err_set(err, TS_EINVAL, "map_epoch: required (the map to place the tables on)");
    if ((st = ts_cluster_check_epoch(s->cluster, req->map_epoch, err)))
        return st;
    s->dp.remap(s->dp.remap_ctx);   /* this shard's roles under that map */
    st = shard_params_move_tables(&s->params, s->cluster, ts_membership_id(s->membership),
                                  req->job, req->snapshot_id, req->step, req->map_epoch,
                                  &resp->tables, &resp->rows, &resp->held_ms, err);
    if (st && st != TS_ENOTFOUND)
        ts_log(TS_WARN, "shard", "job %s: the move of its tables from step %" PRIu64
               " of snapshot %.12s: %s", req->job, req->step, req->snapshot_id, err->msg);
    return st;
}

/* Who may call what, under mutual TLS (docs/security.md): workers register tensors, and so do
 * shards (a head introduces its tensors to a joining shard, repair.c); what changes a job's
 * state for the whole cluster comes from the master (or an admin). */
#define T(name, fn, rq, rs, roles)                                                               \
    { name, fn, &tessera__v1__##rq##__descriptor, &tessera__v1__##rs##__descriptor,             \
      TS_RPC_OWN_THREAD, roles, 0 }
#define MASTER (TS_ROLE_MASTER | TS_ROLE_ADMIN)
static const struct ts_rpc_method shard_methods[] = {
    T("RegisterTensor", register_tensor, register_tensor_request, register_tensor_response,
      TS_ROLE_WORKER | TS_ROLE_SHARD),
    T("RegisterTable", register_table, register_table_request, register_table_response,
      TS_ROLE_WORKER),
    T("ArmSnapshot", arm_snapshot, arm_snapshot_request, arm_snapshot_response, MASTER),
    /* a manifest of every partition this shard holds, with each chunk's hash */
    { "WriteSnapshot", write_snapshot, &tessera__v1__write_snapshot_request__descriptor,
      &tessera__v1__write_snapshot_response__descriptor, TS_RPC_OWN_THREAD, MASTER, 64u << 20 },
    T("ReleaseJob", release_job, release_job_request, release_job_response, MASTER),
    T("RollbackJob", rollback_job, rollback_job_request, rollback_job_response, MASTER),
    T("MoveTables", move_tables, move_tables_request, move_tables_response, MASTER),
    { "ShardStatus", shard_status, &tessera__v1__shard_status_request__descriptor,
      &tessera__v1__shard_status_response__descriptor, 0, 0, 0 },
    T("PartitionDigests", partition_digests, partition_digests_request,
      partition_digests_response, 0),
    { NULL, NULL, NULL, NULL, 0, 0, 0 },
};

struct ts_rpc_service ts_shard_service = { "tessera.v1.Shard", shard_methods, NULL };
