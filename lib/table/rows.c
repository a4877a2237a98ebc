/* rows.c - where a table's rows live: an id map and records in chunks.
 *
 * The map is open addressing with linear probing over two arrays (ids, record numbers), a
 * power-of-two capacity grown by doubling at 3/4 full; ids are mixed by splitmix64's
 * finaliser, since real ids are often dense or strided and would cluster. Records sit in
 * chunks of ROWS_CHUNK so that growing never moves a row (a pointer to one stays valid) and
 * never copies gigabytes. Growth happens only in *_reserve, which a caller runs before it
 * changes anything, so an add cannot fail half way through a step. */
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

void idmap_fini(struct idmap *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}

void rows_init(struct rows *r, size_t rec)
{
    memset(r, 0, sizeof(*r));
    r->rec = rec;
}

void rows_fini(struct rows *r)
{
    for (size_t c = 0; c < r->nchunks; c++)
        free(r->chunks[c]);
    free(r->chunks);
    idmap_fini(&r->map);
    memset(r, 0, sizeof(*r));
}

struct row *rows_at(const struct rows *r, uint64_t k)
{
    return (struct row *)(void *)(r->chunks[k / ROWS_CHUNK] + (k % ROWS_CHUNK) * r->rec);
}

struct row *rows_find(const struct rows *r, uint64_t id)
{
    uint64_t k;

    return idmap_find(&r->map, id, &k) ? rows_at(r, k) : NULL;
}

ts_status rows_reserve(struct rows *r, uint64_t more, struct ts_err *err)
{
    size_t need = (size_t)((r->n + more + ROWS_CHUNK - 1) / ROWS_CHUNK);
    ts_status st;

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
    if ((st = idmap_reserve(&r->map, (size_t)more, err)))
        return st;
    return TS_OK;
}

struct row *rows_add(struct rows *r, uint64_t id)
{
    struct row *w = rows_at(r, r->n);

    idmap_put(&r->map, id, r->n);
    r->n++;
    return w;
}
