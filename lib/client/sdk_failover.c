/* sdk_failover.c - a step that lost a shard is sent again to the shards of the new map
 * (docs/replication.md, "Failover").
 *
 * A broken data-plane connection in the middle of a step means a shard died. When the job's
 * partitions have replicas, the master drops the dead shard from the map once its lease
 * expires, and each partition it headed is headed by its follower, which holds every version
 * a worker could have seen. This worker then closes its connections, connects to the shards
 * of the new map, and sends the whole step again flagged as a retry: a shard that already
 * counted a push of it acknowledges the duplicate without adding it, so every step is applied
 * exactly once. */
#include "client/sdk_internal.h"

#include <inttypes.h>
#include <string.h>

#include "util/log.h"
#include "util/proc.h"

#define MAP_WAIT_MIN_MS 30000   /* a lease or two, and the heartbeat that tells the master */
#define MAP_POLL_MS 100

bool sdk_can_fail_over(struct tessera *t)
{
    return !t->local && t->cl && ts_cluster_replicas(t->cl) > 1;
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
            return ts_err_set(err, TS_EUNAVAIL, "a shard connection broke and the shard map "
                              "did not change within %d ms (epoch %" PRIu64 "%s%s)", wait_ms,
                              old, st ? ": " : "", st ? e.msg : "");
        ts_sleep_ms(MAP_POLL_MS);
    }
}

ts_status sdk_failover(struct tessera *t, struct ts_err *err)
{
    uint64_t old = ts_cluster_epoch(t->cl);
    ts_status st;

    for (size_t s = 0; s < t->nshards; s++)
        ts_tp_close(t->shards[s].conn);
    t->nshards = 0;
    t->hello_done = false;
    if ((st = await_map(t, old, err)) ||
        (st = sdk_connect_shards(t, t->want_transport[0] ? t->want_transport : NULL,
                                 t->delay_ms, err)) ||
        (st = sdk_hello(t, err)))
        return st;
    for (int i = 0; i < t->ntensors; i++) {
        struct sdk_tensor *x = t->tensors[i];
        for (uint32_t p = 0; p < x->nparts; p++) {
            uint32_t id = 0;
            if ((st = ts_cluster_locate(t->cl, x->name, p, &id, err)) ||
                (st = sdk_slot_of(t, id, &x->owner[p], err)))
                return st;
        }
        if ((st = sdk_region_reconnect(t, x, i, err)))
            return st;
    }
    t->failovers++;
    ts_log(TS_WARN, "sdk", "failed over: shard map epoch %" PRIu64 " -> %" PRIu64 ", %zu "
           "shards; the step is sent again", old, ts_cluster_epoch(t->cl), t->nshards);
    return TS_OK;
}
