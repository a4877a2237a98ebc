/* durable.h - what a shard keeps on its own disk under --redo-dir (docs/embeddings.md,
 * "Restarting from its own disk"): the redo log (lib/table/redo.h) of its tables' own rows,
 * and each table's registration beside them, so that the log alone says which tables it
 * holds and how they were made.
 *
 * What it does today: each table this shard registers is attached to the log (its image, then
 * every step it applies, every rollback's or move's image), under the key "t/JOB/TABLE"; its
 * RegisterTableRequest goes in as a blob under "r/JOB/TABLE" first, and both are dropped from
 * the log when the table is freed with its job. A worker's pull of a table is answered only
 * once what the table logged is synced (shard_durable_wait, from dp_rows.c): a step whose
 * effect a worker has seen is on the disk. A thread checkpoints the log (ts_redo_checkpoint)
 * once its generation passes SHARD_REDO_CHECKPOINT_BYTES, so the log stays about one image of
 * the tables plus the steps since. `tessera-shard --replay DIR` reads a log offline and says
 * what it holds (shard_durable_show). The shard does not start from its log yet: a restarted
 * shard still joins, and its jobs go back to their snapshots (issue 48's rest).
 * Only the table's own rows (stores[0]) are logged; copies held for other shards
 * (--replicas 2) are the chain's, and ssp/asp tables are not logged (TS_ENOTSUP: a
 * registration with --redo-dir refuses them, naming the mode).
 *
 * Ownership: shard_durable_open returns what shard_durable_close frees; close it before the
 * tables are freed (shard_params_fini), so that a clean stop leaves them in the log as they
 * were, not dropped. Threads: any. */
#ifndef TS_SHARD_DURABLE_H
#define TS_SHARD_DURABLE_H

#include <stdbool.h>
#include <stdint.h>

#include "table/redo.h"
#include "util/err.h"

#define SHARD_REDO_CHECKPOINT_BYTES (256ull << 20)

struct shard_durable;
struct shard_job;
struct shard_table;

/* Opens the log in dir (TS_EIO naming dir; another process holding it is refused) and starts
 * the checkpoint thread. */
ts_status shard_durable_open(const char *dir, struct shard_durable **out,
                             struct ts_err *err) TS_MUST_CHECK;
/* Stops the thread and closes the log (tables still attached are detached, logging nothing
 * more). NULL: no-op. */
void shard_durable_close(struct shard_durable *d);

/* Table t of job sj, just made (and loaded, where a snapshot restored it), goes into the log:
 * its registration (sj's settings, t's spec and id) as a blob, then t's own rows attached.
 * Errors name the table. NULL d: TS_OK. */
ts_status shard_durable_table(struct shard_durable *d, const struct shard_job *sj,
                              struct shard_table *t, struct ts_err *err) TS_MUST_CHECK;
/* Table t is being freed with its job: its registration leaves the log (its rows' key is
 * dropped by the table's own free). No-op for a table not in a log. */
void shard_durable_forget(struct shard_table *t);
/* Waits at most ms until what t logged is synced (ts_table_redo_wait; TS_OK at once for a
 * table not in a log). */
ts_status shard_durable_wait(struct shard_table *t, int ms, struct ts_err *err) TS_MUST_CHECK;

struct shard_durable_stats {
    struct ts_redo_stats redo;
    uint64_t checkpoints;
    uint64_t checkpoint_failures;
};
void shard_durable_stats(struct shard_durable *d, struct shard_durable_stats *out);

/* `tessera-shard --replay DIR [--json]`: replays the log in dir into tables in memory and
 * prints each table (job, name, step, rows, fingerprint), then the log's figures; 0, or 1
 * with the error on stderr. */
int shard_durable_show(const char *dir, bool json);

#endif
