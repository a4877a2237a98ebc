/* idmap.c - the id maps of lib/table (internal.h, struct idmap): a row's record, a step's
 * sums, the initial values a pull drew, the changed rows, a write-back batch's rows.
 *
 * Open addressing with linear probing over two arrays (ids, values), a power-of-two capacity
 * grown by doubling at 3/4 full, only in idmap_reserve (so a put after it cannot fail); ids
 * are mixed by splitmix64's finaliser, since real ids are often dense or strided and would
 * cluster. A removal shifts the entries after it back (no tombstones). */
#include "table/internal.h"

#include <stdlib.h>
#include <string.h>

static inline size_t slot_of(uint64_t id, size_t cap)
{
    uint64_t z = id;

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (size_t)(z ^ (z >> 31)) & (cap - 1);
}

static void put(uint64_t *keys, uint64_t *vals, size_t cap, uint64_t id, uint64_t val)
{
    size_t i = slot_of(id, cap);

    while (keys[i] != IDMAP_EMPTY)
        i = (i + 1) & (cap - 1);
    keys[i] = id;
    vals[i] = val;
}

ts_status idmap_reserve(struct idmap *m, size_t more, struct ts_err *err)
{
    size_t want = m->n + more, cap = m->cap ? m->cap : 16;
    uint64_t *keys, *vals;

    while (want > cap / 4 * 3)
        cap *= 2;
    if (cap == m->cap)
        return TS_OK;
    keys = malloc(cap * sizeof(*keys));
    vals = malloc(cap * sizeof(*vals));
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return ts_err_set(err, TS_ENOMEM, "no memory for a map of %zu rows", want);
    }
    memset(keys, 0xff, cap * sizeof(*keys));      /* IDMAP_EMPTY */
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i] != IDMAP_EMPTY)
            put(keys, vals, cap, m->keys[i], m->vals[i]);
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    return TS_OK;
}

bool idmap_find(const struct idmap *m, uint64_t id, uint64_t *val)
{
    if (!m->cap)
        return false;
    for (size_t i = slot_of(id, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == id) {
            *val = m->vals[i];
            return true;
        }
        if (m->keys[i] == IDMAP_EMPTY)
            return false;
    }
}

void idmap_put(struct idmap *m, uint64_t id, uint64_t val)
{
    put(m->keys, m->vals, m->cap, id, val);
    m->n++;
}

void idmap_clear(struct idmap *m)
{
    if (m->cap)
        memset(m->keys, 0xff, m->cap * sizeof(*m->keys));
    m->n = 0;
}

void idmap_del(struct idmap *m, uint64_t id)
{
    size_t mask = m->cap - 1, i = slot_of(id, m->cap), j;

    while (m->keys[i] != id)
        i = (i + 1) & mask;
    /* Backward shift: each later entry of the run moves into the hole unless its own home
     * lies cyclically in (hole, its place]. */
    for (j = (i + 1) & mask; m->keys[j] != IDMAP_EMPTY; j = (j + 1) & mask) {
        size_t home = slot_of(m->keys[j], m->cap);
        bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);

        if (!stays) {
            m->keys[i] = m->keys[j];
            m->vals[i] = m->vals[j];
            i = j;
        }
    }
    m->keys[i] = IDMAP_EMPTY;
    m->n--;
}

void idmap_fini(struct idmap *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}
