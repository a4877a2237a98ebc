/* store_lmdb.c - LMDB (Debian's liblmdb) as a table's disk tier, for bench_table_store.
 * One environment and its unnamed database a store, MDB_NORDAHEAD, a write transaction a
 * put and a read-only transaction a get. Variant 0: sync on each commit (what is committed
 * survives power loss); 1: MDB_NOSYNC|MDB_WRITEMAP (it survives a crash of the process, not
 * of the machine). */
#include <string.h>

#include <lmdb.h>

#include "stores.h"

struct lmdb_store {
    struct store base;
    MDB_env *env;
    MDB_dbi dbi;
    size_t mapsize;
};

static ts_status lmdb_check(int rc, const char *what, struct ts_err *err)
{
    return rc == 0 ? TS_OK : ts_err_set(err, TS_EIO, "lmdb %s: %s", what, mdb_strerror(rc));
}

static ts_status lmdb_open(struct lmdb_store *t, struct ts_err *err)
{
    unsigned flags = MDB_NORDAHEAD | (t->base.variant ? MDB_NOSYNC | MDB_WRITEMAP : 0);
    MDB_txn *txn;
    ts_status st = lmdb_check(mdb_env_create(&t->env), "env_create", err);

    if (st == TS_OK)
        st = lmdb_check(mdb_env_set_mapsize(t->env, t->mapsize), "set_mapsize", err);
    if (st == TS_OK)
        st = lmdb_check(mdb_env_open(t->env, t->base.path, flags, 0644), "env_open", err);
    if (st == TS_OK)
        st = lmdb_check(mdb_txn_begin(t->env, NULL, 0, &txn), "txn_begin", err);
    if (st == TS_OK) {
        st = lmdb_check(mdb_dbi_open(txn, NULL, 0, &t->dbi), "dbi_open", err);
        if (st == TS_OK)
            st = lmdb_check(mdb_txn_commit(txn), "commit", err);
        else
            mdb_txn_abort(txn);
    }
    return st;
}

static void lmdb_close(struct lmdb_store *t)
{
    if (t->env) {
        mdb_env_close(t->env);
        t->env = NULL;
    }
}

static ts_status lmdb_create(struct store *s, size_t nrows, struct ts_err *err)
{
    struct lmdb_store *t = (struct lmdb_store *)s;

    /* Copy-on-write pages and half-full pages after random inserts: room for 4x. */
    t->mapsize = ((size_t)nrows * (s->rec + 64) * 4 + (256u << 20)) & ~(size_t)0xFFFFF;
    return lmdb_open(t, err);
}

static ts_status lmdb_cold(struct store *s, struct ts_err *err)
{
    struct lmdb_store *t = (struct lmdb_store *)s;

    lmdb_close(t);
    store_evict(s);
    return lmdb_open(t, err);
}

static ts_status lmdb_put(struct store *s, const unsigned char *k, const unsigned char *v,
                          size_t n, struct ts_err *err)
{
    struct lmdb_store *t = (struct lmdb_store *)s;
    MDB_txn *txn = NULL;
    ts_status st = lmdb_check(mdb_txn_begin(t->env, NULL, 0, &txn), "txn_begin", err);

    if (st != TS_OK)
        return st;
    for (size_t i = 0; st == TS_OK && i < n; i++) {
        MDB_val mk = { KEY_LEN, (void *)(k + i * KEY_LEN) };
        MDB_val mv = { s->rec, (void *)(v + i * s->rec) };

        st = lmdb_check(mdb_put(txn, t->dbi, &mk, &mv, 0), "put", err);
    }
    if (st == TS_OK)
        return lmdb_check(mdb_txn_commit(txn), "commit", err);
    mdb_txn_abort(txn);
    return st;
}

static ts_status lmdb_get(struct store *s, const unsigned char *k, unsigned char *out,
                          size_t n, struct ts_err *err)
{
    struct lmdb_store *t = (struct lmdb_store *)s;
    MDB_txn *txn = NULL;
    ts_status st = lmdb_check(mdb_txn_begin(t->env, NULL, MDB_RDONLY, &txn), "txn_begin", err);

    if (st != TS_OK)
        return st;
    for (size_t i = 0; st == TS_OK && i < n; i++) {
        MDB_val mk = { KEY_LEN, (void *)(k + i * KEY_LEN) }, mv;

        st = lmdb_check(mdb_get(txn, t->dbi, &mk, &mv), "get", err);
        if (st == TS_OK && mv.mv_size != s->rec)
            st = ts_err_set(err, TS_ECORRUPT, "lmdb: a record of %zu bytes", mv.mv_size);
        if (st == TS_OK)
            memcpy(out + i * s->rec, mv.mv_data, s->rec);
    }
    mdb_txn_abort(txn);   /* a read-only transaction ends with abort */
    return st;
}

static void lmdb_fini(struct store *s) { lmdb_close((struct lmdb_store *)s); }

const struct store_ops store_lmdb = { sizeof(struct lmdb_store), lmdb_create, lmdb_cold,
                                      lmdb_put, lmdb_get, lmdb_fini };
