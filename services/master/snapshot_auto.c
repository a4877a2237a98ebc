/* snapshot_auto.c - the automatic loop (snapshot.h, snapper_start): a snapshot of each
 * running job every N steps, and the moves of table jobs' rows (docs/embeddings.md, "When a
 * shard joins"): the held snapshot a join or a death asks for, MoveTables on every shard once
 * the map is ready, and the moves kept in the master's state file so that a restarted master
 * makes them. Snapshots themselves are snapshot_take.c's. */
#include "snapshot.h"
#include "snapshot_internal.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/shard.h"
#include "tessera/v1/shard.pb-c.h"
#include "util/hook.h"
#include "util/log.h"
#include "util/names.h"
#include "util/proc.h"

#define JOIN_SNAP_MS 60000      /* a snapshot a join waits for (snapshot_for_join) */
#define MOVE_WAIT_MS 30000      /* a join's move waits this long for the shards on the ring */
#define MOVE_CALL_MS 120000     /* MoveTables: a shard loads its tables' rows */

bool snapper_join_ready(void *ctx, uint64_t epoch)
{
    struct snapper *sn = ctx;
    uint64_t asked;

    if (!sn->thread_started || atomic_load(&sn->stop) || atomic_load(&sn->join_passed) >= epoch)
        return true;
    asked = atomic_load(&sn->join_asked);
    if (asked < epoch && atomic_compare_exchange_strong(&sn->join_asked, &asked, epoch))
        ts_log(TS_INFO, "master", "the shards joining at epoch %" PRIu64 " have their copies; "
               "they go on the ring once each running job with tables has a snapshot taken "
               "now", epoch);
    return false;
}

/* sn->moves changed: copied for the state file's encoder (snapper_table_moves), and the file
 * to be synced once the loop lets mu go (unlock_loop). sn->mu held. */
static void moves_changed(struct snapper *sn)
{
    pthread_mutex_lock(&sn->stat_mu);
    memcpy(sn->kept_moves, sn->moves, sn->nmoves * sizeof(*sn->moves));
    sn->nkept_moves = sn->nmoves;
    pthread_mutex_unlock(&sn->stat_mu);
    sn->moves_changed = true;
}

/* The loop lets mu go; a change of the moves is on disk before their calls begin (the
 * encoder takes stat_mu and the members' and jobs' locks, never mu: synced after it). */
static void unlock_loop(struct snapper *sn)
{
    bool sync = sn->moves_changed;
    struct ts_err err = { 0 };

    sn->moves_changed = false;
    pthread_mutex_unlock(&sn->mu);
    if (sync && sn->state && master_state_sync(sn->state, &err))
        ts_log(TS_WARN, "master", "the tables' moves could not be written to the state "
               "directory (%s): a restart before they end sends their jobs back to a snapshot",
               err.msg);
}

Tessera__V1__TableMove **snapper_table_moves(struct snapper *sn, struct ts_rpc_call *call,
                                             size_t *n)
{
    Tessera__V1__TableMove **out;

    pthread_mutex_lock(&sn->stat_mu);
    out = ts_rpc_alloc(call, (sn->nkept_moves + 1) * sizeof(*out));
    for (*n = 0; *n < sn->nkept_moves; (*n)++) {
        const struct snap_move *mv = &sn->kept_moves[*n];
        Tessera__V1__TableMove *t = ts_rpc_new(call, &tessera__v1__table_move__descriptor);
        t->job = ts_rpc_strdup(call, mv->job);
        t->snapshot_id = ts_rpc_strdup(call, mv->hex);
        t->step = mv->step;
        t->epoch = mv->epoch;
        out[*n] = t;
    }
    pthread_mutex_unlock(&sn->stat_mu);
    return out;
}

void snapper_restore_moves(struct snapper *sn, Tessera__V1__TableMove *const *v, size_t n)
{
    pthread_mutex_lock(&sn->mu);
    for (size_t i = 0; i < n && sn->nmoves < SNAP_MAX_JOBS; i++) {
        struct snap_move *mv = &sn->moves[sn->nmoves];
        if (ts_job_id_check("job", v[i]->job, NULL) ||
            strspn(v[i]->snapshot_id, "0123456789abcdef") != TS_STORE_HEX_LEN ||
            v[i]->snapshot_id[TS_STORE_HEX_LEN]) {
            ts_log(TS_WARN, "master", "state: table move %zu ('%.64s', snapshot '%.64s') is "
                   "not well formed; left out", i, v[i]->job, v[i]->snapshot_id);
            continue;
        }
        if (!sn->store || !sn->every) {   /* what makes the moves: the automatic loop */
            ts_log(TS_WARN, "master", "job %s: the move of its tables from snapshot %.12s, "
                   "which the master was making when it stopped, is not made: this master "
                   "takes no automatic snapshots (--store with --snapshot-every); the shards' "
                   "holds end at their time", v[i]->job, v[i]->snapshot_id);
            continue;
        }
        snprintf(mv->job, sizeof(mv->job), "%s", v[i]->job);
        memcpy(mv->hex, v[i]->snapshot_id, sizeof(mv->hex));
        mv->step = v[i]->step;
        mv->epoch = v[i]->epoch;
        mv->since_ms = ts_now_ms();   /* MOVE_WAIT_MS again from the restart */
        sn->nmoves++;
        ts_log(TS_WARN, "master", "job %s: the move of its tables from snapshot %.12s at step %"
               PRIu64 ", which the master was making when it stopped, is made now", mv->job,
               mv->hex, mv->step);
    }
    moves_changed(sn);
    sn->moves_changed = false;   /* the file holds them */
    pthread_mutex_unlock(&sn->mu);
}

/* A snapshot, taken now, of each running job with tables among ids[0..n), its tables held at
 * the snapshot's step (no push of a later step taken) until the move (moves_run) places them
 * on the map from it, once that map is past `epoch` with no shard joining. why: for the
 * message and the log ("before the shards joining at epoch E take rows"). A job's move
 * replaces one of it still waiting (the newer snapshot is of the same held step or later). A
 * snapshot that fails (the job lost state or ended, its steps stopped) is logged, its hold
 * ended. sn->mu held. */
static void hold_and_snapshot(struct snapper *sn, uint64_t epoch, const char *why,
                              char (*ids)[TS_JOB_ID_MAX + 1], const bool *tables, size_t n)
{
    for (size_t k = 0; k < n && !atomic_load(&sn->stop); k++) {
        struct taken t = { .hex = "" };
        struct ts_err err = { 0 };
        struct snap_move *mv = NULL;
        ts_status st;

        if (!tables[k])
            continue;
        if ((st = snap_take_while_stale(sn, ids[k], why, "", JOIN_SNAP_MS, true, &t, &err))) {
            ts_log(TS_WARN, "master", "job %s: no snapshot %s (%s); its rows stay where they "
                   "are, and a map that moved them sends it back to its last snapshot",
                   ids[k], why, err.msg);
            continue;
        }
        ts_log(TS_INFO, "master", "job %s: snapshot %.12s of step %" PRIu64 " taken %s, its "
               "tables held there: they move to the map from it, no step redone", ids[k],
               t.hex, t.step, why);
        for (size_t i = 0; i < sn->nmoves && !mv; i++)
            if (strcmp(sn->moves[i].job, ids[k]) == 0)
                mv = &sn->moves[i];
        if (!mv && sn->nmoves == SNAP_MAX_JOBS)   /* unheld by its shards in time */
            continue;
        if (!mv)
            mv = &sn->moves[sn->nmoves++];
        snprintf(mv->job, sizeof(mv->job), "%s", ids[k]);
        memcpy(mv->hex, t.hex, sizeof(mv->hex));
        mv->step = t.step;
        mv->epoch = epoch > mv->epoch ? epoch : mv->epoch;
        mv->since_ms = ts_now_ms();
        moves_changed(sn);
    }
}

/* What a join waits for (snapper_join_ready): the held snapshots above, of the jobs with
 * tables, whose moves come once the joining shards are on the ring; a job whose snapshot
 * failed goes back to its last one when they are. Then the join may go on. sn->mu held. */
static void snapshot_for_join(struct snapper *sn, uint64_t epoch,
                              char (*ids)[TS_JOB_ID_MAX + 1], const bool *tables, size_t n)
{
    char why[96];

    snprintf(why, sizeof(why), "before the shards joining at epoch %" PRIu64 " take rows",
             epoch);
    hold_and_snapshot(sn, epoch, why, ids, tables, n);
    atomic_store(&sn->join_passed, epoch);
}

/* Whether a shard on the ring at the loop's last pass has left it since (it died, or was
 * declared dead); remembers the ring of now. sn->mu held. */
static bool a_shard_left(struct snapper *sn)
{
    struct ts_members_view v;
    struct ts_err err = { 0 };
    uint32_t now[SNAP_MAX_SHARDS];
    size_t n = 0;
    bool left = false;

    if (ts_members_view(sn->members, true, &v, &err))
        return false;
    for (size_t i = 0; i < v.nshards && n < SNAP_MAX_SHARDS; i++)
        if (!v.shards[i].joining)
            now[n++] = v.shards[i].id;
    ts_members_view_free(&v);
    for (size_t k = 0; k < sn->nring_seen && !left; k++) {
        bool there = false;
        for (size_t i = 0; i < n && !there; i++)
            there = now[i] == sn->ring_seen[k];
        left = !there;
    }
    memcpy(sn->ring_seen, now, n * sizeof(*now));
    sn->nring_seen = n;
    return left;
}

/* After a death on a cluster with copies: the copies of the dead shard's rows took over, and
 * those rows, and the ones it followed, have one copy left (docs/embeddings.md, "When a shard
 * goes"). A held snapshot of each job with tables, and its move on the map as it is, places
 * every row on two shards again. sn->mu held. */
static void recopy_after_death(struct snapper *sn, char (*ids)[TS_JOB_ID_MAX + 1],
                               const bool *tables, size_t n)
{
    hold_and_snapshot(sn, 0, "to copy the rows anew after a shard died", ids, tables, n);
}

/* $TESSERA_TEST_MASTER_DIE_MOVING=N (a build with test hooks only: util/hook.h): the master
 * SIGKILLs itself once N shards moved a job's tables, the others' still held: a master that
 * restarts in the middle of a move (tests/integration/test_ctr.py, Joins).
 * $TESSERA_TEST_MASTER_MOVE_PAUSE=1: once the first shard moved them, the master's first move
 * waits (up to MOVE_WAIT_MS) for the map to pass its epoch: a shard that registers in the
 * middle of a move (Joins.test_a_shard_registers_in_the_move). */
#if TS_TEST_HOOKS
static void hook_moved(struct snapper *sn, uint32_t moved, uint64_t epoch)
{
    const char *v = ts_hook("TESSERA_TEST_MASTER_DIE_MOVING");
    static bool paused;   /* sn->mu held */

    if (v && strtol(v, NULL, 10) == (long)moved) {
        ts_log(TS_WARN, "master", "TESSERA_TEST_MASTER_DIE_MOVING: killed after %u shards "
               "moved their tables", moved);
        raise(SIGKILL);
    }
    if (moved == 1 && !paused && (v = ts_hook("TESSERA_TEST_MASTER_MOVE_PAUSE")) &&
        *v == '1') {
        paused = true;
        ts_log(TS_WARN, "master", "TESSERA_TEST_MASTER_MOVE_PAUSE: one shard moved the "
               "tables; the move waits for the map to pass epoch %" PRIu64, epoch);
        for (int64_t until = ts_now_ms() + MOVE_WAIT_MS;
             ts_members_epoch(sn->members) <= epoch && ts_now_ms() < until;)
            ts_sleep_ms(20);
    }
}
#else
static void hook_moved(struct snapper *sn, uint32_t moved, uint64_t epoch)
{
    (void)sn;
    (void)moved;
    (void)epoch;
}
#endif

/* Whether the map of now has the ring of v (the same shards on it, none registered again
 * since), and its epoch then (*epoch). */
static bool same_ring_now(struct snapper *sn, const struct ts_members_view *v, uint64_t *epoch)
{
    struct ts_members_view now;
    struct ts_err err = { 0 };
    size_t i = 0, j = 0;
    bool same;

    if (ts_members_view(sn->members, true, &now, &err))
        return false;
    for (;; i++, j++) {
        while (i < v->nshards && v->shards[i].joining)
            i++;
        while (j < now.nshards && now.shards[j].joining)
            j++;
        if (i == v->nshards || j == now.nshards ||
            v->shards[i].id != now.shards[j].id ||
            v->shards[i].registered_epoch != now.shards[j].registered_epoch)
            break;
    }
    same = i == v->nshards && j == now.nshards;
    *epoch = now.epoch;
    ts_members_view_free(&now);
    return same;
}

/* What a move did: the shards that moved the job's tables, the most tables one moved, the
 * rows in all, the longest hold of their pushes, and the map they went on. */
struct move_result {
    uint32_t moved, tables, held_ms;
    uint64_t rows, epoch;
};

/* MoveTables(mv) on every alive shard of view v on its ring (those without the job skipped;
 * a joining shard holds none of its rows and was not held with them), into *res. A map that moves on in the middle with the same ring (a shard
 * registered, joining) does not stop it: the shards left move on the newer map, the same
 * placement (once such a move was given up half made: the holds ran their 90 s, then the
 * job went back to a snapshot). */
static ts_status move_on_shards(struct snapper *sn, const struct snap_move *mv,
                                const struct ts_members_view *v, struct move_result *res,
                                struct ts_err *err)
{
    Tessera__V1__MoveTablesRequest req = TESSERA__V1__MOVE_TABLES_REQUEST__INIT;
    ts_status st = TS_OK;
    uint64_t epoch;

    req.job = (char *)mv->job;
    req.snapshot_id = (char *)mv->hex;
    req.step = mv->step;
    req.map_epoch = v->epoch;
    shard_channels_reserve(&sn->chan, v->nshards);
    for (size_t i = 0; !st && i < v->nshards; i++) {
        Tessera__V1__MoveTablesResponse *r = NULL;
        struct ts_rpc_channel *ch;
        struct ts_err e = { 0 };

        if (v->shards[i].joining)
            continue;
        if ((st = shard_channels_get(&sn->chan, v->shards[i].addr, &ch, err)))
            break;
        st = ts_shard_move_tables(ch, &req, MOVE_CALL_MS, &r, &e);
        if (st == TS_ESTALE && res->moved && same_ring_now(sn, v, &epoch) &&
            epoch > req.map_epoch) {
            ts_log(TS_INFO, "master", "job %s: the map moved on to epoch %" PRIu64 " in the "
                   "middle of the move, the same shards on its ring; the move goes on on it",
                   mv->job, epoch);
            req.map_epoch = epoch;
            st = TS_OK;
            i--;   /* this shard again */
        } else if (st == TS_ENOTFOUND) {   /* the shard does not hold the job */
            st = TS_OK;
        } else if (st) {
            ts_err_set(err, st, "shard %u: %s", v->shards[i].id, e.msg);
        } else {
            hook_moved(sn, ++res->moved, req.map_epoch);
            res->tables = r->tables > res->tables ? r->tables : res->tables;
            res->rows += r->rows;
            res->held_ms = r->held_ms > res->held_ms ? r->held_ms : res->held_ms;
        }
        if (r)
            protobuf_c_message_free_unpacked(&r->base, NULL);
    }
    res->epoch = req.map_epoch;
    return st;
}

/* $TESSERA_TEST_MASTER_MOVE_AFTER_JOIN=recopy or =join (a build with test hooks only): the
 * first move of that kind that could run (ready) waits, up to MOVE_WAIT_MS, until a shard is
 * joining, the orders that once stalled a move 30 s behind a join that waited for it
 * (tests/integration/test_ctr.py: a re-copy's, test_a_respawned_shard_joins; a join's,
 * Joins.test_a_second_shard_joins_before_the_move). A move of the other kind goes on: a
 * join's move held for a second join that never comes was such a stall of the hook's own
 * (the respawned shard's join had come before the re-copy's move, whose snapshot it took
 * over). Whether it holds the move back now. sn->mu held. */
static bool hook_move_waits(const struct snap_move *mv, bool ready, bool joining)
{
    const char *v = ts_hook("TESSERA_TEST_MASTER_MOVE_AFTER_JOIN");
    static int state;   /* 0: not yet, 1: waiting, 2: done */

    if (!v || strcmp(v, mv->epoch ? "join" : "recopy") || state == 2 || (!state && !ready))
        return false;
    if (!state) {
        state = 1;
        ts_log(TS_WARN, "master", "TESSERA_TEST_MASTER_MOVE_AFTER_JOIN: job %s: the %s move "
               "waits for a shard joining", mv->job, mv->epoch ? "join's" : "re-copy's");
    }
    if (joining) {
        state = 2;
        ts_log(TS_WARN, "master", "TESSERA_TEST_MASTER_MOVE_AFTER_JOIN: job %s: a shard "
               "joins; the move goes on when it may", mv->job);
    }
    return state == 1;
}

/* The moves of held tables (hold_and_snapshot): every shard places the job's tables from the
 * held step's snapshot on the map of now, past mv->epoch. A join's move (mv->epoch: the
 * joining epoch) waits for a map past it with no shard joining: the joined shards on the
 * ring. A re-copy's (mv->epoch 0) goes on the ring as it is, a shard joining or not: a
 * joining shard is on no ring yet, and its join waits for this loop (once a re-copy waited
 * for a join that waited for it, 30 s, and the job went back to a snapshot); a join asked
 * while a join's move waits takes its snapshot over the move's (auto_loop). A map that
 * moved again before any shard moved them (ABORTED) is tried again on the next pass; one
 * that moved in the middle with the same ring, on the map of now (move_on_shards); a move
 * that fails otherwise (a shard that moved them takes pushes again: the move cannot be done
 * over), or waits past MOVE_WAIT_MS, is given up: the shards' holds end at their time, and a
 * job whose rows the map moved goes back to a snapshot, the join's (services/shard/tables.c).
 * sn->mu held. */
static void moves_run(struct snapper *sn)
{
    struct ts_members_view v;
    struct ts_err err = { 0 };
    bool joining = false;

    if (ts_members_view(sn->members, true, &v, &err))
        return;
    for (size_t i = 0; i < v.nshards; i++)
        joining |= v.shards[i].joining;
    for (size_t k = 0; k < sn->nmoves; ) {
        struct snap_move *mv = &sn->moves[k];
        struct move_result res = { 0 };
        int64_t t0 = ts_now_ms();
        ts_status st = TS_ESTALE;
        bool ready = (!joining || !mv->epoch) && v.epoch > mv->epoch;

        if (!hook_move_waits(mv, ready, joining) && ready) {
            st = move_on_shards(sn, mv, &v, &res, &err);
            if (st == TS_ESTALE && res.moved)
                st = TS_EUNAVAIL;   /* not to be tried again (above) */
            if (!st)
                snap_count_move("moved", res.held_ms);
            else if (st != TS_ESTALE)
                snap_count_move("failed", 0);
            if (!st)
                ts_log(TS_WARN, "master", "job %s: %u tables moved to the shards of epoch %"
                       PRIu64 " from snapshot %.12s at step %" PRIu64 " in %" PRId64 " ms (%"
                       PRIu64 " rows; their pushes held %u ms in all); no step redone",
                       mv->job, res.tables, res.epoch, mv->hex, mv->step, ts_now_ms() - t0,
                       res.rows, res.held_ms);
            else if (st != TS_ESTALE)
                ts_log(TS_WARN, "master", "job %s: the move of its tables failed (%s); "
                       "their holds end at their time, and the job then goes back to a "
                       "snapshot, unless a later move (the rows copied anew after a death) "
                       "places them first", mv->job, err.msg);
        }
        if (st == TS_ESTALE && ts_now_ms() - mv->since_ms < MOVE_WAIT_MS) {
            k++;
            continue;
        }
        if (st == TS_ESTALE) {
            snap_count_move("gave_up", 0);
            ts_log(TS_WARN, "master", "job %s: %s within %d s of its snapshot; its tables "
                   "are not moved (their holds end at their time, and a map that moved their "
                   "rows sends the job back to a snapshot)", mv->job, mv->epoch ?
                   "no map with the joining shards on the ring came" :
                   "the map never stayed still for the move", MOVE_WAIT_MS / 1000);
        }
        sn->moves[k] = sn->moves[--sn->nmoves];
        moves_changed(sn);
        ts_err_clear(&err);
    }
    ts_members_view_free(&v);
}

/* The running jobs that keep their parameters on the shards (not reduce), on the alive
 * shards (at most max), the newest step of each, and whether it has tables; returns how
 * many. sn->mu held (its channels). */
static size_t running_jobs(struct snapper *sn, char (*ids)[TS_JOB_ID_MAX + 1], uint64_t *maxv,
                           bool *tables, size_t max)
{
    struct ts_members_view v;
    struct ts_err err = { 0 };
    size_t n = 0;

    if (ts_members_view(sn->members, true, &v, &err))
        return 0;
    shard_channels_reserve(&sn->chan, v.nshards);
    for (size_t i = 0; i < v.nshards; i++) {
        Tessera__V1__ShardStatusRequest req = TESSERA__V1__SHARD_STATUS_REQUEST__INIT;
        Tessera__V1__ShardStatusResponse *r = NULL;
        struct ts_rpc_channel *ch;

        if (shard_channels_get(&sn->chan, v.shards[i].addr, &ch, &err) ||
            ts_shard_status(ch, &req, TS_SHARD_ONCE, SNAP_CALL_MS, &r, &err))
            continue;
        for (size_t j = 0; j < r->n_jobs; j++) {
            const Tessera__V1__JobStatus *js = r->jobs[j];
            size_t k = 0;
            if (js->mode == TESSERA__V1__TRAIN_MODE__TRAIN_MODE_REDUCE || !js->partitions ||
                (sn->running && !jobs_running(sn->running, js->id)))
                continue;
            while (k < n && strcmp(ids[k], js->id))
                k++;
            if (k == n && n < max) {
                snprintf(ids[n], TS_JOB_ID_MAX + 1, "%s", js->id);
                tables[n] = false;
                maxv[n++] = 0;
            }
            if (k < n && js->max_version > maxv[k])
                maxv[k] = js->max_version;
            if (k < n)
                tables[k] |= js->n_table_status > 0;
        }
        protobuf_c_message_free_unpacked(&r->base, NULL);
    }
    ts_members_view_free(&v);
    return n;
}

/* The automatic loop: each running bsp, ssp or asp job in turn, at the next multiple of
 * `every` it has not passed (the current step itself when it is a multiple not written yet:
 * an idle job is captured at once). */
static void *auto_loop(void *arg)
{
    struct snapper *sn = arg;

    while (!atomic_load(&sn->stop)) {
        char ids[SNAP_MAX_JOBS][TS_JOB_ID_MAX + 1];
        bool tables[SNAP_MAX_JOBS];
        uint64_t maxvs[SNAP_MAX_JOBS], maxv, step, done = 0, join;
        struct taken t;
        struct ts_err err = { 0 };
        struct snap_job *r;
        size_t n, k;
        ts_status st;

        ts_sleep_ms(20);
        pthread_mutex_lock(&sn->mu);
        if (sn->nmoves) {   /* held tables: no other snapshot of their steps comes first */
            /* but a join's: shards that join while a move waits on a joining shard would
             * wait for this loop as the move waits for them (the join's snapshot replaces
             * the job's move, held at the same step, and it waits for their map) */
            if ((join = atomic_load(&sn->join_asked)) > atomic_load(&sn->join_passed)) {
                n = running_jobs(sn, ids, maxvs, tables, SNAP_MAX_JOBS);
                snapshot_for_join(sn, join, ids, tables, n);
            }
            moves_run(sn);
            unlock_loop(sn);
            ts_sleep_ms(sn->nmoves ? 50 : 0);
            continue;
        }
        n = running_jobs(sn, ids, maxvs, tables, SNAP_MAX_JOBS);
        if ((join = atomic_load(&sn->join_asked)) > atomic_load(&sn->join_passed)) {
            snapshot_for_join(sn, join, ids, tables, n);
            unlock_loop(sn);
            continue;
        }
        if (a_shard_left(sn) && ts_members_replicas(sn->members) >= 2) {
            recopy_after_death(sn, ids, tables, n);
            unlock_loop(sn);
            continue;
        }
        if (!n) {
            pthread_mutex_unlock(&sn->mu);
            ts_sleep_ms(50);
            continue;
        }
        k = sn->turn++ % n;
        maxv = maxvs[k];
        pthread_mutex_lock(&sn->stat_mu);
        if ((r = snap_job_rec(sn, ids[k], false)))
            done = r->step;
        pthread_mutex_unlock(&sn->stat_mu);
        step = maxv % sn->every == 0 && maxv > done ? maxv : (maxv / sn->every + 1) * sn->every;
        st = snap_take(sn, &(struct take_req){ ids[k], "", "", 3600000, true, step, false }, &t,
                       &err);
        /* Training passed the step while another snapshot was written, it is not a sync of
         * a tensor with a sync period, the job lost state, or the map moved: a later one. */
        if (st == TS_ESTATE || st == TS_ESTALE)
            ts_log(TS_INFO, "master", "automatic snapshot: job %s step %" PRIu64 " skipped: "
                   "%s", ids[k], step, err.msg);
        pthread_mutex_unlock(&sn->mu);
        pthread_mutex_lock(&sn->stat_mu);
        if (st && st != TS_ENOTFOUND && st != TS_ETIMEDOUT && st != TS_ESTATE &&
            st != TS_ESTALE && st != TS_ECANCELLED) {
            if (strcmp(sn->error, err.msg))
                ts_log(TS_WARN, "master", "automatic snapshot: %s", err.msg);
            snprintf(sn->error, sizeof(sn->error), "%s", err.msg);
        } else if (!st) {
            sn->error[0] = '\0';
        }
        pthread_mutex_unlock(&sn->stat_mu);
        if (st)
            ts_sleep_ms(st == TS_ENOTFOUND || st == TS_ESTATE ? 50
                        : st == TS_ESTALE ? SNAP_STALE_RETRY_MS : 300 / n);
    }
    return NULL;
}

void snapper_start(struct snapper *sn, struct master_state *state)
{
    sn->state = state;
    if (sn->store && sn->every && !sn->thread_started &&
        pthread_create(&sn->thread, NULL, auto_loop, sn) == 0)
        sn->thread_started = true;
}
