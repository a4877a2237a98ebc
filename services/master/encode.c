/* encode.c - see encode.h. */
#include "encode.h"

#include <string.h>

static Tessera__V1__MemberState state_pb(enum ts_member_state s)
{
    switch (s) {
    case TS_MEMBER_ALIVE: return TESSERA__V1__MEMBER_STATE__MEMBER_STATE_ALIVE;
    case TS_MEMBER_DEAD: return TESSERA__V1__MEMBER_STATE__MEMBER_STATE_DEAD;
    case TS_MEMBER_LEFT: return TESSERA__V1__MEMBER_STATE__MEMBER_STATE_LEFT;
    }
    return TESSERA__V1__MEMBER_STATE__MEMBER_STATE_UNSPECIFIED;
}

Tessera__V1__ShardInfo **master_shard_infos(struct ts_rpc_call *call,
                                            const struct ts_members_view *v, int64_t now)
{
    Tessera__V1__ShardInfo **out = ts_rpc_alloc(call, (v->nshards + 1) * sizeof(*out));

    for (size_t i = 0; i < v->nshards; i++) {
        const struct ts_member *e = &v->shards[i];
        Tessera__V1__ShardInfo *s = ts_rpc_new(call, &tessera__v1__shard_info__descriptor);
        s->id = e->id;
        s->addr = ts_rpc_strdup(call, e->addr);
        s->state = state_pb(e->state);
        s->lease_ms = e->lease_ms;
        s->last_heartbeat_ms_ago = now - e->last_heartbeat_ms;
        s->instance = ts_rpc_strdup(call, e->instance);
        s->registered_epoch = e->registered_epoch;
        s->death = ts_rpc_strdup(call, e->death);
        s->joining = e->state == TS_MEMBER_ALIVE && e->joining;
        s->restarts = e->restarts;
        s->identity = ts_rpc_strdup(call, e->identity);
        /* at least 1 while away, so that an age of 0 still reads as away */
        if (e->state == TS_MEMBER_ALIVE && e->away_ms)
            s->away_ms_ago = now - e->away_ms > 0 ? now - e->away_ms : 1;
        s->redo_log = e->redo_log;
        s->n_data_planes = e->nendpoints;
        s->data_planes = ts_rpc_alloc(call, (e->nendpoints + 1) * sizeof(*s->data_planes));
        for (size_t k = 0; k < e->nendpoints; k++) {
            Tessera__V1__DataPlaneEndpoint *d =
                ts_rpc_new(call, &tessera__v1__data_plane_endpoint__descriptor);
            d->transport = ts_rpc_strdup(call, e->endpoints[k].transport);
            d->address.len = e->endpoints[k].len;
            d->address.data = ts_rpc_alloc(call, e->endpoints[k].len + 1);
            memcpy(d->address.data, e->endpoints[k].addr, e->endpoints[k].len);
            s->data_planes[k] = d;
        }
        out[i] = s;
    }
    return out;
}

Tessera__V1__WorkerInfo **master_worker_infos(struct ts_rpc_call *call,
                                              const struct ts_members_view *v, int64_t now)
{
    Tessera__V1__WorkerInfo **out = ts_rpc_alloc(call, (v->nworkers + 1) * sizeof(*out));

    for (size_t i = 0; i < v->nworkers; i++) {
        const struct ts_member *e = &v->workers[i];
        Tessera__V1__WorkerInfo *w = ts_rpc_new(call, &tessera__v1__worker_info__descriptor);
        w->id = e->id;
        w->host = ts_rpc_strdup(call, e->addr);
        w->pid = e->pid;
        w->state = state_pb(e->state);
        w->lease_ms = e->lease_ms;
        w->last_heartbeat_ms_ago = now - e->last_heartbeat_ms;
        w->instance = ts_rpc_strdup(call, e->instance);
        w->clock = e->clock;
        w->staleness_last = e->report.staleness_last;
        w->staleness_max = e->report.staleness_max;
        w->steps_skipped = e->report.steps_skipped;
        w->loss_scale = e->report.loss_scale;
        w->role = ts_rpc_strdup(call, e->role);
        w->addr = ts_rpc_strdup(call, e->service);
        w->restarts = e->restarts;
        w->identity = ts_rpc_strdup(call, e->identity);
        out[i] = w;
    }
    return out;
}

Tessera__V1__JobInfo *master_job_info(struct ts_rpc_call *call, const struct job_info *v)
{
    Tessera__V1__JobInfo *j = ts_rpc_new(call, &tessera__v1__job_info__descriptor);

    j->id = ts_rpc_strdup(call, v->id);
    j->state = (Tessera__V1__JobState)v->state;
    j->workers = v->workers;
    j->alive = v->alive;
    j->finished = v->finished;
    j->released = v->released;
    j->started_unix_ms = v->started_unix_ms;
    j->ended_unix_ms = v->ended_unix_ms;
    j->fingerprint = ts_rpc_strdup(call, v->fingerprint);
    j->reason = ts_rpc_strdup(call, v->reason);
    j->owner = ts_rpc_strdup(call, v->owner);
    j->rollbacks = v->rollbacks;
    j->rollback_step = v->rollback_step;
    j->rolling_back = v->rolling_back;
    j->lost = v->lost;
    j->rollback_note = ts_rpc_strdup(call, v->rollback_note);
    j->elastic = v->elastic;
    j->roster = v->roster;
    j->adopted = v->adopted;
    j->start_workers = v->start_workers;
    j->balance = v->balance;
    j->balanced = v->balanced;
    return j;
}

void master_job_owners(struct ts_rpc_call *call, Tessera__V1__JobInfo *j, const uint32_t *owners,
                       size_t n)
{
    j->slot_owners = ts_rpc_alloc(call, (n + 1) * sizeof(*j->slot_owners));
    if (n)
        memcpy(j->slot_owners, owners, n * sizeof(*owners));
    j->n_slot_owners = n;
}
