/* blob.c - a partition as a sequence of fixed-size chunks, put and got on worker threads.
 *
 * Hashing and compressing are CPU-bound (SHA-256 ~1.7 GB/s, zstd -1 ~0.5-1 GB/s per core
 * here), so chunks are handed out to s->threads workers by an atomic counter; each worker has
 * its own zstd contexts and scratch. Fixed-size, not content-defined, chunking: a partition is
 * a fixed-shape array updated in place, so the same offset is the same chunk across steps.
 * A put defers the directory fsyncs: workers only note which fan-out directories the blob
 * touched (wrote a chunk into, or found one in), and put_blob fsyncs each of those once at
 * the end, before it reports success: at most 256 fsyncs instead of one per chunk. A chunk
 * is trusted (its id handed back) only after that fsync; docs/store.md has the reasoning. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
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
    bool *wrote;                /* put: chunk i was written by this call (not found) */
    atomic_uint_fast64_t dirs[4]; /* put: fan-out directories touched, one bit each */
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
        st = ts__put(j->s, w, TS__KIND_CHUNK, j->src + off, n, j->ids[i], true, &ex, &written,
                     e);
        if (st != TS_OK)
            return st;
        atomic_fetch_add(&j->written, written);
        atomic_fetch_or(&j->dirs[j->ids[i][0] >> 6], (uint_fast64_t)1 << (j->ids[i][0] & 63));
        j->wrote[i] = !ex;
        return TS_OK;
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

/* The deferred directory fsyncs, one per fan-out directory touched. A found chunk's
 * directory is synced too: the name may be another put's, renamed but not yet synced. If one
 * fails, the chunks this call wrote into that directory are unlinked again (their names might
 * not survive a crash, as in ts__fs_publish) and the rest stay unsynced: a later put that
 * finds them syncs before trusting them. */
static ts_status sync_dirs(struct job *j, struct ts_err *err)
{
    char path[TS__PATH_MAX];
    ts_status st;

    for (unsigned d = 0; d < 256; d++) {
        if (!(atomic_load(&j->dirs[d >> 6]) >> (d & 63) & 1))
            continue;
        snprintf(path, sizeof(path), "%s/chunks/%02x", j->s->dir, d);
        st = ts__fs_sync_dir(j->s, path, err);
        if (st == TS_OK)
            continue;
        for (size_t i = 0; i < j->n; i++) {
            if (j->wrote[i] && j->ids[i][0] == d) {
                ts__obj_path(j->s, "chunks", j->ids[i], path, sizeof(path));
                j->s->sys.unlink(path); /* ENOENT: a duplicate chunk, already unlinked */
            }
        }
        return st;
    }
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
    j.wrote = calloc(j.n ? j.n : 1, sizeof(*j.wrote));
    if (!j.wrote)
        return ts_err_set(err, TS_ENOMEM, "store: put_blob: %zu chunks: out of memory", j.n);
    st = run(&j, err);
    if (st == TS_OK)
        st = sync_dirs(&j, err);
    free(j.wrote);
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
