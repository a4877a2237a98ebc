/* sdk_failover.c - a step that lost a shard is sent again to the shards of the new map
 * (docs/replication.md, "Failover").
 *
 * A broken data-plane connection in the middle of a step means a shard died. When the job's
 * partitions have replicas, the master drops the dead shard from the map once its lease
 * expires, and each partition it headed is headed by its follower, which holds every version
 * a worker could have seen. This worker then closes its connections, connects to the shards
 * of the new map, and sends the whole step again flagged as a retry: a shard that already
 * counted a push of it acknowledges the duplicate without adding it, so every step is applied
 * exactly once. The shard whose connection broke is reported to the master first, which
 * checks it and drops it from the map at once if it is dead, rather than at its lease.
 *
 * A partition that moved to a shard that joined the ring (docs/replication.md, "Joining") is
 * the same to a worker: its old head answers TS_ESTALE, and the step goes again under the
 * new map.
 *
 * A hung head (stopped, a frozen VM, a swap storm) breaks no connection: it keeps them open
 * and the kernel acknowledges what is sent to it, so a worker would wait on it for as long as
 * it hangs. The master drops it from the map once its lease runs out, and this worker's
 * heartbeat hears of the new epoch within a beat: sdk_follow_epoch then fetches the map and
 * shuts down the connection to each shard it goes on without, which ends a send or a wait on
 * it at once as a broken connection, and the step fails over as above (docs/replication.md,
 * "A hung head").
 *
 * In a reduce job a partition may have lost every copy: before the step goes again, the
 * worker tells each head which version of each partition it pulled last, with its values
 * (SEED), and a head that made the partition afresh takes it from the ranks (docs/
 * replication.md, "Reduce jobs that lose every copy").
 *
 * Recovery's layer is above the wire (sdk_exchange.c: a rollback's pulls) and below the step:
 * this file reconnects and reports, and what is sent again is its caller's to say, the redo
 * that sdk_fail_over runs (sdk_step.c's exchange, sdk_clip.c's clipped step). */
#include "client/sdk_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "transport/frame.h"
#include "util/log.h"
#include "util/proc.h"

#define MAP_WAIT_MIN_MS 30000   /* a lease or two, and the heartbeat that tells the master */
#define MAP_POLL_MS 100
#define ROLLBACK_WAIT_MIN_MS 120000   /* detection, then every shard reads the snapshot */
#define START_TRIES 5                 /* sdk_start_over: shards dying one after another */
/* Failovers of one step before it fails: at least this many, and more while the step's
 * timeout_ms has not run out since the first (a link cut for a minute fails over again every
 * few seconds until it heals), FAILOVER_PAUSE_MS apart once past this many. */
#define MAX_FAILOVERS 8
#define FAILOVER_PAUSE_MS 1000

bool sdk_can_fail_over(struct tessera *t)
{
    return !t->local && t->cl;
}

/* Refreshes the map until its epoch is past `old`. */
static ts_status await_map(struct tessera *t, uint64_t old, struct ts_err *err)
{
    int wait_ms = t->timeout_ms > MAP_WAIT_MIN_MS ? t->timeout_ms : MAP_WAIT_MIN_MS;
    int64_t until = ts_now_ms() + wait_ms;
    ts_status st;

    for (;;) {
        struct ts_err e = { 0 };
        if (!(st = ts_cluster_refresh(t->cl, &e)) && ts_cluster_epoch(t->cl) > old)
            return TS_OK;
        if (ts_now_ms() > until)
            return ts_err_set(err, TS_EUNAVAIL, "a shard connection broke (or a shard said "
                              "the map moved) and the shard map did not change within %d ms "
                              "(epoch %" PRIu64 "%s%s)", wait_ms, old, st ? ": " : "",
                              st ? e.msg : "");
        ts_sleep_ms(MAP_POLL_MS);
    }
}


/* Connects to the shards of the cached map and redoes what a connection carried: HELLO, each
 * partition's head, the shared regions. */
static ts_status reconnect(struct tessera *t, struct ts_err *err)
{
    ts_status st;

    if ((st = sdk_connect_shards(t, sdk_want_transport(t), t->conns.delay_ms, err)) ||
        (st = sdk_hello_or_remap(t, err)))
        return st;
    for (int i = 0; i < t->ntensors; i++) {
        struct sdk_tensor *x = t->tensors[i];
        for (uint32_t p = 0; p < x->nparts; p++) {
            uint32_t id = 0;
            if ((st = ts_cluster_locate(t->cl, x->name, x->salt, p, &id, err)) ||
                (st = sdk_slot_of(t, id, &x->owner[p], err)))
                return st;
        }
        if ((st = sdk_region_reconnect(t, x, i, err)))
            return st;
    }
    return TS_OK;
}

/* reconnect() once the connections carried a HELLO; before (a registration), connects. */
static ts_status connect_again(struct tessera *t, bool hello, struct ts_err *err)
{
    if (hello)
        return reconnect(t, err);
    return sdk_connect_shards(t, sdk_want_transport(t), t->conns.delay_ms, err);
}

ts_status sdk_remap(struct tessera *t, struct ts_err *err)
{
    bool hello = t->hello.said;
    ts_status st;

    sdk_close_shards(t);
    if ((st = ts_cluster_refresh(t->cl, err)))
        return st;
    return connect_again(t, hello, err);
}

ts_status sdk_hello_or_remap(struct tessera *t, struct ts_err *err)
{
    uint32_t member = t->ms ? ts_membership_id(t->ms) : 0;

    /* An authenticated connection is bound to the worker id it proved: this worker registered
     * again since (declared dead while it was away), so it connects anew as the new one. */
    if (t->hello.said && t->hello.member != member && sdk_any_authed(t)) {
        t->hello.member = member;
        return sdk_remap(t, err);
    }
    return sdk_hello(t, err);
}

/* Reduce jobs: tells the head of every partition which version of it this worker pulled
 * last, with its values (none for version 0) and whether it was a skipped step. A head that
 * lost every copy waits for the word of every rank (docs/replication.md, "Reduce jobs that
 * lose every copy"); another takes it as a no-op. Every SEED goes out before any ACK is
 * read, as a step's requests do. */
static ts_status seed(struct tessera *t, struct ts_err *err)
{
    ts_status st = TS_OK, first = TS_OK;

    for (int i = 0; !st && i < t->ntensors; i++) {
        struct sdk_tensor *x = t->tensors[i];
        for (uint32_t p = 0; !st && p < x->nparts; p++) {
            uint64_t off, len;
            bool values = x->have[p] && !x->torn[p];   /* a torn rgrad: the version alone */
            struct ts_frame_hdr h = { .type = TS_FRAME_SEED, .tensor = (uint32_t)i,
                                      .partition = p, .step = x->have[p], .rank = t->rank,
                                      .flags = x->overflow[p] ? TS_SEED_OVERFLOW : 0 };
            ts_partition_range(x->numel, sizeof(float), x->partition_bytes, p, &off, &len);
            st = ts_frame_send(t->conns.shards[x->owner[p]].conn, &h,
                               values ? x->rgrad + off : NULL, values ? len * sizeof(float) : 0,
                               err);
            sdk_note_broken(t, x->owner[p], st);
        }
    }
    for (int i = 0; !st && i < t->ntensors; i++) {
        struct sdk_tensor *x = t->tensors[i];
        for (uint32_t p = 0; !st && p < x->nparts; p++) {
            struct reply_info ri = { 0 };
            struct ts_err e = { 0 };
            ts_status r = sdk_read_reply(t, x->owner[p], TS_FRAME_ACK, (uint32_t)i, p, NULL, 0,
                                         &ri, &e);
            if (r && !first) {
                first = r;
                ts_err_set(err, r, "seeding tensor '%s' partition %u: %s", x->name, p, e.msg);
            }
            if (sdk_transport_failed(r))
                st = r;
        }
    }
    return first;
}

ts_status sdk_failover(struct tessera *t, struct ts_err *err)
{
    uint64_t old = ts_cluster_epoch(t->cl);
    enum ts_report said = TS_REPORT_UNHEARD;
    bool hello = t->hello.said, broke = t->conns.broken != 0;
    char who[64];
    ts_status st;

    if (broke) {
        snprintf(who, sizeof(who), "worker rank %u", t->rank);
        said = ts_cluster_report_unreachable(t->cl, t->conns.broken, who, "its data-plane "
                                             "connection broke in the middle of a step");
        t->conns.broken = 0;
    }
    sdk_close_shards(t);
    /* A shard the master found answering is alive: the link broke, not the shard. Connect
     * again (a pause, so that a shard that keeps refusing is not hammered) under the map as
     * it is now: the one this worker holds may name where the shard was before, and a new
     * process of the same member (a shard that keeps its identity, docs/embeddings.md)
     * answers at its own address. Otherwise wait for the map without it, unless no link
     * broke and the map this worker holds is newer than its connections (a shard refused
     * them for that). */
    if (said == TS_REPORT_KEPT) {
        struct ts_err e = { 0 };
        ts_sleep_ms(MAP_POLL_MS);
        if (ts_cluster_refresh(t->cl, &e))   /* the held map, then: as before */
            ts_log(TS_DEBUG, "sdk", "the shard map: %s", e.msg);
    } else if ((broke || !hello || t->hello.epoch >= old) && (st = await_map(t, old, err)))
        return st;
    if ((st = connect_again(t, hello, err)) ||
        (hello && t->job.mode == TS_MODE_REDUCE && (st = seed(t, err))))
        return st;
    t->rec.failovers++;
    ts_log(TS_WARN, "sdk", "failed over: shard map epoch %" PRIu64 " -> %" PRIu64 ", %zu "
           "shards; what the lost connection carried is sent again", old,
           ts_cluster_epoch(t->cl), t->conns.nshards);
    return TS_OK;
}

void sdk_follow_epoch(void *arg, uint64_t epoch)
{
    struct tessera *t = arg;
    Tessera__V1__ShardMap *m = NULL;
    struct ts_err e = { 0 };
    size_t n;

    pthread_mutex_lock(&t->conns.mu);
    n = t->conns.nshards;   /* none yet (the registration sets the first epoch): nothing to watch */
    pthread_mutex_unlock(&t->conns.mu);
    if (!n)
        return;
    if (!t->master || ts_master_shard_map_update(t->master, t->rec.followed_map, &m, &e)) {
        ts_log(TS_DEBUG, "sdk", "epoch %" PRIu64 ": the shard map: %s", epoch,
               t->master ? e.msg : "not connected yet");
        return;
    }
    pthread_mutex_lock(&t->conns.mu);
    for (size_t i = 0; i < t->conns.nshards; i++) {
        struct sdk_shard *sh = &t->conns.shards[i];
        const Tessera__V1__ShardInfo *in = NULL;

        for (size_t k = 0; k < m->n_shards && !in; k++)
            if (m->shards[k]->id == sh->id)
                in = m->shards[k];
        /* Registered anew since: a new session, which holds none of this one's steps. */
        if (sh->left_epoch || (in && in->registered_epoch <= sh->epoch))
            continue;
        sh->left_epoch = m->epoch;
        ts_log(TS_WARN, "sdk", "shard %u is %s the master's shard map (epoch %" PRIu64 " -> %"
               PRIu64 "): this worker stops waiting for it and fails over", sh->id,
               in ? "registered anew in" : "no longer in", sh->epoch, m->epoch);
        ts_tp_shutdown(sh->conn);
    }
    pthread_mutex_unlock(&t->conns.mu);
    if (t->rec.followed_map)
        protobuf_c_message_free_unpacked(&t->rec.followed_map->base, NULL);
    t->rec.followed_map = m;   /* the next one comes as a delta from it */
}

ts_status sdk_start_over(struct tessera *t, ts_status st, struct ts_err *err)
{
    for (int k = 0; (st == TS_EUNAVAIL || st == TS_ECORRUPT) && t->conns.broken &&
                    sdk_can_fail_over(t) && k < START_TRIES; k++) {
        ts_log(TS_WARN, "sdk", "%s; waiting for the map without that shard", err->msg);
        memset(err, 0, sizeof(*err));
        st = sdk_failover(t, err);
    }
    return st;
}

/* Recovery reconnects (sdk_failover) and reports; what is sent again is the caller's: redo,
 * which it registered. */
ts_status sdk_fail_over(struct tessera *t, const char *what, uint64_t n, ts_status st,
                        sdk_redo_fn redo, void *ctx, struct ts_err *err)
{
    int64_t began = ts_now_ms();

    for (int k = 0; (st == TS_EUNAVAIL || st == TS_ESTALE) && sdk_can_fail_over(t) &&
                    (k < MAX_FAILOVERS || ts_now_ms() - began < t->timeout_ms); k++) {
        ts_log(TS_WARN, "sdk", "%s %" PRIu64 ": %s; failing over", what, n, err->msg);
        memset(err, 0, sizeof(*err));
        if (k >= MAX_FAILOVERS)
            ts_sleep_ms(FAILOVER_PAUSE_MS);
        if ((st = sdk_failover(t, err)))
            continue;   /* another shard died meanwhile (TS_EUNAVAIL): fail over again */
        if (t->hello.generation > t->rec.followed)   /* the new connections name a rollback */
            return ts_err_set(err, TS_EROLLBACK, "job '%s' went back to a snapshot while this "
                              "worker failed over", t->job.id);
        t->rec.retrying = true;
        /* The tables' last pushes first: a shard that came back from its redo log lacks the
         * sums of the step it had not applied (sdk_rows_kept.c). */
        if (!t->rec.resend || !(st = t->rec.resend(t, err)))
            st = redo(t, ctx, err);
        t->rec.retrying = false;
    }
    return st;
}

/* What the master's answer says of job j (NULL: not listed) while this worker waits for its
 * rollback: the wait's message reports that, not a guess at whether the master runs. */
static void master_said(const struct tessera *t, const Tessera__V1__JobInfo *j, char *out,
                        size_t n)
{
    if (!j)
        snprintf(out, n, "the master answers but does not list the job");
    else if (j->state != TESSERA__V1__JOB_STATE__JOB_STATE_RUNNING)
        snprintf(out, n, "the master lists it as %s%s%s", ts_job_state_name(j->state),
                 j->reason[0] ? ": " : "", j->reason);
    else if (j->rolling_back)
        snprintf(out, n, "the master lists it running, its rollback still under way%s%s",
                 j->rollback_note[0] ? ": " : "", j->rollback_note);
    else
        snprintf(out, n, "the master lists it running with %u rollbacks, none after the %u "
                 "this worker followed, and none under way%s%s", j->rollbacks, t->rec.followed,
                 j->rollback_note[0] ? ": " : "", j->rollback_note);
}

/* Waits until the master has rolled the job back past the rollbacks this worker followed;
 * *step: the step it went back to, *rollbacks: the job's rollbacks then. */
static ts_status await_rollback(struct tessera *t, uint64_t *step, uint32_t *rollbacks,
                                struct ts_err *err)
{
    int wait_ms = t->timeout_ms > ROLLBACK_WAIT_MIN_MS ? t->timeout_ms : ROLLBACK_WAIT_MIN_MS;
    int64_t until = ts_now_ms() + wait_ms, said = 0;
    char last[sizeof(err->msg) + 64] = "";   /* what the master said last, for the message */

    for (;;) {
        Tessera__V1__ClusterStatusResponse *cs = NULL;
        const Tessera__V1__JobInfo *j = NULL;
        struct ts_err e = { 0 };
        ts_status st = TS_OK;
        bool done = false;

        if (ts_master_jobs(t->master, ts_master_call_ms(t->master), &cs, &e)) {
            snprintf(last, sizeof(last), "the master did not answer: %s", e.msg);
        } else {
            j = ts_status_job(cs, t->job.id);
            master_said(t, j, last, sizeof(last));
        }
        if (j && j->state == TESSERA__V1__JOB_STATE__JOB_STATE_RUNNING) {
            if (j->lost)
                st = ts_err_set(err, TS_ESTATE, "%s", j->rollback_note);
            else if (j->rollbacks > t->rec.followed && !j->rolling_back) {
                *step = j->rollback_step;
                *rollbacks = j->rollbacks;
                done = true;
            }
        } else if (j) {   /* it ended (abandoned, failed...): no rollback will come */
            st = ts_err_set(err, TS_ESTATE, "job '%s' lost state and will not be rolled back: "
                            "%s", t->job.id, last);
        }
        if (cs)
            protobuf_c_message_free_unpacked(&cs->base, NULL);
        if (st || done)
            return st;
        if (ts_now_ms() > until)
            return ts_err_set(err, TS_ETIMEDOUT, "job '%s' lost state and was not rolled back "
                              "within %d ms; %s", t->job.id, wait_ms, last);
        if (ts_now_ms() - said >= 5000) {
            ts_log(TS_WARN, "sdk", "job '%s': waiting for the master to take it back to its "
                   "last snapshot", t->job.id);
            said = ts_now_ms();
        }
        ts_sleep_ms(MAP_POLL_MS);
    }
}

#if TS_TEST_HOOKS
void sdk_test_hold(const char *hook, const char *what)
{
    const char *file = ts_hook(hook);

    if (!file || !*file || access(file, F_OK) == 0)
        return;
    ts_log(TS_WARN, "sdk", "test hook: %s waits for %s (%s)", what, file, hook);
    while (access(file, F_OK) != 0)
        ts_sleep_ms(20);
}
#endif

/* A pull of every tensor at one step (a rollback's, a rejoin's), for sdk_fail_over to do
 * again. */
struct pull_all_args {
    uint64_t step;
    float *const *params;
};

static ts_status pull_all_again(struct tessera *t, void *ctx, struct ts_err *err)
{
    const struct pull_all_args *a = ctx;

    return sdk_pull_all(t, a->step, a->params, err);
}

ts_status sdk_pull_all_over(struct tessera *t, const char *what, uint64_t n, uint64_t step,
                            float *const *params, struct ts_err *err)
{
    struct pull_all_args a = { step, params };

    return sdk_fail_over(t, what, n, sdk_pull_all(t, step, params, err), pull_all_again, &a,
                         err);
}

ts_status sdk_rollback(struct tessera *t, float *const *params, uint64_t *step,
                       struct ts_err *err)
{
    uint32_t rollbacks = 0;
    ts_status st;

    for (;;) {
        sdk_close_shards(t);
        if ((st = await_rollback(t, step, &rollbacks, err)) ||
            (st = ts_cluster_refresh(t->cl, err)) || (st = reconnect(t, err)))
            return st;
        t->rec.followed = rollbacks;
        if (t->hello.generation > rollbacks)   /* another rollback came since: follow that */
            continue;
        /* A test hook: test_rollback.py has a shard join here. */
        sdk_test_hold("TESSERA_TEST_HOLD_ROLLBACK_PULL", "the pull after the rollback");
        if (!params)
            break;
        /* The map may move while the shards are read: a shard that joined just after the
         * rollback takes partitions from the shards that loaded them, which then answer
         * TS_ESTALE, and one that heads a partition nobody gave it says the job goes back
         * again (TS_EROLLBACK). The first is a failover, the second one more rollback. */
        st = sdk_pull_all_over(t, "pull after rollback", rollbacks, *step, params, err);
        if (st != TS_EROLLBACK)
            break;
        ts_log(TS_WARN, "sdk", "pull after rollback %u: %s; following the next one", rollbacks,
               err->msg);
        memset(err, 0, sizeof(*err));
    }
    if (st)
        return st;
    ts_log(TS_WARN, "sdk", "job '%s' went back to step %" PRIu64 " (rollback %u); training "
           "goes on from there", t->job.id, *step, rollbacks);
    return TS_OK;
}

ts_status sdk_follow_rollback(struct tessera *t, const char *what, uint64_t n,
                              float *const *params, ts_status st, struct ts_err *err)
{
    uint64_t back = 0;

    if (st != TS_EROLLBACK || !sdk_can_fail_over(t))
        return st;
    ts_log(TS_WARN, "sdk", "%s %" PRIu64 ": %s", what, n, err->msg);
    memset(err, 0, sizeof(*err));
    if ((st = sdk_rollback(t, params, &back, err)))
        return st;
    t->rec.resume_step = back;
    return ts_err_set(err, TS_EROLLBACK, "%s %" PRIu64 ": the cluster took job '%s' back to "
                      "step %" PRIu64 " of its last snapshot (a partition lost every copy); %s",
                      what, n, t->job.id, back, params ? "training goes on from there"
                      : "pull every tensor at tessera_resume_step and go on from there");
}
