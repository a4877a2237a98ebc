/* fake_master.h - a master that answers one fixed shard map, for the fuzz targets that need a
 * shard's cluster handle (fuzz_dataplane, fuzz_shard_rpc).
 *
 * Why: a shard places partitions by the map it fetched (ts_cluster_open) and serves RPCs only
 * once it registered (ts_membership_start); both talk gRPC to a master. The real one would
 * bring its leases, jobs and threads into every run; this one serves, on 127.0.0.1 in the
 * fuzzer's process, GetShardMap (the map given, its ring digest computed as the master does),
 * RegisterShard (the map's first shard id, a lease of 10 minutes so that heartbeats stay
 * rare), Heartbeat and Deregister (the map's epoch), ReportUnreachable (nothing dead) and
 * JobAccess (not served: a shard's data plane in a fuzzer gets its table from its own fetch).
 * The other shards of the map listen nowhere: their gRPC address is a port nothing uses and
 * they publish no data-plane endpoint.
 * Ownership: fake_master_start returns a master freed by fake_master_stop.
 * Threads: lib/rpc's server threads answer; start and stop from one thread. */
#ifndef TS_FUZZ_FAKE_MASTER_H
#define TS_FUZZ_FAKE_MASTER_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define FAKE_MASTER_MAX_SHARDS 8

struct fake_master;

/* Serves the map of epoch `epoch` over shards ids[0..n) (n <= FAKE_MASTER_MAX_SHARDS), chains
 * of `replicas`; its address ("127.0.0.1:PORT") into addr (64 bytes). */
ts_status fake_master_start(uint64_t epoch, const uint32_t *ids, size_t n, uint32_t replicas,
                            struct fake_master **out, char addr[64],
                            struct ts_err *err) TS_MUST_CHECK;
void fake_master_stop(struct fake_master *m);   /* NULL: nothing */

#endif
