/* mapdelta.h - the shard map as versioned deltas: a hash that names a map's content, and a
 * delta applied to the map a caller holds (docs/scaling.md, "The shard map").
 *
 * Why: every worker fetches the shard map when its epoch moves on; whole, that is every shard's
 * addresses and data-plane endpoints to every worker on every epoch (10,000 workers and 100
 * shards: about 400 MB from the master for one shard dying). A caller that holds a whole map
 * names it (its epoch and ts_shard_map_hash) and the master answers what changed since: the
 * shards new or changed, the ids gone. The caller applies it and checks the result against the
 * hash the master sent of its own whole map, so a delta applied to anything but its base is
 * caught, and the caller fetches the whole map instead.
 * What a hash covers: the map's epoch, vnodes, replicas and ring digest, and every shard's
 * ShardInfo but last_heartbeat_ms_ago and away_ms_ago (ages, which move on every call and
 * route nothing).
 * Ownership: inputs are only read; ts_shard_map_apply's *out is the caller's, freed with
 * tessera__v1__shard_map__free_unpacked. Threads: any. */
#ifndef TS_CLUSTER_MAPDELTA_H
#define TS_CLUSTER_MAPDELTA_H

#include <stdint.h>

#include "tessera/v1/common.pb-c.h"
#include "util/err.h"

/* One shard's entry, as the map's hash and the master's delta compare it. */
uint64_t ts_shard_info_hash(const Tessera__V1__ShardInfo *s);
/* A map's content; m->shards in id order (as the master lists them). A delta's own fields
 * (delta_from, removed, map_hash) are not part of it. */
uint64_t ts_shard_map_hash(const Tessera__V1__ShardMap *m);
/* The same with each shard's ts_shard_info_hash given (shard_hashes[i] of m->shards[i]). */
uint64_t ts_shard_map_hash_with(const Tessera__V1__ShardMap *m, const uint64_t *shard_hashes);
/* The whole map that delta (delta->delta_from set) makes of base, the whole map of that epoch:
 * base's shards less those removed or replaced, and the delta's, in id order. TS_ESTALE when
 * delta is not from base's epoch or the result's hash is not delta->map_hash: fetch the whole
 * map. */
ts_status ts_shard_map_apply(const Tessera__V1__ShardMap *base,
                             const Tessera__V1__ShardMap *delta, Tessera__V1__ShardMap **out,
                             struct ts_err *err) TS_MUST_CHECK;

#endif
