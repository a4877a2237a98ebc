/* stores.h - the candidate stores for a table's disk tier that bench_table_store measures
 * (bench/ only; not a library of the product), behind one table of operations.
 *
 * A store holds records of rec bytes under KEY_LEN-byte keys (big-endian, so byte order is
 * key order), in a directory of its own, and is written and read in batches. Each store's file
 * defines one const ops table and a struct that starts with struct store, which its ops cast
 * back to: store_mem.c (the in-memory baseline, no files), store_lmdb.c, store_rocksdb.c and
 * store_slotfile.c (lib/table's slot file, the tier's own store). `variant` picks the store's
 * setting; each file says which number is which. Callers use the store_* calls below, never
 * t->ops; stores.c does what every store shares (the directory, allocation).
 * Ownership: store_create() returns a store the caller frees with store_destroy(), which also
 * removes its directory; store_put and store_get borrow their buffers for the call.
 * Threads: one thread at a time calls the stores, all of them together (store_rocksdb.c's get
 * keeps its arrays in statics). */
#ifndef TS_BENCH_STORES_H
#define TS_BENCH_STORES_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define KEY_LEN 8
/* The workload's batches, which bound what one call is handed: */
#define LOAD_BATCH 16384    /* rows a load batch writes: the most records one store_put takes */
#define READ_BATCH 4096     /* rows a read batch reads: the most records one store_get takes */

struct store {
    const struct store_ops *ops;
    int variant;              /* the store's setting: 0 its first */
    size_t rec;               /* bytes a record */
    char path[4096];          /* its directory: made by store_create, removed by store_destroy */
};

struct store_ops {
    size_t size;              /* of the store's struct, which starts with struct store */
    /* Sets the store up and opens it in t->path, which is new and empty, for nrows records.
     * On failure fini still runs. */
    ts_status (*create)(struct store *t, size_t nrows, struct ts_err *err);
    /* A cold start: the store closed, its files written and dropped from the page cache
     * (posix_fadvise DONTNEED: store_evict), opened again; or what comes nearest for a store
     * that a reopen would empty. */
    ts_status (*cold)(struct store *t, struct ts_err *err);
    /* Writes n records (keys k, records v) as one transaction / batch, waited for. */
    ts_status (*put)(struct store *t, const unsigned char *k, const unsigned char *v, size_t n,
                     struct ts_err *err);
    /* Reads n records (keys k, sorted, each one written before) into out, each copied. */
    ts_status (*get)(struct store *t, const unsigned char *k, unsigned char *out, size_t n,
                     struct ts_err *err);
    void (*fini)(struct store *t);   /* closes and frees what create made, all or part; not t */
};

extern const struct store_ops store_mem, store_lmdb, store_rocksdb, store_slotfile;

/* A new store of ops in a new directory path, for nrows records of rec bytes. On TS_OK the
 * caller owns *out, freed with store_destroy. */
ts_status store_create(const struct store_ops *ops, int variant, const char *path, size_t rec,
                       size_t nrows, struct store **out, struct ts_err *err) TS_MUST_CHECK;
/* Closes the store, frees it and removes its directory. NULL: no-op. */
void store_destroy(struct store *t);

static inline ts_status store_cold(struct store *t, struct ts_err *err)
{
    return t->ops->cold(t, err);
}
static inline ts_status store_put(struct store *t, const unsigned char *k,
                                  const unsigned char *v, size_t n, struct ts_err *err)
{
    return t->ops->put(t, k, v, n, err);
}
static inline ts_status store_get(struct store *t, const unsigned char *k, unsigned char *out,
                                  size_t n, struct ts_err *err)
{
    return t->ops->get(t, k, out, n, err);
}

/* The bytes t's directory holds (st_blocks), or -1 if it could not be walked. */
int64_t store_disk_bytes(const struct store *t);
/* For the stores' cold starts: writes the dirty pages of every file under t->path and drops
 * them from the page cache. */
void store_evict(const struct store *t);
/* rm -rf dir, saying on stderr what it could not remove. */
void store_rm_tree(const char *dir);

/* SplitMix64's finalizer: the memory store's hash (the workload draws from bench_rng_next). */
static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#endif
