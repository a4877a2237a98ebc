/* shard.c - see shard.h. The one place that spells the Shard service's paths. */
#include "cluster/shard.h"

#include "cluster/cluster.h"

#define PATH(name) "/tessera.v1.Shard/" name

static ts_status call(struct ts_rpc_channel *ch, const char *path, const ProtobufCMessage *req,
                      const ProtobufCMessageDescriptor *d, void *out, enum ts_shard_try how,
                      int ms, struct ts_err *err)
{
    return how == TS_SHARD_RETRY
               ? ts_rpc_unary(ch, path, req, d, (ProtobufCMessage **)out, ms, err)
               : ts_rpc_unary_once(ch, path, req, d, (ProtobufCMessage **)out, ms, err);
}

ts_status ts_shard_status(struct ts_rpc_channel *ch, const Tessera__V1__ShardStatusRequest *req,
                          enum ts_shard_try how, int ms, Tessera__V1__ShardStatusResponse **out,
                          struct ts_err *err)
{
    Tessera__V1__ShardStatusRequest empty = TESSERA__V1__SHARD_STATUS_REQUEST__INIT;

    return call(ch, PATH("ShardStatus"), req ? &req->base : &empty.base,
                &tessera__v1__shard_status_response__descriptor, out, how, ms, err);
}

ts_status ts_shard_status_peer(struct ts_rpc_channel *ch, int ms, struct ts_rpc_peer *peer,
                               Tessera__V1__ShardStatusResponse **out, struct ts_err *err)
{
    Tessera__V1__ShardStatusRequest req = TESSERA__V1__SHARD_STATUS_REQUEST__INIT;

    return ts_rpc_unary_peer(ch, PATH("ShardStatus"), &req.base,
                             &tessera__v1__shard_status_response__descriptor,
                             (ProtobufCMessage **)out, ms, peer, err);
}

ts_status ts_shard_arm_snapshot(struct ts_rpc_channel *ch,
                                const Tessera__V1__ArmSnapshotRequest *req, int ms,
                                Tessera__V1__ArmSnapshotResponse **out, struct ts_err *err)
{
    return call(ch, PATH("ArmSnapshot"), &req->base,
                &tessera__v1__arm_snapshot_response__descriptor, out, TS_SHARD_ONCE, ms, err);
}

ts_status ts_shard_write_snapshot(struct ts_rpc_channel *ch,
                                  const Tessera__V1__WriteSnapshotRequest *req, int ms,
                                  Tessera__V1__WriteSnapshotResponse **out, struct ts_err *err)
{
    return call(ch, PATH("WriteSnapshot"), &req->base,
                &tessera__v1__write_snapshot_response__descriptor, out, TS_SHARD_ONCE, ms, err);
}

ts_status ts_shard_release_job(struct ts_rpc_channel *ch,
                               const Tessera__V1__ReleaseJobRequest *req, int ms,
                               Tessera__V1__ReleaseJobResponse **out, struct ts_err *err)
{
    return call(ch, PATH("ReleaseJob"), &req->base,
                &tessera__v1__release_job_response__descriptor, out, TS_SHARD_ONCE, ms, err);
}

ts_status ts_shard_move_tables(struct ts_rpc_channel *ch,
                               const Tessera__V1__MoveTablesRequest *req, int ms,
                               Tessera__V1__MoveTablesResponse **out, struct ts_err *err)
{
    return call(ch, PATH("MoveTables"), &req->base,
                &tessera__v1__move_tables_response__descriptor, out, TS_SHARD_ONCE, ms, err);
}

ts_status ts_shard_rollback_job(struct ts_rpc_channel *ch,
                                const Tessera__V1__RollbackJobRequest *req, int ms,
                                Tessera__V1__RollbackJobResponse **out, struct ts_err *err)
{
    return call(ch, PATH("RollbackJob"), &req->base,
                &tessera__v1__rollback_job_response__descriptor, out, TS_SHARD_ONCE, ms, err);
}

ts_status ts_cluster_register_tensor(struct ts_cluster *cl, uint32_t id,
                                     Tessera__V1__RegisterTensorRequest *req, int ms,
                                     Tessera__V1__RegisterTensorResponse **out,
                                     struct ts_err *err)
{
    return ts_cluster_call(cl, id, PATH("RegisterTensor"), &req->base, &req->map_epoch,
                           &tessera__v1__register_tensor_response__descriptor,
                           (ProtobufCMessage **)out, ms, err);
}

ts_status ts_cluster_register_table(struct ts_cluster *cl, uint32_t id,
                                    Tessera__V1__RegisterTableRequest *req, int ms,
                                    Tessera__V1__RegisterTableResponse **out,
                                    struct ts_err *err)
{
    return ts_cluster_call(cl, id, PATH("RegisterTable"), &req->base, &req->map_epoch,
                           &tessera__v1__register_table_response__descriptor,
                           (ProtobufCMessage **)out, ms, err);
}

ts_status ts_cluster_partition_digests(struct ts_cluster *cl, uint32_t id,
                                       Tessera__V1__PartitionDigestsRequest *req, int ms,
                                       Tessera__V1__PartitionDigestsResponse **out,
                                       struct ts_err *err)
{
    uint64_t no_epoch = 0;

    return ts_cluster_call(cl, id, PATH("PartitionDigests"), &req->base, &no_epoch,
                           &tessera__v1__partition_digests_response__descriptor,
                           (ProtobufCMessage **)out, ms, err);
}

ts_status ts_cluster_shard_status(struct ts_cluster *cl, uint32_t shard_id,
                                  Tessera__V1__ShardStatusResponse **out, struct ts_err *err)
{
    Tessera__V1__ShardStatusRequest req = TESSERA__V1__SHARD_STATUS_REQUEST__INIT;

    return ts_cluster_call(cl, shard_id, PATH("ShardStatus"), &req.base, &req.map_epoch,
                           &tessera__v1__shard_status_response__descriptor,
                           (ProtobufCMessage **)out, 0, err);
}
