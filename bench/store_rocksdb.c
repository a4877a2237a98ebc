/* store_rocksdb.c - RocksDB (Debian's librocksdb, its C API) as a table's disk tier, for
 * bench_table_store. A 64 MiB LRU block cache and RocksDB's default options otherwise; a
 * WriteBatch a put and one rocksdb_multi_get a get. Variant 0: WAL and sync on each
 * WriteBatch (what is written survives power loss); 1: WAL without sync (a crash of the
 * process); 2: WAL off (neither). A cold start flushes the memtable first. */
#include <string.h>

#include <rocksdb/c.h>

#include "stores.h"

struct rocks_store {
    struct store base;
    rocksdb_t *db;
    rocksdb_options_t *opt;
    rocksdb_block_based_table_options_t *bbt;
    rocksdb_cache_t *cache;
    rocksdb_writeoptions_t *wo;
    rocksdb_readoptions_t *ro;
};

static ts_status rocks_check(char *e, const char *what, struct ts_err *err)
{
    ts_status st = TS_OK;

    if (e) {
        st = ts_err_set(err, TS_EIO, "rocksdb %s: %s", what, e);
        rocksdb_free(e);
    }
    return st;
}

static ts_status rocks_open(struct rocks_store *t, struct ts_err *err)
{
    char *e = NULL;

    t->db = rocksdb_open(t->opt, t->base.path, &e);
    return rocks_check(e, "open", err);
}

static void rocks_close(struct rocks_store *t)
{
    if (t->db) {
        rocksdb_close(t->db);
        t->db = NULL;
    }
}

static ts_status rocks_create(struct store *s, size_t nrows, struct ts_err *err)
{
    struct rocks_store *t = (struct rocks_store *)s;

    t->opt = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(t->opt, 1);
    t->cache = rocksdb_cache_create_lru(64u << 20);
    t->bbt = rocksdb_block_based_options_create();
    rocksdb_block_based_options_set_block_cache(t->bbt, t->cache);
    rocksdb_options_set_block_based_table_factory(t->opt, t->bbt);
    t->wo = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(t->wo, s->variant == 0);
    rocksdb_writeoptions_disable_WAL(t->wo, s->variant == 2);
    t->ro = rocksdb_readoptions_create();
    return rocks_open(t, err);
}

static ts_status rocks_cold(struct store *s, struct ts_err *err)
{
    struct rocks_store *t = (struct rocks_store *)s;
    rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
    char *e = NULL;

    rocksdb_flushoptions_set_wait(fo, 1);
    rocksdb_flush(t->db, fo, &e);
    rocksdb_flushoptions_destroy(fo);
    if (rocks_check(e, "flush", err) != TS_OK)
        return TS_EIO;
    rocks_close(t);
    store_evict(s);
    return rocks_open(t, err);
}

static ts_status rocks_put(struct store *s, const unsigned char *k, const unsigned char *v,
                           size_t n, struct ts_err *err)
{
    struct rocks_store *t = (struct rocks_store *)s;
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    char *e = NULL;

    for (size_t i = 0; i < n; i++)
        rocksdb_writebatch_put(wb, (const char *)k + i * KEY_LEN, KEY_LEN,
                               (const char *)v + i * s->rec, s->rec);
    rocksdb_write(t->db, t->wo, wb, &e);
    rocksdb_writebatch_destroy(wb);
    return rocks_check(e, "write", err);
}

static ts_status rocks_get(struct store *s, const unsigned char *k, unsigned char *out,
                           size_t n, struct ts_err *err)
{
    struct rocks_store *t = (struct rocks_store *)s;
    static const char *kp[READ_BATCH];
    static size_t ks[READ_BATCH], vs[READ_BATCH];
    static char *vp[READ_BATCH], *errs[READ_BATCH];
    ts_status st = TS_OK;

    for (size_t i = 0; i < n; i++) {
        kp[i] = (const char *)k + i * KEY_LEN;
        ks[i] = KEY_LEN;
    }
    rocksdb_multi_get(t->db, t->ro, n, kp, ks, vp, vs, errs);
    for (size_t i = 0; i < n; i++) {
        if (errs[i] && st == TS_OK)
            st = ts_err_set(err, TS_EIO, "rocksdb multi_get: %s", errs[i]);
        else if (!vp[i] && st == TS_OK)
            st = ts_err_set(err, TS_EINTERNAL, "rocksdb: a loaded row is missing");
        else if (vp[i] && vs[i] != s->rec && st == TS_OK)
            st = ts_err_set(err, TS_ECORRUPT, "rocksdb: a record of %zu bytes", vs[i]);
        else if (vp[i])
            memcpy(out + i * s->rec, vp[i], s->rec);
        rocksdb_free(errs[i]);
        rocksdb_free(vp[i]);
    }
    return st;
}

static void rocks_fini(struct store *s)
{
    struct rocks_store *t = (struct rocks_store *)s;

    rocks_close(t);
    if (t->opt)
        rocksdb_options_destroy(t->opt);
    if (t->bbt)
        rocksdb_block_based_options_destroy(t->bbt);
    if (t->cache)
        rocksdb_cache_destroy(t->cache);
    if (t->wo)
        rocksdb_writeoptions_destroy(t->wo);
    if (t->ro)
        rocksdb_readoptions_destroy(t->ro);
}

const struct store_ops store_rocksdb = { sizeof(struct rocks_store), rocks_create, rocks_cold,
                                         rocks_put, rocks_get, rocks_fini };
