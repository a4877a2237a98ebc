/* restart.c - see restart.h. */
#include "restart.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "encode.h"
#include "master.h"
#include "tessera/v1/state.pb-c.h"
#include "util/log.h"
#include "util/proc.h"

#define STATE_FORMAT 1

ts_status restart_read(struct master_saved *r, struct master_state *s, struct ts_err *err)
{
    uint8_t *cb = NULL, *sb = NULL;
    size_t cn, sn;
    ts_status st;

    memset(r, 0, sizeof(*r));
    if (!(st = master_state_get(s, "clock", &cb, &cn, err)) &&
        !(st = master_state_get(s, "state", &sb, &sn, err))) {
        if (cb && !(r->clock = tessera__v1__master_clock__unpack(NULL, cn, cb)))
            st = ts_err_set(err, TS_ECORRUPT, "%s/clock does not parse", s->dir);
        else if (sb && !(r->state = tessera__v1__master_state__unpack(NULL, sn, sb)))
            st = ts_err_set(err, TS_ECORRUPT, "%s/state does not parse", s->dir);
        else if (r->state && r->state->format != STATE_FORMAT)
            st = ts_err_set(err, TS_ECORRUPT, "%s/state: format %u, this master reads %d",
                            s->dir, r->state->format, STATE_FORMAT);
    }
    free(cb);
    free(sb);
    return st;
}

const char *restart_branch(const struct master_saved *r)
{
    return r->state && r->state->branch[0] ? r->state->branch : NULL;
}

ts_status restart_clock(void *ctx, const struct ts_members_clock *c, struct ts_err *err)
{
    struct master_state *s = ctx;
    Tessera__V1__MasterClock mc = TESSERA__V1__MASTER_CLOCK__INIT;
    uint8_t buf[64];

    if (!master_state_durable_dir(s))
        return TS_OK;
    mc.epoch = c->epoch;
    mc.shard_ids = c->shard_ids;
    mc.worker_ids = c->worker_ids;
    return master_state_put(s, "clock", buf, tessera__v1__master_clock__pack(&mc, buf), err);
}

/* ---- members, from the state file and back ---- */

static void shard_of(const Tessera__V1__ShardInfo *i, struct ts_member *e)
{
    memset(e, 0, sizeof(*e));
    e->id = i->id;
    e->kind = TS_MEMBER_SHARD;
    e->state = (enum ts_member_state)i->state;
    snprintf(e->addr, sizeof(e->addr), "%s", i->addr);
    snprintf(e->instance, sizeof(e->instance), "%s", i->instance);
    e->lease_ms = i->lease_ms;
    e->registered_epoch = i->registered_epoch;
    snprintf(e->death, sizeof(e->death), "%s", i->death);
    e->joining = i->joining;
    e->restarts = i->restarts;
    e->redo_log = i->redo_log;   /* away is not kept: a restarted master's leases decide */
    snprintf(e->identity, sizeof(e->identity), "%s", i->identity);
    for (size_t k = 0; k < i->n_data_planes && k < TS_MEMBERS_MAX_ENDPOINTS; k++) {
        struct ts_endpoint *d = &e->endpoints[e->nendpoints++];
        snprintf(d->transport, sizeof(d->transport), "%s", i->data_planes[k]->transport);
        d->len = i->data_planes[k]->address.len < sizeof(d->addr)
                     ? i->data_planes[k]->address.len : sizeof(d->addr);
        memcpy(d->addr, i->data_planes[k]->address.data, d->len);
    }
}

static void worker_of(const Tessera__V1__WorkerInfo *i, struct ts_member *e)
{
    memset(e, 0, sizeof(*e));
    e->id = i->id;
    e->kind = TS_MEMBER_WORKER;
    e->state = (enum ts_member_state)i->state;
    snprintf(e->addr, sizeof(e->addr), "%s", i->host);
    snprintf(e->instance, sizeof(e->instance), "%s", i->instance);
    e->pid = i->pid;
    e->lease_ms = i->lease_ms;
    snprintf(e->role, sizeof(e->role), "%s", i->role);
    snprintf(e->service, sizeof(e->service), "%s", i->addr);
    snprintf(e->identity, sizeof(e->identity), "%s", i->identity);
}

static ts_status check_member(uint32_t state, uint32_t lease_ms, const char *what, uint32_t id,
                              struct ts_err *err)
{
    if (state < TS_MEMBER_ALIVE || state > TS_MEMBER_LEFT ||
        lease_ms < TS_MEMBERS_MIN_LEASE_MS || lease_ms > TS_MEMBERS_MAX_LEASE_MS)
        return ts_err_set(err, TS_ECORRUPT, "%s %u: state %u, lease %u ms", what, id, state,
                          lease_ms);
    return TS_OK;
}

/* Gives the member of v that s names its secret hash. */
static ts_status restore_secret(struct ts_members_view *v, const Tessera__V1__MemberSecret *s,
                                struct ts_err *err)
{
    bool shard = s->kind == TESSERA__V1__MEMBER_KIND__MEMBER_KIND_SHARD;
    struct ts_member *e = shard ? v->shards : v->workers;
    size_t n = shard ? v->nshards : v->nworkers;

    if (s->sha256.len != TS_MEMBER_SECRET_HASH)
        return ts_err_set(err, TS_ECORRUPT, "secrets: %zu bytes for member %u, want %d",
                          s->sha256.len, s->id, TS_MEMBER_SECRET_HASH);
    for (size_t i = 0; i < n; i++)
        if (e[i].id == s->id) {
            memcpy(e[i].secret_sha256, s->sha256.data, TS_MEMBER_SECRET_HASH);
            e[i].has_secret = true;
            return TS_OK;
        }
    return TS_OK;   /* a departed worker forgotten since: nothing to keep */
}

static ts_status restore_members(struct master *m, const Tessera__V1__MasterState *ms,
                                 const Tessera__V1__MasterClock *clock, struct ts_err *err)
{
    struct ts_members_view v = { .epoch = ms->epoch, .shard_failures = ms->shard_failures };
    struct ts_members_clock c = { 0 };
    ts_status st = TS_OK;

    if (!(v.shards = calloc(ms->n_shards + 1, sizeof(*v.shards))) ||
        !(v.workers = calloc(ms->n_workers + 1, sizeof(*v.workers)))) {
        ts_members_view_free(&v);
        return ts_err_set(err, TS_ENOMEM, "state: out of memory");
    }
    for (size_t i = 0; !st && i < ms->n_shards; i++) {
        shard_of(ms->shards[i], &v.shards[v.nshards++]);
        st = check_member(ms->shards[i]->state, ms->shards[i]->lease_ms, "shard",
                          ms->shards[i]->id, err);
    }
    for (size_t i = 0; !st && i < ms->n_workers; i++) {
        worker_of(ms->workers[i], &v.workers[v.nworkers++]);
        st = check_member(ms->workers[i]->state, ms->workers[i]->lease_ms, "worker",
                          ms->workers[i]->id, err);
    }
    for (size_t i = 0; !st && i < ms->n_secrets; i++)
        st = restore_secret(&v, ms->secrets[i], err);
    if (clock)   /* written first: its epoch may be ahead of v's (the restore takes the larger) */
        c = (struct ts_members_clock){ clock->epoch, clock->shard_ids, clock->worker_ids };
    if (!st)
        st = ts_members_restore(m->members, &v, &c, ts_now_ms(), RESTART_GRACE_MS, err);
    ts_members_view_free(&v);
    return st;
}

/* ---- jobs and data maps ---- */

static ts_status restore_jobs(struct master_saved *s, struct master *m,
                              const Tessera__V1__MasterState *ms, struct ts_err *err)
{
    struct job_record *r = calloc(ms->n_jobs + 1, sizeof(*r));
    ts_status st = r ? TS_OK : ts_err_set(err, TS_ENOMEM, "state: out of memory");

    for (size_t i = 0; !st && i < ms->n_jobs; i++) {
        const Tessera__V1__JobRecord *jr = ms->jobs[i];
        const Tessera__V1__JobInfo *in = jr->info;
        struct job_info *o = &r[i].info;
        if (!in || strlen(in->id) > TS_JOB_ID_MAX) {
            st = ts_err_set(err, TS_ECORRUPT, "jobs[%zu]: no info, or a bad id", i);
            break;
        }
        snprintf(o->id, sizeof(o->id), "%s", in->id);
        o->state = (enum job_state)in->state;
        o->workers = in->workers;
        o->alive = in->alive;
        o->finished = in->finished;
        o->keep = jr->keep;
        o->released = in->released;
        o->started_unix_ms = in->started_unix_ms;
        o->ended_unix_ms = in->ended_unix_ms;
        snprintf(o->fingerprint, sizeof(o->fingerprint), "%s", in->fingerprint);
        snprintf(o->reason, sizeof(o->reason), "%s", in->reason);
        snprintf(o->owner, sizeof(o->owner), "%s", in->owner);
        o->rollbacks = in->rollbacks;
        o->rollback_step = in->rollback_step;
        o->rolling_back = in->rolling_back;
        o->lost = in->lost;
        snprintf(o->rollback_note, sizeof(o->rollback_note), "%s", in->rollback_note);
        o->elastic = in->elastic;
        o->roster = in->roster;
        o->adopted = in->adopted;
        o->start_workers = in->start_workers;
        o->balance = in->balance;
        o->balanced = in->balanced;
        if (in->n_slot_owners &&
            !(r[i].owners = malloc(in->n_slot_owners * sizeof(*r[i].owners)))) {
            st = ts_err_set(err, TS_ENOMEM, "state: out of memory");
            break;
        }
        if (in->n_slot_owners)
            memcpy(r[i].owners, in->slot_owners,
                   (r[i].nowners = in->n_slot_owners) * sizeof(*r[i].owners));
        r[i].failed = jr->failed;
        r[i].died = jr->died;
        if (jr->n_seats && !(r[i].seats = calloc(jr->n_seats, sizeof(*r[i].seats)))) {
            st = ts_err_set(err, TS_ENOMEM, "state: out of memory");
            break;
        }
        for (size_t k = 0; k < jr->n_seats; k++)
            r[i].seats[r[i].nseats++] = (struct job_seat){
                jr->seats[k]->worker, jr->seats[k]->rank,
                (enum job_seat_state)(jr->seats[k]->state > SEAT_DEAD ? SEAT_DEAD
                                                                       : jr->seats[k]->state),
                jr->seats[k]->waiting, 0 };
    }
    if (!st)
        st = jobs_restore(m->jobs, r, ms->n_jobs, ts_now_ms(), s->rerun, RESTART_MAX_RERUN,
                          &s->nrerun, err);
    jobs_records_free(r, ms->n_jobs);
    for (size_t i = 0; !st && i < ms->n_data; i++) {
        char source[96];
        st = datamap_check(&m->data, ms->data[i], true, source, sizeof(source), err);
    }
    return st;
}

/* The members' secret hashes (MasterState.secrets) in call's arena; *n of them. */
static Tessera__V1__MemberSecret **member_secrets(struct ts_rpc_call *call,
                                                 const struct ts_members_view *v, size_t *n)
{
    Tessera__V1__MemberSecret **out = ts_rpc_alloc(call, (v->nshards + v->nworkers + 1) *
                                                             sizeof(*out));

    *n = 0;
    for (size_t i = 0; i < v->nshards + v->nworkers; i++) {
        struct ts_member *e = i < v->nshards ? &v->shards[i] : &v->workers[i - v->nshards];
        Tessera__V1__MemberSecret *s;
        if (!e->has_secret)
            continue;
        s = ts_rpc_new(call, &tessera__v1__member_secret__descriptor);
        s->kind = (Tessera__V1__MemberKind)e->kind;
        s->id = e->id;
        s->sha256.data = ts_rpc_alloc(call, sizeof(e->secret_sha256));
        s->sha256.len = sizeof(e->secret_sha256);
        memcpy(s->sha256.data, e->secret_sha256, sizeof(e->secret_sha256));
        out[(*n)++] = s;
    }
    return out;
}

/* m's state as a message in call's arena. */
static Tessera__V1__MasterState *build(struct master *m, struct ts_rpc_call *call,
                                       struct ts_err *err)
{
    Tessera__V1__MasterState *ms = ts_rpc_new(call, &tessera__v1__master_state__descriptor);
    struct ts_members_view v;
    struct job_record *r;
    size_t n;

    if (ts_members_view(m->members, false, &v, err))
        return NULL;
    if (jobs_export(m->jobs, &r, &n, err)) {
        ts_members_view_free(&v);
        return NULL;
    }
    ms->format = STATE_FORMAT;
    ms->epoch = v.epoch;
    ms->vnodes = v.vnodes;
    ms->replicas = v.replicas;
    ms->shard_failures = v.shard_failures;
    ms->shards = master_shard_infos(call, &v, 0);
    ms->n_shards = v.nshards;
    ms->workers = master_worker_infos(call, &v, 0);
    ms->n_workers = v.nworkers;
    for (size_t i = 0; i < v.nshards; i++) {   /* only what a heartbeat does not change */
        ms->shards[i]->last_heartbeat_ms_ago = 0;
        ms->shards[i]->away_ms_ago = 0;
    }
    for (size_t i = 0; i < v.nworkers; i++) {
        Tessera__V1__WorkerInfo *w = ms->workers[i];
        w->last_heartbeat_ms_ago = 0;
        w->clock = w->staleness_last = w->staleness_max = w->steps_skipped = 0;
        w->loss_scale = 0;
    }
    ms->jobs = ts_rpc_alloc(call, (n + 1) * sizeof(*ms->jobs));
    for (size_t i = 0; i < n; i++) {
        Tessera__V1__JobRecord *jr = ts_rpc_new(call, &tessera__v1__job_record__descriptor);
        jr->info = master_job_info(call, &r[i].info);
        master_job_owners(call, jr->info, r[i].owners, r[i].nowners);
        jr->keep = r[i].info.keep;
        jr->failed = r[i].failed;
        jr->died = r[i].died;
        jr->seats = ts_rpc_alloc(call, (r[i].nseats + 1) * sizeof(*jr->seats));
        for (size_t k = 0; k < r[i].nseats; k++) {
            Tessera__V1__JobSeat *s = ts_rpc_new(call, &tessera__v1__job_seat__descriptor);
            s->worker = r[i].seats[k].worker;
            s->rank = r[i].seats[k].rank;
            s->state = r[i].seats[k].state;
            s->waiting = r[i].seats[k].waiting;
            jr->seats[jr->n_seats++] = s;
        }
        ms->jobs[ms->n_jobs++] = jr;
    }
    ms->data = datamap_requests(&m->data, call, &ms->n_data);
    ms->branch = (char *)snapper_branch(&m->snap, call);
    ms->snapshots = snapper_job_snapshots(&m->snap, call, &ms->n_snapshots);
    ms->table_moves = snapper_table_moves(&m->snap, call, &ms->n_table_moves);
    ms->data_key = (ProtobufCBinaryData){ sizeof(m->data_key), m->data_key };
    ms->secrets = member_secrets(call, &v, &ms->n_secrets);
    jobs_records_free(r, n);
    ts_members_view_free(&v);
    return ms;
}

/* The saver's encoder (state.h): m's state file as it should be now. */
static ts_status encode(void *ctx, uint8_t **out, size_t *n, struct ts_err *err)
{
    struct master *m = ctx;
    struct ts_rpc_call *call = ts_rpc_scratch_new();
    Tessera__V1__MasterState *ms = NULL;
    struct ts_err why = { 0 };

    *out = NULL;
    if (call && (ms = build(m, call, &why)) &&
        (*out = malloc((*n = tessera__v1__master_state__get_packed_size(ms)) + 1)))
        tessera__v1__master_state__pack(ms, *out);
    ts_rpc_scratch_free(call);
    if (!*out)
        return ts_err_set(err, call && why.code ? why.code : TS_ENOMEM, "%s",
                          call && why.msg[0] ? why.msg : "out of memory");
    return TS_OK;
}

ts_status restart_load(struct master_saved *s, struct master *m, bool *restored,
                      struct ts_err *err)
{
    Tessera__V1__MasterState none = TESSERA__V1__MASTER_STATE__INIT;
    const Tessera__V1__MasterState *use = s->state ? s->state : &none;
    struct ts_members_view v;
    ts_status st = TS_OK;

    /* From here on a Deregister's master_state_sync writes the file, before the saver runs. */
    master_state_keep(&m->state, "state", encode, m);
    *restored = false;
    if (!s->state && !s->clock)
        return TS_OK;   /* a first start */
    if (s->state && !(st = ts_members_view(m->members, true, &v, err))) {
        ts_members_view_free(&v);
        if (use->vnodes != v.vnodes || use->replicas != v.replicas)
            st = ts_err_set(err, TS_EINVAL, "--vnodes %u --replicas %u, but the cluster in %s "
                            "runs with --vnodes %u --replicas %u: start the master with those",
                            v.vnodes, v.replicas, m->state.dir, use->vnodes, use->replicas);
    }
    if (!st && !(st = restore_members(m, use, s->clock, err)) &&
        !(st = restore_jobs(s, m, use, err))) {
        snapper_restore_jobs(&m->snap, use->snapshots, use->n_snapshots);
        snapper_restore_moves(&m->snap, use->table_moves, use->n_table_moves);
        if (use->data_key.len == sizeof(m->data_key))
            memcpy(m->data_key, use->data_key.data, sizeof(m->data_key));
        *restored = true;
        ts_log(TS_WARN, "master", "restarted with the state in %s: %zu shards, %zu workers, "
               "%zu jobs; epoch %" PRIu64, m->state.dir, use->n_shards, use->n_workers,
               use->n_jobs, ts_members_epoch(m->members));
    }
    if (st)
        ts_err_prefix(err, "restoring the master's state from %s", m->state.dir);
    tessera__v1__master_clock__free_unpacked(s->clock, NULL);
    tessera__v1__master_state__free_unpacked(s->state, NULL);
    s->clock = NULL;
    s->state = NULL;
    return st;
}

void restart_start(struct master_saved *s, struct master *m)
{
    for (size_t i = 0; i < s->nrerun; i++) {
        struct job_info *v;
        char action[512];
        struct ts_err err = { 0 };
        size_t n;
        uint32_t seen = 0;

        if (jobs_list(m->jobs, &v, &n, &err) == TS_OK) {
            for (size_t k = 0; k < n; k++)
                if (!strcmp(v[k].id, s->rerun[i]))
                    seen = v[k].rollbacks;
            free(v);
        }
        if (rollback_request(m, s->rerun[i], 0, seen, action, sizeof(action), &err))
            ts_log(TS_ERROR, "master", "job %s: the rollback the master was running when it "
                   "stopped: %s", s->rerun[i], err.msg);
        else
            ts_log(TS_WARN, "master", "job %s: the rollback the master was running when it "
                   "stopped, again: %s", s->rerun[i], action);
    }
    s->nrerun = 0;
    master_state_start(&m->state);
}

void restart_free(struct master_saved *s)
{
    tessera__v1__master_clock__free_unpacked(s->clock, NULL);
    tessera__v1__master_state__free_unpacked(s->state, NULL);
    s->clock = NULL;
    s->state = NULL;
    s->nrerun = 0;
}
