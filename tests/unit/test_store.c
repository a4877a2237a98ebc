/* test_store.c - lib/store: chunks, blobs and objects round-trip; an unchanged chunk is not
 * written twice; corruption is caught on read and by fsck, naming the chunk; refs do
 * compare-and-swap and refuse bad names; injected ENOSPC, EIO, short writes and failed
 * fsyncs through the syscall table fail a put cleanly (no file under its name, tmp/ empty,
 * earlier data intact); gc removes exactly the unreachable chunks. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/store.h"

#define CH (64u << 10) /* small chunks keep the test fast */

struct fx {
    char dir[64];
    struct ts_store *s;
};

/* ---- fault injection through the syscall table ---- */
static int f_write_errno;   /* write fails with this errno */
static int f_short;         /* write moves at most this many bytes */
static int f_fdatasync;     /* fdatasync fails with EIO */
static int f_fsync;         /* directory fsync fails with EIO */
static int f_rename;        /* rename fails with EXDEV */
static int f_nosync;        /* fsync and fdatasync succeed without syncing (speed) */
static atomic_int f_fsyncs; /* directory fsyncs made, by the put_blob worker threads too */

static ssize_t x_write(int fd, const void *p, size_t n)
{
    if (f_write_errno) {
        errno = f_write_errno;
        return -1;
    }
    return write(fd, p, f_short && n > (size_t)f_short ? (size_t)f_short : n);
}

static int x_fdatasync(int fd)
{
    if (f_fdatasync) {
        errno = EIO;
        return -1;
    }
    return f_nosync ? 0 : fdatasync(fd);
}

static int x_fsync(int fd)
{
    f_fsyncs++;
    if (f_fsync) {
        errno = EIO;
        return -1;
    }
    return f_nosync ? 0 : fsync(fd);
}

static int x_rename(const char *a, const char *b)
{
    if (f_rename) {
        errno = EXDEV;
        return -1;
    }
    return rename(a, b);
}

static const struct ts_store_syscalls faulty = {
    .write = x_write, .fdatasync = x_fdatasync, .fsync = x_fsync, .rename = x_rename,
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    struct ts_store_opts o = { .threads = 2, .sys = &faulty };
    struct ts_err err = { 0 };

    f_write_errno = f_short = f_fdatasync = f_fsync = f_rename = f_nosync = 0;
    snprintf(f->dir, sizeof(f->dir), "/tmp/ts_store_XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    if (ts_store_open(f->dir, &o, &f->s, &err) != TS_OK)
        fail_msg("open: %s", err.msg);
    *state = f;
    return 0;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(p);
}

static int teardown(void **state)
{
    struct fx *f = *state;

    ts_store_close(f->s);
    nftw(f->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

static void fill_random(void *p, size_t n, unsigned seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    uint8_t *b = p;

    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        b[i] = (uint8_t)x;
    }
}

static void chunk_path(struct fx *f, const uint8_t id[32], char *path, size_t cap)
{
    char hex[TS_STORE_HEX_LEN + 1];

    ts_store_hex(id, hex);
    snprintf(path, cap, "%s/chunks/%.2s/%s", f->dir, hex, hex);
}

static off_t file_size(const char *path)
{
    struct stat sb;

    return stat(path, &sb) == 0 ? sb.st_size : -1;
}

static int count_files(const char *dir)
{
    char cmd[256];
    FILE *p;
    int n = -1;

    snprintf(cmd, sizeof(cmd), "find %s -type f | wc -l", dir);
    p = popen(cmd, "r");
    assert_non_null(p);
    assert_int_equal(fscanf(p, "%d", &n), 1);
    pclose(p);
    return n;
}

/* Puts and gets back a blob of len bytes; returns bytes written. */
static uint64_t roundtrip(struct fx *f, const void *data, size_t len)
{
    size_t n = ts_store_nchunks(len, CH);
    uint8_t (*ids)[32] = calloc(n + 1, 32);
    void *back = malloc(len + 1);
    struct ts_err err = { 0 };
    uint64_t w = 0;

    if (ts_store_put_blob(f->s, data, len, CH, ids, &w, &err) != TS_OK)
        fail_msg("put_blob(%zu): %s", len, err.msg);
    if (ts_store_get_blob(f->s, (const uint8_t (*)[32])ids, back, len, CH, &err) != TS_OK)
        fail_msg("get_blob(%zu): %s", len, err.msg);
    if (len)
        assert_memory_equal(back, data, len);
    free(ids);
    free(back);
    return w;
}

/* Removes every chunk (the fan-out directories stay). */
static void gc_all(struct fx *f)
{
    struct ts_err err = { 0 };

    if (ts_store_gc(f->s, NULL, 0, 0, NULL, &err) != TS_OK)
        fail_msg("gc: %s", err.msg);
}

static void test_roundtrip_sizes(void **state)
{
    struct fx *f = *state;
    size_t sizes[] = { 0, 1, CH - 1, CH, CH + 1, 37 * CH + 123 };
    uint8_t *buf = malloc(37 * CH + 123);

    fill_random(buf, 37 * CH + 123, 1);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        roundtrip(f, buf, sizes[i]);
    assert_int_equal(ts_store_nchunks(0, CH), 0);
    assert_int_equal(ts_store_nchunks(CH, CH), 1);
    assert_int_equal(ts_store_nchunks(CH + 1, CH), 2);
    free(buf);
}

static void test_single_chunk_api(void **state)
{
    struct fx *f = *state;
    struct ts_err err = { 0 };
    uint8_t id[32], id0[32], out[8];
    size_t len = 99;
    bool ex = true;

    assert_int_equal(ts_store_put(f->s, NULL, 0, id0, &ex, &err), TS_OK);
    assert_false(ex);
    assert_int_equal(ts_store_get(f->s, id0, out, sizeof(out), &len, &err), TS_OK);
    assert_int_equal(len, 0);
    assert_int_equal(ts_store_put(f->s, "hello", 5, id, &ex, &err), TS_OK);
    assert_true(ts_store_has(f->s, id));
    /* Too small a buffer says how much is needed. */
    assert_int_equal(ts_store_get(f->s, id, out, 3, &len, &err), TS_EINVAL);
    assert_non_null(strstr(err.msg, "need 5"));
    assert_int_equal(ts_store_get(f->s, id, out, sizeof(out), &len, &err), TS_OK);
    assert_int_equal(len, 5);
    assert_memory_equal(out, "hello", 5);
    id[0] ^= 1;
    ts_err_clear(&err);
    assert_false(ts_store_has(f->s, id));
    assert_int_equal(ts_store_get(f->s, id, out, sizeof(out), &len, &err), TS_ENOTFOUND);
}

static void test_compressible_and_random(void **state)
{
    struct fx *f = *state;
    uint8_t *z = calloc(1, CH), *r = malloc(CH), idz[32], idr[32];
    struct ts_err err = { 0 };
    char path[512];
    bool ex;

    fill_random(r, CH, 2);
    assert_int_equal(ts_store_put(f->s, z, CH, idz, &ex, &err), TS_OK);
    assert_int_equal(ts_store_put(f->s, r, CH, idr, &ex, &err), TS_OK);
    chunk_path(f, idz, path, sizeof(path));
    assert_true(file_size(path) < 1024);           /* zeros compress */
    chunk_path(f, idr, path, sizeof(path));
    assert_int_equal(file_size(path), 32 + CH);    /* random is stored raw */
    roundtrip(f, z, CH);
    roundtrip(f, r, CH);
    free(z);
    free(r);
}

/* The codec byte (5) of a chunk's header. */
static int codec_of(struct fx *f, const uint8_t id[32])
{
    char path[512];
    uint8_t b[8];
    FILE *fp;

    chunk_path(f, id, path, sizeof(path));
    fp = fopen(path, "rb");
    assert_non_null(fp);
    assert_int_equal(fread(b, 1, sizeof(b), fp), sizeof(b));
    fclose(fp);
    return b[5];
}

/* Floats like trained weights, about normal(0, 0.05): a sum of 12 uniforms, no libm. */
static void fill_weights(float *w, size_t n, unsigned seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;

    for (size_t i = 0; i < n; i++) {
        double sum = -6;

        for (int k = 0; k < 12; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            sum += (double)(x >> 11) * 0x1p-53;
        }
        w[i] = (float)(sum * 0.05);
    }
}

/* Chunks above the 64 KiB sample: zeros are stored zstd, random bytes and fp32 weights (which
 * save < 10%) raw, unless always_compress. */
static void test_codec_by_sample(void **state)
{
    struct fx *f = *state;
    size_t big = 1u << 20;
    uint8_t *z = calloc(1, big), *r = malloc(big), id[32], idr[32], idw[32];
    float *w = malloc(big);
    struct ts_store_opts o = { .always_compress = true, .threads = 1 };
    struct ts_err err = { 0 };
    struct ts_store *s = f->s;
    char path[512];
    bool ex;

    fill_random(r, big, 9);
    fill_weights(w, big / 4, 10);
    assert_int_equal(ts_store_put(s, z, big, id, &ex, &err), TS_OK);
    assert_int_equal(codec_of(f, id), 1);
    chunk_path(f, id, path, sizeof(path));
    assert_true(file_size(path) < 4096);
    assert_int_equal(ts_store_put(s, r, big, idr, &ex, &err), TS_OK);
    assert_int_equal(codec_of(f, idr), 0);
    chunk_path(f, idr, path, sizeof(path));
    assert_int_equal(file_size(path), 32 + big);
    assert_int_equal(ts_store_put(s, w, big, idw, &ex, &err), TS_OK);
    assert_int_equal(codec_of(f, idw), 0);
    roundtrip(f, w, big);
    /* Forced: the weights are compressed (a little), random bytes still stored raw. */
    gc_all(f);
    if (ts_store_open(f->dir, &o, &f->s, &err) != TS_OK)
        fail_msg("open: %s", err.msg);
    assert_int_equal(ts_store_put(f->s, w, big, idw, &ex, &err), TS_OK);
    assert_false(ex);
    assert_int_equal(codec_of(f, idw), 1);
    chunk_path(f, idw, path, sizeof(path));
    assert_true(file_size(path) < (off_t)big);
    assert_int_equal(ts_store_put(f->s, r, big, idr, &ex, &err), TS_OK);
    assert_int_equal(codec_of(f, idr), 0);
    roundtrip(f, w, big);
    ts_store_close(s);
    free(z);
    free(r);
    free(w);
}

/* put_blob fsyncs each fan-out directory it touched once, not each chunk's; a failed one
 * takes back the chunks the blob wrote there. */
static void test_blob_dir_syncs(void **state)
{
    struct fx *f = *state;
    size_t n = 600, len = n * 512;
    uint8_t *buf = malloc(len), (*ids)[32] = calloc(n, 32), seen[256] = { 0 };
    struct ts_err err = { 0 };
    int dirs = 0, first = 256;

    f_nosync = 1; /* only the calls are counted: 600 real fdatasyncs would be slow */
    fill_random(buf, len, 11);
    f_fsyncs = 0;
    assert_int_equal(ts_store_put_blob(f->s, buf, len, 512, ids, NULL, &err), TS_OK);
    for (size_t i = 0; i < n; i++) {
        dirs += !seen[ids[i][0]];
        seen[ids[i][0]] = 1;
        first = ids[i][0] < first ? ids[i][0] : first;
    }
    /* Each fan-out directory: its parent's fsync when made, then one batched fsync. */
    assert_int_equal(f_fsyncs, 2 * dirs);
    /* Again, everything found: the directories are synced once more (found is not trusted
     * unsynced), still once each. */
    f_fsyncs = 0;
    assert_int_equal(ts_store_put_blob(f->s, buf, len, 512, ids, NULL, &err), TS_OK);
    assert_int_equal(f_fsyncs, dirs);
    /* A failed batched fsync (the first, of the lowest directory) unlinks what was written
     * into that directory; the chunks found there are untouched. */
    gc_all(f);
    f_fsync = 1;
    assert_int_equal(ts_store_put_blob(f->s, buf, len, 512, ids, NULL, &err), TS_EIO);
    assert_non_null(strstr(err.msg, "fsync dir"));
    f_fsync = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i][0] == first)
            assert_false(ts_store_has(f->s, ids[i]));
    assert_int_equal(ts_store_put_blob(f->s, buf, len, 512, ids, NULL, &err), TS_OK);
    roundtrip(f, buf, len);
    free(buf);
    free(ids);
}

static void test_dedup_and_incremental(void **state)
{
    struct fx *f = *state;
    size_t len = 64 * CH, n = ts_store_nchunks(len, CH);
    uint8_t *buf = malloc(len), (*ids)[32] = calloc(n, 32);
    struct ts_err err = { 0 };
    uint64_t first, again, inc;

    fill_random(buf, len, 3);
    first = roundtrip(f, buf, len);
    assert_true(first >= len);
    again = roundtrip(f, buf, len);
    assert_int_equal(again, 0);
    /* Change 1% of the bytes, in one place spanning a chunk boundary. */
    fill_random(buf + 10 * CH - len / 200, len / 100, 4);
    inc = roundtrip(f, buf, len);
    assert_true(inc > 0);
    assert_true(inc <= first / 50 + CH + 32);
    assert_int_equal(ts_store_put_blob(f->s, buf, len, CH, ids, &again, &err), TS_OK);
    assert_int_equal(again, 0);
    free(buf);
    free(ids);
}

struct seen {
    int n;
    char name[80];
    char msg[256];
};

static void on_bad(void *ctx, const char *what, const char *name, const struct ts_err *why)
{
    struct seen *s = ctx;

    s->n++;
    snprintf(s->name, sizeof(s->name), "%s", name);
    snprintf(s->msg, sizeof(s->msg), "%s", why->msg);
}

/* Rewrites the byte at off of a stored chunk file (mode 0444). */
static void flip_byte(const char *path, off_t off)
{
    uint8_t b;
    int fd;

    assert_int_equal(chmod(path, 0644), 0);
    fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &b, 1, off), 1);
    b ^= 0x40;
    assert_int_equal(pwrite(fd, &b, 1, off), 1);
    close(fd);
}

/* Cuts n bytes off the end of a chunk file. Chunks are stored read-only (they never change),
 * which root ignores and anyone else must lift first, as flip_byte does. */
static void cut_tail(const char *path, off_t n)
{
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(truncate(path, file_size(path) - n), 0);
}

static void check_corrupt(struct fx *f, const uint8_t id[32], size_t cap)
{
    struct ts_err err = { 0 };
    struct ts_store_stats st;
    struct seen seen = { 0 };
    char hex[65];
    void *out = malloc(cap);
    size_t len;

    ts_store_hex(id, hex);
    assert_int_equal(ts_store_get(f->s, id, out, cap, &len, &err), TS_ECORRUPT);
    assert_non_null(strstr(err.msg, hex));
    ts_err_clear(&err);
    assert_int_equal(ts_store_fsck(f->s, on_bad, &seen, &st, &err), TS_OK);
    assert_int_equal(seen.n, 1);
    assert_int_equal(st.bad, 1);
    assert_string_equal(seen.name, hex);
    assert_non_null(strstr(seen.msg, hex));
    free(out);
}

static void test_corruption(void **state)
{
    struct fx *f = *state;
    uint8_t *z = calloc(1, CH), *r = malloc(CH), idz[32], idr[32], ok[32];
    struct ts_err err = { 0 };
    struct ts_store_stats st;
    char path[512];
    bool ex;

    fill_random(r, CH, 5);
    assert_int_equal(ts_store_put(f->s, "fine", 4, ok, &ex, &err), TS_OK);
    assert_int_equal(ts_store_put(f->s, r, CH, idr, &ex, &err), TS_OK);
    assert_int_equal(ts_store_fsck(f->s, NULL, NULL, &st, &err), TS_OK);
    assert_int_equal(st.bad, 0);
    assert_int_equal(st.scanned, 2);
    chunk_path(f, idr, path, sizeof(path));
    flip_byte(path, 32 + 1000);             /* a payload byte of a raw chunk */
    check_corrupt(f, idr, CH);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(ts_store_put(f->s, z, CH, idz, &ex, &err), TS_OK);
    chunk_path(f, idz, path, sizeof(path));
    cut_tail(path, 3);
    check_corrupt(f, idz, CH);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(ts_store_put(f->s, z, CH, idz, &ex, &err), TS_OK);
    flip_byte(path, 9);                     /* the header's length */
    check_corrupt(f, idz, CH);
    free(z);
    free(r);
}

static void test_objects(void **state)
{
    struct fx *f = *state;
    struct ts_err err = { 0 };
    const char *m = "{\"tensors\":[]}";
    uint8_t id[32];
    void *back;
    size_t len;

    assert_int_equal(ts_store_put_object(f->s, TS_STORE_MANIFEST, m, strlen(m), id, &err), TS_OK);
    assert_int_equal(ts_store_get_object(f->s, TS_STORE_MANIFEST, id, &back, &len, &err), TS_OK);
    assert_int_equal(len, strlen(m));
    assert_memory_equal(back, m, len);
    free(back);
    assert_false(ts_store_has(f->s, id)); /* objects are not chunks */
    id[5] ^= 1;
    assert_int_equal(ts_store_get_object(f->s, TS_STORE_MANIFEST, id, &back, &len, &err),
                     TS_ENOTFOUND);
}

static void test_refs(void **state)
{
    struct fx *f = *state;
    static const uint8_t zero[32];
    uint8_t a[32], b[32], c[32], got[32];
    struct ts_err err = { 0 };
    struct ts_store_ref *refs;
    size_t n;

    memset(a, 0xaa, 32), memset(b, 0xbb, 32), memset(c, 0xcc, 32);
    assert_int_equal(ts_store_ref_get(f->s, "heads/main", got, &err), TS_ENOTFOUND);
    assert_int_equal(ts_store_ref_set(f->s, "heads/main", a, zero, &err), TS_OK);
    assert_int_equal(ts_store_ref_get(f->s, "heads/main", got, &err), TS_OK);
    assert_memory_equal(got, a, 32);
    /* Create-only fails once it exists; a stale expectation loses. */
    assert_int_equal(ts_store_ref_set(f->s, "heads/main", b, zero, &err), TS_ESTATE);
    ts_err_clear(&err);
    assert_int_equal(ts_store_ref_set(f->s, "heads/main", b, a, &err), TS_OK);
    assert_int_equal(ts_store_ref_set(f->s, "heads/main", c, a, &err), TS_ESTATE);
    assert_non_null(strstr(err.msg, "heads/main"));
    ts_err_clear(&err);
    assert_int_equal(ts_store_ref_get(f->s, "heads/main", got, &err), TS_OK);
    assert_memory_equal(got, b, 32);
    assert_int_equal(ts_store_ref_set(f->s, "tags/v1", a, NULL, &err), TS_OK);
    assert_int_equal(ts_store_ref_set(f->s, "heads/exp/lr-0.1_b", c, NULL, &err), TS_OK);
    assert_int_equal(ts_store_ref_list(f->s, NULL, &refs, &n, &err), TS_OK);
    assert_int_equal(n, 3);
    assert_string_equal(refs[0].name, "heads/exp/lr-0.1_b");
    assert_string_equal(refs[1].name, "heads/main");
    assert_string_equal(refs[2].name, "tags/v1");
    assert_memory_equal(refs[2].id, a, 32);
    free(refs);
    assert_int_equal(ts_store_ref_list(f->s, "tags/", &refs, &n, &err), TS_OK);
    assert_int_equal(n, 1);
    free(refs);
    assert_int_equal(ts_store_ref_delete(f->s, "tags/v1", b, &err), TS_ESTATE);
    ts_err_clear(&err);
    assert_int_equal(ts_store_ref_delete(f->s, "tags/v1", a, &err), TS_OK);
    assert_int_equal(ts_store_ref_delete(f->s, "tags/v1", NULL, &err), TS_ENOTFOUND);
    ts_err_clear(&err);
    assert_int_equal(ts_store_ref_list(f->s, "tags/", &refs, &n, &err), TS_OK);
    assert_int_equal(n, 0);
    free(refs);
}

static void test_ref_names(void **state)
{
    struct fx *f = *state;
    static const char *const bad[] = { "main", "/heads/main", "heads/../x", "heads/a//b",
        "heads/", "heads/.hidden", "heads/a b", "heads/x.lock", "heads/a/", "branches/x",
        "heads/ü", "" };
    char longname[300];
    uint8_t a[32] = { 1 };
    struct ts_err err = { 0 };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ts_err_clear(&err);
        assert_false(ts_store_ref_valid(bad[i]));
        assert_int_equal(ts_store_ref_set(f->s, bad[i], a, NULL, &err), TS_EINVAL);
        assert_non_null(strstr(err.msg, "ref name"));
    }
    memset(longname, 'x', sizeof(longname));
    memcpy(longname, "heads/", 6);
    longname[201] = '\0';
    assert_false(ts_store_ref_valid(longname));
    longname[200] = '\0';
    assert_true(ts_store_ref_valid(longname));
    assert_true(ts_store_ref_valid("tags/v1.0-rc_2"));
}

/* After a failed put: no chunk file, nothing in tmp/, the earlier chunk intact. */
static void check_failed_put(struct fx *f, const void *data, size_t len, const uint8_t old[32],
                             ts_status want)
{
    struct ts_err err = { 0 };
    uint8_t id[32], back[16];
    char tmp[128];
    size_t n;
    bool ex;

    assert_int_equal(ts_store_put(f->s, data, len, id, &ex, &err), want);
    assert_true(strlen(err.msg) > 0);
    f_write_errno = f_short = f_fdatasync = f_fsync = f_rename = 0;
    snprintf(tmp, sizeof(tmp), "%s/tmp", f->dir);
    assert_int_equal(count_files(tmp), 0);
    assert_int_equal(ts_store_get(f->s, old, back, sizeof(back), &n, &err), TS_OK);
    assert_memory_equal(back, "old", 3);
    /* The failed chunk is not there, so putting it again really writes it. */
    assert_int_equal(ts_store_put(f->s, data, len, id, &ex, &err), TS_OK);
    assert_false(ex);
}

static void test_faults(void **state)
{
    struct fx *f = *state;
    struct ts_err err = { 0 };
    uint8_t old[32], *big = malloc(CH), id[32], *back = malloc(CH);
    char chunks[128];
    size_t n;
    bool ex;

    fill_random(big, CH, 6);
    assert_int_equal(ts_store_put(f->s, "old", 3, old, &ex, &err), TS_OK);
    snprintf(chunks, sizeof(chunks), "%s/chunks", f->dir);
    f_write_errno = ENOSPC;
    check_failed_put(f, "a", 1, old, TS_EIO);
    f_fdatasync = 1;
    check_failed_put(f, "b", 1, old, TS_EIO);
    f_rename = 1;
    check_failed_put(f, "c", 1, old, TS_EIO);
    f_fsync = 1; /* a directory fsync: of a new fan-out dir or after the rename */
    check_failed_put(f, "d", 1, old, TS_EIO);
    /* Short writes are not failures: the loop finishes the file. */
    f_short = 1000;
    assert_int_equal(ts_store_put(f->s, big, CH, id, &ex, &err), TS_OK);
    f_short = 0;
    assert_int_equal(ts_store_get(f->s, id, back, CH, &n, &err), TS_OK);
    assert_memory_equal(back, big, CH);
    assert_int_equal(count_files(chunks), 6);
    free(big);
    free(back);
}

static void test_blob_fault(void **state)
{
    struct fx *f = *state;
    uint8_t *buf = malloc(8 * CH), ids[8][32];
    struct ts_err err = { 0 };
    char tmp[128];
    uint64_t w;

    fill_random(buf, 8 * CH, 7);
    f_fdatasync = 1;
    assert_int_equal(ts_store_put_blob(f->s, buf, 8 * CH, CH, ids, &w, &err), TS_EIO);
    assert_non_null(strstr(err.msg, "fdatasync"));
    f_fdatasync = 0;
    snprintf(tmp, sizeof(tmp), "%s/tmp", f->dir);
    assert_int_equal(count_files(tmp), 0);
    assert_int_equal(count_files(f->dir), 0);
    free(buf);
}

static void test_ref_fault(void **state)
{
    struct fx *f = *state;
    uint8_t a[32] = { 1 }, b[32] = { 2 }, got[32];
    struct ts_err err = { 0 };

    assert_int_equal(ts_store_ref_set(f->s, "heads/main", a, NULL, &err), TS_OK);
    f_fdatasync = 1;
    assert_int_equal(ts_store_ref_set(f->s, "heads/main", b, a, &err), TS_EIO);
    f_fdatasync = 0;
    assert_int_equal(ts_store_ref_get(f->s, "heads/main", got, &err), TS_OK);
    assert_memory_equal(got, a, 32);
}

static void test_gc(void **state)
{
    struct fx *f = *state;
    uint8_t ids[4][32], live[2][32];
    struct ts_err err = { 0 };
    struct ts_store_stats st;
    char path[512];
    const char *data[] = { "zero", "one", "two", "three" };
    bool ex;
    int fd;

    for (int i = 0; i < 4; i++)
        assert_int_equal(ts_store_put(f->s, data[i], strlen(data[i]), ids[i], &ex, &err), TS_OK);
    memcpy(live[0], ids[3], 32);
    memcpy(live[1], ids[1], 32);
    snprintf(path, sizeof(path), "%s/tmp/leftover.tmp", f->dir);
    fd = open(path, O_CREAT | O_WRONLY, 0644);
    assert_true(fd >= 0);
    close(fd);
    /* A recent tmp file survives a grace period; a zero grace removes it. */
    assert_int_equal(ts_store_gc(f->s, (const uint8_t (*)[32])live, 2, 3600, &st, &err), TS_OK);
    assert_int_equal(st.scanned, 4);
    assert_int_equal(st.removed, 2);
    assert_int_equal(st.tmp_removed, 0);
    assert_false(ts_store_has(f->s, ids[0]));
    assert_true(ts_store_has(f->s, ids[1]));
    assert_false(ts_store_has(f->s, ids[2]));
    assert_true(ts_store_has(f->s, ids[3]));
    assert_int_equal(ts_store_gc(f->s, (const uint8_t (*)[32])live, 2, 0, &st, &err), TS_OK);
    assert_int_equal(st.removed, 0);
    assert_int_equal(st.tmp_removed, 1);
    assert_int_equal(ts_store_gc(f->s, NULL, 0, 0, &st, &err), TS_OK);
    assert_int_equal(st.removed, 2);
}

/* A full disk, for real: files created in tmp/ are /dev/full, whose writes the kernel fails
 * with ENOSPC. Under a long directory, and with the context a snapshot adds, the message must
 * still end with the cause ("store: write .../tmp/2b60cc35ff..." once stopped there). */
static char full_tmp[1100];   /* the store's tmp/, with its slash */

static int x_open_full(const char *path, int flags, mode_t mode)
{
    if ((flags & O_CREAT) && !strncmp(path, full_tmp, strlen(full_tmp)))
        return open("/dev/full", O_WRONLY | O_CLOEXEC);
    return open(path, flags, mode);
}

static void test_disk_full(void **state)
{
    static const struct ts_store_syscalls full = { .open = x_open_full };
    struct ts_store_opts o = { .threads = 2, .sys = &full };
    char base[64], dir[1024], fit[256];
    uint8_t *buf = malloc(4 * CH), ids[4][32];
    struct ts_store *s = NULL;
    struct ts_err err = { 0 };
    size_t n;

    (void)state;
    if (access("/dev/full", W_OK) != 0) {
        free(buf);
        skip();   /* a container without /dev/full */
    }
    snprintf(base, sizeof(base), "/tmp/ts_store_XXXXXX");
    assert_non_null(mkdtemp(base));
    n = (size_t)snprintf(dir, sizeof(dir), "%s", base);
    for (int i = 0; i < 12; i++) {
        n += (size_t)snprintf(dir + n, sizeof(dir) - n, "/checkpoints-of-the-long-run-%02d", i);
        assert_int_equal(mkdir(dir, 0777), 0);
    }
    snprintf(full_tmp, sizeof(full_tmp), "%s/tmp/", dir);
    assert_int_equal(ts_store_open(dir, &o, &s, &err), TS_OK);
    fill_random(buf, 4 * CH, 9);
    assert_int_equal(ts_store_put_blob(s, buf, 4 * CH, CH, ids, NULL, &err), TS_EIO);
    assert_true(strncmp(err.msg, "store: write /tmp/ts_store_", 27) == 0);
    assert_non_null(strstr(err.msg, ".tmp: No space left on device"));
    /* As the snapshot path passes it up: the shard, the master, the client. */
    ts_err_prefix(&err, "tensor 'fc1.weight' partition 3");
    ts_err_prefix(&err, "WriteSnapshot at 127.0.0.1:40321: INTERNAL");
    ts_err_prefix(&err, "snapshot: shard 2");
    ts_str_fit(fit, sizeof(fit), err.msg);   /* the SDK's message */
    assert_true(strncmp(fit, "snapshot: shard 2: ", 19) == 0);
    assert_non_null(strstr(fit, ".tmp: No space left on device"));
    /* Nothing was left in tmp/ (the fd was /dev/full, the unlink finds no file). */
    snprintf(dir + n, sizeof(dir) - n, "/tmp");
    assert_int_equal(rmdir(dir), 0);
    ts_store_close(s);
    nftw(base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(buf);
}

static void test_open_errors(void **state)
{
    struct ts_store_opts o = { .zstd_level = 40 };
    struct ts_store *s = NULL;
    struct ts_err err = { 0 };

    assert_int_equal(ts_store_open("", NULL, &s, &err), TS_EINVAL);
    ts_err_clear(&err);
    assert_int_equal(ts_store_open("/tmp/x", &o, &s, &err), TS_EINVAL);
    assert_non_null(strstr(err.msg, "zstd_level"));
    ts_err_clear(&err);
    assert_int_equal(ts_store_open("/proc/nope/store", NULL, &s, &err), TS_EIO);
    assert_non_null(strstr(err.msg, "/proc/nope"));
    assert_null(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_roundtrip_sizes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_single_chunk_api, setup, teardown),
        cmocka_unit_test_setup_teardown(test_compressible_and_random, setup, teardown),
        cmocka_unit_test_setup_teardown(test_codec_by_sample, setup, teardown),
        cmocka_unit_test_setup_teardown(test_blob_dir_syncs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dedup_and_incremental, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corruption, setup, teardown),
        cmocka_unit_test_setup_teardown(test_objects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ref_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_faults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_blob_fault, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ref_fault, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gc, setup, teardown),
        cmocka_unit_test(test_disk_full),
        cmocka_unit_test(test_open_errors),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
