/* tablestat.h - a sparse table's status (ShardStatus's TableStatus) summed over shards and
 * written as JSON, once for `tessera status --json` and the master's status page.
 *
 * Why: both show the same table fields; one encoder keeps their names and the hit rate's
 * definition the same in both places (docs/embeddings.md, "Watching it").
 * Ownership: the functions only read their TableStatus arguments; ts_table_status_add copies
 * numbers, never the name (the caller keeps its own). Threads: any. */
#ifndef TS_CLUSTER_TABLESTAT_H
#define TS_CLUSTER_TABLESTAT_H

#include "tessera/v1/shard.pb-c.h"
#include "util/json.h"

/* Adds one shard's status of a table into *sum: counts and rates summed, the write-back lag
 * the largest, tiered if any shard's is, ttl_steps and ttl_seconds the last seen (a job's
 * table has one lifetime). */
void ts_table_status_add(Tessera__V1__TableStatus *sum, const Tessera__V1__TableStatus *ts);

/* Writes one table as a JSON object (an array member): job, name, then shards when non-zero
 * (a sum over that many shards), the counts, and a "disk_tier" object when tiered. */
void ts_table_status_json(struct ts_json *j, const char *job, const char *name, uint32_t shards,
                          const Tessera__V1__TableStatus *ts);

#endif
