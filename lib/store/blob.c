/* blob.c - a partition as a sequence of fixed-size chunks, put and got on worker threads.
 *
 * Hashing and compressing are CPU-bound (SHA-256 ~1.7 GB/s, zstd -1 ~0.5-1 GB/s per core
 * here), so chunks are handed out to s->threads workers by an atomic counter; each worker has
 * its own zstd contexts and scratch. Fixed-size, not content-defined, chunking: a partition is
 * a fixed-shape array updated in place, so the same offset is the same chunk across steps. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "store/internal.h"

struct job {
    struct ts_store *s;
    bool put;
    const uint8_t *src;         /* put */
    uint8_t *dst;               /* get */
    size_t len, chunk, n;
    uint8_t (*ids)[TS_STORE_ID_LEN];
    atomic_size_t next;
    atomic_bool failed;
    atomic_uint_fast64_t written;
    pthread_mutex_t mu;
    struct ts_err err;          /* the first failure; under mu */
    ts_status st;
};

static ts_status one(struct job *j, struct ts__worker *w, size_t i, struct ts_err *e)
{
    size_t off = i * j->chunk, n = j->len - off < j->chunk ? j->len - off : j->chunk, got;
    uint64_t written;
    ts_status st;
    bool ex;

    if (j->put) {
        st = ts__put(j->s, w, TS__KIND_CHUNK, j->src + off, n, j->ids[i], &ex, &written, e);
        if (st == TS_OK)
            atomic_fetch_add(&j->written, written);
        return st;
    }
    st = ts__get(j->s, w, TS__KIND_CHUNK, j->ids[i], j->dst + off, n, &got, e);
    if (st == TS_OK && got != n) {
        char hex[TS_STORE_HEX_LEN + 1];

        return ts_err_set(e, TS_ECORRUPT, "store: chunk %s (#%zu of blob): %zu bytes, want %zu",
                          ts_store_hex(j->ids[i], hex), i, got, n);
    }
    return st;
}

static void *worker(void *arg)
{
    struct job *j = arg;
    struct ts__worker w = { 0 };
    struct ts_err e = { 0 };

    while (!atomic_load(&j->failed)) {
        size_t i = atomic_fetch_add(&j->next, 1);
        ts_status st;

        if (i >= j->n)
            break;
        st = one(j, &w, i, &e);
        if (st != TS_OK) {
            pthread_mutex_lock(&j->mu);
            if (j->st == TS_OK) {
                j->st = st;
                j->err = e;
            }
            pthread_mutex_unlock(&j->mu);
            atomic_store(&j->failed, true);
        }
    }
    ts__worker_fini(&w);
    return NULL;
}

/* Runs j on min(threads, n) threads, the caller's being one of them. */
static ts_status run(struct job *j, struct ts_err *err)
{
    pthread_t tid[64];
    size_t nt = (size_t)j->s->threads < j->n ? (size_t)j->s->threads : j->n, started = 0;

    pthread_mutex_init(&j->mu, NULL);
    for (size_t t = 1; t < nt; t++) {
        if (pthread_create(&tid[started], NULL, worker, j) != 0)
            break; /* fewer threads is slower, not wrong */
        started++;
    }
    worker(j);
    for (size_t t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
    pthread_mutex_destroy(&j->mu);
    if (j->st != TS_OK)
        return ts_err_set(err, j->st, "%s", j->err.msg);
    return TS_OK;
}

ts_status ts_store_put_blob(struct ts_store *s, const void *data, size_t len, size_t chunk,
                            uint8_t (*ids)[TS_STORE_ID_LEN], uint64_t *bytes_written,
                            struct ts_err *err)
{
    struct job j = { .s = s, .put = true, .src = data, .len = len };
    ts_status st;

    j.chunk = chunk ? chunk : TS_STORE_DEFAULT_CHUNK;
    if (j.chunk > TS_STORE_MAX_CHUNK)
        return ts_err_set(err, TS_EINVAL, "store: put_blob: chunk %zu: at most %u", chunk,
                          TS_STORE_MAX_CHUNK);
    j.n = ts_store_nchunks(len, j.chunk);
    if (j.n && (!data || !ids))
        return ts_err_set(err, TS_EINVAL, "store: put_blob: data and ids are required");
    j.ids = ids;
    st = run(&j, err);
    if (st == TS_OK && bytes_written)
        *bytes_written = atomic_load(&j.written);
    return st;
}

ts_status ts_store_get_blob(struct ts_store *s, const uint8_t (*ids)[TS_STORE_ID_LEN],
                            void *buf, size_t len, size_t chunk, struct ts_err *err)
{
    struct job j = { .s = s, .put = false, .dst = buf, .len = len };

    j.chunk = chunk ? chunk : TS_STORE_DEFAULT_CHUNK;
    if (j.chunk > TS_STORE_MAX_CHUNK)
        return ts_err_set(err, TS_EINVAL, "store: get_blob: chunk %zu: at most %u", chunk,
                          TS_STORE_MAX_CHUNK);
    j.n = ts_store_nchunks(len, j.chunk);
    if (j.n && (!buf || !ids))
        return ts_err_set(err, TS_EINVAL, "store: get_blob: buf and ids are required");
    j.ids = (uint8_t (*)[TS_STORE_ID_LEN])ids; /* read only on this path */
    return run(&j, err);
}
