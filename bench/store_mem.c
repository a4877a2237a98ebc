/* store_mem.c - bench_table_store's baseline: the rows in memory, as lib/table's memory tier
 * holds them. An open-addressing hash map from key to a record in one array (lookup and
 * memcpy); no files, so a cold start changes nothing. One setting (variant 0). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "stores.h"

struct mem_store {
    struct store base;
    uint64_t *slot_key;   /* open addressing: key + 1, 0 = empty */
    uint32_t *slot_idx;
    size_t mask, nrec;
    unsigned char *recs;
};

static ts_status mem_create(struct store *s, size_t nrows, struct ts_err *err)
{
    struct mem_store *t = (struct mem_store *)s;
    size_t cap = 1;

    while (cap < nrows * 2)
        cap <<= 1;
    t->mask = cap - 1;
    t->slot_key = calloc(cap, 8);
    t->slot_idx = malloc(cap * 4);
    t->recs = malloc(nrows * s->rec);
    if (!t->slot_key || !t->slot_idx || !t->recs)
        return ts_err_set(err, TS_ENOMEM, "out of memory for the in-memory table");
    memset(t->recs, 0, nrows * s->rec);   /* fault the pages in, as a warm tier has them */
    return TS_OK;
}

static ts_status mem_cold(struct store *s, struct ts_err *err) { return TS_OK; }

static uint32_t *mem_slot(struct mem_store *t, uint64_t key, bool insert)
{
    size_t i = mix64(key) & t->mask;

    while (t->slot_key[i] != 0 && t->slot_key[i] != key + 1)
        i = (i + 1) & t->mask;
    if (t->slot_key[i] == 0) {
        if (!insert)
            return NULL;
        t->slot_key[i] = key + 1;
        t->slot_idx[i] = (uint32_t)t->nrec++;
    }
    return &t->slot_idx[i];
}

static ts_status mem_put(struct store *s, const unsigned char *k, const unsigned char *v,
                         size_t n, struct ts_err *err)
{
    struct mem_store *t = (struct mem_store *)s;

    for (size_t i = 0; i < n; i++) {
        uint64_t key;

        memcpy(&key, k + i * KEY_LEN, 8);
        memcpy(t->recs + (size_t)*mem_slot(t, key, true) * s->rec, v + i * s->rec, s->rec);
    }
    return TS_OK;
}

static ts_status mem_get(struct store *s, const unsigned char *k, unsigned char *out, size_t n,
                         struct ts_err *err)
{
    struct mem_store *t = (struct mem_store *)s;

    for (size_t i = 0; i < n; i++) {
        uint64_t key;
        uint32_t *idx;

        memcpy(&key, k + i * KEY_LEN, 8);
        if (!(idx = mem_slot(t, key, false)))
            return ts_err_set(err, TS_EINTERNAL, "memory: a loaded row is missing");
        memcpy(out + i * s->rec, t->recs + (size_t)*idx * s->rec, s->rec);
    }
    return TS_OK;
}

static void mem_fini(struct store *s)
{
    struct mem_store *t = (struct mem_store *)s;

    free(t->slot_key);
    free(t->slot_idx);
    free(t->recs);
}

const struct store_ops store_mem = { sizeof(struct mem_store), mem_create, mem_cold, mem_put,
                                     mem_get, mem_fini };
