/* redo.h - a redo log of what a shard's tables became, step by step, so that a shard can come
 * back from its own disk (issue 48, deliverable 3; docs/embeddings.md, "Restarting from its
 * own disk").
 *
 * Why a module: the disk tier (tier.h) is a cache of rows, rewritten in place whenever the
 * memory tier evicts, so after a crash its files hold each row at some older version. The
 * durable record of a table is this log: after each BSP step applies, the images of the rows
 * it changed (the snapshot record of each, table.h "Snapshots": id, update count, last step,
 * values, optimizer state) and the cut of the row lifetime's sweep, if any; and when a table
 * is attached, checkpointed or restored (reset, loads, its step set: a rollback, a move), the
 * table's image: every row and its step, in a file of its own that the log's record names.
 * Images, not gradients: replaying a row's image needs none of its earlier bits. The log also
 * takes blobs (ts_redo_put): bytes under a key that supersede the key's earlier ones, for a
 * dense partition's image after each step. A log record
 * is checksummed (XXH3-64), so a record torn by a crash is seen and dropped: its step was
 * never durable.
 *
 * Files. DIR/redo-<generation>.log, one generation written at a time. A checkpoint starts a
 * new generation, writes into it the image of every table attached (reset, every row, the
 * step: what a snapshot's full capture holds), and once that is synced removes the older
 * generations; so the log holds at most the tables' rows once plus the steps since the last
 * checkpoint. A replay reads the generations in order; a table's reset in a newer one
 * supersedes what an older one said of it.
 *
 * Durability. A writer thread a log appends records in the order tables hand them, at once,
 * and syncs (fdatasync) when someone waits for one of them (ts_redo_wait,
 * ts_table_redo_wait), when the log closes, or TS_REDO_LAZY_MS after the first record not
 * synced: group commit by demand, so the records of every table a step changed, written one
 * after another, share the sync their first pull asks for. ts_redo_wait says when a record is
 * on the disk: the
 * point a caller answers from (a shard answers the pull of the version after a step only once
 * the step's record is synced). A new file and a removed one are made durable with a sync of
 * the directory. A write the disk refuses (ENOSPC, EIO) is undone (the file cut back to where
 * the record began) and tried again every TS_REDO_RETRY_MS; waiters see why. A failed sync is
 * final (the kernel may have dropped the pages it could not write): the log reports it and
 * syncs no more, and the shard must start again.
 *
 * Ownership: ts_redo_open returns a log that ts_redo_close frees; a table attached to it
 * (ts_table_redo) is detached when freed, or by the close. Threads: every function may be
 * called from any thread. */
#ifndef TS_TABLE_REDO_H
#define TS_TABLE_REDO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

struct ts_redo;
struct ts_table;

#define TS_REDO_RETRY_MS 500
#define TS_REDO_LAZY_MS 20         /* a record nobody waits for is synced within this */
#define TS_REDO_KEY_MAX 255        /* bytes of a table's key in the log */

/* Opens the log in dir (created if missing), which one process alone may hold (a lock file,
 * redo.lock, refuses a second). The generations an earlier process left are kept for
 * ts_redo_replay, the newest cut back to its last whole record (what a crash tore off), and a
 * new generation is started for what comes. TS_EIO names dir and what failed. */
ts_status ts_redo_open(const char *dir, struct ts_redo **out, struct ts_err *err) TS_MUST_CHECK;
/* Writes and syncs what is queued (or drops it while the disk refuses it), stops the writer,
 * frees the log. The files stay. Tables still attached are detached: they log nothing more.
 * NULL: no-op. */
void ts_redo_close(struct ts_redo *redo);

/* ---- Replay ---- */
enum ts_redo_kind {
    TS_REDO_IMAGE = 1,             /* the table as it was: every row, and its step */
    TS_REDO_STEP = 2,              /* step `step` applied: the rows it changed, then the sweep */
    TS_REDO_DROP = 3,              /* the table was freed, or the blob's key forgotten */
    TS_REDO_BLOB = 4,              /* ts_redo_put's bytes: records, rec 1, n bytes; step: its
                                    * version */
};
struct ts_redo_rec {
    enum ts_redo_kind kind;
    const char *key;               /* as given to ts_table_redo, NUL-terminated */
    uint64_t step;
    uint64_t cut;                  /* TS_REDO_STEP: the sweep dropped rows last updated before
                                    * this step (0: no sweep); TS_REDO_IMAGE: its number */
    size_t rec;                    /* bytes a record (ts_table_record_bytes) */
    size_t n;                      /* records */
    const uint8_t *records;        /* valid during the callback */
};
struct ts_redo_replayed {
    uint64_t files, records, bytes;
    uint64_t torn;                 /* bytes cut off the newest generation at open */
};
/* Calls fn with every record of the generations found at open, oldest first; fn's failure
 * stops the replay and is returned. A record that fails its checksum in a generation other
 * than the newest (which was cut at open) is TS_ECORRUPT naming the file and offset. */
ts_status ts_redo_replay(struct ts_redo *redo,
                         ts_status (*fn)(void *ctx, const struct ts_redo_rec *r,
                                         struct ts_err *err),
                         void *ctx, struct ts_redo_replayed *out,
                         struct ts_err *err) TS_MUST_CHECK;
/* Does to t, a bsp table made with the configuration the log was written with and not
 * attached to a log, what r says (TS_REDO_DROP: nothing; the caller frees the table).
 * TS_ECORRUPT when r does not follow (a step other than the table's, records of another
 * size), naming the table. */
ts_status ts_table_redo_apply(struct ts_table *t, const struct ts_redo_rec *r,
                              struct ts_err *err) TS_MUST_CHECK;

/* ---- Writing ---- */
/* Attaches bsp table t to the log under key (1..TS_REDO_KEY_MAX bytes, unique among the
 * tables attached: TS_EEXIST): its image (reset, every row, its step) is logged now, and from
 * then on each step it applies and each restore. TS_ENOTSUP for ssp and asp tables, TS_ESTATE
 * when already attached; TS_ENOMEM or the disk tier's error when its rows could not be read. */
ts_status ts_table_redo(struct ts_table *t, struct ts_redo *redo, const char *key,
                        struct ts_err *err) TS_MUST_CHECK;
/* Waits at most ms until everything t logged so far is synced. TS_ETIMEDOUT after ms; TS_EIO
 * with the disk's error while it refuses the log (or after a failed sync); TS_ENOMEM when a
 * record of t could not be made (no memory, or a restore's image the disk refused), saying
 * why: the log is not whole for t until the next checkpoint. TS_OK at once for a table not
 * attached. */
ts_status ts_table_redo_wait(struct ts_table *t, int ms, struct ts_err *err) TS_MUST_CHECK;
/* A new generation with every attached table's image in it; the older generations removed
 * once it is synced. Blocks each table while its rows are copied (a table on disk is read
 * whole). TS_ENOMEM or a disk tier's error leaves the older generations in place. */
ts_status ts_redo_checkpoint(struct ts_redo *redo, struct ts_err *err) TS_MUST_CHECK;

/* ---- Blobs (a dense partition's image after each step: docs/embeddings.md) ----
 * The bytes of iov[0..iovcnt) under key (1..TS_REDO_KEY_MAX bytes; one name space with the
 * tables' keys) at version, which supersede the key's earlier blobs; *seq: the record's
 * number, for ts_redo_wait. The log remembers where each key's last blob is: a checkpoint
 * copies it into the new generation before the older ones go, so a key that did not change
 * since is not lost. */
struct iovec;
ts_status ts_redo_put(struct ts_redo *redo, const char *key, uint64_t version,
                      const struct iovec *iov, int iovcnt, uint64_t *seq,
                      struct ts_err *err) TS_MUST_CHECK;
/* The key's blobs are forgotten: a TS_REDO_DROP record, and no checkpoint carries it. */
void ts_redo_forget(struct ts_redo *redo, const char *key);
/* Waits at most ms until record seq is synced: TS_ETIMEDOUT, or TS_EIO with the disk's
 * error while it refuses the log. */
ts_status ts_redo_wait(struct ts_redo *redo, uint64_t seq, int ms,
                       struct ts_err *err) TS_MUST_CHECK;

struct ts_redo_stats {
    uint64_t generation;
    uint64_t bytes;                /* written to the current generation */
    uint64_t records, synced;      /* records queued, and synced, since open */
    uint64_t syncs;
    char failure[256];             /* why the last write or a sync failed; "" when none */
    bool final;                    /* a sync failed: the log takes nothing more */
};
void ts_redo_stats(struct ts_redo *redo, struct ts_redo_stats *out);

#endif
