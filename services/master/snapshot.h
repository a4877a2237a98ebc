/* snapshot.h - the master's side of coordinated snapshots (docs/snapshots.md).
 *
 * A snapshot of a job is taken at one step for every partition on every shard: the master
 * arms a capture at step S on each shard holding the job (each partition copies its values
 * and optimizer state when it reaches S, so training never stops), asks each to write its
 * copies to the store, then validates the union as a manifest (every partition of every
 * tensor exactly once), writes it, and moves the branch with a compare-and-swap. Chunks are
 * durable before the manifest, the manifest before the ref: a crash anywhere leaves the
 * previous snapshot as the branch's tip and at worst unreferenced chunks for gc.
 * One snapshot or gc runs at a time (the snapshot lock).
 * Ownership: snapper_open fills a caller-owned struct; snapper_close frees what it holds.
 * Threads: every function may be called from any thread. */
#ifndef TS_MASTER_SNAPSHOT_H
#define TS_MASTER_SNAPSHOT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "channels.h"
#include "datamap.h"
#include "jobs.h"
#include "members.h"
#include "rpc/rpc.h"
#include "snapshot/snapshot.h"
#include "state.h"
#include "tessera/v1/master.pb-c.h"
#include "tessera/v1/state.pb-c.h"
#include "util/names.h"

#define SNAP_MAX_SHARDS 256
#define SNAP_MAX_JOBS 64      /* jobs whose newest snapshot the master remembers */

/* A job's snapshots on the branch: the newest (hex, step), and the newest step written. */
struct snap_job {
    char id[TS_JOB_ID_MAX + 1];
    char hex[TS_STORE_HEX_LEN + 1];
    uint64_t step;
};

struct snapper {
    struct ts_members *members;
    struct datamap *data;               /* borrowed: manifests record the job's map */
    struct ts_store *store;
    char dir[1024];
    uint32_t every;                     /* automatic snapshots every N steps (0: off) */
    pthread_mutex_t mu;                 /* the snapshot lock; guards branch and tip */
    char branch[TS_STORE_REF_MAX + 1];  /* "heads/..." */
    uint8_t tip[TS_STORE_ID_LEN];       /* the branch's value as we last set or read it */
    bool has_tip;
    struct snap_job jobs[SNAP_MAX_JOBS];   /* by job, under stat_mu (the oldest replaced) */
    size_t njobs, next_slot;
    size_t turn;                        /* the automatic loop's round robin over jobs */
    atomic_int requested;               /* CreateSnapshot calls waiting for the lock */
    atomic_int rollbacks;               /* rollbacks waiting for the lock (master/rollback.c) */
    /* Joins (snapper_join_ready): the newest joining epoch whose join waits for snapshots of
     * the jobs with tables, and the newest whose snapshots were taken (or given up). */
    _Atomic uint64_t join_asked, join_passed;
    /* A join's moves (under mu): a job with tables whose snapshot for the join was taken with
     * its tables held at its step; once the joining shards are on the ring, the automatic loop
     * has every shard place the job's tables on the new map from that snapshot, no step
     * redone (docs/embeddings.md, "When a shard joins"). */
    struct snap_move {
        char job[TS_JOB_ID_MAX + 1];
        char hex[TS_STORE_HEX_LEN + 1];
        uint64_t step, epoch;          /* the held step; the joining epoch */
        int64_t since_ms;              /* when the snapshot was taken (monotonic) */
    } moves[SNAP_MAX_JOBS];
    size_t nmoves;
    /* The moves as the master's state file keeps them (under stat_mu: its saver must not wait
     * for mu, which a move's calls hold for up to minutes), and whether they changed since the
     * file was last synced (under mu); state: that file's directory (borrowed; NULL: none). */
    struct snap_move kept_moves[SNAP_MAX_JOBS];
    size_t nkept_moves;
    bool moves_changed;
    struct master_state *state;
    /* The shards on the ring at the loop's last pass (under mu): one gone since died, and on a
     * cluster with copies the rows it headed or followed keep one copy; a move on the map as
     * it is (recopy_after_death) gives them two again. */
    uint32_t ring_seen[SNAP_MAX_SHARDS];
    size_t nring_seen;
    pthread_mutex_t stat_mu;            /* guards what status reports */
    char last_hex[TS_STORE_HEX_LEN + 1];
    uint64_t last_step;
    int64_t last_unix_ms;
    char error[512];
    struct shard_channels chan;         /* used under mu */
    struct jobs *running;               /* borrowed (may be NULL): which jobs run */
    pthread_t thread;
    bool thread_started;
    atomic_bool stop;
};

/* Opens the store in dir and settles the branch: --branch, else the restored ref's branch
 * when restore names a branch tip, else a new branch for a restore ("from-<id>") or for a
 * fresh run on a store whose HEAD branch already has snapshots ("run-<time>"); HEAD is moved
 * to it. every > 0 sets up the automatic loop (snapper_start), which snapshots every running
 * job that keeps its parameters on the shards (bsp, ssp, asp; not reduce) at the multiples of
 * every, one job after another (jobs, borrowed, says which jobs run). resume (a restarted
 * master's, from its state; NULL or "": none) is the branch to go on committing to, whatever
 * branch and restore say (restore still gives the data map of the restored snapshot). */
ts_status snapper_open(struct snapper *sn, struct ts_members *members, struct datamap *data,
                       struct jobs *jobs, const char *dir, const char *restore,
                       const char *branch, const char *resume, uint32_t every,
                       struct ts_err *err) TS_MUST_CHECK;
/* For the master's state file (state.h): the branch ("" without a store) and each job's
 * newest snapshot, in call's arena; and back, on a restart. */
const char *snapper_branch(struct snapper *sn, struct ts_rpc_call *call);
Tessera__V1__JobSnapshot **snapper_job_snapshots(struct snapper *sn, struct ts_rpc_call *call,
                                                 size_t *n);
void snapper_restore_jobs(struct snapper *sn, Tessera__V1__JobSnapshot *const *v, size_t n);
/* The same for the moves of table jobs' rows that wait for their shards (snapshot_auto.c):
 * a master restarted in the middle of one makes it (its shards still hold the tables; one
 * that moved them already says so), where a forgotten one would send the job back to a
 * snapshot once the holds end. Entries that are not well formed are left out, logged. */
Tessera__V1__TableMove **snapper_table_moves(struct snapper *sn, struct ts_rpc_call *call,
                                             size_t *n);
void snapper_restore_moves(struct snapper *sn, Tessera__V1__TableMove *const *v, size_t n);
/* Starts the automatic loop's thread (snapshot_auto.c) when snapper_open had a store and
 * every > 0; nothing otherwise. Once, after snapper_open. state: the master's state
 * directory, where a change of the moves above is synced before their calls (borrowed; it
 * outlives the snapper's loop). */
void snapper_start(struct snapper *sn, struct master_state *state);
/* Ends the automatic loop and cancels a snapshot in progress (it fails; nothing is lost). */
void snapper_stop(struct snapper *sn);
void snapper_close(struct snapper *sn);

/* The members' join_ready (members.h; ctx: the snapper): whether the shards joining under
 * epoch may go on the ring. That re-places the rows of every job with tables
 * (docs/embeddings.md, "When a shard joins"); so where the automatic loop runs (--store with
 * --snapshot-every) the join first waits for it to take a snapshot of each of them at once
 * with the job's tables held at its step, and once the joining shards are on the ring the
 * loop has every shard load the tables on the new map from it: no step is redone. Without
 * such a snapshot (no loop, or it failed) the job goes back to its last one. True at once
 * without the loop, and once those snapshots are written or failed. Reads and sets atomics
 * only. */
bool snapper_join_ready(void *ctx, uint64_t epoch);
/* Takes a snapshot of job ("": the only one) now, within timeout_ms; message and tag may be
 * "". Fills out (arena of call) and *written. */
ts_status snapper_create(struct snapper *sn, const char *job, const char *message,
                         const char *tag, int timeout_ms, char hex[TS_STORE_HEX_LEN + 1],
                         uint64_t *step, uint64_t *written, struct ts_err *err) TS_MUST_CHECK;
/* Removes chunks no ref reaches, and stale tmp files, under the snapshot lock. */
ts_status snapper_gc(struct snapper *sn, unsigned tmp_grace_s, struct ts_store_stats *stats,
                     uint64_t *live, struct ts_err *err) TS_MUST_CHECK;
/* The newest snapshot of job on the branch this master writes (or restored from): its hex id
 * and step; false if there is none (no --store, or no snapshot of that job). */
bool snapper_last_of(struct snapper *sn, const char *job, char hex[TS_STORE_HEX_LEN + 1],
                     uint64_t *step);
/* What ClusterStatus reports (strings in call's arena). */
void snapper_status(struct snapper *sn, struct ts_rpc_call *call,
                    Tessera__V1__ClusterStatusResponse *resp);

#endif
