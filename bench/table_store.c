/* table_store.c - bench_table_store: which embedded store should hold a table's disk tier?
 *
 * Why: issue 48 puts a disk tier under lib/table's rows, and asks for Debian's RocksDB or LMDB,
 * chosen by measurement on this workload. The workload is the tier's: records of a sparse
 * table (a 32-byte header, dim floats and dim * state optimizer floats: 544 bytes at dim 64
 * with Adagrad), keyed by the 8-byte big-endian row id spread by a multiplicative hash (rows
 * are created in the order ids are first seen, which is random in key order), read and written
 * in a step's batches. For each store and setting, on a fresh directory under --dir:
 *   load    --rows rows in transactions / WriteBatches of 16384 rows, in id order
 *   read    --read-batches batches of 4096 distinct ids drawn Zipf(--zipf) over the rows,
 *           each sorted by key and read in one read transaction / rocksdb_multi_get, from a
 *           cold start: the store closed, its files dropped from the page cache
 *           (posix_fadvise DONTNEED, no root needed), reopened. The page cache is not bounded
 *           afterwards, so later batches hit it: see docs/embeddings.md.
 *   write   --write-batches batches of 2048 distinct Zipf ids, updated rows written back as one
 *           transaction / WriteBatch each
 *   mixed   --steps steps: read 4096 distinct Zipf ids, update and write back 2048 of them
 *   disk    bytes the directory holds (st_blocks) after the load and after the mixed phase
 * Settings: LMDB with its default sync on commit (durable against power loss) and with
 * MDB_NOSYNC|MDB_WRITEMAP (committed data survives a crash of the process, not of the
 * machine); RocksDB with a 64 MiB block cache and its default options otherwise: WAL and
 * sync on each WriteBatch (power loss), WAL without sync (process crash), WAL off (neither);
 * and Tessera's own slot file (lib/table/tier.c, what the disk tier uses: nothing synced, a
 * cache), driven through the tier's batches as rows.c drives it; its cold start writes and
 * drops its pages (tier_drop_cache) instead of a reopen, which would empty it. In memory,
 * same batches: an in-memory hash map from id to a record in one array (lookup and
 * memcpy), what the memory tier does. Only the stores' calls are timed (not making the
 * records or drawing ids). Each figure is the median of --repeat runs, each on a fresh store.
 * Output: a table and bench/results/table_store.json; headline = the slot file's mixed rows/s
 * (rows read per second of steps) against the best Debian store's, any setting.
 * The stores are behind bench/stores.h, one file each (bench/store_*.c). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "benchlib.h"
#include "stores.h"
#include "util/flags.h"
#include "util/json.h"

#define MAX_REPEAT 15
#define WRITE_BATCH 2048
#define HDR_LEN 32

struct setting {
    const char *store, *setting, *durable; /* durable: what a commit survives */
    const struct store_ops *ops;
    int variant;                           /* the store's setting: see its store_*.c */
};
static const struct setting settings[] = {
    { "memory", "hash map", "nothing", &store_mem, 0 },
    { "lmdb", "sync", "power loss", &store_lmdb, 0 },
    { "lmdb", "nosync+writemap", "process crash", &store_lmdb, 1 },
    { "rocksdb", "wal+sync", "power loss", &store_rocksdb, 0 },
    { "rocksdb", "wal", "process crash", &store_rocksdb, 1 },
    { "rocksdb", "no-wal", "nothing", &store_rocksdb, 2 },
    { "tessera", "slot-file", "nothing", &store_slotfile, 0 },
};
#define NSET (sizeof(settings) / sizeof(settings[0]))

enum { M_LOAD, M_READ, M_WRITE, M_MIXED_STEPS, M_MIXED_ROWS, M_DISK_LOAD, M_DISK_MIXED, NM };

struct opts {
    int64_t rows, dim, state, steps, repeat, read_batches, write_batches;
    const char *dir, *out, *only, *zipf;
    bool quick;
};

struct run {
    struct opts o;
    double zipf_s;
    char machine[192], base[4096];
    bool own_base;
    size_t rec, n;
    double *cdf;
    uint32_t *seen;
    uint32_t stamp;
    /* the batches, drawn once per repeat before any store runs */
    uint32_t *read_ids, *write_ids, *mixed_ids; /* sorted by key within each batch */
    uint32_t *mixed_wb;                         /* the 2048 of each step written back */
    unsigned char *buf;                         /* LOAD_BATCH records */
    unsigned char *keys;                        /* LOAD_BATCH keys */
    double m[NSET][NM][MAX_REPEAT];
    double med[NSET][NM];
    bool on[NSET];
};

static volatile uint64_t sink;

/* The key of row id: the id spread by a multiplicative hash (odd, so one to one), big-endian
 * so that byte order is key order. */
static uint64_t key_of(uint32_t id) { return ((uint64_t)id + 1) * 0x9E3779B97F4A7C15ull; }

static void put_key(unsigned char *k, uint32_t id)
{
    uint64_t v = key_of(id);

    for (int i = 7; i >= 0; i--, v >>= 8)
        k[i] = (unsigned char)v;
}

/* A record: header (id, version, step, flags) and random floats (as incompressible as trained
 * embeddings and optimizer state are). */
static void make_record(unsigned char *r, size_t rec, uint32_t id)
{
    uint64_t s = id * 7919ull + 1, h[4] = { id, 1, 0, 0 };

    memcpy(r, h, HDR_LEN);
    for (size_t i = HDR_LEN; i < rec; i += 4) {
        float f = (float)((double)(bench_rng_next(&s) >> 40) * 0x1p-24 - 0.5) * 0.02f;

        memcpy(r + i, &f, 4);
    }
}

/* What an update does to a record it writes back: its version and the first floats change. */
static void update_record(unsigned char *r, size_t rec)
{
    uint64_t v;
    float f;

    memcpy(&v, r + 8, 8);
    v++;
    memcpy(r + 8, &v, 8);
    for (size_t i = HDR_LEN; i < HDR_LEN + 64 && i + 4 <= rec; i += 4) {
        memcpy(&f, r + i, 4);
        f += 0.001f;
        memcpy(r + i, &f, 4);
    }
}

/* ---- workload ---- */

static uint32_t zipf_draw(const struct run *r, uint64_t *s)
{
    double u = (double)(bench_rng_next(s) >> 11) * 0x1p-53;
    size_t lo = 0, hi = r->n - 1;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (r->cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (uint32_t)lo;
}

static int cmp_by_key(const void *pa, const void *pb)
{
    uint64_t a = key_of(*(const uint32_t *)pa), b = key_of(*(const uint32_t *)pb);

    return (a > b) - (a < b);
}

/* k distinct Zipf ids into out, in the order drawn (hottest first, mostly). */
static void draw_distinct(struct run *r, uint64_t *s, uint32_t *out, size_t k)
{
    size_t got = 0;

    if (++r->stamp == 0) {
        memset(r->seen, 0, r->n * sizeof(uint32_t));
        r->stamp = 1;
    }
    while (got < k) {
        uint32_t id = zipf_draw(r, s);

        if (r->seen[id] != r->stamp) {
            r->seen[id] = r->stamp;
            out[got++] = id;
        }
    }
}

static void draw_batches(struct run *r, uint64_t seed)
{
    uint64_t s = seed;

    for (int64_t b = 0; b < r->o.read_batches; b++) {
        uint32_t *ids = r->read_ids + b * READ_BATCH;

        draw_distinct(r, &s, ids, READ_BATCH);
        qsort(ids, READ_BATCH, 4, cmp_by_key);
    }
    for (int64_t b = 0; b < r->o.write_batches; b++) {
        uint32_t *ids = r->write_ids + b * WRITE_BATCH;

        draw_distinct(r, &s, ids, WRITE_BATCH);
        qsort(ids, WRITE_BATCH, 4, cmp_by_key);
    }
    for (int64_t b = 0; b < r->o.steps; b++) {
        uint32_t *ids = r->mixed_ids + b * READ_BATCH, *wb = r->mixed_wb + b * WRITE_BATCH;

        draw_distinct(r, &s, ids, READ_BATCH);
        memcpy(wb, ids, WRITE_BATCH * 4);   /* the first drawn: the step's hotter rows */
        qsort(ids, READ_BATCH, 4, cmp_by_key);
        qsort(wb, WRITE_BATCH, 4, cmp_by_key);
    }
}

/* ---- one run of one setting ---- */

static void fill_keys(unsigned char *k, const uint32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        put_key(k + i * KEY_LEN, ids[i]);
}

static void progress(const struct setting *s, const char *phase, int64_t done, int64_t total,
                     int64_t *next_ns)
{
    int64_t now = ts_now_ns();

    if (done < total && now < *next_ns)
        return;
    *next_ns = now + 2000000000ll;
    fprintf(stderr, "bench_table_store: %s/%s: %s %" PRId64 "/%" PRId64 "\n", s->store,
            s->setting, phase, done, total);
}

static ts_status run_one(struct run *r, size_t si, int rep, struct ts_err *err)
{
    const struct setting *s = &settings[si];
    struct store *t = NULL;
    unsigned char *k = r->keys, *v = r->buf, *wk = r->keys + READ_BATCH * KEY_LEN;
    char path[4096];
    int64_t ns, t0, next = 0;
    ts_status st;

    snprintf(path, sizeof(path), "%s/%s-%s-%d", r->base, s->store, s->setting, rep);
    for (char *p = path + strlen(r->base) + 1; *p; p++)
        if (*p == '+')
            *p = '_';
    if ((st = store_create(s->ops, s->variant, path, r->rec, r->n, &t, err)) != TS_OK)
        goto out;

    /* load */
    ns = 0;
    for (size_t b = 0; b < r->n; b += LOAD_BATCH) {
        size_t n = r->n - b < LOAD_BATCH ? r->n - b : LOAD_BATCH;

        for (size_t i = 0; i < n; i++) {
            put_key(k + i * KEY_LEN, (uint32_t)(b + i));
            make_record(v + i * r->rec, r->rec, (uint32_t)(b + i));
        }
        t0 = ts_now_ns();
        if ((st = store_put(t, k, v, n, err)) != TS_OK)
            goto out;
        ns += ts_now_ns() - t0;
        progress(s, "load", (int64_t)(b + n), (int64_t)r->n, &next);
    }
    r->m[si][M_LOAD][rep] = (double)r->n / ((double)ns * 1e-9);
    r->m[si][M_DISK_LOAD][rep] = s->ops == &store_mem ? (double)r->n * (double)r->rec
                                                         : (double)store_disk_bytes(t);

    /* read, from a cold start */
    if ((st = store_cold(t, err)) != TS_OK)
        goto out;
    ns = 0;
    next = 0;
    for (int64_t b = 0; b < r->o.read_batches; b++) {
        fill_keys(k, r->read_ids + b * READ_BATCH, READ_BATCH);
        t0 = ts_now_ns();
        if ((st = store_get(t, k, v, READ_BATCH, err)) != TS_OK)
            goto out;
        ns += ts_now_ns() - t0;
        sink += v[HDR_LEN];
        progress(s, "read", b + 1, r->o.read_batches, &next);
    }
    r->m[si][M_READ][rep] = (double)r->o.read_batches * READ_BATCH / ((double)ns * 1e-9);

    /* write-back */
    ns = 0;
    next = 0;
    for (int64_t b = 0; b < r->o.write_batches; b++) {
        const uint32_t *ids = r->write_ids + b * WRITE_BATCH;

        fill_keys(k, ids, WRITE_BATCH);
        for (size_t i = 0; i < WRITE_BATCH; i++) {
            make_record(v + i * r->rec, r->rec, ids[i]);
            update_record(v + i * r->rec, r->rec);
        }
        t0 = ts_now_ns();
        if ((st = store_put(t, k, v, WRITE_BATCH, err)) != TS_OK)
            goto out;
        ns += ts_now_ns() - t0;
        progress(s, "write", b + 1, r->o.write_batches, &next);
    }
    r->m[si][M_WRITE][rep] = (double)r->o.write_batches * WRITE_BATCH / ((double)ns * 1e-9);

    /* mixed: the step's reads, then its write-back (the rows written are among those read;
     * the update between is not timed) */
    ns = 0;
    next = 0;
    for (int64_t b = 0; b < r->o.steps; b++) {
        const uint32_t *ids = r->mixed_ids + b * READ_BATCH, *wb = r->mixed_wb + b * WRITE_BATCH;
        int64_t t1;

        fill_keys(k, ids, READ_BATCH);
        t0 = ts_now_ns();
        if ((st = store_get(t, k, v, READ_BATCH, err)) != TS_OK)
            goto out;
        t1 = ts_now_ns();
        /* The written rows: each one's record as read, updated. ids and wb are both in key
         * order, so one merge finds them. */
        unsigned char *w = v + (size_t)READ_BATCH * r->rec;
        size_t j = 0;
        for (size_t i = 0; i < READ_BATCH && j < WRITE_BATCH; i++)
            if (ids[i] == wb[j]) {
                memcpy(w + j * r->rec, v + i * r->rec, r->rec);
                update_record(w + j * r->rec, r->rec);
                j++;
            }
        if (j != WRITE_BATCH) {
            st = ts_err_set(err, TS_EINTERNAL, "mixed: write-back ids not among the reads");
            goto out;
        }
        fill_keys(wk, wb, WRITE_BATCH);
        int64_t t2 = ts_now_ns();
        if ((st = store_put(t, wk, w, WRITE_BATCH, err)) != TS_OK)
            goto out;
        ns += (t1 - t0) + (ts_now_ns() - t2);
        progress(s, "mixed", b + 1, r->o.steps, &next);
    }
    r->m[si][M_MIXED_STEPS][rep] = (double)r->o.steps / ((double)ns * 1e-9);
    r->m[si][M_MIXED_ROWS][rep] = r->m[si][M_MIXED_STEPS][rep] * READ_BATCH;
    r->m[si][M_DISK_MIXED][rep] = s->ops == &store_mem ? (double)r->n * (double)r->rec
                                                          : (double)store_disk_bytes(t);
out:
    store_destroy(t);
    return st;
}

/* ---- output ---- */

static double r1(double x) { return (double)bench_round_i(x * 10) / 10; }

static void print_table(const struct run *r)
{
    printf("bench_table_store: %zu rows of %zu bytes (dim %" PRId64 ", %" PRId64
           " state), Zipf(%.2f), %s, median of %" PRId64 " (%s)\n", r->n, r->rec, r->o.dim,
           r->o.state, r->zipf_s, r->base, r->o.repeat, r->machine);
    printf("read: %" PRId64 " batches of %d distinct ids from a cold start; write: %" PRId64
           " batches of %d; mixed: %" PRId64 " steps of %d read + %d written\n",
           r->o.read_batches, READ_BATCH, r->o.write_batches, WRITE_BATCH, r->o.steps,
           READ_BATCH, WRITE_BATCH);
    printf("rows/s in thousands; mixed rows/s = rows read per second of steps; "
           "MB = 1e6 bytes on disk (memory: the records' bytes)\n\n");
    printf("%-8s | %-15s | %-13s | %8s | %8s | %8s | %7s | %8s | %8s | %8s\n", "store",
           "setting", "survives", "load k/s", "read k/s", "write k/s", "mixed/s", "mixed k/s",
           "MB load", "MB mixed");
    for (size_t i = 0; i < NSET; i++) {
        const double *m = r->med[i];

        if (!r->on[i])
            continue;
        printf("%-8s | %-15s | %-13s | %8.1f | %8.1f | %9.1f | %7.1f | %9.1f | %8.0f | %8.0f\n",
               settings[i].store, settings[i].setting, settings[i].durable, m[M_LOAD] / 1e3,
               m[M_READ] / 1e3, m[M_WRITE] / 1e3, m[M_MIXED_STEPS], m[M_MIXED_ROWS] / 1e3,
               m[M_DISK_LOAD] / 1e6, m[M_DISK_MIXED] / 1e6);
    }
}

/* The setting of `ops` (or, NULL meaning any Debian store, of LMDB and RocksDB) with the
 * most mixed rows/s; -1 if none ran. */
static int best_of(const struct run *r, const struct store_ops *ops)
{
    int best = -1;

    for (size_t i = 0; i < NSET; i++)
        if (r->on[i] && (!ops ? settings[i].ops == &store_lmdb ||
                                settings[i].ops == &store_rocksdb : settings[i].ops == ops) &&
            (best < 0 || r->med[i][M_MIXED_ROWS] > r->med[best][M_MIXED_ROWS]))
            best = (int)i;
    return best;
}

static ts_status write_json(const struct run *r, struct ts_err *err)
{
    static const char *const key[NM] = { "load_rows_per_s", "read_rows_per_s",
        "write_rows_per_s", "mixed_steps_per_s", "mixed_rows_per_s", "disk_bytes_after_load",
        "disk_bytes_after_mixed" };
    struct ts_json j;
    int ours = best_of(r, &store_slotfile), b = best_of(r, NULL);

    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "name", "table_store");
    ts_json_str(&j, "machine", r->machine);
    ts_json_str(&j, "dir", r->base);
    ts_json_bool(&j, "quick", r->o.quick);
    ts_json_int(&j, "rows", (int64_t)r->n);
    ts_json_int(&j, "dim", r->o.dim);
    ts_json_int(&j, "state", r->o.state);
    ts_json_int(&j, "record_bytes", (int64_t)r->rec);
    ts_json_num(&j, "zipf", r->zipf_s);
    ts_json_int(&j, "read_batch", READ_BATCH);
    ts_json_int(&j, "write_batch", WRITE_BATCH);
    ts_json_int(&j, "read_batches", r->o.read_batches);
    ts_json_int(&j, "write_batches", r->o.write_batches);
    ts_json_int(&j, "steps", r->o.steps);
    ts_json_int(&j, "repeat", r->o.repeat);
    ts_json_str(&j, "read_start", "cold: store closed, files dropped from the page cache "
                "(posix_fadvise DONTNEED), reopened; the page cache is unbounded afterwards");
    ts_json_arr(&j, "rows_measured");
    for (size_t i = 0; i < NSET; i++) {
        if (!r->on[i])
            continue;
        ts_json_obj(&j, NULL);
        ts_json_str(&j, "store", settings[i].store);
        ts_json_str(&j, "setting", settings[i].setting);
        ts_json_str(&j, "survives", settings[i].durable);
        for (int m = 0; m < NM; m++)
            ts_json_num(&j, key[m], r1(r->med[i][m]));
        ts_json_arr(&j, "mixed_rows_per_s_runs");
        for (int64_t k = 0; k < r->o.repeat; k++)
            ts_json_num(&j, NULL, r1(r->m[i][M_MIXED_ROWS][k]));
        ts_json_end(&j);
        ts_json_end(&j);
    }
    ts_json_end(&j);
    ts_json_obj(&j, "headline");
    if (ours >= 0 && b >= 0) {
        ts_json_num(&j, "ours", r1(r->med[ours][M_MIXED_ROWS]));
        ts_json_num(&j, "baseline", r1(r->med[b][M_MIXED_ROWS]));
        ts_json_str(&j, "unit", "rows/s (mixed step: 4096 rows read, 2048 written back)");
        char what[200];
        snprintf(what, sizeof(what), "the disk tier's store (tessera slot-file) vs the best "
                 "Debian store measured (%s %s)", settings[b].store, settings[b].setting);
        ts_json_str(&j, "what", what);
        ts_json_num(&j, "ratio", (double)bench_round_i(r->med[ours][M_MIXED_ROWS] /
                                                       r->med[b][M_MIXED_ROWS] * 1e4) / 1e4);
    }
    ts_json_end(&j);
    return bench_write_json(&j, r->o.out, err);
}

/* ---- main ---- */

static ts_status prepare(struct run *r, struct ts_err *err)
{
    char *end;
    double sum = 0;

    r->zipf_s = strtod(r->o.zipf, &end);
    if (*end || !(r->zipf_s > 0 && r->zipf_s < 5))
        return ts_err_set(err, TS_EINVAL, "--zipf: a number in (0, 5), not %s", r->o.zipf);
    for (size_t i = 0; i < NSET; i++) {
        r->on[i] = true;
        if (r->o.only) {
            char name[64];
            const char *p = r->o.only;
            size_t ln;

            snprintf(name, sizeof(name), "%s/%s", settings[i].store, settings[i].setting);
            ln = strlen(name);
            r->on[i] = i == 0;  /* the baseline always runs */
            for (; (p = strstr(p, name)); p += ln)
                if ((p == r->o.only || p[-1] == ',') && (p[ln] == ',' || p[ln] == 0))
                    r->on[i] = true;
        }
    }
    r->rec = HDR_LEN + (size_t)r->o.dim * 4 * (size_t)(1 + r->o.state);
    r->n = (size_t)r->o.rows;
    r->cdf = malloc(r->n * sizeof(double));
    r->seen = calloc(r->n, sizeof(uint32_t));
    r->read_ids = malloc((size_t)r->o.read_batches * READ_BATCH * 4);
    r->write_ids = malloc((size_t)r->o.write_batches * WRITE_BATCH * 4);
    r->mixed_ids = malloc((size_t)r->o.steps * READ_BATCH * 4);
    r->mixed_wb = malloc((size_t)r->o.steps * WRITE_BATCH * 4);
    r->buf = malloc((size_t)LOAD_BATCH * r->rec);
    r->keys = malloc((size_t)LOAD_BATCH * KEY_LEN);
    if (!r->cdf || !r->seen || !r->read_ids || !r->write_ids || !r->mixed_ids || !r->mixed_wb ||
        !r->buf || !r->keys)
        return ts_err_set(err, TS_ENOMEM, "out of memory for the workload");
    for (size_t i = 0; i < r->n; i++)
        r->cdf[i] = (sum += pow((double)(i + 1), -r->zipf_s));
    for (size_t i = 0; i < r->n; i++)
        r->cdf[i] /= sum;
    if (r->o.dir) {
        snprintf(r->base, sizeof(r->base), "%s", r->o.dir);
        if (mkdir(r->base, 0755) != 0 && errno != EEXIST)
            return ts_err_set(err, TS_EIO, "mkdir %s: %s", r->base, strerror(errno));
    } else {
        snprintf(r->base, sizeof(r->base), "/tmp/bench_table_store.XXXXXX");
        if (!mkdtemp(r->base))
            return ts_err_set(err, TS_EIO, "mkdtemp: %s", strerror(errno));
        r->own_base = true;
    }
    return TS_OK;
}

static ts_status measure(struct run *r, struct ts_err *err)
{
    for (int rep = 0; rep < r->o.repeat; rep++) {
        draw_batches(r, 0x5EED0000ull + (uint64_t)rep);
        for (size_t i = 0; i < NSET; i++) {
            ts_status st;

            if (!r->on[i])
                continue;
            fprintf(stderr, "bench_table_store: run %d/%" PRId64 ": %s/%s\n", rep + 1,
                    r->o.repeat, settings[i].store, settings[i].setting);
            if ((st = run_one(r, i, rep, err)) != TS_OK)
                return st;
        }
    }
    for (size_t i = 0; i < NSET; i++)
        for (int m = 0; m < NM; m++)
            r->med[i][m] = bench_median(r->m[i][m], (size_t)r->o.repeat);
    return TS_OK;
}

static void release(struct run *r)
{
    if (r->own_base && r->base[0])
        store_rm_tree(r->base);
    free(r->cdf);
    free(r->seen);
    free(r->read_ids);
    free(r->write_ids);
    free(r->mixed_ids);
    free(r->mixed_wb);
    free(r->buf);
    free(r->keys);
    free(r);
}

int main(int argc, char **argv)
{
    static const char about[] =
        "Measures the disk tier's candidate stores on a sparse table's workload: LMDB\n"
        "(sync on commit; nosync+writemap), RocksDB (64 MiB block cache; WAL+sync, WAL,\n"
        "no WAL) and Tessera's slot file (the tier's store), beside an in-memory hash map.\n"
        "Per store: bulk load of the rows, Zipf batch reads from a cold start, batched\n"
        "write-back, and mixed steps (read 4096, write back 2048), with the directory's\n"
        "bytes. Prints a table and writes JSON whose headline is the slot file's mixed\n"
        "rows/s against the best Debian store's. Progress goes to stderr.";
    struct opts o = { .state = -1 };
    const struct ts_flag flags[] = {
        { "dir", TS_FLAG_STR, &o.dir, "DIR", "where the stores go, one subdirectory each, "
          "removed after (default a fresh /tmp/bench_table_store.XXXXXX, removed)", 0, 0 },
        { "rows", TS_FLAG_INT, &o.rows, "N", "rows in the table (default 2000000; --quick "
          "200000)", 8192, 1ll << 31 },
        { "dim", TS_FLAG_INT, &o.dim, "N", "floats per row (default 64)", 1, 65536 },
        { "state", TS_FLAG_INT, &o.state, "N", "optimizer floats per value (default 1: "
          "Adagrad; 2: Adam)", 0, 8 },
        { "steps", TS_FLAG_INT, &o.steps, "N", "mixed steps (default 200; --quick 50)", 1,
          100000 },
        { "read-batches", TS_FLAG_INT, &o.read_batches, "N", "read batches of 4096 (default "
          "100; --quick 25)", 1, 100000 },
        { "write-batches", TS_FLAG_INT, &o.write_batches, "N", "write batches of 2048 "
          "(default 100; --quick 25)", 1, 100000 },
        { "zipf", TS_FLAG_STR, &o.zipf, "S", "Zipf exponent of the ids (default 1.05)", 0, 0 },
        { "repeat", TS_FLAG_INT, &o.repeat, "N", "runs per store, the median reported "
          "(default 3)", 1, MAX_REPEAT },
        { "only", TS_FLAG_STR, &o.only, "LIST", "comma-separated STORE/SETTING to run, e.g. "
          "lmdb/sync,rocksdb/wal+sync (the memory baseline always runs)", 0, 0 },
        { "out", TS_FLAG_STR, &o.out, "FILE", "results (default "
          "bench/results/table_store.json)", 0, 0 },
        { "quick", TS_FLAG_BOOL, &o.quick, NULL, "smoke run: 200000 rows, fewer batches "
          "(explicit flags still win)", 0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    struct ts_err err = { 0 };
    struct run *r;
    ts_status st;
    int done;

    if ((done = ts_flags_program("bench_table_store", NULL, about, flags, argc, argv)) >= 0)
        return done;
    o.rows = o.rows ? o.rows : o.quick ? 200000 : 2000000;
    o.dim = o.dim ? o.dim : 64;
    o.state = o.state >= 0 ? o.state : 1;
    o.steps = o.steps ? o.steps : o.quick ? 50 : 200;
    o.read_batches = o.read_batches ? o.read_batches : o.quick ? 25 : 100;
    o.write_batches = o.write_batches ? o.write_batches : o.quick ? 25 : 100;
    o.repeat = o.repeat ? o.repeat : 3;
    o.zipf = o.zipf ? o.zipf : "1.05";
    o.out = o.out ? o.out : "bench/results/table_store.json";
    if (!(r = calloc(1, sizeof(*r)))) {
        fprintf(stderr, "bench_table_store: out of memory\n");
        return 2;
    }
    r->o = o;
    bench_machine_desc(r->machine, sizeof(r->machine));
    st = prepare(r, &err);
    if (st == TS_OK)
        st = measure(r, &err);
    if (st == TS_OK) {
        print_table(r);
        st = write_json(r, &err);
    }
    release(r);
    if (st != TS_OK) {
        fprintf(stderr, "bench_table_store: %s\n", err.msg);
        return 1;
    }
    printf("wrote %s\n", o.out);
    return 0;
}
