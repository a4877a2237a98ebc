/* internal.h - lib/table's struct and the helpers its files share; not public.
 *
 * Rows are reached only through rows_* (rows.c): find, reserve, add, and visiting every row.
 * That is the interface a disk tier will sit behind (issue 46): nothing else knows where a
 * row's record lives. The step accumulator uses the same id map (idmap_*). */
#ifndef TS_TABLE_INTERNAL_H
#define TS_TABLE_INTERNAL_H

#include <pthread.h>

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

/* A row's record: this header, then dim values, then the optimizer's state. */
struct row {
    uint64_t id;
    uint64_t updates;
    uint64_t step;
    uint32_t dirty;
    uint32_t pad;
};

struct rows {
    struct idmap map;              /* id -> record number */
    char **chunks;                 /* ROWS_CHUNK records each */
    size_t nchunks, chunk_cap;
    size_t rec;                    /* bytes a record */
    uint64_t n;
};

/* A BSP step's sums: entry k is ids[k]'s, dim int64 (exact) or float at sums + k * dim. */
struct step_acc {
    struct idmap map;              /* id -> entry */
    uint64_t *ids;
    void *sums;
    size_t n, cap;
    uint64_t fresh;                /* entries with no row yet: their bytes are in the budget */
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

/* A snapshot's capture (capture.c): armed for step, taken when the table reaches it. */
struct table_capture {
    bool armed, taken, full;
    uint64_t step;
    ts_status st;                  /* taken: TS_OK, or why it could not be */
    size_t n;
    uint8_t *records;              /* n records (ts_table_record_bytes), ascending id */
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
    struct ts_optim_cfg optim;
    size_t slen;                   /* floats of state an element */
    uint64_t row_bytes;
    uint64_t charged;              /* bytes this table took from the budget */
    struct rows rows;
    struct step_acc acc;           /* BSP */
    uint8_t *pushed;               /* BSP: workers flags for the step */
    uint32_t npushed;
    uint64_t step;                 /* BSP: steps applied */
    uint64_t *clock;               /* SSP, ASP: each rank's next step */
    uint64_t *dirty;               /* ids changed since the last take */
    size_t ndirty, dirty_cap;
    uint64_t *where;               /* BSP: a push's ids' entries in the step's sums */
    size_t where_cap;
    float *grad;                   /* dim: one row's gradient */
    int64_t *scratch;              /* dim: one row's fixed-point gradient */
    struct table_capture cap;      /* snapshots (capture.c) */
    struct init_cache icache;
    bool lost_dirty;               /* a capture's rows could not be listed as changed again */
};

ts_status idmap_reserve(struct idmap *m, size_t more, struct ts_err *err);
bool idmap_find(const struct idmap *m, uint64_t id, uint64_t *val);
void idmap_put(struct idmap *m, uint64_t id, uint64_t val);   /* after reserve; id absent */
void idmap_clear(struct idmap *m);
void idmap_fini(struct idmap *m);

void rows_init(struct rows *r, size_t rec);
void rows_fini(struct rows *r);
struct row *rows_find(const struct rows *r, uint64_t id);
/* Room for `more` rows, so that as many rows_add cannot fail. */
ts_status rows_reserve(struct rows *r, uint64_t more, struct ts_err *err);
struct row *rows_add(struct rows *r, uint64_t id);            /* after reserve; id absent */
struct row *rows_at(const struct rows *r, uint64_t k);        /* k < n: in creation order */

static inline float *row_values(struct row *w)
{
    return (float *)(void *)(w + 1);
}

/* table.c: the row's initial values into out (dim floats), from the cache where a pull drew
 * them; a new row's record filled; the cache emptied (a step applied). */
void table_init_values(struct ts_table *t, uint64_t id, float *out);
void table_init_forget(struct ts_table *t);
struct row *table_new_row(struct ts_table *t, uint64_t id);   /* after rows_reserve */
void table_mark_dirty(struct ts_table *t, struct row *w);     /* after dirty_reserve */
ts_status table_dirty_reserve(struct ts_table *t, size_t more, struct ts_err *err);
/* Takes bytes from the budget, or TS_ENOMEM naming the table and the budget. */
ts_status table_charge(struct ts_table *t, uint64_t rows, struct ts_err *err);
void table_refund(struct ts_table *t, uint64_t rows);
/* digest.c: the ids of t's rows, ascending, into *out (t->rows.n of them; caller frees).
 * Called with t->mu held. */
ts_status table_sorted_ids(const struct ts_table *t, uint64_t **out, struct ts_err *err);

/* Ascending uint64_t for qsort (ids). */
static inline int table_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* capture.c: takes the armed capture if the table just reached its step (mu held). */
void table_capture_due(struct ts_table *t);

static inline bool table_async(const struct ts_table *t)
{
    return t->job->mode == TS_MODE_SSP || t->job->mode == TS_MODE_ASP;
}

#endif
