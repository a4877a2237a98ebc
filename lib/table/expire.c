/* expire.c - a table's row lifetime (table.h, "Row lifetime"): the sweep that drops the rows
 * no step updated in the last ttl steps, from memory, the write-back batches and the disk
 * tier, keeping their values for the version before (rows_expire, internal.h). The rows'
 * places are rows.c's; this file only reads them through its helpers. */
#include "table/internal.h"

#include <stdlib.h>
#include <string.h>

/* A growing list of ids (rows_expire); false when it could not grow. */
struct idlist {
    uint64_t *v;
    size_t n, cap;
};

static bool idlist_add(struct idlist *l, uint64_t id)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        uint64_t *v = realloc(l->v, cap * sizeof(*v));

        if (!v)
            return false;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = id;
    return true;
}

/* Row id is to be dropped from the disk: listed in dels and as gone until the delete is
 * reaped; false (it stays) when there was no memory for that. */
static bool drop_listed(struct rows *r, struct idlist *dels, uint64_t id)
{
    uint64_t k;

    if (idmap_reserve(&r->gone, 1, NULL) || !idlist_add(dels, id))
        return false;
    if (!idmap_find(&r->gone, id, &k))
        idmap_put(&r->gone, id, 0);
    if (r->guarding && idmap_find(&r->guard, id, &k))   /* a prefetch read it before */
        idmap_del(&r->guard, id);
    return true;
}

/* A dropped row's values (its record rec) into k, while it holds fewer than k->most. */
static void keep(struct rows_kept *k, uint64_t id, const void *rec)
{
    if (!k || k->over)
        return;
    if (k->n == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 256;
        uint64_t *ids;
        float *values;

        cap = cap < k->most ? cap : k->most;
        if (k->n == cap || !(ids = realloc(k->ids, cap * sizeof(*ids)))) {
            k->over = true;
            return;
        }
        k->ids = ids;
        if (!(values = realloc(k->values, cap * k->dim * sizeof(*values)))) {
            k->over = true;
            return;
        }
        k->values = values;
        k->cap = cap;
    }
    k->ids[k->n] = id;
    memcpy(k->values + k->n++ * k->dim, (const struct row *)rec + 1, k->dim * sizeof(float));
}

/* Drops the rows in memory whose step is below before (with a tier: listed for the disk). */
static uint64_t expire_memory(struct rows *r, uint64_t before, struct idlist *dels,
                              struct rows_kept *kept, bool *partial)
{
    uint64_t dropped = 0;

    if (r->free_cap < r->slots) {
        uint64_t *f = realloc(r->free, r->slots * sizeof(*f));

        if (f) {
            r->free = f;
            r->free_cap = r->slots;
        }
    }
    for (uint64_t s = 0; s < r->slots; s++) {
        struct row *w = rows_slot_at(r, s);

        if (w->id == IDMAP_EMPTY || w->step >= before)
            continue;
        if (r->tier && !drop_listed(r, dels, w->id)) {
            *partial = true;
            continue;
        }
        keep(kept, w->id, w);
        rows_slot_free(r, s);
        dropped++;
    }
    if (r->tier)
        rows_window_tidy(r);
    return dropped;
}

/* b's rows not in memory and not gone, into cand. */
static void batch_candidates(struct rows *r, const struct tier_batch *b, struct idlist *cand,
                             bool *partial)
{
    uint64_t k;

    for (size_t i = 0; i < b->n; i++)
        if (idmap_find(&b->map, b->ids[i], &k) && !idmap_find(&r->map, b->ids[i], &k) &&
            !idlist_add(cand, b->ids[i]))
            *partial = true;
}

/* Row id, only in batches or on disk, is dropped: out of the batches' maps (they still write
 * it; the delete after them removes it). */
static void unbatch(struct rows *r, uint64_t id)
{
    uint64_t k;

    if (r->fill && idmap_find(&r->fill->map, id, &k))
        idmap_del(&r->fill->map, id);
    for (struct tier_batch *b = r->newest; b; b = b->older)
        if (idmap_find(&b->map, id, &k))
            idmap_del(&b->map, id);
}

/* The rows only in batches or on disk: their records read, those below before dropped. */
static uint64_t expire_tiers(struct rows *r, uint64_t before, struct idlist *dels,
                             struct rows_kept *kept, bool *partial)
{
    struct idlist cand = { 0 }, read = { 0 };
    uint64_t *disk = NULL, dropped = 0, k;
    uint8_t *recs = NULL;
    bool *found = NULL;
    size_t ndisk = 0;
    struct idmap seen = { 0 };

    if (tier_ids(r->tier, r->space, &disk, &ndisk, NULL))
        *partial = true;
    for (size_t i = 0; i < ndisk; i++)
        if (!idmap_find(&r->map, disk[i], &k) && !rows_gone(r, disk[i]) &&
            !idlist_add(&cand, disk[i]))
            *partial = true;
    free(disk);
    if (r->fill)
        batch_candidates(r, r->fill, &cand, partial);
    for (const struct tier_batch *b = r->newest; b; b = b->older)
        batch_candidates(r, b, &cand, partial);
    if (idmap_reserve(&seen, cand.n, NULL)) {
        *partial = true;
        cand.n = 0;
    }
    for (size_t i = 0; i < cand.n; i++) {
        const uint8_t *rec;
        uint64_t id = cand.v[i];

        if (idmap_find(&seen, id, &k))   /* in a batch and on disk: once */
            continue;
        idmap_put(&seen, id, 0);
        if (!(rec = rows_batch_find(r, id))) {
            if (!idlist_add(&read, id))
                *partial = true;
        } else if (((const struct row *)(const void *)rec)->step < before) {
            if (drop_listed(r, dels, id)) {
                keep(kept, id, rec);
                unbatch(r, id);
                dropped++;
            } else {
                *partial = true;
            }
        }
    }
    if (read.n && (!(recs = malloc(read.n * r->rec)) || !(found = malloc(read.n)) ||
                   tier_get_many(r->tier, r->space, read.n, read.v, recs, r->rec, found,
                                 NULL))) {
        *partial = true;
        read.n = 0;
    }
    for (size_t i = 0; i < read.n; i++) {
        if (!found[i] ||
            ((const struct row *)(const void *)(recs + i * r->rec))->step >= before)
            continue;
        if (drop_listed(r, dels, read.v[i])) {
            keep(kept, read.v[i], recs + i * r->rec);
            dropped++;
        } else
            *partial = true;
    }
    idmap_fini(&seen);
    free(cand.v);
    free(read.v);
    free(recs);
    free(found);
    return dropped;
}

uint64_t rows_expire(struct rows *r, uint64_t before, struct rows_kept *kept, bool *partial)
{
    struct idlist dels = { 0 };
    struct tier_batch *b = NULL;
    uint64_t dropped;

    *partial = false;
    if (r->tier && !(b = calloc(1, sizeof(*b)))) {   /* the deletes' batch, first */
        *partial = true;
        return 0;
    }
    dropped = expire_memory(r, before, &dels, kept, partial);
    if (r->tier)
        dropped += expire_tiers(r, before, &dels, kept, partial);
    __atomic_store_n(&r->n, r->n - dropped, __ATOMIC_RELAXED);
    r->stats.expired += dropped;
    if (!dels.n) {
        free(b);
        return dropped;
    }
    /* The deletes go after every batch before them (the fill first); until the writer is
     * done with them the ids are gone (rows_load, rows_read). */
    rows_hand(r);
    b->space = r->space;
    b->rec = r->rec;
    b->dels = dels.v;
    b->ndels = dels.n;
    atomic_init(&b->done, false);
    if ((b->older = r->newest))
        r->newest->newer = b;
    else
        r->oldest = b;
    r->newest = b;
    r->gone_batches++;
    tier_submit(r->tier, b);
    return dropped;
}
