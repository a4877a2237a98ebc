/* durable.h - what a shard keeps on its own disk under --redo-dir (docs/embeddings.md,
 * "Restarting from its own disk"): a redo log (lib/table/redo.h) of its tables' own rows and
 * of the dense partitions it heads, with the registration of each table and tensor beside
 * them, so that the log alone says what the shard holds and how it was made.
 *
 * Tables: each table this shard makes is attached to the log (its image, then every step it
 * applies, every rollback's or move's image) under "t/JOB/TABLE", after its registration as a
 * blob under "r/JOB/TABLE". Tensors (bsp jobs): the registration under "R/JOB/ID", and the
 * image of each partition this shard heads under "p/JOB/ID/INDEX", at registration, after
 * each update a push applies (read in place while the partition holds the update: every head
 * partition holds its updates, as a chain's head does, and dataplane.c publishes each once its
 * image is queued) and after a rollback's load. What is freed with its job, or a partition
 * dropped or demoted, leaves the log. A worker's pull, of rows or of a partition, is answered
 * only once what it reads is synced (shard_durable_wait, shard_durable_part_wait): a step a
 * worker has seen is on the disk. While the disk refuses the log (ENOSPC, EIO: its writer
 * tries every TS_REDO_RETRY_MS) a pull waits on, up to its wait, saying so in the shard's
 * log; room made lets it go on, nothing lost. A thread checkpoints the log (ts_redo_checkpoint) once its
 * generation passes SHARD_REDO_CHECKPOINT_BYTES, so the log stays about one image of the
 * state plus the steps since. `tessera-shard --replay DIR` reads a log offline and says what
 * it holds (durable_show.c). A shard started on a directory with a log starts from it
 * (shard_durable_start, durable_restore.c) when the master held its place; else it sets the
 * log aside in DIR/previous and begins afresh, joining as any shard does.
 * Not logged: copies held for other shards (--replicas 2: the chain's), a reduce job's
 * partitions (its workers hold the parameters); refused (TS_ENOTSUP, naming the mode): ssp
 * and asp jobs' tables and tensors.
 *
 * Ownership: shard_durable_open returns what shard_durable_free frees; shard_durable_close
 * it before the tables and tensors are freed (shard_params_fini), so that a clean stop leaves
 * them in the log as they were, not dropped. Threads: any. */
#ifndef TS_SHARD_DURABLE_H
#define TS_SHARD_DURABLE_H

#include <stdbool.h>
#include <stdint.h>

#include "cluster/cluster.h"
#include "params.h"
#include "table/redo.h"
#include "util/err.h"

#define SHARD_REDO_CHECKPOINT_BYTES (256ull << 20)

struct shard_durable;
struct shard_table;

/* Opens the log in dir (TS_EIO naming dir; another process holding it is refused) and starts
 * the checkpoint thread. keep: what an earlier process logged stays for a replay; else it is
 * set aside in dir/previous first, the warning saying why (NULL: not said). */
ts_status shard_durable_open(const char *dir, bool keep, const char *why,
                             struct shard_durable **out, struct ts_err *err) TS_MUST_CHECK;
/* `--redo-dir DIR` at a shard's start, before it serves anything: its identity (below) into
 * instance and secret; then, where the identity was kept and the master's map (cl, asked for
 * up to 30 s) still has its member on the ring, the log opened and replayed into sp's
 * registry under that map, every table and tensor logged anew (durable_restore.c; *resumed
 * true: register as RegisterShardRequest.resumed). Else the log set aside and opened afresh.
 * A log that cannot be replayed is an error naming what (the shard must not start: the log
 * stays as it was). sp->durable is the opened log. */
ts_status shard_durable_start(struct shard_params *sp, const char *dir, struct ts_cluster *cl,
                              char *instance, size_t ilen,
                              uint8_t secret[TS_MEMBER_SECRET_LEN], bool *resumed,
                              struct ts_err *err) TS_MUST_CHECK;
/* The log itself (durable_restore.c replays it), and that the shard started from it in ms. */
struct ts_redo *shard_durable_redo(struct shard_durable *d);
void shard_durable_resumed(struct shard_durable *d, int64_t ms);
/* The shard's identity kept in dir/identity (0600): its instance (RegisterShardRequest.instance,
 * into instance[0..ilen)) and secret, read when a shard wrote them there before (*kept), else
 * drawn and written (synced). A shard restarted on the directory registers with the same two,
 * so the master takes it for the same member: the same id (services/master/members.c,
 * reregister), at the new process's address. dir is made if missing. Called before the log
 * is opened: a second process on dir is refused by the log's lock right after. */
ts_status shard_durable_identity(const char *dir, char *instance, size_t ilen,
                                 uint8_t secret[TS_MEMBER_SECRET_LEN], bool *kept,
                                 struct ts_err *err) TS_MUST_CHECK;
/* Stops the thread and closes the log (tables still attached are detached, logging nothing
 * more); what is freed after logs nothing. shard_durable_free: closes it if open, frees it.
 * NULL: no-op. */
void shard_durable_close(struct shard_durable *d);
void shard_durable_free(struct shard_durable *d);

/* Table t of job sj, just made (and loaded, where a snapshot restored it), goes into the log:
 * its registration (sj's settings, t's spec and id) as a blob, then t's own rows attached.
 * Errors name the table. NULL d: TS_OK. */
ts_status shard_durable_table(struct shard_durable *d, const struct shard_job *sj,
                              struct shard_table *t, struct ts_err *err) TS_MUST_CHECK;
/* Tensor t of bsp job sj, just made (its partitions fresh or restored), goes into the log:
 * its registration as a blob under "R/JOB/ID", then the image of each partition it heads
 * under "p/JOB/ID/INDEX" (a header with the job's rollbacks, then ts_part_image's bytes),
 * and those partitions hold each update from then on until shard_durable_part logged it.
 * TS_OK, nothing logged, for a reduce job (its workers hold the parameters); TS_ENOTSUP for
 * ssp and asp. NULL d: TS_OK. */
ts_status shard_durable_tensor(struct shard_durable *d, struct shard_job *sj,
                               struct shard_tensor *t, struct ts_err *err) TS_MUST_CHECK;
/* Whether t's head partitions hold their updates for the log (dataplane.c publishes each once
 * shard_durable_part logged it, rollback.c and rechain.c keep the hold on). */
static inline bool shard_durable_holds(const struct shard_tensor *t)
{
    return t->durable != NULL;
}
/* Partition index of t (p) logged: held, just after a push applied an update it holds (its
 * image read in place; the caller publishes the version after); else a copy (a rollback's
 * load). TS_OK at once for a tensor not in a log. */
ts_status shard_durable_part(struct shard_job *sj, struct shard_tensor *t, uint32_t index,
                             struct ts_part *p, bool held, struct ts_err *err) TS_MUST_CHECK;
/* Waits at most ms until partition index's last logged image is synced (a pull, before it
 * answers). TS_OK at once for a tensor not in a log. */
ts_status shard_durable_part_wait(struct shard_tensor *t, uint32_t index, int ms,
                                  struct ts_err *err) TS_MUST_CHECK;
/* This shard no longer heads partition index of t (dropped, or demoted to a copy): its
 * image leaves the log, whose record is of what this shard heads. */
void shard_durable_forget_part(struct shard_tensor *t, uint32_t index);
/* Tensor t is being freed (its job released, or its registration failed): its registration
 * and images leave the log. */
void shard_durable_forget_tensor(struct shard_tensor *t);
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
    int64_t resumed_ms;   /* how long the start from the log took; -1: it did not */
};
void shard_durable_stats(struct shard_durable *d, struct shard_durable_stats *out);

/* `tessera-shard --replay DIR [--json]`: replays the log in dir into tables in memory and
 * prints each table (job, name, step, rows, fingerprint), then the log's figures; 0, or 1
 * with the error on stderr. */
int shard_durable_show(const char *dir, bool json);

#endif
