/* snapshot.c - bench_snapshot: how fast does lib/store write, rewrite and restore a partition?
 *
 * Why: the snapshot goals are a full write of 1 GiB at >= 0.5 GB/s, an incremental
 * write proportional to what changed, a restore of 1 GiB in < 2 s. This program measures them
 * on two data sets of --bytes fp32 each: "random" (floats uniform in [-1,1): the worst case for
 * compression) and "weights" (normal(0, 0.05): what trained weights look like). Per data set:
 *   full write   ts_store_put_blob into an empty store (every chunk hashed, judged, written);
 *   forced zstd  the same into a second empty store with always_compress (the behaviour before
 *                sampling: shows what the sample saves);
 *   incremental  1% of the floats changed in a few contiguous runs, put_blob again: bytes
 *                written must be <= 2% of the blob + one chunk, or the run fails;
 *   restore      ts_store_get_blob of everything (each chunk re-hashed), after
 *                posix_fadvise(DONTNEED) on every chunk file ("cold"), then again ("warm").
 * Baselines from the same run and data, one core, chunk by chunk: SHA-256 (OpenSSL EVP) and
 * zstd level 1 compress and decompress, the work a store must do at least. The restored bytes
 * must equal the data, or the run fails. Output: a table and bench/results/snapshot.json,
 * headline = full-write GB/s on weights against the 0.5 GB/s goal. The store lives in --dir
 * (default: a fresh /tmp/bench_snapshot_XXXXXX, removed at the end). */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <zstd.h>

#include "benchlib.h"
#include "store/store.h"
#include "util/flags.h"
#include "util/json.h"

#define GOAL_WRITE_GBPS 0.5
#define GOAL_RESTORE_S 2.0   /* for 1 GiB; scaled by --bytes */

enum { D_RANDOM, D_WEIGHTS, ND };
static const char *const ds_key[ND] = { "random_fp32", "weights_fp32" };
static const char *const ds_desc[ND] = { "uniform fp32 in [-1,1)", "normal(0,0.05) fp32" };

struct opts {
    int64_t bytes, chunk, threads;
    const char *out, *dir;
    bool quick;
};

struct fig {                  /* one data set; seconds, bytes, MB/s = 1e6 bytes/s */
    double full_s, forced_s, incr_s, cold_s, warm_s;
    double full_cpu, forced_cpu; /* user + system seconds of the process during the write */
    uint64_t full_bytes, forced_bytes, incr_bytes, changed_bytes;
    int runs;
    double resident_pct;      /* chunk pages still cached after DONTNEED (sampled) */
    double sha_mbps, zc_mbps, zd_mbps, z_ratio;
};

struct run {
    struct opts o;
    char machine[192], dir[256];
    bool own_dir;
    size_t len, nch;
    float *data;
    uint8_t *back, (*ids)[TS_STORE_ID_LEN];
    struct fig f[ND];
};

static double mbps(uint64_t bytes, double s) { return s > 0 ? (double)bytes / s / 1e6 : 0; }
static double r2(double x) { return (double)bench_round_i(x * 100) / 100; }
static double r4(double x) { return (double)bench_round_i(x * 1e4) / 1e4; }

/* ---- data ---- */

static double unit(uint64_t *s) { return (double)(bench_rng_next(s) >> 11) * 0x1p-53; }

/* Floats in [-1,1) with 24 random bits, or normal(0, 0.05) by Box-Muller. */
static void fill(float *x, size_t n, int ds, uint64_t seed)
{
    for (size_t i = 0; i < n; i += 2) {
        double a, b, r;

        if (ds == D_RANDOM) {
            x[i] = (float)((double)(bench_rng_next(&seed) >> 40) * 0x1p-23 - 1.0);
            if (i + 1 < n)
                x[i + 1] = (float)((double)(bench_rng_next(&seed) >> 40) * 0x1p-23 - 1.0);
            continue;
        }
        a = unit(&seed);
        b = unit(&seed);
        r = sqrt(-2.0 * log(a > 0 ? a : 0x1p-53)) * 0.05;
        x[i] = (float)(r * cos(2 * M_PI * b));
        if (i + 1 < n)
            x[i + 1] = (float)(r * sin(2 * M_PI * b));
    }
}

/* Changes 1% of the floats in `runs` contiguous runs spread over the blob. Four unaligned runs
 * touch at most 1% + 8 chunks; when that could exceed the 2% + 1 chunk allowance (small
 * blobs), one run starting on a chunk boundary is used instead. Returns the runs made. */
static int change_one_percent(struct run *r, int ds, uint64_t *changed)
{
    size_t n = r->len / 4, total = n / 100, chunk_f = (size_t)r->o.chunk / 4;
    int runs = total >= 8 * chunk_f ? 4 : 1;
    size_t each = total / (size_t)runs;
    uint64_t seed = 99 + (uint64_t)ds;

    for (int k = 0; k < runs; k++) {
        size_t at = runs == 1 ? n / 2 / chunk_f * chunk_f : (2 * (size_t)k + 1) * n / 8;

        if (at + each > n)
            at = n - each;
        for (size_t i = at; i < at + each; i++)
            r->data[i] = r->data[i] * 0.999f + (float)(unit(&seed) * 1e-3);
    }
    *changed = (uint64_t)each * (uint64_t)runs * 4;
    return runs;
}

/* ---- baselines: one core, chunk by chunk ---- */

static ts_status baselines(struct run *r, struct fig *f, struct ts_err *err)
{
    const uint8_t *src = (const uint8_t *)r->data;
    size_t ch = (size_t)r->o.chunk, bound = ZSTD_compressBound(ch), zlen = 0;
    uint8_t id[32], *out = r->back;
    size_t *zs = calloc(r->nch, sizeof(*zs));
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ZSTD_DCtx *dc = ZSTD_createDCtx();
    uint8_t *zall = malloc(r->len + r->nch * (bound - ch) + 1);
    unsigned int idn;
    int64_t t0;
    ts_status st = TS_OK;

    if (!zs || !cc || !dc || !zall) {
        st = ts_err_set(err, TS_ENOMEM, "baselines: out of memory");
        goto out_free;
    }
    t0 = ts_now_ns();
    for (size_t i = 0, off = 0; i < r->nch; i++, off += ch)
        EVP_Digest(src + off, r->len - off < ch ? r->len - off : ch, id, &idn, EVP_sha256(),
                   NULL);
    f->sha_mbps = mbps(r->len, (double)(ts_now_ns() - t0) / 1e9);
    t0 = ts_now_ns();
    for (size_t i = 0, off = 0; i < r->nch; i++, off += ch) {
        zs[i] = ZSTD_compressCCtx(cc, zall + zlen, bound, src + off,
                                  r->len - off < ch ? r->len - off : ch, 1);
        if (ZSTD_isError(zs[i])) {
            st = ts_err_set(err, TS_EINTERNAL, "zstd: %s", ZSTD_getErrorName(zs[i]));
            goto out_free;
        }
        zlen += zs[i];
    }
    f->zc_mbps = mbps(r->len, (double)(ts_now_ns() - t0) / 1e9);
    f->z_ratio = (double)zlen / (double)r->len;
    t0 = ts_now_ns();
    for (size_t i = 0, off = 0, zo = 0; i < r->nch; zo += zs[i], i++, off += ch)
        ZSTD_decompressDCtx(dc, out + off, ch, zall + zo, zs[i]);
    f->zd_mbps = mbps(r->len, (double)(ts_now_ns() - t0) / 1e9);
    if (memcmp(out, src, r->len) != 0)
        st = ts_err_set(err, TS_EINTERNAL, "zstd baseline: round trip differs");
out_free:
    ZSTD_freeCCtx(cc);
    ZSTD_freeDCtx(dc);
    free(zall);
    free(zs);
    return st;
}

/* ---- the store ---- */

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(p);
}

static void rm_tree(const char *path)
{
    nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void chunk_file(const char *store, const uint8_t id[TS_STORE_ID_LEN], char *p, size_t n)
{
    char hex[TS_STORE_HEX_LEN + 1];

    ts_store_hex(id, hex);
    snprintf(p, n, "%s/chunks/%.2s/%s", store, hex, hex);
}

/* Drops the chunk files from the page cache (no root needed: advice on our own clean files)
 * and returns the percentage of pages still resident in up to 64 of them (mincore). */
static double drop_cache(struct run *r, const char *store)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), res = 0, tot = 0;
    char path[512];

    for (size_t i = 0; i < r->nch; i++) {
        struct stat sb;
        int fd;

        chunk_file(store, r->ids[i], path, sizeof(path));
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        if (i % (r->nch / 64 + 1) == 0 && fstat(fd, &sb) == 0 && sb.st_size > 0) {
            size_t np = ((size_t)sb.st_size + pg - 1) / pg;
            unsigned char *v = malloc(np);
            void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);

            if (v && m != MAP_FAILED && mincore(m, (size_t)sb.st_size, v) == 0) {
                for (size_t k = 0; k < np; k++)
                    res += v[k] & 1;
                tot += np;
            }
            if (m != MAP_FAILED)
                munmap(m, (size_t)sb.st_size);
            free(v);
        }
        close(fd);
    }
    return tot ? 100.0 * (double)res / (double)tot : -1;
}

static ts_status open_store(struct run *r, const char *name, bool forced, struct ts_store **s,
                            char *path, size_t n, struct ts_err *err)
{
    struct ts_store_opts so = { .threads = (int)r->o.threads, .always_compress = forced };

    snprintf(path, n, "%s/%s", r->dir, name);
    return ts_store_open(path, &so, s, err);
}

static double cpu_s(void)
{
    struct rusage u;

    getrusage(RUSAGE_SELF, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

/* A timed put_blob of the data; cpu (may be NULL) gets the CPU seconds it used: a write that
 * took more wall time than CPU time / threads was waiting for the disk. */
static ts_status put_timed(struct run *r, struct ts_store *s, double *sec, double *cpu,
                           uint64_t *bytes, struct ts_err *err)
{
    double c0 = cpu_s();
    int64_t t0 = ts_now_ns();
    ts_status st = ts_store_put_blob(s, r->data, r->len, (size_t)r->o.chunk, r->ids, bytes,
                                     err);

    *sec = (double)(ts_now_ns() - t0) / 1e9;
    if (cpu)
        *cpu = cpu_s() - c0;
    return st;
}

static ts_status restore_timed(struct run *r, struct ts_store *s, double *sec,
                               struct ts_err *err)
{
    int64_t t0;
    ts_status st;

    memset(r->back, 0, r->len); /* also faults the pages in, outside the timing */
    t0 = ts_now_ns();
    st = ts_store_get_blob(s, (const uint8_t (*)[TS_STORE_ID_LEN])r->ids, r->back, r->len,
                           (size_t)r->o.chunk, err);
    *sec = (double)(ts_now_ns() - t0) / 1e9;
    if (st == TS_OK && memcmp(r->back, r->data, r->len) != 0)
        st = ts_err_set(err, TS_EINTERNAL, "restore: bytes differ from what was written");
    return st;
}

/* All measurements of one data set; its stores are removed before returning. */
static ts_status run_ds(struct run *r, int ds, struct ts_err *err)
{
    struct fig *f = &r->f[ds];
    struct ts_store *s = NULL, *forced = NULL;
    char path[300], fpath[300];
    uint64_t limit;
    ts_status st;

    fill(r->data, r->len / 4, ds, 1 + (uint64_t)ds);
    fprintf(stderr, "bench_snapshot: %s: baselines...\n", ds_key[ds]);
    st = baselines(r, f, err);
    if (st == TS_OK)
        st = open_store(r, ds_key[ds], false, &s, path, sizeof(path), err);
    if (st != TS_OK)
        return st;
    fprintf(stderr, "bench_snapshot: %s: store writes and restores...\n", ds_key[ds]);
    st = put_timed(r, s, &f->full_s, &f->full_cpu, &f->full_bytes, err);
    if (st == TS_OK) {
        f->runs = change_one_percent(r, ds, &f->changed_bytes);
        st = put_timed(r, s, &f->incr_s, NULL, &f->incr_bytes, err);
    }
    limit = r->len / 50 + (uint64_t)r->o.chunk;
    if (st == TS_OK && f->incr_bytes > limit)
        st = ts_err_set(err, TS_EINTERNAL, "%s: incremental wrote %" PRIu64 " bytes, more than "
                        "2%% + one chunk (%" PRIu64 ")", ds_key[ds], f->incr_bytes, limit);
    if (st == TS_OK) {
        f->resident_pct = drop_cache(r, path);
        st = restore_timed(r, s, &f->cold_s, err);
    }
    if (st == TS_OK)
        st = restore_timed(r, s, &f->warm_s, err);
    ts_store_close(s);
    rm_tree(path);
    if (st == TS_OK)
        st = open_store(r, "forced", true, &forced, fpath, sizeof(fpath), err);
    if (st == TS_OK)
        st = put_timed(r, forced, &f->forced_s, &f->forced_cpu, &f->forced_bytes, err);
    ts_store_close(forced);
    rm_tree(fpath);
    return st;
}

/* ---- output ---- */

static void print_table(const void *arg)
{
    const struct run *r = arg;
    const struct opts *o = &r->o;

    printf("bench_snapshot: %.0f MiB fp32 per data set, chunk %" PRId64 " KiB, %s threads, "
           "store in %s (%s)\n\n", (double)r->len / 1048576, o->chunk >> 10,
           o->threads ? "--threads" : "default", r->dir, r->machine);
    printf("%-24s | %12s | %12s | %-22s | %-17s | %-17s\n", "data", "full write", "forced zstd",
           "incr. 1% (runs)", "restore cold", "restore warm");
    for (int d = 0; d < ND; d++) {
        const struct fig *f = &r->f[d];
        char inc[64], cold[64], warm[64];

        snprintf(inc, sizeof(inc), "%.2f s, %.1f MB (%d)", f->incr_s,
                 (double)f->incr_bytes / 1e6, f->runs);
        snprintf(cold, sizeof(cold), "%.2f s %5.0f MB/s", f->cold_s, mbps(r->len, f->cold_s));
        snprintf(warm, sizeof(warm), "%.2f s %5.0f MB/s", f->warm_s, mbps(r->len, f->warm_s));
        printf("%-24s | %7.0f MB/s | %7.0f MB/s | %-22s | %-17s | %-17s\n", ds_desc[d],
               mbps(r->len, f->full_s), mbps(r->len, f->forced_s), inc, cold, warm);
    }
    printf("\nbaselines, one core, same data, %" PRId64 " KiB pieces:\n", o->chunk >> 10);
    printf("%-24s | %12s | %-32s | %14s\n", "data", "SHA-256", "zstd -1 compress (ratio)",
           "zstd -1 decomp");
    for (int d = 0; d < ND; d++) {
        const struct fig *f = &r->f[d];

        printf("%-24s | %7.0f MB/s | %7.0f MB/s (%.3f)%13s | %9.0f MB/s\n", ds_desc[d],
               f->sha_mbps, f->zc_mbps, f->z_ratio, "", f->zd_mbps);
    }
    printf("\nstored bytes of the full write: random %.1f MB, weights %.1f MB (forced zstd: "
           "%.1f, %.1f MB); chunk pages cached after fadvise(DONTNEED): %.0f%%, %.0f%%\n",
           (double)r->f[0].full_bytes / 1e6, (double)r->f[1].full_bytes / 1e6,
           (double)r->f[0].forced_bytes / 1e6, (double)r->f[1].forced_bytes / 1e6,
           r->f[0].resident_pct, r->f[1].resident_pct);
    printf("CPU seconds of the full write: random %.2f, weights %.2f (forced zstd: %.2f, %.2f); "
           "wall time above CPU / threads is waiting for the disk\n", r->f[0].full_cpu,
           r->f[1].full_cpu, r->f[0].forced_cpu, r->f[1].forced_cpu);
}

static void json_fig(struct ts_json *j, const struct run *r, int d)
{
    const struct fig *f = &r->f[d];

    ts_json_obj(j, ds_key[d]);
    ts_json_str(j, "what", ds_desc[d]);
    ts_json_num(j, "full_write_seconds", r4(f->full_s));
    ts_json_num(j, "full_write_mbps", r2(mbps(r->len, f->full_s)));
    ts_json_uint(j, "full_write_bytes", f->full_bytes);
    ts_json_num(j, "full_write_cpu_seconds", r4(f->full_cpu));
    ts_json_num(j, "forced_zstd_write_seconds", r4(f->forced_s));
    ts_json_num(j, "forced_zstd_write_mbps", r2(mbps(r->len, f->forced_s)));
    ts_json_uint(j, "forced_zstd_write_bytes", f->forced_bytes);
    ts_json_num(j, "forced_zstd_write_cpu_seconds", r4(f->forced_cpu));
    ts_json_uint(j, "incr_changed_bytes", f->changed_bytes);
    ts_json_int(j, "incr_runs", f->runs);
    ts_json_uint(j, "incr_written_bytes", f->incr_bytes);
    ts_json_num(j, "incr_write_seconds", r4(f->incr_s));
    ts_json_num(j, "incr_write_mbps", r2(mbps(r->len, f->incr_s)));
    ts_json_num(j, "restore_seconds", r4(f->cold_s));
    ts_json_num(j, "restore_mbps", r2(mbps(r->len, f->cold_s)));
    ts_json_num(j, "restore_resident_pct", r2(f->resident_pct));
    ts_json_num(j, "restore_warm_seconds", r4(f->warm_s));
    ts_json_num(j, "restore_warm_mbps", r2(mbps(r->len, f->warm_s)));
    ts_json_num(j, "sha256_mbps", r2(f->sha_mbps));
    ts_json_num(j, "zstd1_compress_mbps", r2(f->zc_mbps));
    ts_json_num(j, "zstd1_decompress_mbps", r2(f->zd_mbps));
    ts_json_num(j, "zstd1_ratio", r4(f->z_ratio));
    ts_json_end(j);
}

static ts_status write_json(const void *arg, struct ts_err *err)
{
    const struct run *r = arg;
    const struct fig *w = &r->f[D_WEIGHTS];
    double ours = mbps(r->len, w->full_s) / 1e3, goal_s = GOAL_RESTORE_S * (double)r->len / 0x1p30;
    struct ts_json j;

    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "name", "snapshot");
    ts_json_str(&j, "machine", r->machine);
    ts_json_bool(&j, "quick", r->o.quick);
    ts_json_int(&j, "bytes", (int64_t)r->len);
    ts_json_int(&j, "chunk", r->o.chunk);
    ts_json_int(&j, "threads", r->o.threads);
    ts_json_str(&j, "restore_cache", "cold = after posix_fadvise(DONTNEED) on every chunk file");
    ts_json_obj(&j, "datasets");
    for (int d = 0; d < ND; d++)
        json_fig(&j, r, d);
    ts_json_end(&j);
    ts_json_obj(&j, "goals");
    ts_json_num(&j, "full_write_gbps", GOAL_WRITE_GBPS);
    ts_json_num(&j, "restore_seconds", r4(goal_s));
    ts_json_bool(&j, "full_write_met", ours >= GOAL_WRITE_GBPS &&
                 mbps(r->len, r->f[D_RANDOM].full_s) / 1e3 >= GOAL_WRITE_GBPS);
    ts_json_bool(&j, "restore_met", w->cold_s < goal_s && r->f[D_RANDOM].cold_s < goal_s);
    ts_json_end(&j);
    ts_json_obj(&j, "headline");
    ts_json_num(&j, "ours", r4(ours));
    ts_json_num(&j, "baseline", GOAL_WRITE_GBPS);
    ts_json_str(&j, "unit", "GB/s full snapshot write, 1 GiB weight-like fp32");
    ts_json_num(&j, "ratio", r4(ours / GOAL_WRITE_GBPS));
    ts_json_end(&j);
    return bench_write_json(&j, r->o.out, err);
}

/* ---- main ---- */

static ts_status prepare(void *arg, struct ts_err *err)
{
    struct run *r = arg;
    r->len = (size_t)r->o.bytes / 4 * 4;
    r->nch = ts_store_nchunks(r->len, (size_t)r->o.chunk);
    r->data = malloc(r->len);
    r->back = malloc(r->len);
    r->ids = calloc(r->nch, TS_STORE_ID_LEN);
    if (!r->data || !r->back || !r->ids)
        return ts_err_set(err, TS_ENOMEM, "out of memory for 2 x %zu bytes", r->len);
    if (r->o.dir) {
        snprintf(r->dir, sizeof(r->dir), "%s", r->o.dir);
        if (mkdir(r->dir, 0777) != 0 && errno != EEXIST)
            return ts_err_set(err, TS_EIO, "--dir %s: %s", r->dir, strerror(errno));
        return TS_OK;
    }
    snprintf(r->dir, sizeof(r->dir), "/tmp/bench_snapshot_XXXXXX");
    if (!mkdtemp(r->dir))
        return ts_err_set(err, TS_EIO, "mkdtemp %s: %s", r->dir, strerror(errno));
    r->own_dir = true;
    return TS_OK;
}

/* Both data sets (bench_phases.measure). */
static ts_status measure(void *arg, struct ts_err *err)
{
    struct run *r = arg;
    ts_status st = TS_OK;

    for (int d = 0; st == TS_OK && d < ND; d++)
        st = run_ds(r, d, err);
    return st;
}

/* Removes the stores' directory if it is ours, and frees the run (bench_phases.release). */
static void release(void *arg)
{
    struct run *r = arg;

    if (r->own_dir)
        rm_tree(r->dir);
    free(r->data);
    free(r->back);
    free(r->ids);
    free(r);
}

int main(int argc, char **argv)
{
    static const char about[] =
        "Measures lib/store on random and weight-like fp32: full snapshot write,\n"
        "incremental write after a 1% change, restore (cold and warm page cache),\n"
        "against one-core SHA-256 and zstd -1 speeds on the same data. Prints a\n"
        "table and writes JSON whose headline is the full-write GB/s on weights\n"
        "against the 0.5 GB/s goal.";
    struct opts o = { 0 };
    const struct ts_flag flags[] = {
        { "bytes", TS_FLAG_INT, &o.bytes, "N", "fp32 bytes per data set (default 1073741824 = "
          "1 GiB)", 1 << 16, 1ll << 36 },
        { "chunk", TS_FLAG_INT, &o.chunk, "N", "chunk size (default 1048576)", 4096,
          TS_STORE_MAX_CHUNK },
        { "threads", TS_FLAG_INT, &o.threads, "N", "store workers (default 0: the store's, "
          "online CPUs up to 8)", 0, 64 },
        { "dir", TS_FLAG_STR, &o.dir, "DIR", "where the stores go (default a new "
          "/tmp/bench_snapshot_XXXXXX, removed at the end)", 0, 0 },
        { "out", TS_FLAG_STR, &o.out, "FILE", "results (default bench/results/snapshot.json)",
          0, 0 },
        { "quick", TS_FLAG_BOOL, &o.quick, NULL, "smoke run: 64 MiB (explicit flags still win)",
          0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    static const struct bench_phases phases = {
        "bench_snapshot", prepare, measure, print_table, write_json, release };
    struct run *r;
    int done;

    if ((done = ts_flags_program("bench_snapshot", NULL, about, flags, argc, argv)) >= 0)
        return done;
    if (!(r = calloc(1, sizeof(*r)))) {
        fprintf(stderr, "bench_snapshot: out of memory\n");
        return 2;
    }
    o.bytes = o.bytes ? o.bytes : o.quick ? 64ll << 20 : 1ll << 30;
    o.chunk = o.chunk ? o.chunk : TS_STORE_DEFAULT_CHUNK;
    o.out = o.out ? o.out : "bench/results/snapshot.json";
    r->o = o;
    bench_machine_desc(r->machine, sizeof(r->machine));
    return bench_run(&phases, r, o.out);
}
