/* rows.c - where a table's rows live: an id map and records in chunks, and with a disk tier
 * the memory tier over it.
 *
 * The id map is idmap.c's. Records sit in
 * chunks of ROWS_CHUNK so that growing never moves a row (a pointer to one stays valid) and
 * never copies gigabytes. Growth happens only in *_reserve, which a caller runs before it
 * changes anything, so an add cannot fail half way through a step.
 *
 * The memory tier (issue 48; docs/embeddings.md, "Tables bigger than memory"). A row leaves
 * memory by CLOCK: the hand sweeps the slots, a row used since its last pass (ROW_REF) gets
 * a second chance, a pinned one (needed by the operation under way) is passed over. A row
 * changed since the disk had it (ROW_UNWRITTEN) goes into the batch being filled, which is
 * handed to the tier's writer when it holds WB_BYTES (or a quarter of what batches may hold,
 * below); until the writer is done with it a
 * batch is searched, newest first, before the disk. Of the table's quota (rows_begin), four
 * fifths are for rows in memory and a fifth for records waiting for the disk: past that, an
 * eviction waits for the oldest batch (the disk is slower than the pushes), the one place an
 * operation waits on a write. Why CLOCK: one bit a row and no list to reorder under the
 * table's lock on every hit.
 *
 * Admission by frequency (W-TinyLFU's design): alone, CLOCK's hit rate is 2 points below
 * exact LRU's on the Zipf workload; with this it is above LRU's (bench/table_policy.c).
 * A sketch counts every id an operation looks up (rows_note). A row coming into memory
 * enters a window (ROW_TRIAL, listed in arrival order) of a fifth of the quota, which CLOCK
 * does not sweep. When room is needed and the window is full, its oldest row that no
 * operation under way needs and that came in before the table's step (so a step's rows stay
 * until its push, whichever rank's pull read them) is weighed against CLOCK's victim: the
 * one the sketch saw less often leaves memory, the other stays (the window's row joining
 * CLOCK's rows). So a row
 * read once for a step does not push out a row read every few steps, and memory keeps to
 * the quota. A prefetched row stays unweighed for the steps it was announced for (install).
 * The row lifetime's sweep is expire.c's. */
#include "table/internal.h"
#include "table/tier.h"
#include "util/proc.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define WB_BYTES (1u << 20)        /* a batch for the writer */
#define WB_AGE_MS 1000             /* a batch this old goes to the writer, full or not */
/* The admission's window: a fifth of the quota. bench_table_policy (one rank) at 1%, 10%
 * and 25% in memory: a third, a tenth, a twentieth and a hundredth did no better at any
 * share and lost 0.2 to 5 points at 1%; bench/table_tiers.py (2 ranks, 2 shards): a third
 * gained 1.8 points at 1% without prefetch, a tenth lost at 1% (measured with prefetched rows
 * put in CLOCK at once, before they waited in the window). */
#define WINDOW 5
/* The steps a prefetched row is kept in the window unweighed: the CTR trainer's default
 * --prefetch-depth. */
#define PREFETCH_STEPS 2

void rows_mem_charge(struct rows *r, uint64_t bytes, bool add)
{
    if (!r->budget)
        return;
    if (add)
        atomic_fetch_add(&r->budget->used, bytes);
    else
        atomic_fetch_sub(&r->budget->used, bytes);
}

void rows_init(struct rows *r, size_t rec, struct ts_tier *tier,
               struct ts_table_budget *budget, uint64_t row_bytes)
{
    memset(r, 0, sizeof(*r));
    r->rec = rec;
    r->quota = UINT64_MAX;
    r->epoch = 1;
    if (tier) {
        r->tier = tier;
        r->budget = budget;
        r->row_bytes = row_bytes;
        r->space = tier_space(tier);
    }
}

static bool make_room(struct rows *r);
static size_t batch_rows(const struct rows *r);

/* A batch the writer is done with: kept as the spare when it has the size the next one will
 * have (and no deletes, which are allocated for their batch), else freed. */
static void recycle(struct rows *r, struct tier_batch *b)
{
    if (r->spare || b->cap != batch_rows(r) || b->ndels || b->drop) {
        tier_batch_free(b);
        return;
    }
    idmap_clear(&b->map);
    b->n = 0;
    b->next = b->newer = b->older = NULL;
    b->skip = b->orphan = false;
    atomic_store(&b->done, false);
    r->spare = b;
}

/* Frees the batches the writer is done with, oldest first (it takes them in that order). */
static void reap(struct rows *r)
{
    while (r->oldest && atomic_load(&r->oldest->done)) {
        struct tier_batch *b = r->oldest;

        if ((r->oldest = b->newer))
            r->oldest->older = NULL;
        else
            r->newest = NULL;
        r->pending -= b->n;
        rows_mem_charge(r, b->n * r->rec, false);
        r->stats.written += b->n;
        if (b->ndels && !--r->gone_batches)   /* the disk has none of the dropped rows now */
            idmap_clear(&r->gone);
        recycle(r, b);
    }
}

void rows_fini(struct rows *r)
{
    if (r->tier) {
        struct tier_batch *b, *older;

        for (b = r->newest; b; b = older) {
            older = b->older;
            if (tier_orphan(r->tier, b))
                tier_batch_free(b);
        }
        tier_batch_free(r->fill);
        tier_batch_free(r->spare);
        rows_mem_charge(r, r->resident * r->row_bytes + r->pending * r->rec +
                               sketch_bytes(&r->freq), false);
        tier_drop_space(r->tier, r->space);
    }
    sketch_fini(&r->freq);
    free(r->trial);
    for (size_t c = 0; c < r->nchunks; c++)
        free(r->chunks[c]);
    free(r->chunks);
    free(r->free);
    idmap_fini(&r->map);
    idmap_fini(&r->guard);
    idmap_fini(&r->gone);
    scratch_fini(&r->load);
    memset(r, 0, sizeof(*r));
}

void rows_begin(struct rows *r, uint64_t quota)
{
    if (!r->tier)
        return;
    r->epoch++;
    r->quota = quota - quota / 5 ? quota - quota / 5 : 1;
    r->pending_max = quota / 5 ? quota / 5 : 1;
    reap(r);
    if (r->fill && ts_now_ms() - r->fill->made_ms >= WB_AGE_MS)
        rows_hand(r);
    /* Back to the quota after an operation that needed more (a step's rows stay in memory
     * while it applies) or a smaller share (more tables): nothing is pinned now. */
    while (r->resident > r->quota && make_room(r))
        ;
}

void rows_flush(struct rows *r)
{
    if (!r->tier)
        return;
    rows_hand(r);
    if (r->newest)
        tier_wait(r->tier, r->newest);   /* FIFO: the older ones are written too */
    reap(r);
}

/* A batch: WB_BYTES, or a quarter of what batches may hold, so that the writer writes one
 * while the next ones fill and an eviction waits only when four are queued. */
static size_t batch_rows(const struct rows *r)
{
    size_t n = WB_BYTES / r->rec, q = r->pending_max / 4;

    n = q < n ? q : n;
    return n < 16 ? 16 : n;
}

static struct tier_batch *batch_new(struct rows *r)
{
    struct tier_batch *b = r->spare;

    if (b && b->cap == batch_rows(r) && b->space == r->space) {
        r->spare = NULL;
        return b;
    }
    if (!(b = calloc(1, sizeof(*b))))
        return NULL;
    b->space = r->space;
    b->rec = r->rec;
    b->cap = batch_rows(r);
    atomic_init(&b->done, false);
    b->ids = malloc(b->cap * sizeof(*b->ids));
    b->recs = malloc(b->cap * r->rec);
    if (!b->ids || !b->recs || idmap_reserve(&b->map, b->cap, NULL)) {
        tier_batch_free(b);
        return NULL;
    }
    return b;
}

void rows_hand(struct rows *r)
{
    struct tier_batch *b = r->fill;

    if (!b || !b->n)
        return;
    r->fill = NULL;
    b->newer = NULL;
    if ((b->older = r->newest))
        r->newest->newer = b;
    else
        r->oldest = b;
    r->newest = b;
    tier_submit(r->tier, b);
}

const uint8_t *rows_batch_find(const struct rows *r, uint64_t id)
{
    uint64_t k;

    if (r->fill && idmap_find(&r->fill->map, id, &k))
        return r->fill->recs + k * r->rec;
    for (const struct tier_batch *b = r->newest; b; b = b->older)
        if (idmap_find(&b->map, id, &k))
            return b->recs + k * r->rec;
    return NULL;
}

bool rows_gone(const struct rows *r, uint64_t id)
{
    uint64_t k;

    return r->gone.n && idmap_find(&r->gone, id, &k);
}

/* Batches waiting for the disk hold at most a fifth of the quota (the file's comment). */
static void throttle(struct rows *r)
{
    while (r->pending >= r->pending_max) {
        if (!r->oldest)
            rows_hand(r);
        if (!r->oldest)
            return;
        if (!tier_wait(r->tier, r->oldest))
            return;   /* the disk refuses: rows_reserve says so, evictions stop */
        reap(r);
    }
}

/* Row w (unwritten) into the batch being filled; false when no batch could be made. */
static bool fill_add(struct rows *r, const struct row *w)
{
    struct tier_batch *b;
    uint64_t k;

    throttle(r);
    if (r->fill && r->fill->n == r->fill->cap)
        rows_hand(r);
    if (!r->fill && !(r->fill = batch_new(r)))
        return false;
    b = r->fill;
    if (!b->n)
        b->made_ms = ts_now_ms();
    if (!idmap_find(&b->map, w->id, &k)) {   /* evicted again since: the newer record */
        k = b->n++;
        b->ids[k] = w->id;
        idmap_put(&b->map, w->id, k);
        r->pending++;
        rows_mem_charge(r, r->rec, true);
    }
    memcpy(b->recs + k * r->rec, w, r->rec);
    return true;
}

/* CLOCK's victim: the hand moves to the first of CLOCK's rows (not in the window) neither
 * pinned nor used since its last pass, clearing the bits it passes, and stays on it;
 * UINT64_MAX when there is none. */
static uint64_t clock_victim(struct rows *r)
{
    /* None since this operation began (its pins only grow), or none at all: no sweep of
     * every slot again for each row a scan of the table brings into the window. */
    if (r->clock_dry == r->epoch || r->resident == r->ntrial)
        return UINT64_MAX;
    for (uint64_t seen = 0; r->slots && seen <= 2 * r->slots; seen++) {
        uint64_t s = r->hand;
        struct row *w = rows_slot_at(r, s);

        r->swept++;
        if (w->id != IDMAP_EMPTY && w->pin != r->epoch && !(w->flags & ROW_TRIAL)) {
            if (!(w->flags & ROW_REF))
                return s;
            w->flags &= ~ROW_REF;
        }
        r->hand = s + 1 < r->slots ? s + 1 : 0;
    }
    r->clock_dry = r->epoch;
    return UINT64_MAX;
}

void rows_slot_free(struct rows *r, uint64_t s)
{
    struct row *w = rows_slot_at(r, s);

    r->ntrial -= (w->flags & ROW_TRIAL) != 0;
    w->flags = 0;
    idmap_del(&r->map, w->id);
    w->id = IDMAP_EMPTY;
    if (r->nfree < r->free_cap)
        r->free[r->nfree++] = s;
    if (r->tier) {
        r->resident--;
        rows_mem_charge(r, r->row_bytes, false);
    }
}

/* Slot s's row (not pinned) leaves memory, into the batch being filled if the disk does not
 * have it; false when no batch could be made. */
static bool evict_slot(struct rows *r, uint64_t s)
{
    struct row *w = rows_slot_at(r, s);

    if ((w->flags & ROW_UNWRITTEN) && !fill_add(r, w))
        return false;
    r->stats.prefetch_unused += (w->flags & ROW_PREFETCHED) != 0;
    rows_slot_free(r, s);
    r->stats.evictions++;
    if (s == r->hand)
        r->hand = s + 1 < r->slots ? s + 1 : 0;
    return true;
}

static bool in_window(const struct rows *r, uint64_t s)
{
    const struct row *w;

    if (s == UINT64_MAX)
        return false;
    w = rows_slot_at(r, s);
    return w->id != IDMAP_EMPTY && (w->flags & ROW_TRIAL);
}

/* Drops the entries of rows that left the window from the front of its list. */
static void window_front(struct rows *r)
{
    while (r->trial_h < r->trial_n && !in_window(r, r->trial[r->trial_h].slot))
        r->trial_h++;
}

/* The window's oldest row that no operation under way needs and that came before the
 * table's step (r->gen: a step's rows stay until its push, whichever rank's pull brought
 * them in): its entry in r->trial, or SIZE_MAX. Entries of rows that left are dropped from
 * the front on the way; the search goes on from where the last one of this operation
 * stopped (pins only grow within an operation, and the step does not change: an operation
 * bringing in more rows than the quota made it quadratic). */
static size_t window_oldest(struct rows *r)
{
    window_front(r);
    if (r->win_epoch != r->epoch || r->win_from < r->trial_h) {
        r->win_epoch = r->epoch;
        r->win_from = r->trial_h;
    }
    for (; r->win_from < r->trial_n; r->win_from++) {
        const struct window_entry *e = &r->trial[r->win_from];

        if (in_window(r, e->slot) && rows_slot_at(r, e->slot)->pin != r->epoch &&
            e->gen < r->gen)
            return r->win_from;
    }
    return SIZE_MAX;
}

/* The window's row of entry k joins CLOCK's rows. */
static void promote(struct rows *r, size_t k)
{
    rows_slot_at(r, r->trial[k].slot)->flags &= ~ROW_TRIAL;
    r->ntrial--;
    r->trial[k].slot = UINT64_MAX;
}

/* The window's row of entry k leaves memory (as evict_slot). */
static bool window_evict(struct rows *r, size_t k)
{
    if (!evict_slot(r, r->trial[k].slot))
        return false;
    r->trial[k].slot = UINT64_MAX;   /* its slot may take another row of the window */
    return true;
}

/* Frees one slot (the file's comment: the window's oldest row against CLOCK's victim, or
 * CLOCK's victim while the window is not full; with no sketch, the window's row stays);
 * false when every row is pinned (or no batch could be made). */
static bool make_room(struct rows *r)
{
    uint64_t wmax = r->quota / WINDOW ? r->quota / WINDOW : 1, t, v;
    size_t k;

    for (;;) {
        k = r->ntrial >= wmax ? window_oldest(r) : SIZE_MAX;
        if (k == SIZE_MAX) {
            if ((v = clock_victim(r)) != UINT64_MAX)
                return evict_slot(r, v);
            /* CLOCK's rows all pinned: the window's oldest not pinned, of any step (a scan
             * of the table within one step: its rows leave in the order they came), else
             * none. */
            window_front(r);
            for (k = r->trial_h; k < r->trial_n; k++) {
                t = r->trial[k].slot;
                if (in_window(r, t) && rows_slot_at(r, t)->pin != r->epoch)
                    return window_evict(r, k);
            }
            return false;
        }
        t = r->trial[k].slot;
        if (r->resident - r->ntrial < r->quota - wmax) {   /* CLOCK's rows have room */
            promote(r, k);
            continue;
        }
        v = clock_victim(r);
        if (v != UINT64_MAX &&
            (!r->freq.c || sketch_get(&r->freq, rows_slot_at(r, t)->id) >
                               sketch_get(&r->freq, rows_slot_at(r, v)->id))) {
            if (!evict_slot(r, v))
                return false;
            promote(r, k);
            return true;
        }
        return window_evict(r, k);
    }
}

/* A slot for a row coming into memory (reserved: this cannot fail). With a tier at its
 * quota, make_room frees slots first; when it cannot, the tier goes past its quota for
 * now. */
static uint64_t slot_take(struct rows *r)
{
    while (r->tier && r->resident >= r->quota && r->dry != r->epoch)
        if (!make_room(r))
            r->dry = r->epoch;
    if (r->nfree)
        return r->free[--r->nfree];
    return r->slots++;
}

/* A slot gets row id from rec (copied), pinned; with a tier, in the window (room for its
 * entry made by rows_reserve), kept from being weighed until the table's step is past its
 * gen: this step for a row an operation needs, PREFETCH_STEPS more for a prefetched one
 * (announced for the next steps' pulls: weighed as soon as their step was over, prefetched
 * rows pushed each other out before their pull, at 1% in memory the hit rate fell from 69%
 * to 45%, bench/table_tiers.py). */
static struct row *install(struct rows *r, uint64_t id, const void *rec, uint32_t flags)
{
    uint64_t s = slot_take(r), k;
    struct row *w = rows_slot_at(r, s);

    if (rec)
        memcpy(w, rec, r->rec);
    w->id = id;
    w->pin = r->epoch;
    w->flags = ROW_REF | flags;
    if (r->tier) {
        w->flags |= ROW_TRIAL;
        r->trial[r->trial_n].slot = s;
        r->trial[r->trial_n++].gen = r->gen + (flags & ROW_PREFETCHED ? PREFETCH_STEPS : 0);
        r->ntrial++;
    }
    idmap_put(&r->map, id, s);
    if (r->guarding && idmap_find(&r->guard, id, &k))   /* what a prefetch read is old now */
        idmap_del(&r->guard, id);
    if (r->tier) {
        r->resident++;
        rows_mem_charge(r, r->row_bytes, true);
    }
    return w;
}

struct row *rows_find(struct rows *r, uint64_t id)
{
    uint64_t s;
    struct row *w;

    if (!idmap_find(&r->map, id, &s))
        return NULL;
    w = rows_slot_at(r, s);
    w->flags |= ROW_REF;
    return w;
}

void rows_window_tidy(struct rows *r)
{
    size_t n = 0;

    for (size_t k = r->trial_h; k < r->trial_n; k++)
        if (in_window(r, r->trial[k].slot))
            r->trial[n++] = r->trial[k];
    r->trial_h = 0;
    r->trial_n = n;
    r->win_epoch = 0;   /* indices moved: window_oldest starts again */
}

/* Room in the window's list for `more` entries: entries that left are dropped first. */
static ts_status window_reserve(struct rows *r, uint64_t more, struct ts_err *err)
{
    size_t n, cap;
    struct window_entry *tl;

    if (r->trial_cap - r->trial_n >= more)
        return TS_OK;
    rows_window_tidy(r);
    if (r->trial_cap - (n = r->trial_n) >= more)
        return TS_OK;
    for (cap = r->trial_cap ? r->trial_cap : 64; cap - n < more;)
        cap *= 2;
    if (!(tl = realloc(r->trial, cap * sizeof(*tl))))
        return ts_err_set(err, TS_ENOMEM, "no memory for the memory tier's window of %zu "
                          "rows", cap);
    r->trial = tl;
    r->trial_cap = cap;
    return TS_OK;
}

ts_status rows_reserve(struct rows *r, uint64_t more, struct ts_err *err)
{
    size_t need = (size_t)((r->slots + more + ROWS_CHUNK - 1) / ROWS_CHUNK);
    char why[200];
    ts_status st;

    /* Rows that would push others out to a disk that refuses writes: nothing is taken, and
     * what is in memory or waits in a batch stays there. */
    if (more && r->tier && r->resident + more > r->quota &&
        tier_failing(r->tier, why, sizeof(why)))
        return ts_err_set(err, TS_ENOMEM, "the disk tier in %s cannot take rows (%s): %" PRIu64
                          " more rows would not fit in memory; nothing of the call was taken: "
                          "free space there", ts_tier_dir(r->tier), why, more);
    if (need > r->chunk_cap) {
        size_t cap = r->chunk_cap ? r->chunk_cap : 8;
        char **chunks;

        while (cap < need)
            cap *= 2;
        if (!(chunks = realloc(r->chunks, cap * sizeof(*chunks))))
            return ts_err_set(err, TS_ENOMEM, "no memory for %zu chunks of rows", cap);
        r->chunks = chunks;
        r->chunk_cap = cap;
    }
    while (r->nchunks < need) {
        if (!(r->chunks[r->nchunks] = malloc(ROWS_CHUNK * r->rec)))
            return ts_err_set(err, TS_ENOMEM, "no memory for %d rows of %zu bytes",
                              ROWS_CHUNK, r->rec);
        r->nchunks++;
    }
    if (r->tier && r->free_cap < r->nchunks * ROWS_CHUNK) {
        uint64_t *f = realloc(r->free, r->nchunks * ROWS_CHUNK * sizeof(*f));

        if (!f)
            return ts_err_set(err, TS_ENOMEM, "no memory for the memory tier's free list");
        r->free = f;
        r->free_cap = r->nchunks * ROWS_CHUNK;
    }
    if (r->tier && (st = window_reserve(r, more, err)))
        return st;
    if ((st = idmap_reserve(&r->map, (size_t)more, err)))
        return st;
    return TS_OK;
}

void rows_note(struct rows *r, const uint64_t *ids, size_t n)
{
    uint64_t had;

    if (!r->tier || r->quota == UINT64_MAX)
        return;
    had = sketch_bytes(&r->freq);
    if (sketch_fit(&r->freq, r->quota) && sketch_bytes(&r->freq) != had) {
        rows_mem_charge(r, had, false);
        rows_mem_charge(r, sketch_bytes(&r->freq), true);
    }
    for (size_t i = 0; i < n; i++)
        sketch_add(&r->freq, ids[i]);
}

struct row *rows_add(struct rows *r, uint64_t id)
{
    __atomic_store_n(&r->n, r->n + 1, __ATOMIC_RELAXED);   /* ts_table_count reads it */
    return install(r, id, NULL, ROW_UNWRITTEN);
}

ts_status rows_load(struct rows *r, const uint64_t *ids, size_t n, struct ts_err *err)
{
    uint64_t *miss = NULL, s;
    uint8_t *recs = NULL;
    bool *found = NULL;
    size_t nmiss = 0;
    ts_status st;

    if (!r->tier || !n)
        return TS_OK;
    for (size_t i = 0; i < n; i++)   /* room for those not in memory */
        nmiss += !idmap_find(&r->map, ids[i], &s);
    if ((st = rows_reserve(r, nmiss, err)))
        return st;
    /* The window's list takes an entry for every row brought in, and a row counted in memory
     * above may be evicted by one brought in before it is reached (it is not pinned yet), then
     * brought in again: up to n entries. Slots and the map are not short then: each eviction
     * gives back what the extra row takes. (Reserved for nmiss only, a shard wrote past the
     * list and died: bench/table_tiers.py at 1% with prefetch.) */
    if (nmiss && r->tier && (st = window_reserve(r, n, err)))
        return st;
    /* All in memory (nothing above was evicted: nothing needed room): no buffers. Else n of
     * each: making room may have evicted rows of ids counted in memory above. */
    if (nmiss) {
        size_t at = (n * r->rec + 7) / 8 * 8;

        if (!(recs = scratch_get(&r->load, at + n * (sizeof(*miss) + sizeof(*found))))) {
            st = ts_err_set(err, TS_ENOMEM, "no memory to read %zu rows from the disk tier",
                            n);
            goto out;
        }
        miss = (uint64_t *)(void *)(recs + at);
        found = (bool *)(miss + n);
    }
    nmiss = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *rec;

        if (idmap_find(&r->map, ids[i], &s)) {
            struct row *w = rows_slot_at(r, s);

            w->pin = r->epoch;
            w->flags |= ROW_REF;
            r->stats.hits++;
            if (w->flags & ROW_PREFETCHED) {
                w->flags &= ~ROW_PREFETCHED;
                r->stats.prefetch_used++;
            }
        } else if ((rec = rows_batch_find(r, ids[i]))) {
            /* Copied out first: making a slot may hand or free that batch. */
            memcpy(recs, rec, r->rec);
            install(r, ids[i], recs, 0);   /* clean: the batch takes it to the disk */
            r->stats.hits++;
        } else if (!rows_gone(r, ids[i])) {
            miss[nmiss++] = ids[i];
        }
    }
    if (nmiss && (st = tier_get_many(r->tier, r->space, nmiss, miss, recs, r->rec, found, err)))
        goto out;
    for (size_t i = 0; i < nmiss; i++)
        if (found[i] && !idmap_find(&r->map, miss[i], &s)) {   /* an id asked twice */
            install(r, miss[i], recs + i * r->rec, 0);
            r->stats.misses++;
            r->stats.loaded++;
        }
out:
    scratch_done(&r->load, recs);
    return st;
}

bool rows_prefetch_begin(struct rows *r, const uint64_t *ids, size_t n, size_t most,
                         uint64_t **want, size_t *nwant, struct ts_err *err)
{
    uint64_t s;

    *want = NULL;
    *nwant = 0;
    if (!r->tier || r->guarding || !n)
        return false;
    if (!(*want = malloc((n < most ? n : most) * sizeof(**want))) ||
        idmap_reserve(&r->guard, n < most ? n : most, err)) {
        free(*want);
        *want = NULL;
        return false;
    }
    for (size_t i = 0; i < n && *nwant < most; i++)
        if (!idmap_find(&r->map, ids[i], &s) && !idmap_find(&r->guard, ids[i], &s) &&
            !rows_batch_find(r, ids[i]) && !rows_gone(r, ids[i])) {
            idmap_put(&r->guard, ids[i], 0);
            (*want)[(*nwant)++] = ids[i];
        }
    r->guarding = true;
    return true;
}

void rows_prefetch_end(struct rows *r, uint64_t space, const uint64_t *want, size_t n,
                       const uint8_t *recs, const bool *found)
{
    uint64_t s, in = 0;

    if (r->space != space)   /* reset since: another table */
        return;
    for (size_t i = 0; i < n; i++)
        in += found[i] && idmap_find(&r->guard, want[i], &s);
    if (rows_reserve(r, in, NULL) == TS_OK)
        for (size_t i = 0; i < n; i++)
            if (found[i] && idmap_find(&r->guard, want[i], &s)) {
                struct row *w = install(r, want[i], recs + i * r->rec, ROW_PREFETCHED);

                w->pin = 0;            /* the next operation may evict it (a second chance) */
                r->stats.prefetched++;
            }
    idmap_clear(&r->guard);
    r->guarding = false;
}

ts_status rows_read(struct rows *r, uint64_t id, void *rec, bool *found, struct ts_err *err)
{
    const uint8_t *b;
    uint64_t s;

    *found = true;
    if (idmap_find(&r->map, id, &s)) {
        if (rec)
            memcpy(rec, rows_slot_at(r, s), r->rec);
        return TS_OK;
    }
    if (r->tier && (b = rows_batch_find(r, id))) {
        if (rec)
            memcpy(rec, b, r->rec);
        return TS_OK;
    }
    *found = false;
    if (!r->tier || rows_gone(r, id))
        return TS_OK;
    {
        uint8_t *buf = rec ? rec : malloc(r->rec);
        ts_status st;

        if (!buf)
            return ts_err_set(err, TS_ENOMEM, "no memory to read a row");
        st = tier_get_many(r->tier, r->space, 1, &id, buf, r->rec, found, err);
        if (!rec)
            free(buf);
        return st;
    }
}

/* b's ids that are still its rows (not dropped since), into out; how many. */
static size_t batch_ids(const struct tier_batch *b, uint64_t *out)
{
    size_t m = 0;
    uint64_t at;

    for (size_t k = 0; k < b->n; k++)
        if (idmap_find(&b->map, b->ids[k], &at))
            out[m++] = b->ids[k];
    return m;
}

ts_status rows_sorted_ids(struct rows *r, uint64_t **out, struct ts_err *err)
{
    uint64_t *ids, *disk = NULL;
    size_t m = 0, ndisk = 0, cap;
    ts_status st;

    if (r->tier && (st = tier_ids(r->tier, r->space, &disk, &ndisk, err)))
        return st;
    cap = ndisk + r->slots + r->pending + 1;
    if (!(ids = malloc(cap * sizeof(*ids)))) {
        free(disk);
        return ts_err_set(err, TS_ENOMEM, "no memory to sort %" PRIu64 " ids", r->n);
    }
    for (size_t k = 0; k < ndisk; k++)
        if (!rows_gone(r, disk[k]))
            ids[m++] = disk[k];
    free(disk);
    for (uint64_t s = 0; s < r->slots; s++)
        if (rows_slot_at(r, s)->id != IDMAP_EMPTY)
            ids[m++] = rows_slot_at(r, s)->id;
    if (r->fill)
        m += batch_ids(r->fill, ids + m);
    for (const struct tier_batch *b = r->newest; b; b = b->older)
        m += batch_ids(b, ids + m);
    qsort(ids, m, sizeof(*ids), table_cmp_u64);
    if (r->tier) {   /* a row is in memory, in a batch and on disk at once */
        size_t u = 0;

        for (size_t k = 0; k < m; k++)
            if (!u || ids[k] != ids[u - 1])
                ids[u++] = ids[k];
        m = u;
    }
    if (m != r->n) {
        free(ids);
        return ts_err_set(err, TS_EINTERNAL, "rows: %zu ids listed, %" PRIu64 " rows exist",
                          m, r->n);
    }
    *out = ids;
    return TS_OK;
}
