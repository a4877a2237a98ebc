/* master.c - see cluster.h: the master handle and memberships. */
#include "cluster/cluster.h"
#include "util/names.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "cluster/mapdelta.h"
#include "rpc/rpc.h"
#include "util/knobs.h"
#include "util/log.h"
#include "util/proc.h"

struct ts_master {
    struct ts_rpc_channel *ch;
    int call_ms;                      /* each call's deadline (ts_master_set_call_ms) */
};

#define DEREGISTER_OUTCOME_MS 20000
#define SLOTS_MAX 4096                /* a job's workers (services/master/jobs.h) */
#define HELD_JOBS_MAX 256             /* a shard's jobs (services/shard/params.h SHARD_MAX_JOBS) */
#define VOUCHED_MAX 65536             /* workers one shard heartbeat vouches for */
#define REST_TICKS 4                  /* a resting worker looks again every interval / 4 */
#define BEAT_GAP_DIV 10               /* beats at least interval / 10 apart (next_beat_in) */

struct ts_membership {
    struct ts_master *m;
    struct ts_membership_cfg cfg;
    char addr[256];
    char instance[40];
    /* Proves to the master that this process holds its registration (RegisterShardRequest
     * .secret): sent with every registration, heartbeat and deregistration, never shown. */
    uint8_t secret[TS_MEMBER_SECRET_LEN];
    char job[TS_JOB_ID_MAX + 1];      /* cfg.job, copied */
    bool failed;                      /* the outcome Deregister reports (ts_membership_end) */
    char outcome[257];                /* its fingerprint or reason */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    atomic_uint id, registrations;
    atomic_bool caught_up;            /* workers: ts_membership_caught_up, this registration */
    atomic_uint_least64_t epoch, clock;
    struct ts_worker_report report;   /* under mu */
    bool progress;                    /* under mu: loss, accuracy, samples_per_s are set */
    double loss, accuracy, samples_per_s;
    double slot_s;                    /* under mu: ts_membership_set_speed; 0: none yet */
    uint32_t speed_slots;
    /* Priority tasks (under mu): the last one handed and not yet taken by the trainer, the
     * last id taken (never handed twice), and a result to send until a heartbeat is answered. */
    struct ts_task handed;
    uint32_t taken;
    Tessera__V1__TaskInfo result;
    char result_fp[65], result_error[257];
    uint64_t roster;                  /* under mu: the last heartbeat's roster and slots */
    uint32_t slots[SLOTS_MAX];
    size_t nslots;
    pthread_mutex_t beat_mu;          /* one heartbeat (or registration) at a time */
    uint32_t interval_ms;
    /* Workers (under mu): the last heartbeat's rest_ms (the shards vouch for this worker: it
     * may leave beats out, docs/scaling.md), and news: rank 0's progress, a task's result or
     * a balanced job's speed waits to go, which no vouching carries. last_beat_ms: the
     * heartbeat thread's own. */
    uint32_t rest_ms;
    bool news;
    _Atomic int64_t last_beat_ms;
    /* Copies of the endpoints, for re-registering after the caller's are gone. */
    Tessera__V1__DataPlaneEndpoint endpoints[4];
    Tessera__V1__DataPlaneEndpoint *endpoint_ptrs[4];
    uint8_t endpoint_addr[4][192];
    char endpoint_name[4][16];
    size_t nendpoints;
    /* Workers: the data-plane key of the last registration (the worker's own in its job,
     * transport/auth.h); under mu. */
    uint8_t data_key[32];
    bool has_data_key;
};

/* Keeps the key a registration handed out (none: plaintext, no handshake). */
static void keep_key(struct ts_membership *ms, const ProtobufCBinaryData *k)
{
    pthread_mutex_lock(&ms->mu);
    ms->has_data_key = k->len == sizeof(ms->data_key);
    if (ms->has_data_key)
        memcpy(ms->data_key, k->data, sizeof(ms->data_key));
    pthread_mutex_unlock(&ms->mu);
}

bool ts_membership_data_key(struct ts_membership *ms, uint8_t out[32])
{
    bool has;

    pthread_mutex_lock(&ms->mu);
    if ((has = ms->has_data_key))
        memcpy(out, ms->data_key, sizeof(ms->data_key));
    pthread_mutex_unlock(&ms->mu);
    return has;
}

const char *ts_master_default_addr(const char *flag)
{
    return flag && flag[0] ? flag : ts_knob_str(TS_KNOB_MASTER);
}

ts_status ts_master_open(const char *addr, struct ts_master **out, struct ts_err *err)
{
    struct ts_master *m = calloc(1, sizeof(*m));
    ts_status st;

    if (!m)
        return ts_err_set(err, TS_ENOMEM, "master client: out of memory");
    if ((st = ts_rpc_channel_create(addr, NULL, &m->ch, err))) {
        free(m);
        return st;
    }
    m->call_ms = ts_call_ms_default();
    *out = m;
    return TS_OK;
}

int ts_call_ms_default(void)
{
    return (int)ts_knob_int(TS_KNOB_CALL_TIMEOUT_MS);
}

void ts_master_set_call_ms(struct ts_master *m, int ms)
{
    m->call_ms = ms > 0 ? ms : ts_call_ms_default();
}

int ts_master_call_ms(const struct ts_master *m)
{
    return m->call_ms;
}

void ts_master_close(struct ts_master *m)
{
    if (!m)
        return;
    ts_rpc_channel_free(m->ch);
    free(m);
}

const char *ts_master_addr(const struct ts_master *m)
{
    return ts_rpc_channel_target(m->ch);
}

#define CALL(m, name, req, rdesc, out, ms, err)                                                    \
    ts_rpc_unary((m)->ch, "/tessera.v1.Master/" name, &(req)->base, (rdesc),                       \
                 (ProtobufCMessage **)(out), (ms), (err))

const Tessera__V1__JobInfo *ts_status_job(const Tessera__V1__ClusterStatusResponse *cs,
                                          const char *id)
{
    for (size_t i = 0; cs && i < cs->n_jobs; i++)
        if (!strcmp(cs->jobs[i]->id, id))
            return cs->jobs[i];
    return NULL;
}

const char *ts_job_state_name(int s)
{
    switch (s) {
    case TESSERA__V1__JOB_STATE__JOB_STATE_RUNNING: return "running";
    case TESSERA__V1__JOB_STATE__JOB_STATE_IDLE: return "idle";
    case TESSERA__V1__JOB_STATE__JOB_STATE_FINISHED: return "finished";
    case TESSERA__V1__JOB_STATE__JOB_STATE_FAILED: return "failed";
    case TESSERA__V1__JOB_STATE__JOB_STATE_ABANDONED: return "abandoned";
    default: return "unknown";
    }
}

ts_status ts_master_status_req(struct ts_master *m, int deadline_ms,
                               const Tessera__V1__ClusterStatusRequest *req,
                               Tessera__V1__ClusterStatusResponse **out, struct ts_err *err)
{
    return CALL(m, "ClusterStatus", req, &tessera__v1__cluster_status_response__descriptor, out,
                deadline_ms, err);
}

ts_status ts_master_status(struct ts_master *m, int deadline_ms,
                           Tessera__V1__ClusterStatusResponse **out, struct ts_err *err)
{
    Tessera__V1__ClusterStatusRequest req = TESSERA__V1__CLUSTER_STATUS_REQUEST__INIT;

    return ts_master_status_req(m, deadline_ms, &req, out, err);
}

ts_status ts_master_jobs(struct ts_master *m, int deadline_ms,
                         Tessera__V1__ClusterStatusResponse **out, struct ts_err *err)
{
    Tessera__V1__ClusterStatusRequest req = TESSERA__V1__CLUSTER_STATUS_REQUEST__INIT;

    req.jobs_only = true;
    return ts_master_status_req(m, deadline_ms, &req, out, err);
}

ts_status ts_master_shard_map(struct ts_master *m, Tessera__V1__ShardMap **out,
                              struct ts_err *err)
{
    return ts_master_shard_map_update(m, NULL, out, err);
}

ts_status ts_master_shard_map_update(struct ts_master *m, const Tessera__V1__ShardMap *held,
                                     Tessera__V1__ShardMap **out, struct ts_err *err)
{
    Tessera__V1__GetShardMapRequest req = TESSERA__V1__GET_SHARD_MAP_REQUEST__INIT;
    Tessera__V1__ShardMap *got = NULL;
    ts_status st;

    *out = NULL;
    if (held && held->map_hash && !held->delta_from) {   /* a master that hashes maps */
        req.base_epoch = held->epoch;
        req.base_hash = held->map_hash;
    }
    if ((st = CALL(m, "GetShardMap", &req, &tessera__v1__shard_map__descriptor, &got,
                   m->call_ms, err)))
        return st;
    if (!got->delta_from) {
        *out = got;
        return TS_OK;
    }
    st = held ? ts_shard_map_apply(held, got, out, err) : TS_ESTALE;
    tessera__v1__shard_map__free_unpacked(got, NULL);
    if (st == TS_ESTALE) {   /* not from our base after all: the whole map */
        ts_log(TS_DEBUG, "cluster", "a shard map delta did not apply (%s): fetching it whole",
               err ? err->msg : "");
        return ts_master_shard_map_update(m, NULL, out, err);
    }
    return st;
}

ts_status ts_master_check_data(struct ts_master *m, const Tessera__V1__CheckDataRequest *req,
                               Tessera__V1__CheckDataResponse **out, struct ts_err *err)
{
    return CALL(m, "CheckData", req, &tessera__v1__check_data_response__descriptor, out,
                m->call_ms, err);
}

ts_status ts_master_call(struct ts_master *m, const char *method, const ProtobufCMessage *req,
                         const ProtobufCMessageDescriptor *rdesc, ProtobufCMessage **out,
                         struct ts_err *err)
{
    char path[96];

    snprintf(path, sizeof(path), "/tessera.v1.Master/%s", method);
    return ts_rpc_unary(m->ch, path, req, rdesc, out, m->call_ms, err);
}

ts_status ts_master_create_snapshot(struct ts_master *m,
                                    const Tessera__V1__CreateSnapshotRequest *req,
                                    int deadline_ms, Tessera__V1__CreateSnapshotResponse **out,
                                    struct ts_err *err)
{
    return CALL(m, "CreateSnapshot", req, &tessera__v1__create_snapshot_response__descriptor,
                out, deadline_ms, err);
}

ts_status ts_master_collect_garbage(struct ts_master *m,
                                    const Tessera__V1__CollectGarbageRequest *req,
                                    int deadline_ms, Tessera__V1__CollectGarbageResponse **out,
                                    struct ts_err *err)
{
    return CALL(m, "CollectGarbage", req, &tessera__v1__collect_garbage_response__descriptor,
                out, deadline_ms, err);
}

ts_status ts_master_snapshot(struct ts_master *m, const char *job, const char *message,
                             int deadline_ms, char hex[65], struct ts_err *err)
{
    Tessera__V1__CreateSnapshotRequest req = TESSERA__V1__CREATE_SNAPSHOT_REQUEST__INIT;
    Tessera__V1__CreateSnapshotResponse *r = NULL;
    ts_status st;

    req.job = (char *)(job ? job : "");
    req.message = (char *)(message ? message : "");
    if ((st = ts_master_create_snapshot(m, &req, deadline_ms, &r, err)))
        return st;
    snprintf(hex, 65, "%s", r->snapshot->id);
    tessera__v1__create_snapshot_response__free_unpacked(r, NULL);
    return TS_OK;
}

/* ---- membership ---- */

static void set_epoch(struct ts_membership *ms, uint64_t epoch)
{
    if (atomic_exchange(&ms->epoch, epoch) != epoch && ms->cfg.on_epoch)
        ms->cfg.on_epoch(ms->cfg.arg, epoch);
}

static ts_status do_register(struct ts_membership *ms, int deadline_ms, struct ts_err *err)
{
    uint32_t id, lease, interval;
    uint64_t epoch;
    ts_status st;

    atomic_store(&ms->caught_up, false);   /* a new registration has not, yet */
    if (ms->cfg.kind == TESSERA__V1__MEMBER_KIND__MEMBER_KIND_SHARD) {
        Tessera__V1__RegisterShardRequest req = TESSERA__V1__REGISTER_SHARD_REQUEST__INIT;
        Tessera__V1__RegisterShardResponse *resp;
        req.addr = ms->addr;
        req.instance = ms->instance;
        req.lease_ms = ms->cfg.lease_ms;
        req.restarts = ms->cfg.restarts;
        req.redo_log = ms->cfg.redo_log;
        req.resumed = ms->cfg.resumed;
        req.secret = (ProtobufCBinaryData){ sizeof(ms->secret), ms->secret };
        req.n_data_planes = ms->nendpoints;
        req.data_planes = ms->endpoint_ptrs;
        if ((st = CALL(ms->m, "RegisterShard", &req,
                       &tessera__v1__register_shard_response__descriptor, &resp, deadline_ms,
                       err)))
            return st;
        id = resp->shard_id, epoch = resp->epoch, lease = resp->lease_ms;
        interval = resp->heartbeat_interval_ms;
        keep_key(ms, &resp->data_key);
        tessera__v1__register_shard_response__free_unpacked(resp, NULL);
    } else {
        Tessera__V1__RegisterWorkerRequest req = TESSERA__V1__REGISTER_WORKER_REQUEST__INIT;
        Tessera__V1__RegisterWorkerResponse *resp;
        req.host = ms->addr;
        req.pid = (uint32_t)getpid();
        req.instance = ms->instance;
        req.lease_ms = ms->cfg.lease_ms;
        req.role = (char *)(ms->cfg.role ? ms->cfg.role : "");
        req.addr = (char *)(ms->cfg.service ? ms->cfg.service : "");
        req.job = ms->job;
        req.rank = ms->cfg.rank;
        req.workers = ms->cfg.workers;
        req.keep = ms->cfg.keep;
        req.elastic = ms->cfg.elastic;
        req.restarts = ms->cfg.restarts;
        req.start_workers = ms->cfg.start_workers;
        req.balance = ms->cfg.balance;
        req.secret = (ProtobufCBinaryData){ sizeof(ms->secret), ms->secret };
        if ((st = CALL(ms->m, "RegisterWorker", &req,
                       &tessera__v1__register_worker_response__descriptor, &resp, deadline_ms,
                       err)))
            return st;
        id = resp->worker_id, epoch = resp->epoch, lease = resp->lease_ms;
        interval = resp->heartbeat_interval_ms;
        keep_key(ms, &resp->data_key);
        tessera__v1__register_worker_response__free_unpacked(resp, NULL);
    }
    atomic_store(&ms->id, id);
    atomic_fetch_add(&ms->registrations, 1);
    ms->interval_ms = interval ? interval : lease / 3;
    set_epoch(ms, epoch);
    ts_log(TS_INFO, "member", "registered with %s as %u (lease %u ms, epoch %llu)",
           ts_master_addr(ms->m), id, lease, (unsigned long long)epoch);
    return TS_OK;
}

/* A shard's jobs for its heartbeat: req->jobs points into ids (held_jobs' buffer). */
static void list_jobs(struct ts_membership *ms, Tessera__V1__HeartbeatRequest *req,
                      char (*ids)[TS_JOB_ID_MAX + 1], char **ptrs)
{
    size_t n = ms->cfg.held_jobs(ms->cfg.arg, ids, HELD_JOBS_MAX);

    for (size_t i = 0; i < n; i++)
        ptrs[i] = ids[i];
    req->jobs = ptrs;
    req->n_jobs = n;
}

static ts_status beat(struct ts_membership *ms, struct ts_err *err)
{
    Tessera__V1__HeartbeatRequest req = TESSERA__V1__HEARTBEAT_REQUEST__INIT;
    Tessera__V1__HeartbeatResponse *resp;
    Tessera__V1__TaskInfo sent;
    char sent_fp[65], sent_error[257];
    char (*ids)[TS_JOB_ID_MAX + 1] = NULL;
    char **ptrs = NULL;
    uint32_t *vouched = NULL;
    uint64_t *steps = NULL;
    ts_status st;

    req.kind = ms->cfg.kind;
    req.id = atomic_load(&ms->id);
    req.known_epoch = atomic_load(&ms->epoch);
    req.clock = atomic_load(&ms->clock);
    req.caught_up = atomic_load(&ms->caught_up);
    req.secret = (ProtobufCBinaryData){ sizeof(ms->secret), ms->secret };
    pthread_mutex_lock(&ms->mu);
    req.staleness_last = ms->report.staleness_last;
    req.staleness_max = ms->report.staleness_max;
    req.steps_skipped = ms->report.steps_skipped;
    req.loss_scale = ms->report.loss_scale;
    req.has_progress = ms->progress;
    req.loss = ms->loss;
    req.accuracy = ms->accuracy;
    req.samples_per_s = ms->samples_per_s;
    req.has_speed = ms->slot_s > 0;
    req.slot_seconds = ms->slot_s;
    req.speed_slots = ms->speed_slots;
    ms->news = false;   /* going now; set again below if this beat is not answered */
    if (ms->result.id) {
        sent = ms->result;
        snprintf(sent_fp, sizeof(sent_fp), "%s", ms->result_fp);
        snprintf(sent_error, sizeof(sent_error), "%s", ms->result_error);
        sent.fingerprint = sent_fp;
        sent.error = sent_error;
        req.task_done = &sent;
    }
    pthread_mutex_unlock(&ms->mu);
    if (ms->cfg.moves)
        req.moves_pending = ms->cfg.moves(ms->cfg.arg, &req.moves_epoch);
    if (ms->cfg.vouched && (vouched = malloc(VOUCHED_MAX * sizeof(*vouched))) &&
        (steps = malloc(VOUCHED_MAX * sizeof(*steps)))) {
        req.vouched = vouched;
        req.vouched_steps = steps;
        req.n_vouched = req.n_vouched_steps = ms->cfg.vouched(ms->cfg.arg, vouched, steps,
                                                              VOUCHED_MAX);
    }
    if (ms->cfg.held_jobs && ms->cfg.on_unknown_jobs &&
        (ids = malloc(HELD_JOBS_MAX * sizeof(*ids))) &&
        (ptrs = malloc(HELD_JOBS_MAX * sizeof(*ptrs))))
        list_jobs(ms, &req, ids, ptrs);
    /* A heartbeat later than its interval is worth nothing: keep its deadline to one interval. */
    st = CALL(ms->m, "Heartbeat", &req, &tessera__v1__heartbeat_response__descriptor, &resp,
              (int)ms->interval_ms, err);
    if (!st && req.jobs)   /* the master's word on the jobs sent: only an answer counts */
        ms->cfg.on_unknown_jobs(ms->cfg.arg, resp->unknown_jobs, resp->n_unknown_jobs);
    free(ptrs);
    free(ids);
    free(vouched);
    free(steps);
    if (st) {
        pthread_mutex_lock(&ms->mu);
        ms->news |= req.has_progress || req.task_done || req.has_speed;
        pthread_mutex_unlock(&ms->mu);
        return st;
    }
    atomic_store(&ms->last_beat_ms, ts_now_ms());
    set_epoch(ms, resp->epoch);
    if (ms->cfg.kind == TESSERA__V1__MEMBER_KIND__MEMBER_KIND_WORKER) {
        pthread_mutex_lock(&ms->mu);
        ms->roster = resp->roster;
        ms->nslots = resp->n_slots < SLOTS_MAX ? resp->n_slots : SLOTS_MAX;
        if (ms->nslots)
            memcpy(ms->slots, resp->slots, ms->nslots * sizeof(*ms->slots));
        if (req.task_done && ms->result.id == req.task_done->id)
            ms->result.id = 0;   /* delivered */
        ms->rest_ms = resp->rest_ms;
        if (resp->task && resp->task->id > ms->taken)
            ms->handed = (struct ts_task){ resp->task->id, resp->task->kind };
        pthread_mutex_unlock(&ms->mu);
    }
    for (size_t i = 0; ms->cfg.on_roster && i < resp->n_rosters; i++)
        ms->cfg.on_roster(ms->cfg.arg, resp->rosters[i]->job, resp->rosters[i]->roster);
    tessera__v1__heartbeat_response__free_unpacked(resp, NULL);
    return TS_OK;
}

/* A heartbeat, and a new registration if the master declared us dead or forgot us. */
static ts_status beat_or_join(struct ts_membership *ms, struct ts_err *err)
{
    ts_status st;

    pthread_mutex_lock(&ms->beat_mu);
    st = beat(ms, err);
    if (st == TS_ESTATE || st == TS_ENOTFOUND) {
        /* Declared dead, or a master that restarted and forgot us: join again. */
        ts_log(TS_WARN, "member", "%s; registering again", err->msg);
        ts_err_clear(err);
        if (!(st = do_register(ms, (int)ms->interval_ms, err)))
            st = beat(ms, err);   /* the new registration's slots */
    }
    pthread_mutex_unlock(&ms->beat_mu);
    return st;
}

ts_status ts_membership_beat(struct ts_membership *ms, struct ts_err *err)
{
    return beat_or_join(ms, err);
}

ts_status ts_membership_caught_up(struct ts_membership *ms, unsigned registration,
                                  struct ts_err *err)
{
    bool same;

    pthread_mutex_lock(&ms->beat_mu);
    if ((same = atomic_load(&ms->registrations) == registration))
        atomic_store(&ms->caught_up, true);
    pthread_mutex_unlock(&ms->beat_mu);
    return same ? beat_or_join(ms, err) : TS_OK;
}

unsigned ts_membership_registrations(struct ts_membership *ms)
{
    return atomic_load(&ms->registrations);
}

size_t ts_membership_slots(struct ts_membership *ms, uint64_t *roster, uint32_t *slots,
                           size_t max)
{
    size_t n;

    pthread_mutex_lock(&ms->mu);
    *roster = ms->roster;
    n = ms->nslots < max ? ms->nslots : max;
    memcpy(slots, ms->slots, n * sizeof(*slots));
    pthread_mutex_unlock(&ms->mu);
    return n;
}

/* Whether this worker's heartbeat may be left out now (mu held): the master said the shards
 * vouch for it (rest_ms), a shard answered it within the last half interval (so that shard's
 * next heartbeat renews its lease), nothing waits to be reported, and its last own beat is
 * less than rest_ms old. When the answers stop, the worker beats within half an interval and
 * a REST_TICKS-th of one: the shards' last vouch (at most an interval before the last answer)
 * is then at most 7/12 of a lease old, room for a shard's beat that comes late. With a whole
 * interval and a tick of a whole one (the first form) it was a whole lease: one shard beat
 * late (in CI, on a loaded machine, while a move held the pushes) and the master declared the
 * job's two workers dead. */
static bool may_rest(struct ts_membership *ms)
{
    int64_t now = ts_now_ms(), reply, beat = atomic_load(&ms->last_beat_ms);

    if (!ms->rest_ms || ms->news || !ms->cfg.last_reply_ms || !beat ||
        now - beat >= (int64_t)ms->rest_ms)
        return false;
    reply = ms->cfg.last_reply_ms(ms->cfg.arg);
    return reply && now - reply <= (int64_t)ms->interval_ms / 2;
}

/* How long the heartbeat thread waits after a beat that took took_ms: the rest of the
 * interval from the beat's start, and at least a BEAT_GAP_DIV-th of one. Beats start an
 * interval apart whatever each took, so a beat that ran to its deadline (one interval: a
 * master slow under load) is followed by the next at once. Waiting a whole interval after it
 * (the first form) put the next beat two intervals after the last one that could have
 * renewed the lease: with a lease of three intervals, one slow answer left the lease to run
 * out just as the next beat was sent (the likely cause of two shards declared dead in CI,
 * under the sanitizers on a loaded machine). Now one answer may take its whole interval with
 * nine tenths of one to spare. */
static uint32_t next_beat_in(uint32_t interval_ms, int64_t took_ms)
{
    int64_t left = (int64_t)interval_ms - (took_ms > 0 ? took_ms : 0);
    uint32_t gap = interval_ms / BEAT_GAP_DIV;

    return left > (int64_t)gap ? (uint32_t)left : gap;
}

static void *heartbeat_main(void *arg)
{
    struct ts_membership *ms = arg;
    bool warned = false;
    int64_t began;

    pthread_mutex_lock(&ms->mu);
    while (!ms->stop) {
        struct ts_err err = { 0 };
        struct timespec ts;
        ts_status st = TS_OK;

        if (may_rest(ms)) {
            ts_abstime_ms(&ts, ms->interval_ms / REST_TICKS);
            pthread_cond_timedwait(&ms->cv, &ms->mu, &ts);
            continue;
        }
        pthread_mutex_unlock(&ms->mu);
        began = ts_now_ms();
        st = beat_or_join(ms, &err);
        if (st && !warned)
            ts_log(TS_WARN, "member", "heartbeat failed: %s (will keep trying)", err.msg);
        warned = st != TS_OK;
        pthread_mutex_lock(&ms->mu);
        ts_abstime_ms(&ts, next_beat_in(ms->interval_ms, ts_now_ms() - began));
        if (!ms->stop)
            pthread_cond_timedwait(&ms->cv, &ms->mu, &ts);
    }
    pthread_mutex_unlock(&ms->mu);
    return NULL;
}

ts_status ts_membership_start(struct ts_master *m, const struct ts_membership_cfg *cfg,
                              int deadline_ms, struct ts_membership **out, struct ts_err *err)
{
    struct ts_membership *ms = calloc(1, sizeof(*ms));
    ts_status st;

    if (!ms)
        return ts_err_set(err, TS_ENOMEM, "membership: out of memory");
    ms->m = m;
    ms->cfg = *cfg;
    if (cfg->nendpoints > 4) {
        free(ms);
        return ts_err_set(err, TS_EINVAL, "membership: at most 4 data-plane endpoints");
    }
    for (size_t i = 0; i < cfg->nendpoints; i++) {
        const Tessera__V1__DataPlaneEndpoint *d = cfg->endpoints[i];
        Tessera__V1__DataPlaneEndpoint init = TESSERA__V1__DATA_PLANE_ENDPOINT__INIT;
        size_t len = d->address.len < 192 ? d->address.len : 192;
        ms->endpoints[i] = init;
        snprintf(ms->endpoint_name[i], sizeof(ms->endpoint_name[i]), "%s", d->transport);
        memcpy(ms->endpoint_addr[i], d->address.data, len);
        ms->endpoints[i].transport = ms->endpoint_name[i];
        ms->endpoints[i].address.data = ms->endpoint_addr[i];
        ms->endpoints[i].address.len = len;
        ms->endpoint_ptrs[i] = &ms->endpoints[i];
    }
    ms->nendpoints = cfg->nendpoints;
    ms->cfg.endpoints = NULL;
    snprintf(ms->addr, sizeof(ms->addr), "%s", cfg->addr ? cfg->addr : "");
    snprintf(ms->job, sizeof(ms->job), "%s", cfg->job ? cfg->job : "");
    ms->cfg.job = NULL;
    if (cfg->instance)
        snprintf(ms->instance, sizeof(ms->instance), "%s", cfg->instance);
    else
        ts_proc_instance_id(ms->instance, sizeof(ms->instance));
    if (cfg->secret)
        memcpy(ms->secret, cfg->secret, sizeof(ms->secret));
    else if (getrandom(ms->secret, sizeof(ms->secret), 0) != (ssize_t)sizeof(ms->secret)) {
        free(ms);
        return ts_err_set(err, TS_EIO, "membership: getrandom: no random bytes for its secret");
    }
    pthread_mutex_init(&ms->mu, NULL);
    pthread_mutex_init(&ms->beat_mu, NULL);
    pthread_cond_init(&ms->cv, NULL);
    if ((st = do_register(ms, deadline_ms, err)) ||
        pthread_create(&ms->thread, NULL, heartbeat_main, ms) != 0) {
        if (!st)
            st = ts_err_set(err, TS_ENOMEM, "membership: cannot start the heartbeat thread");
        pthread_mutex_destroy(&ms->mu);
        pthread_mutex_destroy(&ms->beat_mu);
        pthread_cond_destroy(&ms->cv);
        free(ms);
        return st;
    }
    *out = ms;
    return TS_OK;
}

void ts_membership_stop(struct ts_membership *ms, bool deregister)
{
    if (!ms)
        return;
    pthread_mutex_lock(&ms->mu);
    ms->stop = true;
    pthread_cond_signal(&ms->cv);
    pthread_mutex_unlock(&ms->mu);
    pthread_join(ms->thread, NULL);
    if (deregister) {
        Tessera__V1__DeregisterRequest req = TESSERA__V1__DEREGISTER_REQUEST__INIT;
        Tessera__V1__DeregisterResponse *resp;
        struct ts_err err = { 0 };
        req.kind = ms->cfg.kind;
        req.id = atomic_load(&ms->id);
        req.reason = ms->failed ? ms->outcome : (char *)"clean shutdown";
        req.secret = (ProtobufCBinaryData){ sizeof(ms->secret), ms->secret };
        if (ms->cfg.kind == TESSERA__V1__MEMBER_KIND__MEMBER_KIND_WORKER && ms->job[0]) {
            req.outcome = ms->failed ? TESSERA__V1__WORKER_OUTCOME__WORKER_OUTCOME_FAILED
                                     : TESSERA__V1__WORKER_OUTCOME__WORKER_OUTCOME_FINISHED;
            req.fingerprint = ms->failed ? (char *)"" : ms->outcome;
        }
        /* A worker's outcome (its fingerprint) is what its job is judged by: it waits out a
         * master that restarts (docs/membership.md), retrying while it is unreachable. */
        if (CALL(ms->m, "Deregister", &req, &tessera__v1__deregister_response__descriptor,
                 &resp, req.outcome ? DEREGISTER_OUTCOME_MS : 2000, &err))
            ts_log(TS_WARN, "member", "deregister: %s", err.msg);
        else
            tessera__v1__deregister_response__free_unpacked(resp, NULL);
    }
    pthread_mutex_destroy(&ms->mu);
    pthread_mutex_destroy(&ms->beat_mu);
    pthread_cond_destroy(&ms->cv);
    free(ms);
}

bool ts_membership_task(struct ts_membership *ms, struct ts_task *out)
{
    bool got;

    pthread_mutex_lock(&ms->mu);
    got = ms->handed.id > ms->taken;
    if (got) {
        *out = ms->handed;
        ms->taken = ms->handed.id;
    }
    pthread_mutex_unlock(&ms->mu);
    return got;
}

void ts_membership_task_done(struct ts_membership *ms, const Tessera__V1__TaskInfo *r)
{
    pthread_mutex_lock(&ms->mu);
    ms->news = true;
    ms->result = *r;
    snprintf(ms->result_fp, sizeof(ms->result_fp), "%s", r->fingerprint ? r->fingerprint : "");
    snprintf(ms->result_error, sizeof(ms->result_error), "%s", r->error ? r->error : "");
    ms->result.fingerprint = ms->result_fp;
    ms->result.error = ms->result_error;
    pthread_mutex_unlock(&ms->mu);
}

ts_status ts_membership_claim(struct ts_membership *ms, uint64_t clock, uint32_t want,
                              uint64_t units, bool ssp, uint32_t staleness,
                              Tessera__V1__ClaimWorkResponse **out, struct ts_err *err)
{
    Tessera__V1__ClaimWorkRequest req = TESSERA__V1__CLAIM_WORK_REQUEST__INIT;

    req.worker_id = atomic_load(&ms->id);
    req.secret = (ProtobufCBinaryData){ sizeof(ms->secret), ms->secret };
    req.clock = clock;
    req.want = want;
    req.units = units;
    req.ssp = ssp;
    req.staleness = staleness;
    return CALL(ms->m, "ClaimWork", &req, &tessera__v1__claim_work_response__descriptor, out,
                ms->m->call_ms, err);
}

ts_status ts_membership_job_access(struct ts_membership *ms, const char *job,
                                   Tessera__V1__JobAccessResponse **out, struct ts_err *err)
{
    Tessera__V1__JobAccessRequest req = TESSERA__V1__JOB_ACCESS_REQUEST__INIT;

    req.shard_id = atomic_load(&ms->id);
    req.secret = (ProtobufCBinaryData){ sizeof(ms->secret), ms->secret };
    req.job = (char *)job;
    return CALL(ms->m, "JobAccess", &req, &tessera__v1__job_access_response__descriptor, out,
                ms->m->call_ms, err);
}

void ts_membership_end(struct ts_membership *ms, bool failed, const char *text)
{
    if (!ms)
        return;
    ms->failed = failed;
    snprintf(ms->outcome, sizeof(ms->outcome), "%s", text ? text : "");
}

uint32_t ts_membership_id(struct ts_membership *ms)
{
    return atomic_load(&ms->id);
}

uint64_t ts_membership_epoch(struct ts_membership *ms)
{
    return atomic_load(&ms->epoch);
}

const char *ts_membership_instance(struct ts_membership *ms)
{
    return ms->instance;
}

void ts_membership_set_clock(struct ts_membership *ms, uint64_t clock)
{
    atomic_store(&ms->clock, clock);
}

void ts_membership_set_report(struct ts_membership *ms, const struct ts_worker_report *r)
{
    pthread_mutex_lock(&ms->mu);
    ms->report = *r;
    pthread_mutex_unlock(&ms->mu);
}

void ts_membership_set_progress(struct ts_membership *ms, double loss, double accuracy,
                                double samples_per_s)
{
    pthread_mutex_lock(&ms->mu);
    ms->news |= ms->cfg.rank == 0;   /* the master shows rank 0's progress alone */
    ms->progress = true;
    ms->loss = loss;
    ms->accuracy = accuracy;
    ms->samples_per_s = samples_per_s;
    pthread_mutex_unlock(&ms->mu);
}

void ts_membership_set_speed(struct ts_membership *ms, double slot_s, uint32_t slots)
{
    pthread_mutex_lock(&ms->mu);
    ms->news |= ms->cfg.balance;   /* the master moves a balanced job's slots by it */
    ms->slot_s = slot_s;
    ms->speed_slots = slots;
    pthread_mutex_unlock(&ms->mu);
}
