/* tier.h - the disk tier under a shard's tables (issue 48; docs/embeddings.md, "Tables bigger
 * than memory").
 *
 * Why a module: a table may hold more rows than a shard's memory. With a tier, every row that
 * leaves memory lives in a file of fixed-size row slots (one file a table store, in a
 * directory a shard process alone uses; chosen over RocksDB and LMDB by measurement:
 * docs/embeddings.md, "Choosing the disk tier's store"), found through an index in memory,
 * and the table's memory keeps the hot rows under the shard's --table-mem budget (rows.c:
 * CLOCK eviction with admission by frequency, write-back of changed rows in batches by this
 * module's writer thread, reads of rows that are not in memory).
 *
 * Each table store takes a key space of its own (tier_space), its own file and index. What is
 * on disk is a cache of the rows, rebuilt from the job's snapshot and the chain's copies after
 * a crash, never read back by a new process: nothing is synced, and the stores' files are
 * removed when a shard opens the directory and when it closes the tier.
 *
 * Ownership: ts_tier_open returns a tier that ts_tier_close frees, after every table that
 * uses it (a shard's struct ts_table_budget holds it: table.h) is freed. Threads: every
 * function may be called from any thread; one writer thread a tier writes the batches. */
#ifndef TS_TABLE_TIER_H
#define TS_TABLE_TIER_H

#include <stdint.h>

#include "util/err.h"

struct ts_tier;

/* Opens the tier in dir (created if missing; the stores' files an earlier process left are
 * removed), which must be a directory this process alone uses: a lock file there (tier.lock)
 * refuses a second tier with TS_EIO naming dir, as other failures do. Starts the writer. */
ts_status ts_tier_open(const char *dir, struct ts_tier **out, struct ts_err *err) TS_MUST_CHECK;
/* Stops the writer (batches still queued are written first, or dropped while the disk
 * refuses them), unmaps and removes the stores' files. NULL: no-op. */
void ts_tier_close(struct ts_tier *tier);
/* The directory, as given to ts_tier_open. */
const char *ts_tier_dir(const struct ts_tier *tier);
/* Why the last write failed ("" when the last one succeeded): the writer keeps the batch and
 * tries it again every TS_TIER_RETRY_MS until the disk takes it. */
#define TS_TIER_RETRY_MS 500
void ts_tier_failure(struct ts_tier *tier, char *buf, size_t len);

#endif
