/* follow.c - the shard following a new shard map (shard.h, shard_follow_map). */
#include <pthread.h>

#include "shard.h"
#include "testhooks.h"
#include "util/log.h"

/* Shards on the cached map's ring (for a test hook). */
static size_t ring_size(struct ts_cluster *cl)
{
    uint32_t ids[1024];

    return ts_cluster_shard_ids(cl, ids, sizeof(ids) / sizeof(ids[0]));
}

void shard_follow_map(struct shard *s)
{
    struct ts_err err = { 0 };
    size_t before = 0;

    if (!s->cluster || !s->membership)
        return;
    pthread_mutex_lock(&s->remap_mu);   /* the heartbeat thread and the data plane */
    if (TS_TEST_HOOKS)
        before = ring_size(s->cluster);
    if (ts_cluster_refresh(s->cluster, &err))
        ts_log(TS_WARN, "shard", "fetching the shard map: %s", err.msg);
    else {
        if (TS_TEST_HOOKS)
            hook_ring_shrank(before, ring_size(s->cluster));
        shard_params_rechain(&s->params, s->cluster, ts_membership_id(s->membership));
        dataplane_remapped(&s->dp, ts_cluster_epoch(s->cluster));
    }
    pthread_mutex_unlock(&s->remap_mu);
}

