/* shard.h - calling a shard: the Shard service (proto/tessera/v1/shard.proto) from its
 * callers' side, beside the master client of cluster.h.
 *
 * Why: the master (its snapshots, releases, rollbacks, status page and its probe of a
 * registering shard), the CLI, the SDK and the shards themselves call shards; each RPC's path
 * and reply type are spelled here once, and each call is typed, so a request of the wrong
 * kind does not compile. A call goes either on a channel the caller holds (ts_shard_*: the
 * master keeps one per shard, lib/rpc) or to a shard of the cached map by id, refreshing the
 * map on ABORTED (ts_cluster_*, through ts_cluster_call).
 * How a call on a channel is tried: TS_SHARD_ONCE, one attempt, UNAVAILABLE at once (callers
 * that go on without that shard or retry in their own loop: the master's threads);
 * TS_SHARD_RETRY, UNAVAILABLE retried within the deadline (ts_rpc_unary).
 * Ownership: *out is the caller's, freed with protobuf_c_message_free_unpacked(&(*out)->base,
 * NULL); requests are only read. Threads: any, as lib/rpc's channels. */
#ifndef TS_CLUSTER_SHARD_H
#define TS_CLUSTER_SHARD_H

#include <stdint.h>

#include "rpc/rpc.h"
#include "tessera/v1/shard.pb-c.h"
#include "util/err.h"

struct ts_cluster;

enum ts_shard_try { TS_SHARD_ONCE, TS_SHARD_RETRY };

/* req NULL: an empty request (no map epoch to check). */
ts_status ts_shard_status(struct ts_rpc_channel *ch, const Tessera__V1__ShardStatusRequest *req,
                          enum ts_shard_try how, int ms, Tessera__V1__ShardStatusResponse **out,
                          struct ts_err *err) TS_MUST_CHECK;
/* ShardStatus once, also saying which certificate answered (ts_rpc_unary_peer). */
ts_status ts_shard_status_peer(struct ts_rpc_channel *ch, int ms, struct ts_rpc_peer *peer,
                               Tessera__V1__ShardStatusResponse **out,
                               struct ts_err *err) TS_MUST_CHECK;
/* The master's calls, each once. */
ts_status ts_shard_arm_snapshot(struct ts_rpc_channel *ch,
                                const Tessera__V1__ArmSnapshotRequest *req, int ms,
                                Tessera__V1__ArmSnapshotResponse **out,
                                struct ts_err *err) TS_MUST_CHECK;
ts_status ts_shard_write_snapshot(struct ts_rpc_channel *ch,
                                  const Tessera__V1__WriteSnapshotRequest *req, int ms,
                                  Tessera__V1__WriteSnapshotResponse **out,
                                  struct ts_err *err) TS_MUST_CHECK;
ts_status ts_shard_release_job(struct ts_rpc_channel *ch,
                               const Tessera__V1__ReleaseJobRequest *req, int ms,
                               Tessera__V1__ReleaseJobResponse **out,
                               struct ts_err *err) TS_MUST_CHECK;
ts_status ts_shard_move_tables(struct ts_rpc_channel *ch,
                               const Tessera__V1__MoveTablesRequest *req, int ms,
                               Tessera__V1__MoveTablesResponse **out,
                               struct ts_err *err) TS_MUST_CHECK;
ts_status ts_shard_rollback_job(struct ts_rpc_channel *ch,
                                const Tessera__V1__RollbackJobRequest *req, int ms,
                                Tessera__V1__RollbackJobResponse **out,
                                struct ts_err *err) TS_MUST_CHECK;

/* To shard id of cl's map (ts_cluster_call: its map epoch set and refreshed on ABORTED; ms
 * <= 0: the cluster's call deadline). */
ts_status ts_cluster_register_tensor(struct ts_cluster *cl, uint32_t id,
                                     Tessera__V1__RegisterTensorRequest *req, int ms,
                                     Tessera__V1__RegisterTensorResponse **out,
                                     struct ts_err *err) TS_MUST_CHECK;
ts_status ts_cluster_register_table(struct ts_cluster *cl, uint32_t id,
                                    Tessera__V1__RegisterTableRequest *req, int ms,
                                    Tessera__V1__RegisterTableResponse **out,
                                    struct ts_err *err) TS_MUST_CHECK;
/* PartitionDigests carries no map epoch: no stale-map check. */
ts_status ts_cluster_partition_digests(struct ts_cluster *cl, uint32_t id,
                                       Tessera__V1__PartitionDigestsRequest *req, int ms,
                                       Tessera__V1__PartitionDigestsResponse **out,
                                       struct ts_err *err) TS_MUST_CHECK;
/* ShardStatus sent with the cached epoch; on ABORTED the map is refreshed and the call
 * retried (up to 3 times). */
ts_status ts_cluster_shard_status(struct ts_cluster *cl, uint32_t shard_id,
                                  Tessera__V1__ShardStatusResponse **out,
                                  struct ts_err *err) TS_MUST_CHECK;

#endif
