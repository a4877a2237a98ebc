/* store_slotfile.c - Tessera's own slot file (lib/table/tier.c), what the disk tier uses, for
 * bench_table_store: one table store in a tier, driven through the tier's batches as rows.c
 * drives it. Nothing is synced: a cache. Its cold start writes and drops its pages
 * (tier_drop_cache) and keeps the index, since a reopen would empty it. One setting
 * (variant 0). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "stores.h"
#include "table/internal.h"
#include "table/tier.h"

struct slot_store {
    struct store base;
    struct ts_tier *tier;
    uint64_t space;
    uint64_t *ids;        /* LOAD_BATCH: a call's row ids */
    bool *found;          /* LOAD_BATCH */
};

static ts_status slot_create(struct store *s, size_t nrows, struct ts_err *err)
{
    struct slot_store *t = (struct slot_store *)s;

    if (!(t->ids = malloc(LOAD_BATCH * sizeof(*t->ids))) ||
        !(t->found = malloc(LOAD_BATCH * sizeof(*t->found))))
        return ts_err_set(err, TS_ENOMEM, "out of memory for the ids");
    if (ts_tier_open(s->path, &t->tier, err) != TS_OK)
        return TS_EIO;
    t->space = tier_space(t->tier);
    return TS_OK;
}

/* Its pages written and dropped, the index kept. */
static ts_status slot_cold(struct store *s, struct ts_err *err)
{
    tier_drop_cache(((struct slot_store *)s)->tier);
    return TS_OK;
}

/* The slot file's row ids of n keys: the key's value, below 2^63 as table ids are. */
static void slot_ids(struct slot_store *t, const unsigned char *k, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t v = 0;

        for (int b = 0; b < 8; b++)
            v = v << 8 | k[i * KEY_LEN + b];
        t->ids[i] = v >> 1;
    }
}

static ts_status slot_put(struct store *s, const unsigned char *k, const unsigned char *v,
                          size_t n, struct ts_err *err)
{
    struct slot_store *t = (struct slot_store *)s;
    /* One batch as rows.c hands it to the writer (its own copy of the records, as an
     * eviction makes), waited for: the other stores' writes are synchronous too. */
    struct tier_batch *b = calloc(1, sizeof(*b));

    if (!b || !(b->ids = malloc(n * sizeof(*b->ids))) || !(b->recs = malloc(n * s->rec))) {
        tier_batch_free(b);
        return ts_err_set(err, TS_ENOMEM, "out of memory for a batch");
    }
    *b = (struct tier_batch){ .space = t->space, .rec = s->rec, .n = n, .cap = n,
                              .ids = b->ids, .recs = b->recs };
    slot_ids(t, k, n);
    memcpy(b->ids, t->ids, n * sizeof(*b->ids));
    memcpy(b->recs, v, n * s->rec);
    tier_submit(t->tier, b);
    if (!tier_wait(t->tier, b)) {
        char why[256];

        tier_failing(t->tier, why, sizeof(why));
        if (tier_orphan(t->tier, b))   /* else the writer frees it */
            tier_batch_free(b);
        return ts_err_set(err, TS_EIO, "tessera slot file: %s", why);
    }
    tier_batch_free(b);
    return TS_OK;
}

static ts_status slot_get(struct store *s, const unsigned char *k, unsigned char *out,
                          size_t n, struct ts_err *err)
{
    struct slot_store *t = (struct slot_store *)s;

    slot_ids(t, k, n);
    if (tier_get_many(t->tier, t->space, n, t->ids, out, s->rec, t->found, err) != TS_OK)
        return TS_EIO;
    for (size_t i = 0; i < n; i++)
        if (!t->found[i])
            return ts_err_set(err, TS_EINTERNAL, "tessera: a loaded row is missing");
    return TS_OK;
}

static void slot_fini(struct store *s)
{
    struct slot_store *t = (struct slot_store *)s;

    ts_tier_close(t->tier);
    free(t->ids);
    free(t->found);
}

const struct store_ops store_slotfile = { sizeof(struct slot_store), slot_create, slot_cold,
                                          slot_put, slot_get, slot_fini };
