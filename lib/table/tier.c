/* tier.c - the disk tier: one RocksDB database, key spaces for table stores, and the writer
 * thread that writes evicted rows in batches (tier.h).
 *
 * The writer takes batches in the order tables hand them (a FIFO), so a row evicted twice is
 * on disk as of its later eviction. A batch that fails (the disk full) stays at the head of
 * the queue and is tried again every TS_TIER_RETRY_MS: the table still finds its rows in it
 * (rows.c), so nothing is lost while the disk refuses. Options: no compression (rows are
 * floats, which compress poorly, and lz4 costs CPU on every read), a 10-bit Bloom filter a
 * key (a pull of a row that was never created looks for it on disk), a small block cache
 * (the table's own memory tier is the cache that counts), small blocks read through a
 * mapping (below), and reads as RocksDB's batched MultiGet. */
#include "table/internal.h"
#include "table/tier.h"

#include "util/proc.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <rocksdb/c.h>

#define KEY_LEN 16
#define BLOCK_CACHE_BYTES (16u << 20)
#define WRITE_BUFFER_BYTES (16u << 20)

struct ts_tier {
    rocksdb_t *db;
    rocksdb_column_family_handle_t *cf;   /* the default one: batched MultiGet names it */
    rocksdb_options_t *opt;
    rocksdb_block_based_table_options_t *bbt;
    rocksdb_cache_t *cache;
    rocksdb_writeoptions_t *wo;
    rocksdb_readoptions_t *ro;
    char dir[PATH_MAX];
    pthread_t writer;
    bool started, stop;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    struct tier_batch *head, *tail;    /* queued, oldest first; the head is being written */
    _Atomic uint64_t next_space;
    char failure[256];                 /* under mu */
    bool full;                         /* tests: writes fail as on a full disk (under mu) */
};

static void key_of(uint8_t k[KEY_LEN], uint64_t space, uint64_t id)
{
    for (int b = 0; b < 8; b++) {
        k[b] = (uint8_t)(space >> (56 - 8 * b));
        k[8 + b] = (uint8_t)(id >> (56 - 8 * b));
    }
}

static uint64_t id_of(const char *k)
{
    uint64_t id = 0;

    for (int b = 0; b < 8; b++)
        id = id << 8 | (uint8_t)k[8 + b];
    return id;
}

/* Writes b: its space's keys deleted (b->drop), then its dropped rows' (b->dels), then its
 * rows. */
static char *write_batch(struct ts_tier *tier, const struct tier_batch *b)
{
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    uint8_t k[KEY_LEN], end[KEY_LEN];
    char *e = NULL;

    if (b->drop) {
        key_of(k, b->space, 0);
        key_of(end, b->space + 1, 0);
        rocksdb_writebatch_delete_range(wb, (const char *)k, KEY_LEN, (const char *)end,
                                        KEY_LEN);
    }
    for (size_t i = 0; i < b->ndels; i++) {
        key_of(k, b->space, b->dels[i]);
        rocksdb_writebatch_delete(wb, (const char *)k, KEY_LEN);
    }
    for (size_t i = 0; i < b->n; i++) {
        key_of(k, b->space, b->ids[i]);
        rocksdb_writebatch_put(wb, (const char *)k, KEY_LEN,
                               (const char *)b->recs + i * b->rec, b->rec);
    }
    rocksdb_write(tier->db, tier->wo, wb, &e);
    rocksdb_writebatch_destroy(wb);
    return e;
}

/* The failure as a reader wants it: RocksDB's text names the file it was writing (a path the
 * message already has, in front) and repeats the cause, so the common causes are said once. */
static void set_failure(struct ts_tier *tier, const char *e)
{
    static const struct { const char *text, *say; } known[] = {
        { "No space left on device", "no space left on the device (ENOSPC)" },
        { "Disk quota exceeded", "the disk quota is exceeded (EDQUOT)" },
        { "Read-only file system", "the file system is read-only (EROFS)" },
        { "Permission denied", "permission denied (EACCES)" },
        { "Input/output error", "an I/O error (EIO)" },
    };

    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (strstr(e, known[i].text)) {
            snprintf(tier->failure, sizeof(tier->failure), "%s", known[i].say);
            return;
        }
    snprintf(tier->failure, sizeof(tier->failure), "%s", e);
}

static void *writer_main(void *arg)
{
    struct ts_tier *tier = arg;

    pthread_mutex_lock(&tier->mu);
    for (;;) {
        struct tier_batch *b;
        char *e;

        while (!tier->head && !tier->stop)
            pthread_cond_wait(&tier->work, &tier->mu);
        if (!(b = tier->head))
            break;
        if (tier->full && !b->skip) {
            e = strdup("IO error: No space left on device (tier_set_full)");
        } else {
            pthread_mutex_unlock(&tier->mu);
            e = b->skip ? NULL : write_batch(tier, b);
            pthread_mutex_lock(&tier->mu);
        }
        if (e) {
            set_failure(tier, e);
            free(e);   /* rocksdb_free is free() */
            pthread_cond_broadcast(&tier->done);   /* waiters see the failure (tier_wait) */
            if (tier->stop) {
                b->skip = true;      /* closing: what the disk refuses is dropped */
            } else {
                struct timespec ts;

                ts_abstime_ms(&ts, TS_TIER_RETRY_MS);
                pthread_cond_timedwait(&tier->work, &tier->mu, &ts);
            }
            continue;
        }
        tier->failure[0] = '\0';
        if (!(tier->head = b->next))
            tier->tail = NULL;
        if (b->orphan)
            tier_batch_free(b);
        else
            atomic_store(&b->done, true);
        pthread_cond_broadcast(&tier->done);
    }
    pthread_mutex_unlock(&tier->mu);
    return NULL;
}

static void tier_free(struct ts_tier *tier)
{
    if (tier->cf)
        rocksdb_column_family_handle_destroy(tier->cf);
    if (tier->db)
        rocksdb_close(tier->db);
    if (tier->opt)
        rocksdb_options_destroy(tier->opt);
    if (tier->bbt)
        rocksdb_block_based_options_destroy(tier->bbt);
    if (tier->cache)
        rocksdb_cache_destroy(tier->cache);
    if (tier->wo)
        rocksdb_writeoptions_destroy(tier->wo);
    if (tier->ro)
        rocksdb_readoptions_destroy(tier->ro);
    pthread_mutex_destroy(&tier->mu);
    pthread_cond_destroy(&tier->work);
    pthread_cond_destroy(&tier->done);
    free(tier);
}

ts_status ts_tier_open(const char *dir, struct ts_tier **out, struct ts_err *err)
{
    struct ts_tier *tier;
    struct stat sb;
    char *e = NULL;

    if (!dir || !*dir || strlen(dir) >= PATH_MAX)
        return ts_err_set(err, TS_EINVAL, "table-dir: required, under %d bytes", PATH_MAX);
    if (mkdir(dir, 0700) && errno != EEXIST)
        return ts_err_set(err, TS_EIO, "table-dir %s: cannot create it: %s", dir,
                          strerror(errno));
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode))
        return ts_err_set(err, TS_EIO, "table-dir %s: not a directory", dir);
    if (!(tier = calloc(1, sizeof(*tier))))
        return ts_err_set(err, TS_ENOMEM, "no memory for the disk tier");
    pthread_mutex_init(&tier->mu, NULL);
    pthread_cond_init(&tier->work, NULL);
    pthread_cond_init(&tier->done, NULL);
    snprintf(tier->dir, sizeof(tier->dir), "%s", dir);
    atomic_init(&tier->next_space, 1);
    tier->opt = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(tier->opt, 1);
    rocksdb_options_set_compression(tier->opt, rocksdb_no_compression);
    rocksdb_options_set_write_buffer_size(tier->opt, WRITE_BUFFER_BYTES);
    rocksdb_options_set_max_background_jobs(tier->opt, 2);
    /* A Bloom filter over the write buffer's keys too: many look-ups in a step are of rows
     * not made yet, which the skip list would otherwise search (perf: that search was the
     * shard's top cost, and the CTR run 1.2x as fast with it). */
    rocksdb_options_set_memtable_prefix_bloom_size_ratio(tier->opt, 0.1);
    rocksdb_options_set_memtable_whole_key_filtering(tier->opt, 1);
    tier->cache = rocksdb_cache_create_lru(BLOCK_CACHE_BYTES);
    tier->bbt = rocksdb_block_based_options_create();
    rocksdb_block_based_options_set_block_cache(tier->bbt, tier->cache);
    rocksdb_block_based_options_set_filter_policy(tier->bbt,
                                                  rocksdb_filterpolicy_create_bloom(10));
    /* Point reads of single rows: 1 KiB blocks (a row is 0.2 to 1 KiB; with 4 KiB ones
     * each row read copied and checksummed four times its bytes), a hash index in each
     * block (no binary search), the files mapped (no read call and copy a block). */
    rocksdb_block_based_options_set_block_size(tier->bbt, 1024);
    rocksdb_block_based_options_set_data_block_index_type(
        tier->bbt, rocksdb_block_based_table_data_block_index_type_binary_search_and_hash);
    rocksdb_options_set_allow_mmap_reads(tier->opt, 1);
    rocksdb_options_set_block_based_table_factory(tier->opt, tier->bbt);
    tier->wo = rocksdb_writeoptions_create();
    rocksdb_writeoptions_disable_WAL(tier->wo, 1);
    tier->ro = rocksdb_readoptions_create();
    /* A cache of rows, never read back by a new process: start empty (tier.h). */
    rocksdb_destroy_db(tier->opt, dir, &e);
    if (e) {
        ts_err_set(err, TS_EIO, "table-dir %s: cannot empty the old tier: %s", dir, e);
        rocksdb_free(e);
        tier_free(tier);
        return TS_EIO;
    }
    if (mkdir(dir, 0700) && errno != EEXIST) {
        ts_err_set(err, TS_EIO, "table-dir %s: cannot create it: %s", dir, strerror(errno));
        tier_free(tier);
        return TS_EIO;
    }
    const char *cfname[1] = { "default" };
    const rocksdb_options_t *cfopt[1] = { tier->opt };
    if (!(tier->db = rocksdb_open_column_families(tier->opt, dir, 1, cfname, cfopt, &tier->cf,
                                                  &e))) {
        ts_err_set(err, TS_EIO, "table-dir %s: cannot open the disk tier: %s (is another "
                   "shard using this directory?)", dir, e ? e : "unknown error");
        rocksdb_free(e);
        tier_free(tier);
        return TS_EIO;
    }
    if (pthread_create(&tier->writer, NULL, writer_main, tier)) {
        tier_free(tier);
        return ts_err_set(err, TS_EIO, "cannot start the disk tier's writer thread");
    }
    tier->started = true;
    *out = tier;
    return TS_OK;
}

void ts_tier_close(struct ts_tier *tier)
{
    if (!tier)
        return;
    pthread_mutex_lock(&tier->mu);
    tier->stop = true;
    pthread_cond_broadcast(&tier->work);
    pthread_mutex_unlock(&tier->mu);
    if (tier->started)
        pthread_join(tier->writer, NULL);
    tier_free(tier);
}

const char *ts_tier_dir(const struct ts_tier *tier)
{
    return tier->dir;
}

void ts_tier_failure(struct ts_tier *tier, char *buf, size_t len)
{
    pthread_mutex_lock(&tier->mu);
    snprintf(buf, len, "%s", tier->failure);
    pthread_mutex_unlock(&tier->mu);
}

uint64_t tier_space(struct ts_tier *tier)
{
    return atomic_fetch_add(&tier->next_space, 1);
}

void tier_submit(struct ts_tier *tier, struct tier_batch *b)
{
    b->next = NULL;
    pthread_mutex_lock(&tier->mu);
    if (tier->tail)
        tier->tail->next = b;
    else
        tier->head = b;
    tier->tail = b;
    pthread_cond_signal(&tier->work);
    pthread_mutex_unlock(&tier->mu);
}

bool tier_wait(struct ts_tier *tier, struct tier_batch *b)
{
    bool done;

    pthread_mutex_lock(&tier->mu);
    while (!(done = atomic_load(&b->done)) && !tier->failure[0])
        pthread_cond_wait(&tier->done, &tier->mu);
    pthread_mutex_unlock(&tier->mu);
    return done;
}

bool tier_failing(struct ts_tier *tier, char *why, size_t len)
{
    bool failing;

    pthread_mutex_lock(&tier->mu);
    if ((failing = tier->failure[0] != '\0') && why)
        snprintf(why, len, "%s", tier->failure);
    pthread_mutex_unlock(&tier->mu);
    return failing;
}

void tier_set_full(struct ts_tier *tier, bool full)
{
    pthread_mutex_lock(&tier->mu);
    tier->full = full;
    pthread_cond_broadcast(&tier->work);
    pthread_mutex_unlock(&tier->mu);
}

bool tier_orphan(struct ts_tier *tier, struct tier_batch *b)
{
    bool done;

    pthread_mutex_lock(&tier->mu);
    if (!(done = atomic_load(&b->done))) {
        b->orphan = true;
        b->skip = true;      /* its table is gone: nothing reads these rows again */
    }
    pthread_mutex_unlock(&tier->mu);
    return done;
}

void tier_drop_space(struct ts_tier *tier, uint64_t space)
{
    struct tier_batch *b = calloc(1, sizeof(*b));

    if (!b)
        return;     /* the keys stay until the database is emptied at the next start */
    b->space = space;
    b->drop = true;
    b->orphan = true;
    tier_submit(tier, b);
}

ts_status tier_get_many(struct ts_tier *tier, uint64_t space, size_t n, const uint64_t *ids,
                        uint8_t *recs, size_t rec, bool *found, struct ts_err *err)
{
    enum { GROUP = 256 };
    uint8_t keys[GROUP][KEY_LEN];
    const char *kp[GROUP];
    size_t ks[GROUP];
    rocksdb_pinnableslice_t *vp[GROUP];
    char *errs[GROUP];
    ts_status st = TS_OK;

    /* Batched MultiGet: the group's keys looked up together, level by level (one index
     * and filter probe a file for all of them), values pinned where they lie, not copied
     * twice. */
    for (size_t at = 0; at < n; at += GROUP) {
        size_t m = n - at < GROUP ? n - at : GROUP;

        for (size_t i = 0; i < m; i++) {
            key_of(keys[i], space, ids[at + i]);
            kp[i] = (const char *)keys[i];
            ks[i] = KEY_LEN;
        }
        rocksdb_batched_multi_get_cf(tier->db, tier->ro, tier->cf, m, kp, ks, vp, errs, false);
        for (size_t i = 0; i < m; i++) {
            size_t vs = 0;
            const char *v = vp[i] ? rocksdb_pinnableslice_value(vp[i], &vs) : NULL;

            found[at + i] = false;
            if (errs[i] && !st)
                st = ts_err_set(err, TS_EIO, "disk tier %s: reading row %" PRIu64 ": %s",
                                tier->dir, ids[at + i], errs[i]);
            else if (v && vs != rec && !st)
                st = ts_err_set(err, TS_ECORRUPT, "disk tier %s: row %" PRIu64 " is %zu "
                                "bytes, want %zu", tier->dir, ids[at + i], vs, rec);
            else if (v) {
                memcpy(recs + (at + i) * rec, v, rec);
                found[at + i] = true;
            }
            rocksdb_free(errs[i]);
            if (vp[i])
                rocksdb_pinnableslice_destroy(vp[i]);
        }
        if (st)
            return st;
    }
    return TS_OK;
}

ts_status tier_ids(struct ts_tier *tier, uint64_t space, uint64_t **out, size_t *n,
                   struct ts_err *err)
{
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    uint8_t start[KEY_LEN], end[KEY_LEN];
    rocksdb_iterator_t *it;
    size_t cap = 1024, k = 0;
    uint64_t *ids = malloc(cap * sizeof(*ids));
    ts_status st = TS_OK;
    char *e = NULL;

    key_of(start, space, 0);
    key_of(end, space + 1, 0);
    rocksdb_readoptions_set_iterate_upper_bound(ro, (const char *)end, KEY_LEN);
    rocksdb_readoptions_set_fill_cache(ro, 0);
    it = rocksdb_create_iterator(tier->db, ro);
    for (rocksdb_iter_seek(it, (const char *)start, KEY_LEN); ids && rocksdb_iter_valid(it);
         rocksdb_iter_next(it)) {
        size_t kl;
        const char *key = rocksdb_iter_key(it, &kl);

        if (k == cap) {
            uint64_t *more = realloc(ids, 2 * cap * sizeof(*ids));

            if (!more) {
                free(ids);
                ids = NULL;
                break;
            }
            ids = more;
            cap *= 2;
        }
        if (kl == KEY_LEN)
            ids[k++] = id_of(key);
    }
    rocksdb_iter_get_error(it, &e);
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    if (e) {
        st = ts_err_set(err, TS_EIO, "disk tier %s: listing rows: %s", tier->dir, e);
        rocksdb_free(e);
    } else if (!ids) {
        st = ts_err_set(err, TS_ENOMEM, "no memory to list the disk tier's rows");
    }
    if (st) {
        free(ids);
        return st;
    }
    *out = ids;
    *n = k;
    return TS_OK;
}

uint64_t tier_space_bytes(struct ts_tier *tier, uint64_t space)
{
    uint8_t start[KEY_LEN], end[KEY_LEN];
    const char *sk[1] = { (const char *)start }, *ek[1] = { (const char *)end };
    size_t sl[1] = { KEY_LEN }, el[1] = { KEY_LEN };
    uint64_t size = 0;
    char *e = NULL;

    key_of(start, space, 0);
    key_of(end, space + 1, 0);
    rocksdb_approximate_sizes(tier->db, 1, sk, sl, ek, el, &size, &e);
    if (e) {
        rocksdb_free(e);
        size = 0;
    }
    return size;
}

void tier_batch_free(struct tier_batch *b)
{
    if (!b)
        return;
    idmap_fini(&b->map);
    free(b->dels);
    free(b->ids);
    free(b->recs);
    free(b);
}
