/* internal.h - lib/table's struct and the helpers its files share; not public.
 *
 * Rows are reached only through rows_* (rows.c, and the row lifetime's sweep in expire.c):
 * find, reserve, add, and visiting every row. That is the interface the disk tier sits behind
 * (issue 48, rows.c and tier.c): nothing else knows where a row's record lives. The step accumulator uses the same id map
 * (idmap_*). */
#ifndef TS_TABLE_INTERNAL_H
#define TS_TABLE_INTERNAL_H

#include <pthread.h>

#include "table/redo.h"
#include "table/table.h"

#define IDMAP_EMPTY UINT64_MAX     /* no id is this: ids are below 2^63 */
#define ROWS_CHUNK 1024            /* records a chunk */

/* An open-addressing map (linear probing) from id to an index; grows by doubling at 3/4
 * full; nothing is ever removed but all at once (idmap_clear). */
struct idmap {
    uint64_t *keys;                /* cap; IDMAP_EMPTY: free */
    uint64_t *vals;
    size_t cap, n;
};

/* A row's record: this header, then dim values, then the optimizer's state. In the memory
 * tier a free slot has id IDMAP_EMPTY. */
#define ROW_REF 1u                 /* CLOCK: used since the hand last passed */
#define ROW_UNWRITTEN 2u           /* changed since the disk tier last had it */
#define ROW_PREFETCHED 4u          /* brought in by a prefetch, not used since */
#define ROW_TRIAL 8u               /* in the admission's window (rows.c), not CLOCK's */
struct row {
    uint64_t id;
    uint64_t updates;
    uint64_t step;
    uint32_t pin;                  /* the operation (rows.epoch) that needs it in memory */
    uint32_t flags;                /* ROW_* */
};

/* Rows evicted from a memory tier before the disk had them: handed to the tier's writer
 * (tier.c), found by rows.c until written. */
struct tier_batch {
    struct tier_batch *next;       /* tier.c: the writer's queue */
    struct tier_batch *newer, *older;   /* rows.c: the table's batches */
    uint64_t space;
    size_t rec, n, cap;
    uint64_t *ids;
    uint8_t *recs;                 /* n records of rec bytes */
    struct idmap map;              /* id -> index (rows.c) */
    int64_t made_ms;               /* when its first row came (rows.c) */
    bool drop;                     /* delete the space's keys first */
    uint64_t *dels;                /* ids whose keys are deleted (rows_expire), ndels of them */
    size_t ndels;
    bool skip;                     /* under the tier's lock: write nothing */
    bool orphan;                   /* under the tier's lock: the writer frees it once done */
    _Atomic bool done;             /* written: the writer no longer touches it */
};

/* A buffer an operation reuses from the last one (a fresh megabyte a call cost page faults
 * and munmaps, a tenth of a tiered shard's CPU: perf, bench/table_tiers.py). Up to
 * SCRATCH_KEEP bytes stay allocated between calls; a larger request gets a buffer of its own,
 * freed by scratch_done. scratch.c. */
#define SCRATCH_KEEP (4u << 20)
struct scratch {
    void *p;
    size_t cap;
};
void *scratch_get(struct scratch *s, size_t bytes);   /* NULL: no memory */
void scratch_done(struct scratch *s, void *p);
void scratch_fini(struct scratch *s);

/* How often the memory tier saw each row, roughly: a count-min sketch that halves its
 * counts as they age (sketch.c). Empty (c NULL) until sketch_fit; then sketch_get answers 0
 * for every row and sketch_add does nothing. */
struct sketch {
    uint8_t *c;
    uint64_t mask, adds;
};
/* Counters for at least `rows` rows (a new, empty sketch if it had fewer); false if it has
 * none (no memory). */
bool sketch_fit(struct sketch *s, uint64_t rows);
uint64_t sketch_bytes(const struct sketch *s);
unsigned sketch_get(const struct sketch *s, uint64_t id);
void sketch_add(struct sketch *s, uint64_t id);
void sketch_fini(struct sketch *s);

/* The memory tier's counters (ts_table_tier_stats). */
struct rows_stats {
    uint64_t hits, misses, evictions, written, loaded;
    uint64_t prefetched, prefetch_used, prefetch_unused;
    uint64_t expired;
};

/* A table's rows. Without a tier every row is in memory, in slots that never move or free
 * (a pointer to one stays valid). With a tier (rows.c): the rows in memory (`resident`) are a
 * cache under `quota`, kept by CLOCK; the others are in batches on their way to the disk, or
 * on it. A row that an operation needs is pinned (row.pin == epoch) and stays in memory, and
 * its pointer valid, until the next rows_begin. */
struct rows {
    struct idmap map;              /* id -> slot */
    char **chunks;                 /* ROWS_CHUNK records each */
    size_t nchunks, chunk_cap;
    size_t rec;                    /* bytes a record */
    uint64_t n;                    /* rows that exist, in every tier */
    uint64_t slots;                /* slots ever used (in memory, or free) */
    /* The memory tier (tier != NULL) */
    struct ts_tier *tier;
    struct ts_table_budget *budget;
    uint64_t row_bytes;            /* what a resident row costs the budget */
    uint64_t space;                /* the table's keys in the tier */
    uint64_t *free;                /* free slots */
    size_t nfree, free_cap;
    uint64_t resident;
    uint64_t quota;                /* rows the memory tier holds (rows_begin) */
    uint64_t pending_max;          /* records batches may hold */
    uint64_t hand;                 /* CLOCK */
    /* Admission (rows.c): the look-ups seen (rows_note); the window's rows (ROW_TRIAL,
     * ntrial of them), their slots oldest first in trial[trial_h..trial_n) (slot UINT64_MAX,
     * or a slot whose row is not ROW_TRIAL any more: an entry that left, skipped). */
    struct sketch freq;
    uint64_t ntrial;
    struct window_entry {
        uint64_t slot, gen;        /* gen: the table's step when the row came in */
    } *trial;
    size_t trial_h, trial_n, trial_cap;
    size_t win_from;               /* entries before it are pinned in win_epoch */
    uint32_t win_epoch;
    uint32_t clock_dry;            /* the epoch in which CLOCK found no victim */
    uint64_t swept;                /* slots CLOCK's hand looked at: its work, for tests */
    uint32_t epoch;
    uint64_t gen;                  /* the table's step (table_begin), for the window */
    /* The epoch in which CLOCK went round and found every row pinned: an operation that
     * needs more rows than the quota goes past it without a scan a row (pins only grow
     * within an epoch; a scan a row made such a step quadratic: 1M rows took 63 s). */
    uint32_t dry;
    struct tier_batch *fill;       /* being filled; not handed yet */
    struct tier_batch *oldest, *newest;   /* handed, not reaped */
    size_t pending;                /* records in fill and the handed batches */
    struct idmap gone;             /* rows dropped (rows_expire) whose keys the disk still has */
    size_t gone_batches;           /* the batches of their deletes, not yet reaped */
    bool guarding;                 /* a prefetch reads the disk (rows_prefetch_*) */
    struct idmap guard;            /* its ids that no operation brought in since */
    struct scratch load;           /* rows_load's buffers (under the table's lock) */
    struct tier_batch *spare;      /* a written batch kept for the next one */
    struct rows_stats stats;
};

/* A BSP step's sums: entry k is ids[k]'s, dim int64 (exact) or float at sums + k * dim. */
struct step_acc {
    struct idmap map;              /* id -> entry */
    uint64_t *ids;
    void *sums;
    size_t n, cap;
    uint64_t fresh;                /* entries with no row yet: their bytes are in the budget */
};

/* BSP: the values of the rows the last applied step changed, and of those its row
 * lifetime's sweep dropped, as they were before it (ids ascending, values dim floats each, a
 * created row's its initial ones): a pull of the version before the table's step reads
 * them, as an elastic job's slot redone by its new owner does when some shards applied the
 * step already (table.h, "Elastic jobs"). `of` is that version; valid false after a reset or
 * a restore. swept_lost: the sweep dropped rows whose values are not here (past
 * SWEEP_KEEP_BYTES with a tier, or no memory), so a row found nowhere may have had values at
 * `of`: such a pull is refused. Not charged to the budget (the step's sums are not either). */
struct step_prev {
    uint64_t *ids;
    float *values;
    size_t n, cap;
    uint64_t of;
    bool valid;
    bool swept_lost;
};

/* The values of the rows a sweep dropped (rows_expire), as they were: ids in the order
 * dropped, dim floats each; at most `most` rows, `over` when it dropped more (or memory ran
 * out). Without a tier every dropped row was in memory, and its record freed is larger than
 * its values kept, so a sweep keeps them all; with one, the rows dropped from the disk could
 * be more than memory holds, so at most ts_table.sweep_keep bytes of values (push.c). */
#define SWEEP_KEEP_BYTES (64u << 20)
struct rows_kept {
    uint32_t dim;
    size_t most;
    uint64_t *ids;
    float *values;
    size_t n, cap;
    bool over;
};

/* The initial values drawn for rows a pull read before they existed (table.c): the push
 * that creates a row, and other ranks' pulls of it, copy them instead of drawing the
 * initializer again (its normal draws were half a sparse step's time: bench/embeddings.py).
 * Emptied when a BSP step applies (its rows then exist) and when full. */
#define INIT_CACHE_BYTES (16u << 20)
struct init_cache {
    struct idmap map;              /* id -> entry */
    float *vals;                   /* cap x dim */
    size_t n, cap;
};

/* A row lifetime by the clock (lifetime.c; ts_table_cfg.ttl_seconds): marks of when steps
 * were applied, oldest first, (step, ms): every step below `step` applied by `ms`; the plans
 * of the last two steps, by the step's parity (code: TS_TABLE_SWEEP_NONE, or the distance to
 * the cut + 2; 0: none made); the last sweep's time and cut. now_ms: ts_now_ms, or a test's
 * clock. ttl_ms 0: none, and every function is a no-op. */
#define LIFE_MARKS 32
struct life_mark {
    uint64_t step;
    int64_t ms;
};
struct life_plan {
    uint64_t step;
    uint32_t code;
};
struct lifetime {
    int64_t ttl_ms;
    int64_t (*now_ms)(void);
    struct life_mark marks[LIFE_MARKS];
    size_t nmarks;
    int64_t swept_ms;
    uint64_t cut_done;             /* the rows updated below it are gone */
    struct life_plan plan[2];
};
void life_init(struct lifetime *l, uint64_t ttl_seconds);
/* A reset or a restore: the marks and plans go, the lifetime counts from now. */
void life_restart(struct lifetime *l);
/* The first push of `step`: its plan, the head's `code` (a copy's push) or, for 0, made from
 * this clock (sweep when ttl passed since the last one and some mark is ttl old). A plan made
 * for the step already stays. */
void life_plan(struct lifetime *l, uint64_t step, uint32_t code);
/* The plan of `step` (0: none made, or no lifetime by the clock). */
uint32_t life_plan_of(const struct lifetime *l, uint64_t step);
/* `step` applied: the step below which its sweep drops rows (0: no sweep), and a mark made. */
uint64_t life_applied(struct lifetime *l, uint64_t step);

/* A snapshot's capture (capture.c): armed for step, taken when the table reaches it. */
struct table_capture {
    bool armed, taken, full;
    uint64_t step;
    ts_status st;                  /* taken: TS_OK, or why it could not be */
    size_t n;
    uint8_t *records;              /* n records (ts_table_record_bytes), ascending id */
    uint64_t rows;                 /* the rows the table held at the step */
};

struct ts_table {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const struct ts_job *job;
    struct ts_table_budget *budget;
    char name[TS_JOB_ID_MAX + 1];
    char init[64];
    uint32_t dim;
    uint64_t max_id, seed;
    uint64_t ttl;                  /* row lifetime in steps; 0: none */
    struct lifetime life;          /* row lifetime by the clock */
    struct ts_optim_cfg optim;
    size_t slen;                   /* floats of state an element */
    uint64_t row_bytes;
    uint64_t charged;              /* bytes this table took from the budget */
    struct rows rows;
    struct step_acc acc;           /* BSP */
    struct step_prev prev;         /* BSP */
    size_t sweep_keep;             /* with a tier: bytes of a sweep's dropped values kept */
    uint8_t *pushed;               /* BSP: workers flags for the step */
    uint32_t npushed;
    uint64_t step;                 /* BSP: steps applied */
    uint64_t *clock;               /* SSP, ASP: each rank's next step */
    uint64_t *dirty;               /* ids changed since the last take */
    size_t ndirty, dirty_cap;
    struct idmap dirty_set;        /* the same ids, each once */
    uint64_t *where;               /* BSP: a push's ids' entries in the step's sums */
    size_t where_cap;
    float *grad;                   /* dim: one row's gradient */
    int64_t *scratch;              /* dim: one row's fixed-point gradient */
    /* The prefetch's buffers, one prefetch a table at a time (pf_busy, under mu): not the
     * rows', which a reset during the prefetch's reads would free under it. */
    struct scratch pf;
    bool pf_busy;
    struct table_capture cap;      /* snapshots (capture.c) */
    struct init_cache icache;
    bool lost_dirty;               /* a capture's rows could not be listed as changed again */
    pthread_mutex_t tiers_mu;      /* tiers_seen: the last ts_table_tiers's figures */
    struct ts_table_tiers tiers_seen;
    /* redo_table.c: the log it is attached to (NULL: none), its key there, its last record's
     * number, whether a record could not be made (the log not whole for it until its next
     * image), and the log's list of tables (under the log's attach lock). */
    struct ts_redo *redo;
    char redo_key[TS_REDO_KEY_MAX + 1];
    uint64_t redo_seq;
    bool redo_lost;
    char redo_why[200];            /* what redo_lost lost */
    bool redo_restoring;           /* reset or loaded, its step not set yet */
    struct ts_table *redo_next;
};

/* idmap.c */
ts_status idmap_reserve(struct idmap *m, size_t more, struct ts_err *err);
bool idmap_find(const struct idmap *m, uint64_t id, uint64_t *val);
void idmap_put(struct idmap *m, uint64_t id, uint64_t val);   /* after reserve; id absent */
void idmap_clear(struct idmap *m);
void idmap_fini(struct idmap *m);

void idmap_del(struct idmap *m, uint64_t id);                 /* id present */

/* rows.c. tier NULL: memory only (budget and row_bytes unused). */
void rows_init(struct rows *r, size_t rec, struct ts_tier *tier,
               struct ts_table_budget *budget, uint64_t row_bytes);
/* Frees the memory tier; with a tier, the table's keys are deleted after its last batch. */
void rows_fini(struct rows *r);
/* An operation starts (with a tier: the last one's pins end, written batches are freed, the
 * memory tier holds at most quota rows from now on: four fifths in memory, a fifth in
 * batches, rows.c). */
void rows_begin(struct rows *r, uint64_t quota);
/* Pins the rows among ids[0..n) that exist, read into memory from a batch or the disk
 * (TS_EIO, TS_ECORRUPT: the disk's; TS_ENOMEM: no slot could be made). Without a tier: a
 * no-op. After it, rows_find answers for them whether they exist. */
ts_status rows_load(struct rows *r, const uint64_t *ids, size_t n, struct ts_err *err);
/* An operation will look up ids[0..n): counted in the admission's sketch (with a tier
 * whose memory has a quota; else a no-op). Before rows_load and rows_add. */
void rows_note(struct rows *r, const uint64_t *ids, size_t n);
/* A resident row, or NULL (without a tier: NULL means it does not exist). */
struct row *rows_find(struct rows *r, uint64_t id);
/* Room for `more` new rows, so that as many rows_add cannot fail. */
ts_status rows_reserve(struct rows *r, uint64_t more, struct ts_err *err);
/* A new row (pinned); after reserve; id exists nowhere. */
struct row *rows_add(struct rows *r, uint64_t id);
/* A prefetch, its disk reads made without the table's lock: _begin (lock held) lists in
 * *want (caller frees) the ids among ids[0..n) in no tier but the disk, at most `most`, and
 * guards them; false (nothing listed) when another prefetch is under way. Then the caller
 * reads them (tier_get_many) with the lock let go, and _end (lock held again) brings into
 * memory, unpinned, those found that no operation brought in meanwhile (guard), if the
 * table is still the one of _begin (space). */
bool rows_prefetch_begin(struct rows *r, const uint64_t *ids, size_t n, size_t most,
                         uint64_t **want, size_t *nwant, struct ts_err *err);
void rows_prefetch_end(struct rows *r, uint64_t space, const uint64_t *want, size_t n,
                       const uint8_t *recs, const bool *found);
/* Drops every row whose last update step is below `before` (row lifetime, table.h), from
 * memory, the batches and the disk (a delete the writer makes after the batches before it;
 * until then the rows count as absent), their values kept in *kept (NULL: not kept).
 * Returns how many; cannot fail: rows a disk error kept it from reading stay, and *partial
 * says so. */
uint64_t rows_expire(struct rows *r, uint64_t before, struct rows_kept *kept, bool *partial);
/* Hands the batch being filled to the writer and waits until every batch is on disk. */
void rows_flush(struct rows *r);
/* rows.c's own pieces that expire.c reads rows through: slot s's record; the memory tier's
 * bytes in the shard's budget (resident rows and batches not written), added or taken; the
 * batch being filled handed to the writer; row id's record in a batch not written yet (the
 * newest that has it), or NULL; whether row id was dropped and the disk may still have it. */
static inline struct row *rows_slot_at(const struct rows *r, uint64_t s)
{
    return (struct row *)(void *)(r->chunks[s / ROWS_CHUNK] + (s % ROWS_CHUNK) * r->rec);
}
void rows_mem_charge(struct rows *r, uint64_t bytes, bool add);
/* Slot s's row leaves memory (an eviction, or a row lifetime's drop): out of the map and the
 * window, its slot free for the next row (when the free list has room), and with a tier its
 * bytes uncharged. What else it needs (its write-back, counts) is the caller's. */
void rows_slot_free(struct rows *r, uint64_t s);
void rows_hand(struct rows *r);
const uint8_t *rows_batch_find(const struct rows *r, uint64_t id);
bool rows_gone(const struct rows *r, uint64_t id);
/* Drops the window's list entries of rows that left it other than by rows.c (the sweep
 * freed their slots, which a new row may take before the entry reaches the front). */
void rows_window_tidy(struct rows *r);
/* Copies row id's record (rec bytes; rec may be NULL) from whichever tier holds it, with no
 * change to the memory tier; *found false if it does not exist. */
ts_status rows_read(struct rows *r, uint64_t id, void *rec, bool *found, struct ts_err *err);
/* The ids of every row, ascending, into *out (r->n of them; caller frees). */
ts_status rows_sorted_ids(struct rows *r, uint64_t **out, struct ts_err *err);

/* tier.c, for rows.c */
uint64_t tier_space(struct ts_tier *tier);
void tier_submit(struct ts_tier *tier, struct tier_batch *b);
/* Until b->done (true), or while the writer's last write failed (false at once). */
bool tier_wait(struct ts_tier *tier, struct tier_batch *b);
/* Whether the writer's last write failed (why: its message). */
bool tier_failing(struct ts_tier *tier, char *why, size_t len);
/* Tests: every write fails as on a full disk, until set false. */
void tier_set_full(struct ts_tier *tier, bool full);
/* The table no longer needs b: true when it is written (the caller frees it), false when
 * the writer will drop it unwritten and free it. */
bool tier_orphan(struct ts_tier *tier, struct tier_batch *b);
/* The space's keys deleted, after the batches handed before this. */
void tier_drop_space(struct ts_tier *tier, uint64_t space);
ts_status tier_get_many(struct ts_tier *tier, uint64_t space, size_t n, const uint64_t *ids,
                        uint8_t *recs, size_t rec, bool *found, struct ts_err *err);
ts_status tier_ids(struct ts_tier *tier, uint64_t space, uint64_t **ids, size_t *n,
                   struct ts_err *err);
uint64_t tier_space_bytes(struct ts_tier *tier, uint64_t space);
/* Benchmarks: every store's pages written, then dropped from memory (a cold start). */
void tier_drop_cache(struct ts_tier *tier);
void tier_batch_free(struct tier_batch *b);

static inline float *row_values(struct row *w)
{
    return (float *)(void *)(w + 1);
}

/* table.c: the row's initial values into out (dim floats), from the cache where a pull drew
 * them; a new row's record filled; the cache emptied (a step applied). */
void table_init_values(struct ts_table *t, uint64_t id, float *out);
void table_init_forget(struct ts_table *t);
struct row *table_new_row(struct ts_table *t, uint64_t id);   /* after rows_reserve */
void table_mark_dirty(struct ts_table *t, uint64_t id);       /* after dirty_reserve */
/* An operation on t starts (mu held): rows_begin with the table's share of the budget. */
void table_begin(struct ts_table *t);
ts_status table_dirty_reserve(struct ts_table *t, size_t more, struct ts_err *err);
/* Takes `rows` new rows' cost from the budget (table_row_cost each: the record without a
 * tier, its index entry with one: table.h), or TS_ENOMEM naming the budget. */
ts_status table_charge(struct ts_table *t, uint64_t rows, struct ts_err *err);
uint64_t table_row_cost(const struct ts_table *t);
void table_refund(struct ts_table *t, uint64_t rows);

/* Ascending uint64_t for qsort (ids). */
static inline int table_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* capture.c: takes the armed capture if the table just reached its step (mu held). */
void table_capture_due(struct ts_table *t);
/* capture.c (mu held): row w as a record (ts_table_record_bytes at out); the records of rows
 * ids[0..n), each of which exists, read from whichever tier holds it; ts_table_load's work. */
void table_record_put(const struct ts_table *t, struct row *w, uint8_t *out);
ts_status table_records(struct ts_table *t, const uint64_t *ids, size_t n, uint8_t *out,
                        struct ts_err *err);
ts_status table_load_locked(struct ts_table *t, const uint8_t *records, size_t n,
                            bool (*keep)(void *ctx, uint64_t id), void *ctx,
                            struct ts_err *err);
/* push.c (mu held): the row lifetime's sweep of the rows last updated before `before`. */
void table_expire(struct ts_table *t, uint64_t before);

/* redo_table.c (mu held): what a table logs when attached (nothing when not). A step's
 * record is begun with room for its n rows, filled row by row (k: its place in ascending id)
 * and queued with the sweep's cut; NULL when not attached or without memory (then the table's
 * log is marked not whole). A restore (reset, loads) logs nothing until its step is set:
 * then the table's image. */
struct redo_item;
struct redo_item *table_redo_step_begin(struct ts_table *t, size_t n);
void table_redo_step_row(struct ts_table *t, struct redo_item *it, size_t k, struct row *w);
void table_redo_step_end(struct ts_table *t, struct redo_item *it, uint64_t cut);
void table_redo_restoring(struct ts_table *t);
void table_redo_restored(struct ts_table *t);
/* ts_table_free: off the log's list, a drop logged (mu not held). */
void table_redo_detach(struct ts_table *t);

static inline bool table_async(const struct ts_table *t)
{
    return t->job->mode == TS_MODE_SSP || t->job->mode == TS_MODE_ASP;
}

#endif
