/* dp_prefetch.h - a shard's prefetch frames served off the connections' threads (issue 48;
 * docs/embeddings.md, "Prefetch").
 *
 * Why a module: a ROWS_PREFETCH frame asks for disk reads (milliseconds for a batch's misses),
 * and it comes between a worker's pull and its push on the same connection. Served in line,
 * the push waited behind the reads and the step grew by them; here the connection routes the
 * ids to its stores (dp_rows.c) and posts them, and one thread a shard reads them while the
 * connection goes on to the push.
 *
 * A posted prefetch pins its job (shard_job.conns, as a connection does), so the job's tables
 * stay; the thread takes the table's lock shared and reads only into a store that is still
 * one of the table's (a rollback may have placed it anew meanwhile: then it is dropped, a
 * hint). The queue holds at most DP_PREFETCH_QUEUED ids; a post past that is dropped, as a
 * prefetch that would come too late anyway.
 *
 * Ownership: dp_prefetch_create returns what dp_prefetch_free stops (queued prefetches are
 * dropped, their jobs let go) and frees; post copies the ids. Threads: post from any. */
#ifndef TS_SHARD_DP_PREFETCH_H
#define TS_SHARD_DP_PREFETCH_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

struct dp_prefetch;
struct shard_job;
struct shard_table;
struct ts_table;

#define DP_PREFETCH_QUEUED (1u << 20)

ts_status dp_prefetch_create(struct dp_prefetch **out, struct ts_err *err) TS_MUST_CHECK;
void dp_prefetch_free(struct dp_prefetch *pf);   /* NULL: no-op */
/* Queues a prefetch of n ids into store (one of table's stores) of job sj, which the caller
 * holds attached and table's lock shared. Starts the thread on first use. */
void dp_prefetch_post(struct dp_prefetch *pf, struct shard_job *sj, struct shard_table *table,
                      struct ts_table *store, const uint64_t *ids, size_t n);

#endif
