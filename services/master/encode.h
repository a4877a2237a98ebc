/* encode.h - the master's tables as protobuf messages: the members and jobs as ClusterStatus
 * lists them, and as the state file keeps them (state.c). One encoder for both, so a field
 * added to a table shows in the replies and survives a restart alike.
 * Ownership: everything is allocated in call's arena (lib/rpc: a handler's call, or the state
 * writer's scratch call) and freed with it. Threads: any; the views are the caller's copies. */
#ifndef TS_MASTER_ENCODE_H
#define TS_MASTER_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include "jobs.h"
#include "members.h"
#include "rpc/rpc.h"
#include "tessera/v1/master.pb-c.h"

/* The members of v as ClusterStatus lists them (heartbeat ages against now, monotonic ms; the
 * state file passes 0). */
Tessera__V1__ShardInfo **master_shard_infos(struct ts_rpc_call *call,
                                            const struct ts_members_view *v, int64_t now);
Tessera__V1__WorkerInfo **master_worker_infos(struct ts_rpc_call *call,
                                              const struct ts_members_view *v, int64_t now);
Tessera__V1__JobInfo *master_job_info(struct ts_rpc_call *call, const struct job_info *v);
/* j's slot owners: a copy of owners[0..n) in call's arena. */
void master_job_owners(struct ts_rpc_call *call, Tessera__V1__JobInfo *j, const uint32_t *owners,
                       size_t n);

#endif
