/* test_table_tier.c - lib/table's disk tier (issue 48): the memory tier's eviction (CLOCK with
 * a window and admission by frequency) and write-back against a reference model, its sketch,
 * and tables much larger than their memory giving the bits of a table held all in memory:
 * pulls, exact steps, rows, captures and loads. */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "table/internal.h"
#include "table/tier.h"

static char dir[64];
static struct ts_tier *tier;

static int open_tier(void **state)
{
    struct ts_err e = { 0 };

    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/ts-tier-test-XXXXXX");
    assert_non_null(mkdtemp(dir));
    if (ts_tier_open(dir, &tier, &e))
        fail_msg("ts_tier_open: %s", e.msg);
    return 0;
}

static int close_tier(void **state)
{
    char cmd[128];

    (void)state;
    ts_tier_close(tier);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- The memory tier against a reference: CLOCK with a window and admission ---- */

#define QUOTA 5                    /* rows in memory */
#define WMAX 1                     /* the window: a fifth of the quota (rows.c) */
#define MAXS 64
#define EMPTY UINT64_MAX

/* What rows.c is meant to do, written the plain way: slots, a hand, a reference bit a slot,
 * free slots reused last-freed first, the rows an operation needs pinned; a row coming in
 * joins the window (a list in arrival order); when room is needed and the window holds
 * WMAX rows or more, its oldest row not pinned joins CLOCK's rows if they have room, else
 * it is weighed against CLOCK's victim by the sketch (rows.c's own counts: the same ids were
 * noted), and the one seen less often leaves; otherwise CLOCK's victim leaves (or, with none,
 * the window's oldest not pinned). An evicted row that changed since the disk had it goes to
 * the batch being filled (a set, written at a flush). */
struct ref {
    uint64_t id[MAXS];
    int refbit[MAXS], unwritten[MAXS], pinned[MAXS], trial[MAXS];
    uint64_t free[MAXS];
    size_t nfree, slots, hand, resident, ntrial;
    size_t order[MAXS];            /* the window's slots, oldest first */
    size_t norder;
    uint64_t fill[MAXS];
    size_t nfill, written;
    const struct sketch *sk;
    size_t won, lost, joined;      /* the window's oldest: beat CLOCK's victim, lost, room */
};

static void ref_leave(struct ref *m, size_t s)
{
    if (m->unwritten[s]) {
        size_t k = 0;

        while (k < m->nfill && m->fill[k] != m->id[s])
            k++;
        if (k == m->nfill)
            m->fill[m->nfill++] = m->id[s];
    }
    if (m->trial[s])
        m->ntrial--;
    m->trial[s] = 0;
    m->id[s] = EMPTY;
    m->free[m->nfree++] = s;
    m->resident--;
    if (m->hand == s)
        m->hand = s + 1 < m->slots ? s + 1 : 0;
}

/* The hand stops on CLOCK's victim; EMPTY if none. */
static size_t ref_victim(struct ref *m)
{
    for (size_t seen = 0; m->slots && seen <= 2 * m->slots; seen++) {
        size_t s = m->hand;

        if (m->id[s] != EMPTY && !m->pinned[s] && !m->trial[s]) {
            if (!m->refbit[s])
                return s;
            m->refbit[s] = 0;
        }
        m->hand = s + 1 < m->slots ? s + 1 : 0;
    }
    return EMPTY;
}

/* The window's oldest row not pinned: its place in order, or EMPTY. */
static size_t ref_oldest(const struct ref *m)
{
    for (size_t k = 0; k < m->norder; k++)
        if (!m->pinned[m->order[k]])
            return k;
    return EMPTY;
}

static void ref_unlist(struct ref *m, size_t k)
{
    memmove(&m->order[k], &m->order[k + 1], (m->norder - k - 1) * sizeof(m->order[0]));
    m->norder--;
}

static int ref_make_room(struct ref *m)
{
    for (;;) {
        size_t k = m->ntrial >= WMAX ? ref_oldest(m) : EMPTY, t, v;

        if (k == EMPTY) {
            if ((v = ref_victim(m)) != EMPTY) {
                ref_leave(m, v);
                return 1;
            }
            if ((k = ref_oldest(m)) == EMPTY)
                return 0;
            t = m->order[k];
            ref_unlist(m, k);
            ref_leave(m, t);
            return 1;
        }
        t = m->order[k];
        ref_unlist(m, k);
        if (m->resident - m->ntrial < QUOTA - WMAX) {   /* CLOCK's rows have room */
            m->trial[t] = 0;
            m->ntrial--;
            m->joined++;
            continue;
        }
        v = ref_victim(m);
        if (v != EMPTY && sketch_get(m->sk, m->id[t]) > sketch_get(m->sk, m->id[v])) {
            ref_leave(m, v);
            m->trial[t] = 0;
            m->ntrial--;
            m->won++;
        } else {
            ref_leave(m, t);
            m->lost++;
        }
        return 1;
    }
}

static size_t ref_find(const struct ref *m, uint64_t id)
{
    for (size_t s = 0; s < m->slots; s++)
        if (m->id[s] == id)
            return s;
    return EMPTY;
}

/* A row comes into memory (loaded, unwritten 0; or new, 1), pinned, into the window. */
static void ref_install(struct ref *m, uint64_t id, int unwritten)
{
    size_t s;

    while (m->resident >= QUOTA && ref_make_room(m))
        ;
    s = m->nfree ? m->free[--m->nfree] : m->slots++;
    m->id[s] = id;
    m->refbit[s] = 1;
    m->unwritten[s] = unwritten;
    m->pinned[s] = 1;
    m->trial[s] = 1;
    m->ntrial++;
    m->order[m->norder++] = s;
    m->resident++;
}

static void ref_begin(struct ref *m)
{
    memset(m->pinned, 0, sizeof(m->pinned));
}

/* The value a row's first float has after version v of it. */
static float val(uint64_t id, int v)
{
    return (float)(id * 1000 + (uint64_t)v);
}

static void check_same(struct rows *r, const struct ref *m)
{
    size_t in_ref = 0;
    uint64_t slot;

    for (size_t s = 0; s < m->slots; s++) {
        if (m->id[s] == EMPTY)
            continue;
        in_ref++;
        if (!idmap_find(&r->map, m->id[s], &slot))   /* rows_find would set its bit */
            fail_msg("row %lu: in memory in the reference, not in rows.c",
                     (unsigned long)m->id[s]);
        if (!(rows_slot_at(r, slot)->flags & ROW_TRIAL) != !m->trial[s])
            fail_msg("row %lu: %s the window in the reference, not in rows.c",
                     (unsigned long)m->id[s], m->trial[s] ? "in" : "out of");
    }
    assert_int_equal(r->resident, in_ref);
    assert_int_equal(r->ntrial, m->ntrial);
}

static void t_admission_against_reference(void **state)
{
    /* ops: positive: that row, made if new or loaded (and changed when the op is odd);
     * 0: a flush. Several ids between two -1 are one operation. */
    static const int64_t ops[] = {
        1, 2, 3, 4, 5, 6, 7, 8, 2, 9, 10, 0, 1, 3, 11, -1, 12, 13, 14, -1, 4, 5, 0, 15, 2, 16,
        1, 17, 18, 0, -1, 26, 27, 28, -1, -1, 19, 20, 21, 22, -1, 3, 3, 1, 23, 0, 24, 25, 6, 2, 10,
    };
    struct ts_err e = { 0 };
    struct ref m = { 0 };
    int version[64] = { 0 };
    size_t rec = sizeof(struct row) + 4 * sizeof(float);
    struct rows r;
    uint8_t buf[256];
    bool found;
    size_t k = 0, op = 0;

    (void)state;
    memset(m.id, 0xff, sizeof(m.id));
    rows_init(&r, rec, tier, NULL, rec);
    while (k < sizeof(ops) / sizeof(ops[0])) {
        uint64_t ids[8];
        size_t n = 0;

        if (ops[k] == 0) {   /* flush: the batch goes to disk */
            rows_flush(&r);
            m.written += m.nfill;
            m.nfill = 0;
            assert_int_equal(r.stats.written, m.written);
            k++;
            continue;
        }
        if (ops[k] == -1) {
            for (k++; k < sizeof(ops) / sizeof(ops[0]) && ops[k] > 0 && n < 8; k++)
                ids[n++] = (uint64_t)ops[k];
            k += k < sizeof(ops) / sizeof(ops[0]) && ops[k] == -1;
        } else {
            ids[n++] = (uint64_t)ops[k++];
        }
        op++;
        rows_begin(&r, 100);
        r.quota = QUOTA;           /* and batches that never wait: written at a flush only */
        r.pending_max = 1000;
        ref_begin(&m);
        m.sk = &r.freq;            /* rows_note below counts the ids both see */
        r.gen = op;                /* every operation a step of its own */
        rows_note(&r, ids, n);
        /* One id an operation, or several that are all new: the reference's order. */
        assert_int_equal(rows_load(&r, ids, n, &e), TS_OK);
        assert_int_equal(rows_reserve(&r, n, &e), TS_OK);
        for (size_t i = 0; i < n; i++) {
            struct row *w = rows_find(&r, ids[i]);
            size_t s = ref_find(&m, ids[i]);

            if (s != EMPTY) {
                m.refbit[s] = 1;
                m.pinned[s] = 1;
            } else {
                ref_install(&m, ids[i], !w && !version[ids[i]]);
            }
            if (!w) {
                if (!version[ids[i]]) {
                    w = rows_add(&r, ids[i]);
                    version[ids[i]] = 1;
                    row_values(w)[0] = val(ids[i], 1);
                } else {
                    fail_msg("row %lu: exists, was not loaded", (unsigned long)ids[i]);
                }
            }
            assert_true(row_values(w)[0] == val(ids[i], version[ids[i]]));
            if (op % 2) {   /* changed: it must reach the disk when evicted */
                version[ids[i]]++;
                row_values(w)[0] = val(ids[i], version[ids[i]]);
                w->flags |= ROW_UNWRITTEN;
                m.unwritten[ref_find(&m, ids[i])] = 1;
            }
        }
        check_same(&r, &m);
    }
    assert_true(r.stats.evictions > 10);
    /* Every way out of the window was taken. */
    assert_true(m.won > 0 && m.lost > 0 && m.joined > 0);
    rows_flush(&r);
    /* Every row, wherever it is now, has its last version; the count is right. */
    for (uint64_t id = 1; id < 64; id++) {
        assert_int_equal(rows_read(&r, id, buf, &found, &e), TS_OK);
        assert_int_equal(found, version[id] > 0);
        if (found)
            assert_true(row_values((struct row *)(void *)buf)[0] == val(id, version[id]));
    }
    {
        uint64_t *ids;
        size_t made = 0;

        for (uint64_t id = 1; id < 64; id++)
            made += version[id] > 0;
        assert_int_equal(r.n, made);
        assert_int_equal(rows_sorted_ids(&r, &ids, &e), TS_OK);
        for (size_t i = 1; i < made; i++)
            assert_true(ids[i - 1] < ids[i]);
        free(ids);
    }
    rows_fini(&r);
}

/* One operation on rows with a quota of 10 (a window of 2) at the table's step gen: row id
 * made (rows_add), as a push that creates it does. */
static void op_add(struct rows *r, uint64_t gen, uint64_t id)
{
    struct ts_err e = { 0 };

    r->gen = gen;
    rows_begin(r, 100);
    r->quota = 10;
    r->pending_max = 1000;
    rows_note(r, &id, 1);
    assert_int_equal(rows_load(r, &id, 1, &e), TS_OK);
    assert_int_equal(rows_reserve(r, 1, &e), TS_OK);
    row_values(rows_add(r, id))[0] = (float)id;
    assert_true(r->resident <= 10);
}

/* A row in the window is not weighed against CLOCK's victim during the step it came in (a
 * step's pulls and its push are several operations: a row one rank's pull read stays for
 * the push), and memory keeps to its quota meanwhile; at the next step it is. */
static void t_window_keeps_a_steps_rows(void **state)
{
    size_t rec = sizeof(struct row) + 4 * sizeof(float);
    struct rows r;
    uint64_t s;

    (void)state;
    rows_init(&r, rec, tier, NULL, rec);
    for (uint64_t id = 1; id <= 20; id++)   /* a step each */
        op_add(&r, id, id);
    for (uint64_t id = 500; id <= 505; id++) {   /* one step, six operations */
        op_add(&r, 100, id);
        assert_true(idmap_find(&r.map, 500, &s));
    }
    for (uint64_t id = 506; id <= 530; id++)    /* the next step */
        op_add(&r, 101, id);
    assert_false(idmap_find(&r.map, 500, &s));
    rows_flush(&r);
    rows_fini(&r);
}

/* A scan of many rows within one step (a fingerprint, a capture: many operations, all of the
 * same step) brings every row into the window, where the step
 * keeps them from being weighed; CLOCK's rows run out, and the window's oldest go. CLOCK's
 * hand must not sweep every slot for each row then: it made the end of test_big_table's run
 * (its fingerprint) take 90 s more. Its work stays linear in the rows. */
static void t_scan_within_a_step_stays_linear(void **state)
{
    size_t rec = sizeof(struct row) + 4 * sizeof(float);
    struct rows r;
    uint64_t s;

    (void)state;
    rows_init(&r, rec, tier, NULL, rec);
    for (uint64_t id = 1; id <= 20; id++)      /* some rows CLOCK holds, steps of their own */
        op_add(&r, id, id);
    for (uint64_t id = 1000; id < 6000; id++)  /* the scan: one step */
        op_add(&r, 50, id);
    assert_true(r.resident <= 10);
    assert_true(idmap_find(&r.map, 5999, &s));
    assert_true(r.swept < 4 * 6000);
    rows_flush(&r);
    rows_fini(&r);
}

/* A load whose rows brought in from the disk evict rows of the same load that were in memory
 * when it began (not pinned yet: they come later in its ids), which it then brings in again:
 * more rows enter the window than were missing at the start. The window's list must have room
 * for them: reserved for the missing rows alone, the load wrote past it (a shard died of it
 * under bench/table_tiers.py at 1% with prefetch). Here the list's room is made exactly the
 * missing rows' count, and the rows in memory come last. */
static void t_load_that_evicts_its_own_rows(void **state)
{
    size_t rec = sizeof(struct row) + 4 * sizeof(float);
    uint64_t ids[64], s;
    struct ts_err e = { 0 };
    struct rows r;
    size_t m, n = 0;

    (void)state;
    rows_init(&r, rec, tier, NULL, rec);
    for (uint64_t id = 1; id <= 60; id++)   /* a step each: the last ones stay in memory */
        op_add(&r, id, id);
    assert_true(r.trial_cap > r.trial_n);
    m = r.trial_cap - r.trial_n;            /* the list's room, exactly */
    assert_true(m <= 40);
    for (uint64_t id = 1; id <= 50 && n < m; id++)
        if (!idmap_find(&r.map, id, &s))
            ids[n++] = id;                  /* on disk or in a batch */
    assert_int_equal(n, m);
    for (uint64_t id = 1; id <= 60; id++)
        if (idmap_find(&r.map, id, &s) && n < 64)
            ids[n++] = id;                  /* in memory, last */
    assert_true(n > m);
    r.gen = 61;
    rows_begin(&r, 100);
    r.quota = 10;
    assert_int_equal(rows_load(&r, ids, n, &e), TS_OK);
    assert_true(r.trial_n <= r.trial_cap);
    for (size_t i = 0; i < n; i++)
        assert_true(idmap_find(&r.map, ids[i], &s));
    rows_flush(&r);
    rows_fini(&r);
}

/* Rows read back after the tier's pages left the page cache (tier_drop_cache): the load asks
 * the kernel for their pages first (tier.c, ask_first: its sample finds them cold), and every
 * row comes back with its value. */
static void t_cold_rows_read_back(void **state)
{
    size_t rec = sizeof(struct row) + 4 * sizeof(float);
    uint64_t ids[100], s;
    struct ts_err e = { 0 };
    struct rows r;

    (void)state;
    rows_init(&r, rec, tier, NULL, rec);
    for (uint64_t id = 1; id <= 300; id++)
        op_add(&r, id, id);
    rows_flush(&r);
    tier_drop_cache(tier);
    for (uint64_t i = 0; i < 100; i++)
        ids[i] = i + 1;                      /* long evicted: on disk */
    r.gen = 301;
    rows_begin(&r, 100);
    r.quota = 200;
    assert_int_equal(rows_load(&r, ids, 100, &e), TS_OK);
    for (uint64_t i = 0; i < 100; i++) {
        assert_true(idmap_find(&r.map, ids[i], &s));
        assert_true(row_values(rows_slot_at(&r, s))[0] == (float)ids[i]);
    }
    rows_flush(&r);
    rows_fini(&r);
}

/* The admission's sketch: a count never below the true one, and halved as counts age. */
static void t_sketch_counts_and_ages(void **state)
{
    struct sketch sk = { 0 };
    unsigned before, after;

    (void)state;
    assert_int_equal(sketch_get(&sk, 7), 0);   /* none yet: every count 0, adds ignored */
    sketch_add(&sk, 7);
    assert_int_equal(sketch_get(&sk, 7), 0);
    assert_true(sketch_fit(&sk, 50));
    assert_int_equal(sketch_bytes(&sk), 4 * 64);   /* 4 rows of 64 counters */
    for (int i = 0; i < 100; i++)
        sketch_add(&sk, 7);
    for (uint64_t id = 1000; id < 1100; id++)
        sketch_add(&sk, id);
    before = sketch_get(&sk, 7);
    assert_true(before >= 100);
    for (uint64_t id = 1000; id < 1100; id++)
        assert_true(sketch_get(&sk, id) >= 1);
    /* 200 adds so far; the halving comes at 20 x 64 = 1280. */
    for (uint64_t id = 2000; id < 3080; id++)
        sketch_add(&sk, id);
    after = sketch_get(&sk, 7);
    assert_true(after >= 50 && after <= (before + 1) / 2 + 1);
    assert_true(sketch_fit(&sk, 1000));            /* grown: empty again */
    assert_int_equal(sketch_bytes(&sk), 4 * 1024);
    assert_int_equal(sketch_get(&sk, 7), 0);
    sketch_fini(&sk);
}

/* A prefetch's disk read races an operation that brings the same row in and changes it: the
 * operation's bits stay; the rows no operation touched come in, unpinned. Rows dropped (row
 * lifetime) during a prefetch's read do not come back. */
static void t_prefetch_keeps_what_an_operation_changed(void **state)
{
    struct ts_err e = { 0 };
    size_t rec = sizeof(struct row) + 4 * sizeof(float);
    uint64_t ids[4] = { 1, 2, 3, 4 }, *want, *none, s;
    uint8_t recs[4 * 64];
    bool found[4];
    struct rows r;
    size_t nwant;

    (void)state;
    rows_init(&r, rec, tier, NULL, rec);
    rows_begin(&r, 100);
    assert_int_equal(rows_reserve(&r, 4, &e), TS_OK);
    for (int i = 0; i < 4; i++) {
        struct row *w = rows_add(&r, ids[i]);
        row_values(w)[0] = (float)ids[i];
        w->step = 7;
    }
    rows_begin(&r, 100);
    r.quota = 0;                 /* every row out: CLOCK empties memory to the disk */
    assert_int_equal(rows_reserve(&r, 1, &e), TS_OK);
    row_values(rows_add(&r, 9))[0] = 9.0f;
    rows_find(&r, 9)->step = 7;
    rows_flush(&r);
    assert_int_equal(r.resident, 1);
    assert_true(rows_prefetch_begin(&r, ids, 4, 100, &want, &nwant, &e));
    assert_int_equal(nwant, 4);
    assert_false(rows_prefetch_begin(&r, ids, 4, 100, &none, &nwant, &e));   /* one at a time */
    assert_null(none);
    assert_int_equal(tier_get_many(tier, r.space, 4, ids, recs, rec, found, &e), TS_OK);
    /* Meanwhile an operation brings row 2 in and changes it. */
    rows_begin(&r, 100);
    assert_int_equal(rows_load(&r, &ids[1], 1, &e), TS_OK);
    row_values(rows_find(&r, 2))[0] = 42.0f;
    rows_find(&r, 2)->flags |= ROW_UNWRITTEN;
    rows_prefetch_end(&r, r.space, ids, 4, recs, found);
    free(want);
    assert_true(row_values(rows_find(&r, 2))[0] == 42.0f);
    for (int i = 0; i < 4; i++)
        assert_true(idmap_find(&r.map, ids[i], &s));
    assert_int_equal(r.stats.prefetched, 3);
    assert_int_equal(r.resident, 5);
    /* Used by an operation: counted once. */
    rows_begin(&r, 100);
    assert_int_equal(rows_load(&r, ids, 4, &e), TS_OK);
    assert_int_equal(r.stats.prefetch_used, 3);
    assert_int_equal(r.stats.misses, 1);   /* row 2's load, before */
    /* Dropped (row lifetime) while a prefetch reads them: they do not come back. */
    for (int i = 0; i < 4; i++) {
        rows_find(&r, ids[i])->step = 0;
        rows_find(&r, ids[i])->flags |= ROW_UNWRITTEN;
    }
    rows_begin(&r, 100);
    r.quota = 0;
    assert_int_equal(rows_reserve(&r, 1, &e), TS_OK);
    row_values(rows_add(&r, 10))[0] = 10.0f;
    rows_find(&r, 10)->step = 5;
    rows_flush(&r);
    assert_true(rows_prefetch_begin(&r, ids, 4, 100, &want, &nwant, &e));
    assert_int_equal(nwant, 4);
    assert_int_equal(tier_get_many(tier, r.space, 4, ids, recs, rec, found, &e), TS_OK);
    assert_true(found[0] && found[3]);
    {
        bool partial;
        uint64_t before = r.n;

        assert_int_equal(rows_expire(&r, 1, NULL, &partial), 4);   /* rows 1..4: step 0 */
        assert_false(partial);
        assert_int_equal(r.n, before - 4);
    }
    rows_prefetch_end(&r, r.space, ids, 4, recs, found);
    free(want);
    for (int i = 0; i < 4; i++) {
        bool there = true;

        assert_int_equal(rows_read(&r, ids[i], NULL, &there, &e), TS_OK);
        assert_false(there);
    }
    rows_flush(&r);   /* the deletes written: the disk has none of them either */
    assert_int_equal(tier_get_many(tier, r.space, 4, ids, recs, rec, found, &e), TS_OK);
    assert_false(found[0] || found[1] || found[2] || found[3]);
    rows_fini(&r);
}

/* ---- The store under the tier, against a map ---- */

#define SROWS 6000                 /* 1.2 MB of 200-byte records: several segments */
#define SREC 200

static void rec_fill(uint8_t *rec, uint64_t id, uint32_t version)
{
    for (size_t k = 0; k < SREC; k++)
        rec[k] = (uint8_t)(id * 31 + version * 7 + k);
}

/* A batch of the ids [lo, hi) at version v (one record each) and the deletes dels[0..nd). */
static void put_batch(uint64_t space, uint64_t lo, uint64_t hi, uint32_t v,
                      const uint64_t *dels, size_t nd)
{
    struct tier_batch *b = calloc(1, sizeof(*b));

    assert_non_null(b);
    b->space = space;
    b->rec = SREC;
    b->n = hi - lo;
    b->ids = malloc((b->n ? b->n : 1) * sizeof(*b->ids));
    b->recs = malloc((b->n ? b->n : 1) * SREC);
    for (uint64_t id = lo; id < hi; id++) {
        b->ids[id - lo] = id;
        rec_fill(b->recs + (id - lo) * SREC, id, v);
    }
    if (nd) {
        b->dels = malloc(nd * sizeof(*b->dels));
        memcpy(b->dels, dels, nd * sizeof(*b->dels));
        b->ndels = nd;
    }
    tier_submit(tier, b);
    assert_true(tier_wait(tier, b));
    tier_batch_free(b);
}

/* Every id below SROWS: found with version[id]'s bytes, or absent where version[id] is 0. */
static void check_store(uint64_t space, const uint32_t *version)
{
    static uint8_t recs[SROWS * SREC], want[SREC];
    static uint64_t ids[SROWS];
    static bool found[SROWS];
    struct ts_err e = { 0 };
    uint64_t *listed;
    size_t n, present = 0;

    for (uint64_t id = 0; id < SROWS; id++)
        ids[id] = id;
    assert_int_equal(tier_get_many(tier, space, SROWS, ids, recs, SREC, found, &e), TS_OK);
    for (uint64_t id = 0; id < SROWS; id++) {
        assert_int_equal(found[id], version[id] != 0);
        if (version[id]) {
            rec_fill(want, id, version[id]);
            assert_memory_equal(recs + id * SREC, want, SREC);
            present++;
        }
    }
    assert_int_equal(tier_ids(tier, space, &listed, &n, &e), TS_OK);
    assert_int_equal(n, present);
    for (size_t i = 0; i < n; i++)
        assert_true(listed[i] < SROWS && version[listed[i]]);
    free(listed);
}

static bool exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* The slot file: rows written, overwritten in place, deleted (their slots reused), a store
 * dropped with its file, another store beside it untouched; a second tier on the directory
 * refused; a dead shard's files removed by the next open. */
static void t_store_against_a_map(void **state)
{
    static uint32_t version[SROWS], other[SROWS];
    uint64_t a = tier_space(tier), b = tier_space(tier), dels[SROWS / 3];
    struct ts_tier *second = NULL;
    struct ts_err e = { 0 };
    uint64_t bytes;
    char path[128];
    uint8_t rec[SREC];
    bool found;

    (void)state;
    assert_int_equal(tier_get_many(tier, a, 1, dels, rec, SREC, &found, &e), TS_OK);
    assert_false(found);                                   /* no store yet: nothing */
    for (uint64_t lo = 0; lo < SROWS; lo += 1000) {        /* batches of 1000 new rows */
        put_batch(a, lo, lo + 1000, 1, NULL, 0);
        for (uint64_t id = lo; id < lo + 1000; id++)
            version[id] = 1;
    }
    put_batch(b, 0, 10, 5, NULL, 0);
    for (uint64_t id = 0; id < 10; id++)
        other[id] = 5;
    check_store(a, version);
    bytes = tier_space_bytes(tier, a);
    assert_true(bytes >= (uint64_t)SROWS * SREC && bytes < 4ull * SROWS * SREC);
    put_batch(a, 1500, 2500, 2, NULL, 0);                  /* overwritten in place */
    for (uint64_t id = 1500; id < 2500; id++)
        version[id] = 2;
    for (size_t i = 0; i < SROWS / 3; i++) {               /* every third row deleted */
        dels[i] = 3 * i;
        version[3 * i] = 0;
    }
    put_batch(a, 0, 0, 0, dels, SROWS / 3);
    check_store(a, version);
    /* new rows and deleted ones back, in one batch with deletes: the freed slots reused */
    put_batch(a, 0, 900, 3, dels + 1, 1);                  /* deletes row 3 first, then puts */
    for (uint64_t id = 0; id < 900; id++)
        version[id] = 3;
    check_store(a, version);
    assert_int_equal(tier_space_bytes(tier, a), bytes);    /* no new segment */
    check_store(b, other);
    /* the store dropped: its rows and its file gone, the other store as it was */
    snprintf(path, sizeof(path), "%s/space-%" PRIu64 ".rows", dir, a);
    assert_true(exists(path));
    tier_drop_space(tier, a);
    put_batch(b, 0, 0, 0, NULL, 0);                        /* after the drop (FIFO) */
    assert_false(exists(path));
    memset(version, 0, sizeof(version));
    check_store(a, version);
    assert_int_equal(tier_space_bytes(tier, a), 0);
    check_store(b, other);
    /* one tier a directory */
    assert_int_equal(ts_tier_open(dir, &second, &e), TS_EIO);
    assert_non_null(strstr(e.msg, "another process"));
    assert_null(second);
    /* what a killed shard left is removed by the next open */
    {
        char d2[64], stale[128];
        FILE *f;

        snprintf(d2, sizeof(d2), "/tmp/ts-tier-stale-XXXXXX");
        assert_non_null(mkdtemp(d2));
        snprintf(stale, sizeof(stale), "%s/space-7.rows", d2);
        assert_non_null(f = fopen(stale, "w"));
        fclose(f);
        assert_int_equal(ts_tier_open(d2, &second, &e), TS_OK);
        assert_false(exists(stale));
        ts_tier_close(second);
        snprintf(stale, sizeof(stale), "rm -rf '%s'", d2);
        assert_int_equal(system(stale), 0);
    }
}

/* ---- Whole tables: a tiered one gives the bits of one all in memory ---- */

static struct ts_job job(uint32_t workers)
{
    struct ts_job j;
    assert_int_equal(ts_job_init(&j, "tier-job", workers, true, "sgd", 64, NULL), TS_OK);
    assert_int_equal(ts_job_set_mode(&j, TS_MODE_BSP, 0, NULL), TS_OK);
    return j;
}

static struct ts_table *mk(const struct ts_job *j, struct ts_table_budget *b)
{
    struct ts_table_cfg c = { .name = "xemb", .dim = 16, .max_id = 1u << 20,
                              .init = "normal:0.1", .seed = 7, .optimizer = "adagrad:lr=0.05" };
    struct ts_table *t;
    struct ts_err e = { 0 };

    if (ts_table_create(j, &c, b, &t, &e))
        fail_msg("ts_table_create: %s", e.msg);
    return t;
}

/* A skewed draw of n sorted unique ids below 4000, as a Zipf-like feature. */
static size_t draw(uint64_t *ids, size_t n, unsigned *seed)
{
    size_t m = 0;

    for (size_t i = 0; i < n; i++) {
        double u = (double)rand_r(seed) / RAND_MAX;
        ids[m++] = (uint64_t)(4000.0 * u * u * u);
    }
    for (size_t i = 1; i < m; i++)   /* insertion sort, then unique */
        for (size_t j = i; j && ids[j - 1] > ids[j]; j--) {
            uint64_t x = ids[j];
            ids[j] = ids[j - 1];
            ids[j - 1] = x;
        }
    size_t u = 0;
    for (size_t i = 0; i < m; i++)
        if (!u || ids[u - 1] != ids[i])
            ids[u++] = ids[i];
    return u;
}

static void push_both(struct ts_table *a, struct ts_table *b, uint32_t rank, uint64_t step,
                      const uint64_t *ids, size_t n, const float *g)
{
    struct ts_row_push in = { .rank = rank, .step = step, .n = n, .ids = ids, .grad = g,
                              .encoding = TS_ENC_FIXED_F32 };
    struct ts_err e = { 0 };
    bool applied;

    if (ts_table_push(a, &in, &applied, &e) || ts_table_push(b, &in, &applied, &e))
        fail_msg("push: %s", e.msg);
}

static void same_hash(struct ts_table *a, struct ts_table *b)
{
    char ha[65], hb[65];
    struct ts_err e = { 0 };

    assert_int_equal(ts_table_sha256(&a, 1, ha, &e), TS_OK);
    if (ts_table_sha256(&b, 1, hb, &e))
        fail_msg("sha256: %s", e.msg);
    assert_string_equal(ha, hb);
}

static void t_tiered_table_is_exact(void **state)
{
    struct ts_job j = job(2);
    struct ts_table_budget mem, small;
    struct ts_table *a, *b;
    struct ts_err e = { 0 };
    struct ts_table_tiers st;
    struct ts_table_capture ca, cb;
    uint64_t ids[400];
    float g[400 * 16], pa[400 * 16], pb[400 * 16];
    unsigned seed = 11;
    bool armed, ready;

    (void)state;
    ts_table_budget_init(&mem, 0);
    a = mk(&j, &mem);
    ts_table_budget_init(&small, 0);
    small.tier = tier;
    b = mk(&j, &small);
    small.limit = 150 * ts_table_row_bytes(b);   /* a few percent of the rows */
    assert_int_equal(ts_table_arm(a, 12, true, &armed, &e), TS_OK);
    assert_int_equal(ts_table_arm(b, 12, true, &armed, &e), TS_OK);
    for (uint64_t step = 0; step < 25; step++) {
        for (uint32_t rank = 0; rank < 2; rank++) {
            size_t n = draw(ids, 60, &seed);

            if (step % 2)   /* a prefetch changes no bit */
                ts_table_prefetch(b, ids, n);
            assert_int_equal(ts_table_pull(a, rank, step, 1000, ids, n, pa, &e), TS_OK);
            assert_int_equal(ts_table_pull(b, rank, step, 1000, ids, n, pb, &e), TS_OK);
            assert_memory_equal(pa, pb, n * 16 * sizeof(float));
            for (size_t i = 0; i < n * 16; i++)
                g[i] = (float)((rand_r(&seed) % 2001) - 1000) / 997.0f;
            push_both(a, b, rank, step, ids, n, g);
        }
        if (step == 12) {   /* the full capture, taken at step 12, is the same records */
            assert_int_equal(ts_table_capture_take(a, 12, &ca, &ready, &e), TS_OK);
            assert_true(ready);
            assert_int_equal(ts_table_capture_take(b, 12, &cb, &ready, &e), TS_OK);
            assert_true(ready);
            assert_int_equal(ca.n, cb.n);
            assert_memory_equal(ca.records, cb.records, ca.n * ts_table_record_bytes(a));
            free(cb.records);
        }
    }
    assert_int_equal(ts_table_count(a), ts_table_count(b));
    same_hash(a, b);
    ts_table_tiers(b, &st);
    assert_true(st.tiered);
    assert_true(st.evictions > 1000);
    assert_true(st.misses > 100);
    assert_true(st.resident <= st.quota_rows);
    assert_true(st.rows > 10 * st.quota_rows / 2);
    assert_true(st.mem_bytes <= small.limit);
    assert_true(st.prefetched > 100);
    assert_true(st.prefetch_used > st.prefetched / 2);
    {
        float va[48], vb[48];
        struct ts_row_meta ma, mb;
        uint64_t *ia, *ib;
        size_t na, nb;

        assert_int_equal(ts_table_ids(a, 25, 100, &ia, &na, &e), TS_OK);
        assert_int_equal(ts_table_ids(b, 25, 100, &ib, &nb, &e), TS_OK);
        assert_int_equal(na, nb);
        assert_memory_equal(ia, ib, na * sizeof(*ia));
        for (size_t i = 0; i < na; i += 37) {
            assert_int_equal(ts_table_row(a, ia[i], va, va + 16, &ma, &e), TS_OK);
            assert_int_equal(ts_table_row(b, ia[i], vb, vb + 16, &mb, &e), TS_OK);
            assert_memory_equal(va, vb, 32 * sizeof(float));
            assert_int_equal(ma.updates, mb.updates);
        }
        free(ia);
        free(ib);
    }
    /* A rollback: b emptied and loaded back from a's capture of step 12, then both go on:
     * a is loaded too, so both continue from the same rows. */
    ts_table_reset(a);
    ts_table_reset(b);
    assert_int_equal(ts_table_count(b), 0);
    assert_int_equal(ts_table_load(a, ca.records, ca.n, NULL, NULL, &e), TS_OK);
    assert_int_equal(ts_table_load(b, ca.records, ca.n, NULL, NULL, &e), TS_OK);
    assert_int_equal(ts_table_set_step(a, 13, &e), TS_OK);
    assert_int_equal(ts_table_set_step(b, 13, &e), TS_OK);
    same_hash(a, b);
    for (uint64_t step = 13; step < 20; step++)
        for (uint32_t rank = 0; rank < 2; rank++) {
            size_t n = draw(ids, 60, &seed);

            for (size_t i = 0; i < n * 16; i++)
                g[i] = (float)((rand_r(&seed) % 2001) - 1000) / 997.0f;
            push_both(a, b, rank, step, ids, n, g);
        }
    same_hash(a, b);
    free(ca.records);
    ts_table_free(a);
    ts_table_free(b);
    assert_int_equal(ts_table_budget_used(&small), 0);
}

/* The disk refuses every write (as when full): a call that needs rows to leave memory is
 * refused with TS_ENOMEM naming the tier, nothing of it taken; every row stays readable with
 * its bits; once the disk takes writes again the same call goes through and the table ends
 * as one held in memory. */
static void t_full_disk_refuses_and_loses_nothing(void **state)
{
    struct ts_job j = job(2);
    struct ts_table_budget mem, small;
    struct ts_table *a, *b;
    struct ts_err e = { 0 };
    uint64_t ids[400];
    float g[400 * 16];
    unsigned seed = 5;
    bool refused = false, applied;

    (void)state;
    ts_table_budget_init(&mem, 0);
    a = mk(&j, &mem);
    ts_table_budget_init(&small, 0);
    small.tier = tier;
    b = mk(&j, &small);
    small.limit = 150 * ts_table_row_bytes(b);
    for (uint64_t step = 0; step < 40; step++) {
        if (step == 5)
            tier_set_full(tier, true);
        for (uint32_t rank = 0; rank < 2; rank++) {
            size_t n = draw(ids, 60, &seed);
            struct ts_row_push in = { .rank = rank, .step = step, .n = n, .ids = ids,
                                      .grad = g, .encoding = TS_ENC_FIXED_F32 };
            ts_status st;

            for (size_t i = 0; i < n * 16; i++)
                g[i] = (float)((rand_r(&seed) % 2001) - 1000) / 997.0f;
            while ((st = ts_table_push(b, &in, &applied, &e)) == TS_ENOMEM) {
                assert_non_null(strstr(e.msg, "cannot take rows"));
                assert_non_null(strstr(e.msg, dir));
                if (!refused) {   /* refused: nothing taken, every row as a's */
                    refused = true;
                    same_hash(a, b);
                    tier_set_full(tier, false);   /* space again */
                }
                usleep(50 * 1000);   /* the writer tries again every 500 ms */
            }
            assert_int_equal(st, TS_OK);
            assert_int_equal(ts_table_push(a, &in, &applied, &e), TS_OK);
        }
    }
    assert_true(refused);
    same_hash(a, b);
    ts_table_free(a);
    ts_table_free(b);
}

/* Row lifetime: rows not updated in the last T steps are dropped at each step that is a
 * multiple of T, by the same rule in memory, over the disk tier and split over two stores
 * (a reference model of the rule gives the rows); a row touched again is made anew from its
 * initializer; the capture after a sweep that dropped rows is full. */
/* Push rows ids [lo, hi) at step of rank; the status of the push. */
static ts_status push_range(struct ts_table *t, uint32_t rank, uint64_t step, uint64_t lo,
                            uint64_t hi, struct ts_err *e)
{
    static uint64_t ids[512];
    static float g[512 * 16];
    struct ts_row_push in = { .rank = rank, .step = step, .n = hi - lo, .ids = ids, .grad = g,
                              .encoding = TS_ENC_FIXED_F32 };
    bool applied;

    for (uint64_t id = lo; id < hi; id++)
        ids[id - lo] = id;
    for (size_t i = 0; i < (hi - lo) * 16; i++)
        g[i] = 0.25f;
    return ts_table_push(t, &in, &applied, e);
}

/* The tier's index is budgeted (--table-index-mem): each row that exists costs
 * TS_TABLE_INDEX_ROW_BYTES of budget.index whatever its tier; a step that would create rows
 * past index_limit is refused with nothing taken (the other rank's push kept for the step),
 * a smaller one then goes through; freeing the table gives everything back. */
static void t_index_budget_refuses_past_it(void **state)
{
    struct ts_job j = job(2);
    struct ts_table_budget b;
    struct ts_table *t, *twin;
    struct ts_table_budget mem;
    struct ts_err e = { 0 };
    char before[65], after[65];

    (void)state;
    ts_table_budget_init(&b, 0);
    b.tier = tier;
    b.index_limit = 100 * TS_TABLE_INDEX_ROW_BYTES;
    t = mk(&j, &b);
    b.limit = 20 * ts_table_row_bytes(t);             /* 20 rows in memory: most on disk */
    ts_table_budget_init(&mem, 0);
    twin = mk(&j, &mem);
    assert_int_equal(push_range(t, 0, 0, 0, 60, &e), TS_OK);
    assert_int_equal(atomic_load(&b.index), 0);       /* charged when the step applies */
    assert_int_equal(push_range(t, 1, 0, 30, 80, &e), TS_OK);
    assert_int_equal(push_range(twin, 0, 0, 0, 60, &e), TS_OK);
    assert_int_equal(push_range(twin, 1, 0, 30, 80, &e), TS_OK);
    assert_int_equal(ts_table_count(t), 80);
    assert_int_equal(atomic_load(&b.index), 80 * TS_TABLE_INDEX_ROW_BYTES);
    /* Step 1: rank 0 brings 40 new ids (80..119), rank 1 the last push: 120 rows > 100. */
    assert_int_equal(push_range(t, 0, 1, 60, 120, &e), TS_OK);
    assert_int_equal(ts_table_sha256(&t, 1, before, &e), TS_OK);
    assert_int_equal(push_range(t, 1, 1, 0, 10, &e), TS_ENOMEM);
    assert_non_null(strstr(e.msg, "--table-index-mem"));
    assert_int_equal(ts_table_count(t), 80);
    assert_int_equal(ts_table_step(t), 1);
    assert_int_equal(ts_table_sha256(&t, 1, after, &e), TS_OK);
    assert_string_equal(before, after);
    assert_int_equal(atomic_load(&b.index), 80 * TS_TABLE_INDEX_ROW_BYTES);
    /* Room made by another table's rows going (its free): the step goes through. */
    b.index_limit = 120 * TS_TABLE_INDEX_ROW_BYTES;
    assert_int_equal(push_range(t, 1, 1, 0, 10, &e), TS_OK);
    assert_int_equal(push_range(twin, 0, 1, 60, 120, &e), TS_OK);
    assert_int_equal(push_range(twin, 1, 1, 0, 10, &e), TS_OK);
    assert_int_equal(ts_table_count(t), 120);
    assert_int_equal(atomic_load(&b.index), 120 * TS_TABLE_INDEX_ROW_BYTES);
    same_hash(t, twin);
    ts_table_free(t);
    ts_table_free(twin);
    assert_int_equal(atomic_load(&b.index), 0);
}

/* The clocks of t_ttl_seconds: the head's, and a copy's that never moves (alone, it would
 * never sweep). */
static int64_t head_ms, copy_ms;
static int64_t head_clock(void)
{
    return head_ms;
}
static int64_t copy_clock(void)
{
    return copy_ms;
}

/* Row lifetime by the clock (table.h): with ttl_seconds 10 and a step a second, a row last
 * updated 2T + 1 s or more ago is gone, one updated less than T ago is there, and a row
 * touched every step stays; the copy fed the head's pushes with its plan drops exactly the
 * head's rows (the same fingerprint every step), though its own clock stands still, and a
 * plan no head makes (distance 0) drops nothing; a reset
 * starts the lifetime again; exact jobs, a second lifetime and ssp are refused naming the
 * field. */
static void t_ttl_seconds(void **state)
{
    enum { T = 10, STEPS = 60 };
    struct ts_job j, jx = job(1);
    struct ts_table_cfg c = { .name = "xclock", .dim = 4, .max_id = 1000, .init = "normal:0.1",
                              .seed = 3, .optimizer = "adagrad:lr=0.05", .ttl_seconds = T };
    struct ts_table *head, *copy, *x;
    struct ts_err e = { 0 };
    uint64_t ids[2], swept = 0, dropped_at = 0;
    float g[8] = { 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f };
    char hh[65], hc[65];
    bool applied;

    (void)state;
    assert_int_equal(ts_job_init(&j, "clock-job", 1, false, "sgd", 64, NULL), TS_OK);
    assert_int_equal(ts_job_set_mode(&j, TS_MODE_BSP, 0, NULL), TS_OK);
    assert_int_equal(ts_table_create(&j, &c, NULL, &head, &e), TS_OK);
    assert_int_equal(ts_table_create(&j, &c, NULL, &copy, &e), TS_OK);
    head->life.now_ms = head_clock;
    copy->life.now_ms = copy_clock;
    head_ms = copy_ms = 1000000;
    life_restart(&head->life);
    life_restart(&copy->life);
    for (uint64_t s = 0; s < STEPS; s++, head_ms += 1000) {
        /* row 0 every step, row s + 1 at step s only */
        struct ts_row_push in = { .step = s, .n = 2, .ids = ids, .grad = g,
                                  .encoding = TS_ENC_RAW };
        uint64_t before = ts_table_count(head);
        ids[0] = 0;
        ids[1] = s + 1;
        assert_int_equal(ts_table_sweep_plan(head, s), 0);   /* none before its first push */
        assert_int_equal(ts_table_push(head, &in, &applied, &e), TS_OK);
        in.sweep = ts_table_sweep_plan(head, s);
        assert_true(in.sweep >= TS_TABLE_SWEEP_NONE);
        assert_int_equal(ts_table_push(copy, &in, &applied, &e), TS_OK);
        assert_int_equal(ts_table_sha256(&head, 1, hh, &e), TS_OK);
        assert_int_equal(ts_table_sha256(&copy, 1, hc, &e), TS_OK);
        assert_string_equal(hh, hc);
        if (ts_table_count(head) < before + 1) {
            swept++;
            dropped_at = dropped_at ? dropped_at : s;
        }
    }
    /* The last step was at head_ms - 1000: rows of step s were updated at 1000000 + 1000 s. */
    for (uint64_t s = 0; s < STEPS; s++) {
        int64_t age = head_ms - 1000 - (1000000 + (int64_t)s * 1000);
        float v[4];
        ts_status st = ts_table_row(head, s + 1, v, NULL, NULL, &e);
        bool there = st == TS_OK;
        assert_true(st == TS_OK || st == TS_ENOTFOUND);
        if (age >= (2 * T + 1) * 1000)
            assert_false(there);
        if (age < T * 1000)
            assert_true(there);
    }
    {
        float v[4];
        assert_int_equal(ts_table_row(head, 0, v, NULL, NULL, &e), TS_OK);
    }
    assert_true(swept >= 2);
    assert_true(dropped_at >= T);   /* nothing goes before it is T old */
    assert_int_equal(ts_table_count(head), ts_table_count(copy));
    {   /* A plan of distance 0 (no head makes one: a bad frame) drops nothing. */
        uint64_t n0 = ts_table_count(copy);
        struct ts_row_push in = { .step = STEPS, .n = 1, .ids = ids, .grad = g,
                                  .encoding = TS_ENC_RAW, .sweep = 2 };
        ids[0] = 0;
        assert_int_equal(ts_table_push(copy, &in, &applied, &e), TS_OK);
        assert_int_equal(ts_table_count(copy), n0);
    }
    /* A reset starts the lifetime again: T steps with no sweep. */
    ts_table_reset(head);
    for (uint64_t s = 0; s < T; s++, head_ms += 1000) {
        struct ts_row_push in = { .step = s, .n = 1, .ids = ids, .grad = g,
                                  .encoding = TS_ENC_RAW };
        ids[0] = s + 1;
        assert_int_equal(ts_table_push(head, &in, &applied, &e), TS_OK);
        assert_int_equal(ts_table_sweep_plan(head, s), TS_TABLE_SWEEP_NONE);
    }
    assert_int_equal(ts_table_count(head), T);
    ts_table_free(head);
    ts_table_free(copy);
    /* Refused, naming the field: an exact job, a second lifetime, ssp. */
    e = (struct ts_err){ 0 };
    assert_int_equal(ts_table_create(&jx, &c, NULL, &x, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "table.ttl_seconds: 10: an exact job drops rows by steps"));
    c.ttl_steps = 5;
    e = (struct ts_err){ 0 };
    assert_int_equal(ts_table_check(&j, &c, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "table.ttl_seconds: 10, and ttl_steps 5"));
    c.ttl_steps = 0;
    assert_int_equal(ts_job_set_mode(&j, TS_MODE_SSP, 2, NULL), TS_OK);
    e = (struct ts_err){ 0 };
    assert_int_equal(ts_table_check(&j, &c, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "table.ttl_seconds: 10: a row lifetime needs bsp"));
}

/* A sweep that drops many rows keeps their values for one step (the version before), then
 * gives that room back. */
static void t_sweep_room_given_back(void **state)
{
    enum { N = 5000 };
    struct ts_job j = job(1);
    struct ts_table_cfg c = { .name = "xsweep", .dim = 4, .max_id = N, .init = "zeros",
                              .seed = 1, .optimizer = "sgd:lr=1", .ttl_steps = 1 };
    static uint64_t ids[N];
    static float g[N * 4], v[4];
    struct ts_table *t;
    struct ts_err e = { 0 };
    bool applied;

    (void)state;
    for (size_t i = 0; i < N; i++)
        ids[i] = i;
    for (size_t i = 0; i < N * 4; i++)
        g[i] = 1;
    assert_int_equal(ts_table_create(&j, &c, NULL, &t, &e), TS_OK);
    for (uint64_t s = 0; s < 3; s++) {   /* N rows at step 0, then row N alone */
        struct ts_row_push in = { .step = s, .n = s ? 1 : N, .ids = s ? ids + N - 1 : ids,
                                  .grad = g, .encoding = TS_ENC_FIXED_F32 };

        assert_int_equal(ts_table_push(t, &in, &applied, &e), TS_OK);
        if (s == 1) {   /* its sweep dropped rows 0..N-2: kept as they were, a step */
            assert_true(t->prev.cap >= N);
            assert_int_equal(ts_table_pull(t, 0, 1, 0, ids + 7, 1, v, &e), TS_OK);
            assert_true(v[0] == -1.0f / 64);
        }
    }
    assert_int_equal(t->prev.cap, 256);
    assert_int_equal(ts_table_count(t), 1);
    ts_table_free(t);
}

static void t_ttl_drops_rows_deterministically(void **state)
{
    enum { T = 4, STEPS = 13, WIDTH = 30, IDS = 200 };
    struct ts_job j = job(1);
    struct ts_table_budget mem, small;
    struct ts_table_cfg c = { .name = "xttl", .dim = 16, .max_id = 1u << 20,
                              .init = "normal:0.1", .seed = 7, .optimizer = "adagrad:lr=0.05",
                              .ttl_steps = T };
    struct ts_table *a, *b, *half[2];
    struct ts_err e = { 0 };
    int64_t last[IDS];
    uint64_t ids[WIDTH + 3], part[2][WIDTH + 3], *got, all[IDS];
    static float was[IDS * 16], now[IDS * 16];
    float g[(WIDTH + 3) * 16];
    size_t n, np[2], ngot, want;
    bool armed, ready, applied;
    struct ts_table_capture cap;
    char ha[65], hh[65];

    (void)state;
    for (size_t i = 0; i < IDS; i++) {
        last[i] = -1;
        all[i] = i;
    }
    ts_table_budget_init(&mem, 0);
    ts_table_budget_init(&small, 0);
    small.tier = tier;
    assert_int_equal(ts_table_create(&j, &c, &mem, &a, &e), TS_OK);
    assert_int_equal(ts_table_create(&j, &c, &small, &b, &e), TS_OK);
    small.limit = 20 * ts_table_row_bytes(b);
    assert_int_equal(ts_table_create(&j, &c, &mem, &half[0], &e), TS_OK);
    assert_int_equal(ts_table_create(&j, &c, &mem, &half[1], &e), TS_OK);
    for (uint64_t s = 0; s < STEPS; s++) {
        /* a window moving 10 ids a step, and ids 3, 5 and 7 again at steps 9 and 10 */
        n = 0;
        if (s == 9 || s == 10)
            for (uint64_t id = 3; id <= 7; id += 2)
                ids[n++] = id;
        for (uint64_t id = s * 10; id < s * 10 + WIDTH; id++)
            if (!(n && id <= ids[n - 1]))
                ids[n++] = id;
        np[0] = np[1] = 0;
        for (size_t i = 0; i < n; i++) {
            part[ids[i] % 2][np[ids[i] % 2]++] = ids[i];
            last[ids[i]] = (int64_t)s;
            for (int k = 0; k < 16; k++)
                g[i * 16 + k] = 0.01f * (float)(k + 1);
        }
        struct ts_row_push in = { .step = s, .n = n, .ids = ids, .grad = g,
                                  .encoding = TS_ENC_FIXED_F32 };
        assert_int_equal(ts_table_pull(a, 0, s, 0, all, IDS, was, &e), TS_OK);
        if (s == 11)   /* its sweep keeps none of the dropped rows' values in b */
            b->sweep_keep = 0;
        assert_int_equal(ts_table_push(a, &in, &applied, &e), TS_OK);
        assert_int_equal(ts_table_push(b, &in, &applied, &e), TS_OK);
        /* The version before (an elastic job's slot computed again) as it was, the rows the
         * sweep dropped from memory, the batches and the disk included. */
        assert_int_equal(ts_table_pull(a, 0, s, 0, all, IDS, now, &e), TS_OK);
        assert_memory_equal(now, was, sizeof(was));
        if (s == 11) {
            assert_int_equal(ts_table_pull(b, 0, s, 0, all, IDS, now, &e), TS_ESTATE);
            assert_non_null(strstr(e.msg, "table 'xttl': ids[0]: row 0 at version 11 is not "
                                          "kept: the row lifetime's sweep"));
            b->sweep_keep = SWEEP_KEEP_BYTES;
        } else {
            assert_int_equal(ts_table_pull(b, 0, s, 0, all, IDS, now, &e), TS_OK);
            assert_memory_equal(now, was, sizeof(was));
        }
        for (int h = 0; h < 2; h++) {
            struct ts_row_push ph = { .step = s, .n = np[h], .ids = part[h], .grad = g,
                                      .encoding = TS_ENC_FIXED_F32 };
            assert_int_equal(ts_table_push(half[h], &ph, &applied, &e), TS_OK);
        }
        if ((s + 1) % T == 0)   /* the reference: the same rule */
            for (size_t i = 0; i < IDS; i++)
                if (last[i] >= 0 && last[i] < (int64_t)(s + 1 - T))
                    last[i] = -1;
        if (s == 8)   /* armed incremental at 9: after the sweep at 8 it is full */
            assert_int_equal(ts_table_arm(a, 9, false, &armed, &e), TS_OK);
        if (s == 9) {
            assert_int_equal(ts_table_capture_take(a, 9, &cap, &ready, &e), TS_OK);
            assert_true(ready);
            free(cap.records);
        }
        want = 0;
        for (size_t i = 0; i < IDS; i++)
            want += last[i] >= 0;
        assert_int_equal(ts_table_count(a), want);
        assert_int_equal(ts_table_count(b), want);
        assert_int_equal(ts_table_count(half[0]) + ts_table_count(half[1]), want);
        assert_int_equal(ts_table_ids(b, s + 1, 100, &got, &ngot, &e), TS_OK);
        assert_int_equal(ngot, want);
        for (size_t i = 0; i < ngot; i++)
            assert_true(got[i] < IDS && last[got[i]] >= 0);
        free(got);
        same_hash(a, b);
        assert_int_equal(ts_table_sha256(&a, 1, ha, &e), TS_OK);
        assert_int_equal(ts_table_sha256(half, 2, hh, &e), TS_OK);
        assert_string_equal(ha, hh);
    }
    /* Row 3 (last updated at step 0) went at the sweep after step 7 and was made again at
     * step 9: two updates since. */
    {
        struct ts_row_meta m;
        float v[16];

        assert_int_equal(ts_table_row(b, 3, v, NULL, &m, &e), TS_OK);
        assert_int_equal(m.updates, 2);   /* steps 9 and 10 */
    }
    assert_true(cap.full);
    ts_table_free(a);
    ts_table_free(b);
    ts_table_free(half[0]);
    ts_table_free(half[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_store_against_a_map),
        cmocka_unit_test(t_admission_against_reference),
        cmocka_unit_test(t_sketch_counts_and_ages),
        cmocka_unit_test(t_window_keeps_a_steps_rows),
        cmocka_unit_test(t_scan_within_a_step_stays_linear),
        cmocka_unit_test(t_load_that_evicts_its_own_rows),
        cmocka_unit_test(t_cold_rows_read_back),
        cmocka_unit_test(t_prefetch_keeps_what_an_operation_changed),
        cmocka_unit_test(t_tiered_table_is_exact),
        cmocka_unit_test(t_full_disk_refuses_and_loses_nothing),
        cmocka_unit_test(t_index_budget_refuses_past_it),
        cmocka_unit_test(t_ttl_drops_rows_deterministically),
        cmocka_unit_test(t_sweep_room_given_back),
        cmocka_unit_test(t_ttl_seconds),
    };
    return cmocka_run_group_tests(tests, open_tier, close_tier);
}
