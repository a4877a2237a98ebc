/* shard.h - what the shard's main.c and rpc.c share. */
#ifndef TS_SHARD_SHARD_H
#define TS_SHARD_SHARD_H

#include <stdint.h>

#include "cluster/cluster.h"
#include "dataplane.h"
#include "repair.h"
#include "params.h"
#include "rpc/rpc.h"

struct shard {
    char addr[256];                 /* advertised gRPC address */
    /* This process start's id (RegisterShardRequest.instance), made before the server starts:
     * ShardStatus reports it from the first call, so the master can check that this process
     * answers at addr before it takes the address from another registration. */
    char instance[40];
    const char *master_addr;
    struct ts_master *master;
    struct ts_membership *membership;
    struct ts_cluster *cluster;     /* the shard map, to know which partitions are ours */
    struct shard_params params;
    const char *store_dir;          /* --store, or NULL */
    struct dataplane dp;
    pthread_mutex_t remap_mu;       /* one map refresh and rechain at a time */
    struct repair repair;           /* new chain members brought up to date (repair.h) */
    int64_t started_ms;
};

/* Fetches the shard map and follows its chains (docs/replication.md, "Failover"): what the
 * heartbeat does when the epoch moves, the data plane when a request names a newer map, and
 * WriteSnapshot when the master asks under one. Under remap_mu; params.rechained is the
 * epoch followed. No-op without a master. */
void shard_follow_map(struct shard *s);

/* Registers the shard's metrics (metrics.c), read from s at each scrape. */
void shard_metrics_init(struct shard *s);

/* tessera.v1.Shard; ctx must be set to a struct shard * before ts_rpc_server_add. */
extern struct ts_rpc_service ts_shard_service;

#endif
