/* tables.h - the sparse embedding tables a shard holds, per job (docs/embeddings.md, "Tables
 * on the shards").
 *
 * RegisterTable creates, on every shard, the store of a job's table that holds the rows the
 * ring gives this shard (lib/table: empty; a row is made when a push first touches it). A
 * registration of the same table again is answered with the store as it is; another spec
 * under the same id or name is TS_EEXIST. A job's first registration, of a tensor or a table,
 * fixes its settings (params.c).
 * Snapshots (docs/embeddings.md, "Snapshots of tables"): each table keeps the runs this shard
 * wrote for it (its chain: the last full run, then the incremental ones since), which every
 * snapshot's piece lists; a restore (--restore) loads the runs of the snapshot's table and
 * keeps the rows the ring gives this shard.
 * Copies (rowcopy.h): on a cluster with replicas, every row is also held by the next shard of
 * its chain, and a shard that dies is taken over by those copies; a map that loses both
 * copies of some rows sends the job back to its last snapshot (shard_tables_rechain,
 * shard_tables_rollback). A join moves the rows from a snapshot taken with the tables held
 * (shard_tables_move, below), or without one sends the job back too; a shard that joined
 * takes the snapshot's tables from its manifest either way. After a death the master moves
 * them the same way on the map as it is, which gives every row its copies again.
 * Memory: every table's rows are charged to the shard's row budget (--table-mem,
 * shard_params.tables_budget), checked by each push before it creates a row.
 * Ownership: the job owns its tables (freed with it). Threads: the registry lock (sp->mu)
 * guards the job's table array; each table locks itself. */
#ifndef TS_SHARD_TABLES_H
#define TS_SHARD_TABLES_H

#include <stdatomic.h>

#include "params.h"
#include "snapshot/snapshot.h"
#include "table/redo.h"
#include "table/table.h"

/* A store of a table's rows on this shard: those whose chain, on the ring the table was
 * placed on, starts at shard `origin` (rowcopy.h). */
struct table_store {
    uint32_t origin;
    struct ts_table *t;
    atomic_bool owned;     /* served to workers: this shard's own, or a copy taken over */
    atomic_bool full;      /* taken over: its next snapshot capture is a full one */
    atomic_bool broken;    /* a copy that refused a push passed on: it cannot take over */
    /* Taken over: this shard's map epoch when it did (set before `owned`); 0 for its own
     * store and a copy not taken over. A worker connection begun under an older map may still
     * place rows on the ring with that copy's head: dp_rows.c refuses its pushes. */
    atomic_uint_least64_t taken;
};

struct shard_table {
    uint32_t id;
    struct ts_table *t;                  /* this shard's own rows: stores[0].t */
    /* The stores (rowcopy.h): stores[0] this shard's own, then with `replicated` a copy of
     * the rows of each shard this one follows. `placed` is the ring of members (below), nh
     * the table's name hash. Written under `lock` (exclusive) by a rollback; the data plane
     * reads them under it (shared). */
    pthread_rwlock_t lock;
    struct table_store *stores;
    size_t nstores;
    struct ts_ring *placed;
    uint64_t placed_epoch;               /* the map epoch of `placed` */
    uint64_t nh;
    bool replicated;
    uint32_t me;
    /* The shards that hold copies of this shard's own rows (those that follow it). */
    uint32_t *followers;
    size_t nfollowers;
    char name[TS_JOB_ID_MAX + 1];
    char init[64], optimizer[128];
    uint32_t dim;
    uint64_t max_id, seed, ttl_steps, ttl_seconds;
    /* Rows pulled and pushed by workers (ids, repeats included; dp_rows.c), for /metrics;
     * and a second's worth of each over the last interval between heartbeats, in thousandths
     * (shard_tables_tick, which alone keeps rate_*: the counts and time it last saw). */
    atomic_uint_least64_t pulled, pushed;
    atomic_uint_least64_t pulled_milli_s, pushed_milli_s;
    uint64_t rate_pulled, rate_pushed;
    int64_t rate_ms;
    /* The runs this shard wrote to snapshots, oldest first: a full one, then incremental
     * ones (under the shard's snap_mu). */
    struct shard_run *runs;
    size_t nruns;
    /* The shards of `placed`: those of the map it was registered (or last rolled back)
     * under. A map with one more, or one less whose rows lost both copies, means rows are
     * misplaced or missing: the job goes back to its last snapshot (rowcopy_rechain). */
    uint32_t members[TS_CLUSTER_MAX_SHARDS];
    size_t nmembers;
    /* A join's move (docs/embeddings.md, "When a shard joins"). hold: while set (the held
     * step S + 1, until hold_until_ms), pushes and copies of step S and later (which would
     * take the table past S) wait, so that every store stays at the step of the snapshot the
     * move loads (set and checked under `lock`, exclusive and shared). moved: the map epoch
     * of the last move; a connection begun under an older map placed its rows on the ring
     * before it, and is refused (TS_ESTALE). */
    atomic_uint_least64_t hold, moved;
    _Atomic int64_t hold_until_ms;
    /* --redo-dir (durable.h): the log t's own rows are attached to, and the key of its
     * registration there (NULL and "" without one). */
    struct shard_durable *durable;
    char reg_key[TS_REDO_KEY_MAX + 1];
};

struct shard_run {
    uint64_t step, records, bytes_written;
    bool full;
    size_t nchunks;
    uint8_t (*chunks)[TS_STORE_ID_LEN];
};

/* Registers req's table (map_epoch checked against cl; my_id: this shard's). A table the
 * cluster's --restore snapshot holds starts from it. *version: the table's step; *rows: the
 * rows it holds here. Errors name the field (table.dim, table_id, ...). */
ts_status shard_params_register_table(struct shard_params *sp, struct ts_cluster *cl,
                                      uint32_t my_id,
                                      const Tessera__V1__RegisterTableRequest *req,
                                      uint64_t *version, uint64_t *rows,
                                      struct ts_err *err) TS_MUST_CHECK;

/* The table of job sj with id `table`, or NULL: tables live as long as their job (an attached
 * connection keeps it). */
struct shard_table *shard_params_table(struct shard_params *sp, struct shard_job *sj,
                                       uint32_t table);

/* fn(arg, job id, table) for every table of every job, with no job released meanwhile (for
 * /metrics). */
void shard_tables_each(struct shard_params *sp,
                       void (*fn)(void *arg, const char *job, struct shard_table *t), void *arg);

/* Snapshots, with snap_mu held: arm (or disarm) a capture of step in every table of sj;
 * *past: one is already past step, *maxv then its step (nothing stays armed). hold: each
 * table is also held at step (a join's move, below), and one that took a push of a later
 * step is past it. Errors name the table (TS_ENOTSUP for ssp and asp). */
ts_status shard_tables_arm(struct shard_params *sp, struct shard_job *sj, uint64_t step,
                           bool disarm, bool hold, bool *past, uint64_t *maxv,
                           struct ts_err *err);
/* *ready: every table's capture of step is taken (waiting until until_ms); then each is
 * written as a run and the piece gets every table with this shard's chain of runs. */
ts_status shard_tables_write(struct shard_params *sp, struct shard_job *sj, uint64_t step,
                             int64_t until_ms, struct ts_snap_piece *piece, bool *ready,
                             struct ts_err *err) TS_MUST_CHECK;

/* The map changed (rechain.c, mu held): the copies of a shard that left are taken over
 * (rowcopy_rechain); a job whose rows lost every copy, or were placed on shards one joined,
 * is reported lost, so the master sends it back to its last snapshot (docs/embeddings.md,
 * "When a shard goes"). */
void shard_tables_rechain(struct shard_params *sp, struct ts_cluster *cl);
/* Rollback (rollback.c): TS_ECORRUPT naming a chunk of m's tables of job sj that the store
 * lacks; then the load: every table of the fenced job sj emptied and loaded from m's table of
 * its name (the rows cl's ring gives my_id), at step; a table m lacks starts empty, and a
 * table of m that sj lacks (this shard joined since it was registered) is made from m's spec
 * first. */
ts_status shard_tables_rollback_check(struct shard_params *sp, struct shard_job *sj,
                                      const ts_manifest *m, struct ts_err *err) TS_MUST_CHECK;
ts_status shard_tables_rollback(struct shard_params *sp, struct ts_cluster *cl, uint32_t my_id,
                                struct shard_job *sj, const ts_manifest *m, const char *hex,
                                uint64_t step, struct ts_err *err) TS_MUST_CHECK;

/* A join's move (docs/embeddings.md, "When a shard joins"): hold every table of sj at step
 * (shard_tables_arm with hold) until the move, a disarm, a rollback or SHARD_TABLE_HOLD_MS.
 * shard_tables_held: whether a push or copy of `step` to t must wait. shard_tables_move: the
 * held tables placed on cl's map (epoch) and loaded from m (the snapshot of the held step),
 * those m names that sj lacks (this shard joined) made first; *tables, *rows: the tables
 * placed and the rows this shard serves of them; *held_ms: how long they were held.
 * TS_ESTATE when a table is not held at step.
 * shard_tables_unhold: the hold ends (a disarm), unless the map moved since it began (then it
 * ends at its time, as below; mu not held). shard_tables_expire_holds (mu not held): a
 * hold past its time ends, and its job is checked against cl's map as a map change does
 * (shard_tables_rechain), so a move that never came sends it back to a snapshot. */
#define SHARD_TABLE_HOLD_MS 90000
bool shard_tables_held(struct shard_table *t, uint64_t step);
ts_status shard_tables_move(struct shard_params *sp, struct ts_cluster *cl, uint32_t my_id,
                            struct shard_job *sj, const ts_manifest *m, const char *hex,
                            uint64_t step, uint64_t epoch, uint32_t *tables, uint64_t *rows,
                            uint32_t *held_ms, struct ts_err *err) TS_MUST_CHECK;
void shard_tables_unhold(struct shard_params *sp, struct shard_job *sj);
void shard_tables_expire_holds(struct shard_params *sp, struct ts_cluster *cl, int64_t now_ms);

/* Each heartbeat (now_ms): every table's rows pulled and pushed a second since the last one. */
void shard_tables_tick(struct shard_params *sp, int64_t now_ms);

/* Frees a job's tables (params.c's job_free, mu held). */
void shard_tables_free(struct shard_job *sj);

#endif
