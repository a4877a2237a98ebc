/* rpc.c - tessera.v1.Master handlers: decode, call members.c, encode. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "cluster/mapdelta.h"
#include "encode.h"
#include "master.h"
#include "tessera/v1/master.pb-c.h"
#include "tessera/v1/shard.pb-c.h"
#include "transport/auth.h"
#include "transport/transport.h"
#include "util/log.h"
#include "util/names.h"
#include "util/proc.h"

/* The caller's credential for a call about a member (members.h, struct ts_member_cred): the
 * SHA-256 of the secret it sent, whether it is an admin, and for a registration the member its
 * certificate names. `registering`: under mutual TLS a registration must bring a secret, since
 * nothing else tells its process from another of the same member. */
static ts_status member_cred(struct ts_rpc_call *call, const ProtobufCBinaryData *secret,
                             bool registering, struct ts_member_cred *c, struct ts_err *err)
{
    struct ts_err ignored = { 0 };

    if (secret->len && (secret->len < 16 || secret->len > 64))
        return ts_err_set(err, TS_EINVAL, "secret: %zu bytes; want 16 to 64 random bytes",
                          secret->len);
    if (registering && !secret->len && ts_rpc_tls_mutual())
        return ts_err_set(err, TS_EINVAL, "secret: required under mutual TLS (16 to 64 random "
                          "bytes the member keeps and sends with its heartbeats)");
    *c = (struct ts_member_cred){
        .has_secret = secret->len > 0,
        .admin = ts_rpc_need_role(call, TS_ROLE_ADMIN, &ignored) == TS_OK,
    };
    if (registering)   /* the certificate is read whole: not at every heartbeat */
        ts_rpc_peer_identity(call, c->identity, sizeof(c->identity));
    if (c->has_secret &&
        !EVP_Digest(secret->data, secret->len, c->secret_sha256, NULL, EVP_sha256(), NULL))
        return ts_err_set(err, TS_EINTERNAL, "secret: SHA-256 failed (OpenSSL)");
    return TS_OK;
}

static ts_status register_shard(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                                ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__RegisterShardRequest *req = (const void *)rq;
    Tessera__V1__RegisterShardResponse *resp = (void *)rs;
    struct master *m = ts_rpc_ctx(call);
    struct ts_endpoint ep[TS_MEMBERS_MAX_ENDPOINTS];
    struct ts_member_grant g;
    struct ts_member_cred cred;
    size_t n = req->n_data_planes;
    ts_status st;

    if (n > TS_MEMBERS_MAX_ENDPOINTS)
        return ts_err_set(err, TS_EINVAL, "data_planes: %zu endpoints, at most %d", n,
                          TS_MEMBERS_MAX_ENDPOINTS);
    memset(ep, 0, sizeof(ep));
    for (size_t i = 0; i < n; i++) {
        const Tessera__V1__DataPlaneEndpoint *d = req->data_planes[i];
        if (d->address.len > sizeof(ep[i].addr))
            return ts_err_set(err, TS_EINVAL, "data_planes[%zu].address: %zu bytes, at most %zu",
                              i, d->address.len, sizeof(ep[i].addr));
        snprintf(ep[i].transport, sizeof(ep[i].transport), "%s", d->transport);
        ep[i].len = d->address.len;
        if (d->address.len) /* an empty bytes field is NULL, which memcpy may not get */
            memcpy(ep[i].addr, d->address.data, d->address.len);
    }
    if ((st = member_cred(call, &req->secret, true, &cred, err)))
        return st;
    cred.restarts = req->restarts;
    if ((st = master_admit_shard(m, req, &cred, err)) ||
        (st = ts_members_register_shard(m->members, req->addr, req->instance, req->lease_ms, ep,
                                        n, req->redo_log, req->resumed, ts_now_ms(), &g, &cred,
                                        err)))
        return st;
    resp->shard_id = g.id;
    resp->epoch = g.epoch;
    resp->lease_ms = g.lease_ms;
    resp->heartbeat_interval_ms = g.lease_ms / 3;
    return TS_OK;
}

/* Under mutual TLS a member speaks for its own kind only: a shard's certificate for shards, a
 * worker's or the verify service's for workers (`extra`: who else may, an admin). A kind that
 * is neither is left to the handler to refuse. */
static ts_status kind_role(struct ts_rpc_call *call, Tessera__V1__MemberKind kind,
                           unsigned extra, struct ts_err *err)
{
    if (kind == TESSERA__V1__MEMBER_KIND__MEMBER_KIND_SHARD)
        return ts_rpc_need_role(call, TS_ROLE_SHARD | extra, err);
    if (kind == TESSERA__V1__MEMBER_KIND__MEMBER_KIND_WORKER)
        return ts_rpc_need_role(call, TS_ROLE_WORKER | TS_ROLE_VERIFY | extra, err);
    return TS_OK;
}

static ts_status register_worker(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                                 ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__RegisterWorkerRequest *req = (const void *)rq;
    Tessera__V1__RegisterWorkerResponse *resp = (void *)rs;
    struct master *m = ts_rpc_ctx(call);
    struct ts_member_grant g;
    struct ts_member_cred cred;
    struct ts_err ignored = { 0 };
    char who[TS_RPC_IDENTITY_MAX + 1];
    uint64_t epoch;
    ts_status st;

    /* the verify service registers with its own certificate, trainers with a worker's */
    if ((st = ts_rpc_need_role(call, strcmp(req->role, "verify") ? TS_ROLE_WORKER
                                                                 : TS_ROLE_VERIFY, err)) ||
        (st = member_cred(call, &req->secret, true, &cred, err)))
        return st;
    cred.restarts = req->restarts;
    if ((st = master_admit_worker(req, &cred, err)) ||
        (st = ts_members_register_worker(m->members, req->host, req->pid, req->role, req->addr,
                                         req->instance, req->lease_ms, ts_now_ms(), &g, &cred,
                                         err)))
        return st;
    if (req->balance && !req->elastic)
        return ts_err_set(err, TS_EINVAL, "balance: needs elastic (a slot moves between live "
                          "workers as a dead worker's does; docs/scheduler.md)");
    ts_rpc_caller(call, who, sizeof(who));   /* whose quota a new run counts in */
    if (req->job[0] && (st = jobs_join(m->jobs, req->job, g.id, req->rank, req->workers,
                                       req->start_workers, req->keep, req->elastic,
                                       req->restarts > 0, who,
                                       ts_now_ms(), err))) {
        /* Refused: the worker was not let in (a retry registers it again); one that was in
         * already (the same process start, alive) stays. */
        if (g.joined && ts_members_deregister(m->members, TS_MEMBER_WORKER, g.id,
                                              "its job refused it", &epoch, NULL, &ignored))
            ts_log(TS_WARN, "master", "worker %u: %s", g.id, ignored.msg);
        return st;
    }
    if (req->job[0] && req->balance)
        jobs_balance(m->jobs, g.id);
    resp->worker_id = g.id;
    resp->epoch = g.epoch;
    resp->lease_ms = g.lease_ms;
    resp->heartbeat_interval_ms = g.lease_ms / 3;
    if (req->job[0] && ts_rpc_tls_mutual()) {   /* its own key in the job alone */
        uint8_t jk[TS_DP_KEY_LEN], *k = ts_rpc_alloc(call, TS_DP_KEY_LEN);
        ts_dp_job_key(m->data_key, req->job, jk);
        ts_dp_member_key(jk, g.id, k);
        OPENSSL_cleanse(jk, sizeof(jk));
        resp->data_key = (ProtobufCBinaryData){ TS_DP_KEY_LEN, k };
    }
    return TS_OK;
}

/* JobAccess: a shard binds a job's data-plane connections to their senders (docs/security.md,
 * "Pushes bound to their sender"): the slots' owners, and under mutual TLS the job's key. */
static ts_status job_access(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                            ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__JobAccessRequest *req = (const void *)rq;
    Tessera__V1__JobAccessResponse *resp = (void *)rs;
    struct master *m = ts_rpc_ctx(call);
    uint32_t *owners, *past, width;
    struct ts_member_cred cred;
    bool elastic;
    ts_status st;

    if ((st = ts_job_id_check("job", req->job, err)) ||
        (st = member_cred(call, &req->secret, false, &cred, err)) ||
        (st = ts_members_vouch(m->members, TS_MEMBER_SHARD, req->shard_id, &cred, err)))
        return st;
    /* Room for the job's slots as it is now (a run started meanwhile with more is cut to it:
     * the shard asks again when a slot it does not know pushes). */
    width = jobs_width(m->jobs, req->job);
    owners = ts_rpc_alloc(call, ((size_t)width + 1) * sizeof(*owners));
    past = ts_rpc_alloc(call, ((size_t)width * JOBS_PAST_OWNERS + 1) * sizeof(*past));
    if ((st = jobs_access(m->jobs, req->job, owners, past, width, &resp->n_owners,
                          &resp->roster, &elastic, err)))
        return st;
    resp->owners = owners;
    resp->past_owners = past;
    resp->n_past_owners = resp->n_owners * JOBS_PAST_OWNERS;
    resp->elastic = elastic;
    if (ts_rpc_tls_mutual()) {
        uint8_t *k = ts_rpc_alloc(call, TS_DP_KEY_LEN);
        ts_dp_job_key(m->data_key, req->job, k);
        resp->data_key = (ProtobufCBinaryData){ TS_DP_KEY_LEN, k };
    }
    return TS_OK;
}

/* A worker's slots and its job's roster, for its heartbeat (docs/elastic.md). */
static void slots_of(struct ts_rpc_call *call, struct master *m, uint32_t worker,
                     Tessera__V1__HeartbeatResponse *resp)
{
    size_t room = 16;   /* a worker owns its own slot, and those of a few dead at most */
    uint32_t *slots = ts_rpc_alloc(call, room * sizeof(*slots));
    int n = jobs_slots(m->jobs, worker, &resp->roster, slots, room);

    if (n > (int)room) {
        room = (size_t)n;
        slots = ts_rpc_alloc(call, room * sizeof(*slots));
        n = jobs_slots(m->jobs, worker, &resp->roster, slots, room);
        n = n > (int)room ? (int)room : n;   /* more again meanwhile: the next beat has them */
    }

    resp->slots = slots;
    resp->n_slots = n > 0 ? (size_t)n : 0;
}

/* The rosters of the elastic jobs, for a shard's heartbeat: a shard wakes the pulls of a job
 * whose roster grew, so that its workers take the slots of the dead. */
static void rosters_of(struct ts_rpc_call *call, struct master *m,
                       Tessera__V1__HeartbeatResponse *resp)
{
    char (*ids)[TS_JOB_ID_MAX + 1] = ts_rpc_alloc(call, JOBS_MAX * sizeof(*ids));
    uint64_t rosters[JOBS_MAX];
    size_t n = jobs_rosters(m->jobs, ids, rosters, JOBS_MAX);

    resp->rosters = ts_rpc_alloc(call, (n + 1) * sizeof(*resp->rosters));
    for (size_t i = 0; i < n; i++) {
        Tessera__V1__JobRoster *r = ts_rpc_new(call, &tessera__v1__job_roster__descriptor);
        r->job = ids[i];
        r->roster = rosters[i];
        resp->rosters[resp->n_rosters++] = r;
    }
}

/* Of the jobs a shard says it holds, those the master holds nothing of (no running, idle or
 * unreleased job of that id), for its heartbeat: the shard releases a job named so for its
 * --orphan-job-ms (docs/operations.md, "What nobody comes back for"). The others are noted
 * as held: a kept job that no shard holds has nothing to keep (jobs_reclaim_unheld). */
static void unknown_of(struct ts_rpc_call *call, struct master *m,
                       const Tessera__V1__HeartbeatRequest *req,
                       Tessera__V1__HeartbeatResponse *resp)
{
    size_t n = req->n_jobs < JOBS_MAX ? req->n_jobs : JOBS_MAX;   /* what a shard can hold */

    resp->unknown_jobs = ts_rpc_alloc(call, (n + 1) * sizeof(*resp->unknown_jobs));
    for (size_t i = 0; i < n; i++)
        if (!jobs_note_held(m->jobs, req->jobs[i], ts_now_ms()))
            resp->unknown_jobs[resp->n_unknown_jobs++] = ts_rpc_strdup(call, req->jobs[i]);
}

/* A worker's progress report: the page plots its job's rank 0's. */
static void note_progress(struct master *m, const Tessera__V1__HeartbeatRequest *req)
{
    char job[TS_JOB_ID_MAX + 1];
    uint32_t rank;

    if (jobs_seat_of(m->jobs, req->id, job, sizeof(job), &rank) && rank == 0)
        progress_note(m->progress, job, &(struct progress_point){
            .step = req->clock, .loss = req->loss, .accuracy = req->accuracy,
            .samples_per_s = req->samples_per_s }, ts_now_ms());
}

static ts_status heartbeat(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                           ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__HeartbeatRequest *req = (const void *)rq;
    Tessera__V1__HeartbeatResponse *resp = (void *)rs;
    struct master *m = ts_rpc_ctx(call);
    struct ts_member_grant g;
    struct ts_member_cred cred;
    struct task done;
    ts_status st;

    /* A speed or a task result out of range is refused before anything changes (worker 0: no
     * job, the values are checked only). */
    if ((st = kind_role(call, req->kind, 0, err)) ||
        (req->has_speed && (st = jobs_speed(m->jobs, 0, req->slot_seconds, req->speed_slots,
                                            ts_now_ms(), err))) ||
        (req->task_done && (st = master_task_result(req->task_done, &done, err))) ||
        (st = member_cred(call, &req->secret, false, &cred, err)) ||
        (st = ts_members_heartbeat(m->members, (enum ts_member_kind)req->kind, req->id,
                                   req->known_epoch, req->clock, ts_now_ms(), &g, &cred, err)))
        return st;
    if (req->kind == TESSERA__V1__MEMBER_KIND__MEMBER_KIND_WORKER) {
        struct ts_member_report r = { req->staleness_last, req->staleness_max,
                                      req->steps_skipped, req->loss_scale };
        ts_members_report(m->members, req->id, &r);
        if (req->has_progress)
            note_progress(m, req);
        if (req->caught_up)
            jobs_ready(m->jobs, req->id);
        if (req->has_speed && (st = jobs_speed(m->jobs, req->id, req->slot_seconds,
                                               req->speed_slots, ts_now_ms(), err)))
            return st;
        slots_of(call, m, req->id, resp);
        master_task_beat(call, m, req->id, req->task_done ? &done : NULL, resp);
        /* An elastic job's slots move by heartbeat too: a resting worker learns of new ones
         * when a shard wakes its pull (TS_ESLOTS) and it beats at once (sdk_elastic.c). */
        resp->rest_ms = g.rest_ms;
    } else {
        if (req->n_vouched)
            ts_members_vouched(m->members, req->vouched,
                               req->n_vouched_steps == req->n_vouched ? req->vouched_steps : NULL,
                               req->n_vouched, ts_now_ms());
        ts_members_moves(m->members, req->id, req->moves_epoch, req->moves_pending);
        rosters_of(call, m, resp);
        unknown_of(call, m, req, resp);
    }
    resp->epoch = g.epoch;
    resp->lease_ms = g.lease_ms;
    resp->map_changed = g.map_changed;
    return TS_OK;
}

static ts_status deregister(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                            ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__DeregisterRequest *req = (const void *)rq;
    Tessera__V1__DeregisterResponse *resp = (void *)rs;
    struct master *m = ts_rpc_ctx(call);
    struct ts_member_cred cred;
    ts_status st;

    if (req->outcome > TESSERA__V1__WORKER_OUTCOME__WORKER_OUTCOME_FAILED)
        return ts_err_set(err, TS_EINVAL, "outcome: %d is not a WorkerOutcome", req->outcome);
    if (req->fingerprint[0] && strspn(req->fingerprint, "0123456789abcdef") != 64)
        return ts_err_set(err, TS_EINVAL, "fingerprint: want 64 lowercase hex digits or \"\"");
    if ((st = kind_role(call, req->kind, TS_ROLE_ADMIN, err)) ||
        (st = member_cred(call, &req->secret, false, &cred, err)) ||
        (st = ts_members_deregister(m->members, (enum ts_member_kind)req->kind, req->id,
                                    req->reason, &resp->epoch, &cred, err)))
        return st;
    if (req->kind == TESSERA__V1__MEMBER_KIND__MEMBER_KIND_WORKER)
        jobs_leave(m->jobs, req->id,
                   req->outcome == TESSERA__V1__WORKER_OUTCOME__WORKER_OUTCOME_FAILED,
                   req->fingerprint, req->reason, ts_now_ms());
    /* On disk before the reply: the member goes away once it has it, so a master restarted
     * without the record would take its silence for a death (state.h). A master killed
     * before it answers is asked again (the worker retries while it is unreachable). */
    if ((st = master_state_sync(&m->state, err)))
        ts_err_prefix(err, "%s %u left, but the record is not on disk yet (tried again every "
                      "%d ms)", req->kind == TESSERA__V1__MEMBER_KIND__MEMBER_KIND_WORKER
                      ? "worker" : "shard", req->id, STATE_PERIOD_MS);
    return st;
}

/* A dynamic job's queue counts (workq.h) into j; outstanding leaves out lost units. */
static void work_of(struct master *m, const struct job_info *v, Tessera__V1__JobInfo *j)
{
    bool *alive = v->state == JOB_RUNNING ? jobs_alive_ranks(m->jobs, v->id) : NULL;
    struct workq_grant g;

    if (workq_counts(m->work, v->id, v->started_unix_ms, alive, &g)) {
        j->work_units = g.units;
        j->work_done = g.done;
        j->work_outstanding = g.outstanding;
    }
    free(alive);
}

/* j's rank 0's last progress report, if it made one. */
static void progress_of(struct ts_rpc_call *call, struct master *m, Tessera__V1__JobInfo *j)
{
    struct progress_point pt;
    int64_t heard;
    Tessera__V1__JobProgress *p;

    if (!progress_last(m->progress, j->id, &pt, &heard) ||
        !(p = ts_rpc_new(call, &tessera__v1__job_progress__descriptor)))
        return;
    p->step = pt.step;
    p->loss = pt.loss;
    p->accuracy = pt.accuracy;
    p->samples_per_s = pt.samples_per_s;
    p->reported_ms_ago = ts_now_ms() - heard;
    j->progress = p;
}

/* Each worker's seat: its job and rank. */
static void seats_of(struct ts_rpc_call *call, struct master *m,
                     Tessera__V1__ClusterStatusResponse *resp)
{
    char job[TS_JOB_ID_MAX + 1];
    uint32_t rank;

    for (size_t i = 0; i < resp->n_workers; i++)
        if (jobs_seat_of(m->jobs, resp->workers[i]->id, job, sizeof(job), &rank)) {
            resp->workers[i]->job = ts_rpc_strdup(call, job);
            resp->workers[i]->rank = rank;
        }
}

/* The job table as JobInfo messages in call's arena. */
static ts_status job_infos(struct ts_rpc_call *call, struct master *m,
                           Tessera__V1__ClusterStatusResponse *resp, struct ts_err *err)
{
    struct job_info *v;
    size_t n;
    ts_status st = jobs_list(m->jobs, &v, &n, err);

    if (st)
        return st;
    resp->jobs = ts_rpc_alloc(call, (n + 1) * sizeof(*resp->jobs));
    for (size_t i = 0; i < n; i++) {
        Tessera__V1__JobInfo *j = master_job_info(call, &v[i]);
        /* Every job's: a worker waiting on a step names the ranks it waits for with it. */
        uint32_t *owners = ts_rpc_alloc(call, (v[i].workers + 1) * sizeof(*owners));
        if (owners) {
            j->slot_owners = owners;
            j->n_slot_owners = jobs_owners(m->jobs, v[i].id, owners, v[i].workers);
        }
        work_of(m, &v[i], j);
        master_job_tasks(call, m, &v[i], j);
        progress_of(call, m, j);
        resp->jobs[resp->n_jobs++] = j;
    }
    free(v);
    return TS_OK;
}

/* Notes the whole map resp holds as handed out, and cuts it down to a delta from the
 * caller's base map when that is one of those kept (maphist.h). */
static void map_delta(struct ts_rpc_call *call, struct master *m,
                      const Tessera__V1__GetShardMapRequest *req, Tessera__V1__ShardMap *resp)
{
    size_t n = resp->n_shards, kept = 0, nremoved;
    uint32_t *ids = ts_rpc_alloc(call, (n + 1) * sizeof(*ids));
    uint64_t *hashes = ts_rpc_alloc(call, (n + 1) * sizeof(*hashes));
    bool *changed = ts_rpc_alloc(call, (n + 1) * sizeof(*changed));
    uint32_t *removed = ts_rpc_alloc(call, MAPHIST_REMOVED_MAX * sizeof(*removed));

    for (size_t i = 0; i < n; i++) {
        ids[i] = resp->shards[i]->id;
        hashes[i] = ts_shard_info_hash(resp->shards[i]);
    }
    resp->map_hash = ts_shard_map_hash_with(resp, hashes);
    maphist_note(&m->maps, resp->epoch, resp->map_hash, n, ids, hashes);
    if (req->base_epoch &&
        maphist_delta(&m->maps, req->base_epoch, req->base_hash, n, ids, hashes, changed,
                      removed, MAPHIST_REMOVED_MAX, &nremoved)) {
        for (size_t i = 0; i < n; i++)
            if (changed[i])
                resp->shards[kept++] = resp->shards[i];
        resp->n_shards = kept;
        resp->removed = removed;
        resp->n_removed = nremoved;
        resp->delta_from = req->base_epoch;
    }
    maphist_count(&m->maps, resp->delta_from != 0, tessera__v1__shard_map__get_packed_size(resp));
}

static ts_status get_shard_map(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                               ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__GetShardMapRequest *req = (const void *)rq;
    Tessera__V1__ShardMap *resp = (void *)rs;
    struct master *m = ts_rpc_ctx(call);
    struct ts_members_view v;
    ts_status st;

    if ((st = ts_members_check_epoch(m->members, req->known_epoch, err)) ||
        (st = ts_members_view(m->members, true, &v, err)))
        return st;
    resp->epoch = v.epoch;
    resp->vnodes = v.vnodes;
    resp->replicas = v.replicas;
    resp->digest = v.ring_digest;
    resp->n_shards = v.nshards;
    resp->shards = master_shard_infos(call, &v, ts_now_ms());
    ts_members_view_free(&v);
    map_delta(call, m, req, resp);
    return TS_OK;
}

static ts_status cluster_status(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                                ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__ClusterStatusRequest *req = (const void *)rq;
    Tessera__V1__ClusterStatusResponse *resp = (void *)rs;
    struct master *m = ts_rpc_ctx(call);
    struct ts_members_view v;
    int64_t now = ts_now_ms();
    ts_status st;

    if (!req->jobs_only) {   /* the page of workers asked for alone is copied */
        if ((st = ts_members_view_page(m->members, req->workers_after, req->max_workers, &v,
                                       err)))
            return st;
        resp->epoch = v.epoch;
        resp->n_shards = v.nshards;
        resp->shards = master_shard_infos(call, &v, now);
        resp->n_workers = v.nworkers;
        resp->workers = master_worker_infos(call, &v, now);
        seats_of(call, m, resp);
        resp->workers_alive = v.workers_in[TS_MEMBER_ALIVE];
        resp->workers_dead = v.workers_in[TS_MEMBER_DEAD];
        resp->workers_left = v.workers_in[TS_MEMBER_LEFT];
        resp->workers_next = v.workers_next;
        resp->vnodes = v.vnodes;
        resp->replicas = v.replicas;
        resp->ring_digest = v.ring_digest;
        resp->default_lease_ms = v.default_lease_ms;
        resp->shard_failures = v.shard_failures;
        ts_members_view_free(&v);
    }
    resp->version = TESSERA_VERSION;
    resp->uptime_ms = now - m->started_ms;
    resp->master_restarts = m->restarts;
    resp->restored = m->restored;
    resp->master_pid = (uint32_t)getpid();
    snapper_status(&m->snap, call, resp);
    return job_infos(call, m, resp, err);
}

static ts_status create_snapshot(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                                 ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__CreateSnapshotRequest *req = (const void *)rq;
    Tessera__V1__CreateSnapshotResponse *resp = (void *)rs;
    struct master *m = ts_rpc_ctx(call);
    Tessera__V1__SnapshotRef *ref = ts_rpc_new(call, &tessera__v1__snapshot_ref__descriptor);
    char hex[TS_STORE_HEX_LEN + 1];
    int64_t t0 = ts_now_ms();
    ts_status st;

    if (req->job[0] && ts_job_id_check("job", req->job, err)) /* "": the only job */
        return TS_EINVAL;
    if (strlen(req->message) > TS_MANIFEST_MAX_MESSAGE)
        return ts_err_set(err, TS_EINVAL, "message: at most %d bytes", TS_MANIFEST_MAX_MESSAGE);
    if (strlen(req->tag) > 128)
        return ts_err_set(err, TS_EINVAL, "tag: at most 128 bytes");
    if (req->timeout_ms > 3600000)
        return ts_err_set(err, TS_EINVAL, "timeout_ms: %u, at most 3600000", req->timeout_ms);
    st = snapper_create(&m->snap, req->job, req->message, req->tag,
                        req->timeout_ms ? (int)req->timeout_ms : 60000, hex, &ref->step,
                        &resp->bytes_written, err);
    if (st)
        return st;
    ref->id = ts_rpc_strdup(call, hex);
    ref->branch = ts_rpc_strdup(call, m->snap.branch);
    ref->created_unix_ms = ts_unix_ms();
    if (req->tag[0]) {
        ref->tags = ts_rpc_alloc(call, sizeof(char *));
        ref->tags[0] = req->tag;
        ref->n_tags = 1;
    }
    resp->snapshot = ref;
    resp->took_ms = ts_now_ms() - t0;
    return TS_OK;
}

static ts_status collect_garbage(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                                 ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__CollectGarbageRequest *req = (const void *)rq;
    Tessera__V1__CollectGarbageResponse *resp = (void *)rs;
    struct master *m = ts_rpc_ctx(call);
    struct ts_store_stats stats = { 0 };
    ts_status st = snapper_gc(&m->snap, req->tmp_grace_s ? req->tmp_grace_s : 3600, &stats,
                              &resp->chunks_live, err);

    resp->chunks_removed = stats.removed;
    resp->bytes_removed = stats.removed_bytes;
    resp->tmp_removed = stats.tmp_removed;
    return st;
}

static ts_status check_data(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                            ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__CheckDataRequest *req = (const void *)rq;
    Tessera__V1__CheckDataResponse *resp = (void *)rs;
    struct master *m = ts_rpc_ctx(call);
    char source[96];
    ts_status st = datamap_check(&m->data, req, jobs_holds(m->jobs, req->job), source,
                                 sizeof(source), err);

    if (st)
        return st;
    resp->reference = ts_rpc_strdup(call, source);
    resp->partitions = (uint32_t)req->n_checksums;
    return TS_OK;
}

static ts_status report_lost(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                            ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__ReportLostRequest *req = (const void *)rq;
    Tessera__V1__ReportLostResponse *resp = (void *)rs;
    struct master *m = ts_rpc_ctx(call);
    char action[400];
    ts_status st;

    if ((st = ts_job_id_check("job", req->job, err)) ||
        (st = rollback_request(m, req->job, req->shard_id, req->generation, action,
                               sizeof(action), err)))
        return st;
    resp->action = ts_rpc_strdup(call, action);
    return TS_OK;
}

/* How long the master tries a reported shard's address. A dead process's port refuses at
 * once; a slow answer proves nothing, and the lease decides. */
#define REPORT_PROBE_MS 500

static ts_status report_unreachable(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                                    ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__ReportUnreachableRequest *req = (const void *)rq;
    Tessera__V1__ReportUnreachableResponse *resp = (void *)rs;
    struct master *m = ts_rpc_ctx(call);
    char addr[TS_MEMBERS_MAX_ADDR + 1], instance[TS_MEMBERS_MAX_INSTANCE + 1], seen[160];
    char why[200], away[320];
    const char *verdict = seen;
    int64_t left_ms = 0;
    bool alive = false;
    ts_status st;

    if (strlen(req->reporter) > 128)
        return ts_err_set(err, TS_EINVAL, "reporter: %zu bytes, at most 128",
                          strlen(req->reporter));
    if (strlen(req->detail) > 256)
        return ts_err_set(err, TS_EINVAL, "detail: %zu bytes, at most 256", strlen(req->detail));
    if (req->worker_id && req->shard_id)
        return ts_err_set(err, TS_EINVAL, "worker_id: set with shard_id; report one member");
    if (req->worker_id) {   /* its process is gone: nothing to probe (workers serve nothing) */
        /* so only those who see it go may say so: a shard (its data plane) or an admin */
        if ((st = ts_rpc_need_role(call, TS_ROLE_SHARD | TS_ROLE_ADMIN, err)))
            return st;
        uint64_t since = req->reporter_shard
                         ? ts_members_shard_registered(m->members, req->reporter_shard) : 0;
        if (req->reporter_shard && !since) {
            ts_log(TS_INFO, "master", "worker %u reported by shard %u, which is out of the "
                   "map: not heard (its connections are from before it was dropped)",
                   req->worker_id, req->reporter_shard);
            resp->verdict = ts_rpc_strdup(call, "not heard: the reporting shard is out of "
                                          "the map");
            resp->epoch = ts_members_epoch(m->members);
            return TS_OK;
        }
        /* Back in the map, it may still read hang-ups of connections begun before it was
         * dropped (its workers left them when the map moved on without it). */
        if (req->reporter_shard && req->hello_epoch && req->hello_epoch < since) {
            ts_log(TS_INFO, "master", "worker %u reported by shard %u about a connection begun "
                   "under map epoch %llu, before the shard registered again (epoch %llu): not "
                   "heard (its lease decides)", req->worker_id, req->reporter_shard,
                   (unsigned long long)req->hello_epoch, (unsigned long long)since);
            resp->verdict = ts_rpc_strdup(call, "not heard: the connection began before the "
                                          "reporting shard registered again");
            resp->epoch = ts_members_epoch(m->members);
            return TS_OK;
        }
        snprintf(why, sizeof(why), "its connection to %.60s hung up without a goodbye (%.100s)",
                 req->reporter[0] ? req->reporter : "a shard", req->detail);
        if (ts_members_declare_dead(m->members, TS_MEMBER_WORKER, req->worker_id, NULL, why))
            jobs_dead(m->jobs, req->worker_id, ts_now_ms());
        resp->dead = true;
        resp->epoch = ts_members_epoch(m->members);
        resp->verdict = ts_rpc_strdup(call, "declared dead");
        return TS_OK;
    }
    if ((st = ts_members_shard_addr(m->members, req->shard_id, addr, instance, &alive, err)))
        return st;
    if (!alive) {
        snprintf(seen, sizeof(seen), "shard %u is out of the map already", req->shard_id);
    } else if (ts_tcp_refused(addr, REPORT_PROBE_MS, seen, sizeof(seen))) {
        snprintf(why, sizeof(why), "reported unreachable by %.60s, and %.120s",
                 req->reporter[0] ? req->reporter : "a member", seen);
        /* A shard that keeps a redo log may be held away instead (the restart grace): the
         * reporter then waits for it, or for the map without it once the grace ends. */
        if (ts_members_shard_gone(m->members, req->shard_id, instance, why, ts_now_ms(),
                                  &left_ms) == TS_GONE_AWAY) {
            snprintf(away, sizeof(away), "away: shard %u keeps a redo log; its place is held "
                     "for %lld ms more (--shard-restart-grace); %s", req->shard_id,
                     (long long)left_ms, seen);
            verdict = away;
        } else {
            alive = false;
        }
    } else {
        ts_log(TS_INFO, "master", "shard %u reported unreachable by %s (%s), but %s: kept",
               req->shard_id, req->reporter[0] ? req->reporter : "a member", req->detail, seen);
    }
    resp->dead = !alive;
    resp->epoch = ts_members_epoch(m->members);
    resp->verdict = ts_rpc_strdup(call, verdict);
    return TS_OK;
}

/* ClaimWork: a worker of a dynamic job takes the next units of its data (workq.h). The claim
 * is a sign of life: it renews the worker's lease as a heartbeat would. */
static ts_status claim_work(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                            ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__ClaimWorkRequest *req = (const void *)rq;
    Tessera__V1__ClaimWorkResponse *resp = (void *)rs;
    struct master *m = ts_rpc_ctx(call);
    struct ts_member_grant mg;
    struct ts_member_cred cred;
    struct jobs_run run;
    struct workq_grant g;
    ts_status st;

    if ((st = member_cred(call, &req->secret, false, &cred, err)) ||
        (st = ts_members_heartbeat(m->members, TS_MEMBER_WORKER, req->worker_id, 0, 0,
                                   ts_now_ms(), &mg, &cred, err)))
        return st;
    if (!jobs_run_seat(m->jobs, req->worker_id, true, &run))
        return ts_err_set(err, TS_ESTATE, "worker_id: worker %u has no live seat in a running "
                          "job (register with RegisterWorker naming the job first)",
                          req->worker_id);
    st = workq_claim(m->work, &(struct workq_seat){ run.job, run.run_ms, run.rank, run.workers,
                                                    run.alive },
                     req->clock, req->want, req->units,
                     (struct workq_ssp){ req->ssp, req->staleness }, &g, err);
    free(run.alive);
    if (st)
        return st;
    *resp = (Tessera__V1__ClaimWorkResponse){ resp->base, g.first, g.count, g.clock, g.done,
                                              g.outstanding, g.units, g.lost, g.retry,
                                              g.pull };
    return TS_OK;
}

/* Who may call what, under mutual TLS (docs/security.md): members their own registration,
 * heartbeats and reports; the handlers narrow these by the member kind a request names. A
 * loss is reported by the shard that heads the partition, and sends the job back to its last
 * snapshot: a shard's or an admin's word only. */
#define MEMBERS (TS_ROLE_SHARD | TS_ROLE_WORKER | TS_ROLE_VERIFY)
#define M(name, fn, rq, rs, roles) \
    { name, fn, &tessera__v1__##rq##__descriptor, &tessera__v1__##rs##__descriptor, 0, roles, 0 }
#define T(name, fn, rq, rs, roles)                                                               \
    { name, fn, &tessera__v1__##rq##__descriptor, &tessera__v1__##rs##__descriptor,             \
      TS_RPC_OWN_THREAD, roles, 0 }
static const struct ts_rpc_method master_methods[] = {
    T("RegisterShard", register_shard, register_shard_request, register_shard_response,
      TS_ROLE_SHARD),
    M("RegisterWorker", register_worker, register_worker_request, register_worker_response,
      TS_ROLE_WORKER | TS_ROLE_VERIFY),
    M("Heartbeat", heartbeat, heartbeat_request, heartbeat_response, MEMBERS),
    /* Its own thread: it waits for the state on disk (a group commit, state.c), which must not
     * hold a completion-queue thread and the heartbeats behind it. */
    T("Deregister", deregister, deregister_request, deregister_response,
      MEMBERS | TS_ROLE_ADMIN),
    M("GetShardMap", get_shard_map, get_shard_map_request, shard_map, 0),
    M("ClusterStatus", cluster_status, cluster_status_request, cluster_status_response, 0),
    /* up to 100000 data checksums of a name and 32 bytes each */
    { "CheckData", check_data, &tessera__v1__check_data_request__descriptor,
      &tessera__v1__check_data_response__descriptor, 0, TS_ROLE_WORKER, 16u << 20 },
    T("CreateSnapshot", create_snapshot, create_snapshot_request, create_snapshot_response,
      TS_ROLE_ADMIN | TS_ROLE_VERIFY),
    T("ReportUnreachable", report_unreachable, report_unreachable_request,
      report_unreachable_response, MEMBERS),
    T("ClaimWork", claim_work, claim_work_request, claim_work_response, TS_ROLE_WORKER),
    M("SubmitTask", master_submit_task, submit_task_request, submit_task_response,
      TS_ROLE_ADMIN | TS_ROLE_VERIFY),
    M("JobAccess", job_access, job_access_request, job_access_response, TS_ROLE_SHARD),
    M("ReportLost", report_lost, report_lost_request, report_lost_response,
      TS_ROLE_SHARD | TS_ROLE_ADMIN),
    T("CollectGarbage", collect_garbage, collect_garbage_request, collect_garbage_response,
      TS_ROLE_ADMIN),
    { NULL, NULL, NULL, NULL, 0, 0, 0 },
};

struct ts_rpc_service ts_master_service = { "tessera.v1.Master", master_methods, NULL };
