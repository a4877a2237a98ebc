/* snapshot.c - the snapper's life and what it tells (see snapshot.h): opening the store and
 * settling the branch (snapshot_branch.c), stopping the automatic loop, gc, the status and
 * state-file accessors, and each job's newest snapshot. Taking a snapshot, and the automatic
 * loop that takes them, are snapshot_take.c and snapshot_auto.c, which call down into this
 * file, never back. */
#include "snapshot.h"
#include "snapshot_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

struct snap_job *snap_job_rec(struct snapper *sn, const char *job, bool add)
{
    struct snap_job *r;

    for (size_t i = 0; i < sn->njobs; i++)
        if (!strcmp(sn->jobs[i].id, job))
            return &sn->jobs[i];
    if (!add)
        return NULL;
    if (sn->njobs < SNAP_MAX_JOBS)
        r = &sn->jobs[sn->njobs++];
    else
        r = &sn->jobs[sn->next_slot++ % SNAP_MAX_JOBS];
    memset(r, 0, sizeof(*r));
    snprintf(r->id, sizeof(r->id), "%s", job);
    return r;
}

void snap_note_job(struct snapper *sn, const char *job, const char *hex, uint64_t step)
{
    struct snap_job *r = snap_job_rec(sn, job, true);

    snprintf(r->hex, sizeof(r->hex), "%s", hex);
    r->step = step;
}

ts_status snapper_open(struct snapper *sn, struct ts_members *members, struct datamap *data,
                       struct jobs *jobs, const char *dir, const char *restore,
                       const char *branch, const char *resume, uint32_t every,
                       struct ts_err *err)
{
    char named[TS_STORE_REF_MAX + 1];
    bool resuming = resume && resume[0];
    ts_status st;

    memset(sn, 0, sizeof(*sn));
    pthread_mutex_init(&sn->mu, NULL);
    pthread_mutex_init(&sn->stat_mu, NULL);
    sn->members = members;
    sn->running = jobs;
    sn->data = data;
    sn->every = every;
    if (!dir)
        return TS_OK;
    snprintf(sn->dir, sizeof(sn->dir), "%s", dir);
    if ((st = ts_store_open(dir, NULL, &sn->store, err)) ||
        (st = resuming ? snap_resolve_restore(sn, restore, named, err)
                       : snap_settle_branch(sn, restore, branch, err))) {
        ts_err_prefix(err, "--store %s", dir);
        return st;
    }
    if (sn->has_tip) {
        char hex[TS_STORE_HEX_LEN + 1];
        ts_manifest *m;

        if ((st = ts_manifest_load(sn->store, sn->tip, &m, err)))
            return st;
        snprintf(sn->last_hex, sizeof(sn->last_hex), "%s", ts_store_hex(sn->tip, hex));
        char source[96];
        snprintf(source, sizeof(source), "snapshot %.12s", hex);
        if ((st = datamap_restore(data, m, source, err))) {
            ts_manifest_free(m);
            return st;
        }
        sn->last_step = m->step;
        sn->last_unix_ms = m->created_unix_ms;
        if (m->job)
            snap_note_job(sn, m->job->id, sn->last_hex, m->step);
        ts_manifest_free(m);
    }
    if (resuming && (st = snap_continue_branch(sn, resume, err))) {
        ts_err_prefix(err, "--store %s", dir);
        return st;
    }
    ts_log(TS_INFO, "master", "snapshots: store %s, branch %s%s", dir, sn->branch,
           resuming ? " (continued after a restart)" : sn->has_tip ? " (restored)" : "");
    return TS_OK;
}

void snapper_stop(struct snapper *sn)
{
    atomic_store(&sn->stop, true);
    if (sn->thread_started)
        pthread_join(sn->thread, NULL);
    sn->thread_started = false;
}

void snapper_close(struct snapper *sn)
{
    snapper_stop(sn);
    shard_channels_free(&sn->chan);
    ts_store_close(sn->store);
    pthread_mutex_destroy(&sn->mu);
    pthread_mutex_destroy(&sn->stat_mu);
}

ts_status snapper_gc(struct snapper *sn, unsigned tmp_grace_s, struct ts_store_stats *stats,
                     uint64_t *live, struct ts_err *err)
{
    uint8_t (*ids)[TS_STORE_ID_LEN] = NULL;
    size_t n = 0;
    ts_status st;

    if (!sn->store)
        return ts_err_set(err, TS_ESTATE, "this master runs without --store");
    pthread_mutex_lock(&sn->mu);
    st = ts_snap_live_chunks(sn->store, &ids, &n, NULL, err);
    if (!st)
        st = ts_store_gc(sn->store, (const uint8_t(*)[TS_STORE_ID_LEN])ids, n, tmp_grace_s,
                         stats, err);
    pthread_mutex_unlock(&sn->mu);
    free(ids);
    *live = n;
    return st;
}

bool snapper_last_of(struct snapper *sn, const char *job, char hex[TS_STORE_HEX_LEN + 1],
                     uint64_t *step)
{
    struct snap_job *r;
    bool found;

    pthread_mutex_lock(&sn->stat_mu);
    r = sn->store ? snap_job_rec(sn, job, false) : NULL;
    if ((found = r && r->hex[0])) {
        memcpy(hex, r->hex, TS_STORE_HEX_LEN + 1);
        *step = r->step;
    }
    pthread_mutex_unlock(&sn->stat_mu);
    return found;
}

void snapper_status(struct snapper *sn, struct ts_rpc_call *call,
                    Tessera__V1__ClusterStatusResponse *resp)
{
    resp->store = ts_rpc_strdup(call, sn->dir);
    resp->snapshot_every = sn->every;
    pthread_mutex_lock(&sn->stat_mu);
    resp->branch = ts_rpc_strdup(call, sn->store ? sn->branch : "");
    resp->snapshot_error = ts_rpc_strdup(call, sn->error);
    if (sn->last_hex[0]) {
        Tessera__V1__SnapshotRef *r = ts_rpc_new(call, &tessera__v1__snapshot_ref__descriptor);
        r->id = ts_rpc_strdup(call, sn->last_hex);
        r->branch = ts_rpc_strdup(call, sn->branch);
        r->step = sn->last_step;
        r->created_unix_ms = sn->last_unix_ms;
        resp->last_snapshot = r;
    }
    pthread_mutex_unlock(&sn->stat_mu);
}

const char *snapper_branch(struct snapper *sn, struct ts_rpc_call *call)
{
    const char *b;

    pthread_mutex_lock(&sn->stat_mu);
    b = ts_rpc_strdup(call, sn->store ? sn->branch : "");
    pthread_mutex_unlock(&sn->stat_mu);
    return b;
}

Tessera__V1__JobSnapshot **snapper_job_snapshots(struct snapper *sn, struct ts_rpc_call *call,
                                                 size_t *n)
{
    Tessera__V1__JobSnapshot **out;

    pthread_mutex_lock(&sn->stat_mu);
    out = ts_rpc_alloc(call, (sn->njobs + 1) * sizeof(*out));
    *n = 0;
    for (size_t i = 0; i < sn->njobs; i++) {
        Tessera__V1__JobSnapshot *j;
        if (!sn->jobs[i].hex[0])
            continue;
        j = ts_rpc_new(call, &tessera__v1__job_snapshot__descriptor);
        j->job = ts_rpc_strdup(call, sn->jobs[i].id);
        j->id = ts_rpc_strdup(call, sn->jobs[i].hex);
        j->step = sn->jobs[i].step;
        out[(*n)++] = j;
    }
    pthread_mutex_unlock(&sn->stat_mu);
    return out;
}

void snapper_restore_jobs(struct snapper *sn, Tessera__V1__JobSnapshot *const *v, size_t n)
{
    pthread_mutex_lock(&sn->stat_mu);
    for (size_t i = 0; i < n; i++)
        if (strlen(v[i]->job) <= TS_JOB_ID_MAX && strlen(v[i]->id) == TS_STORE_HEX_LEN)
            snap_note_job(sn, v[i]->job, v[i]->id, v[i]->step);
    pthread_mutex_unlock(&sn->stat_mu);
}
