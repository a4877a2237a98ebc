/* rollback.h - the master takes a job back to its last snapshot when a partition of it lost
 * every copy (docs/replication.md, "Rollback").
 *
 * A shard that heads a partition with no copy left (R = 1 and its shard died, or every member
 * of its chain) reports the job (ReportLost). With a snapshot of the job on the master's
 * branch, one thread of the master, under the snapshot lock (no snapshot runs meanwhile):
 *   0. asks every alive shard whether it can load the snapshot (Shard.RollbackJob, check
 *      true): a snapshot gone from the store or a chunk missing stops here, nothing fenced;
 *   1. fences the job on every alive shard and loads the snapshot into every partition each
 *      holds under the current map (Shard.RollbackJob, open false); the shards refuse the
 *      job's data-plane requests meanwhile, saying it rolls back, and end its waiting pulls;
 *   2. then reopens it on every shard (open true) as the job's next generation;
 *   3. records it in the job table: workers waiting for it (sdk_rollback.c) see rollbacks grow
 *      in ClusterStatus, reconnect, pull the snapshot's values and train on from its step.
 * A shard that dies during 0, 1 or 2 changes the map; the whole is tried again, up to
 * ROLLBACK_ATTEMPTS times, on the new map. Without a snapshot the job is marked lost with a
 * note saying what was lost and how to avoid it, and its workers fail with that note.
 * Ownership: struct rollbacks is embedded in struct master (master.h).
 * Threads: rollback_request from any thread; rollbacker_main is one thread of its own. */
#ifndef TS_MASTER_ROLLBACK_H
#define TS_MASTER_ROLLBACK_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"
#include "util/names.h"

#define ROLLBACK_QUEUE 16
#define ROLLBACK_ATTEMPTS 5

/* One rollback to run: the job, which of its rollbacks it is, the snapshot and its step. */
struct rollback_todo {
    char job[TS_JOB_ID_MAX + 1];
    uint32_t generation;
    char hex[65];
    uint64_t step;
};

struct rollbacks {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct rollback_todo queue[ROLLBACK_QUEUE];   /* oldest first */
    size_t n;
};

struct master;

void rollbacks_init(struct rollbacks *rb);
void rollbacks_fini(struct rollbacks *rb);
/* ReportLost of job by shard, found after `seen` rollbacks: queues the rollback (or marks the
 * job lost when there is no snapshot to go back to); action (n bytes) says which, or why
 * nothing is done (one runs already, or ran since). TS_ENOTFOUND: the job is not running. */
ts_status rollback_request(struct master *m, const char *job, uint32_t shard, uint32_t seen,
                           char *action, size_t n, struct ts_err *err) TS_MUST_CHECK;
/* The thread that runs queued rollbacks until m->stopping. arg: the struct master *. */
void *rollbacker_main(void *arg);
/* Wakes rollbacker_main to see m->stopping. */
void rollbacks_wake(struct rollbacks *rb);

#endif
