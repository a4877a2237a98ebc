/* repair.h - a head brings a shard that joined its chain up to date at once
 * (docs/replication.md, "Failover"), and the master hears of partitions that lost every copy
 * ("Rollback").
 *
 * When the map drops a shard, each chain it was in gains the next shard on the ring at its
 * tail (shard_params_rechain flags the head's partition). A running job would send that shard
 * its image with the next step anyway; an idle one (kept with --keep) would never. A thread
 * sends the flagged partitions' images, publishes what the chain then holds, and tries again
 * later where the new member cannot be reached yet. The same thread tells joining shards of
 * the jobs they do not know (their tensors; "Joining"), frees the partitions whose chains
 * left this shard once no one uses them, drops the snapshots armed that nobody asks for any
 * more (shard_params_expire_arms), so that their jobs can be released, and releases the jobs
 * the master holds nothing of (shard_params_reclaim_orphans).
 * Ownership: the caller embeds struct repair; repair_stop joins the thread.
 * Threads: one of its own. */
#ifndef TS_SHARD_REPAIR_H
#define TS_SHARD_REPAIR_H

#include <pthread.h>
#include <stdatomic.h>

#include "dataplane.h"
#include "params.h"

struct repair {
    struct shard_params *sp;        /* borrowed */
    struct dataplane *dp;           /* borrowed: its cluster handle and stop flag */
    pthread_t thread;
    atomic_bool stop;
    bool started;
};

void repair_start(struct repair *r, struct shard_params *sp, struct dataplane *dp);
void repair_stop(struct repair *r);

#endif
