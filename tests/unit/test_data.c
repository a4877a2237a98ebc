/* test_data.c - lib/data: the installed Fashion-MNIST loads with the known shape, labels and
 * fingerprint; broken files (missing, bad magic, bad label, wrong size, truncated, padded,
 * corrupt gzip) are refused naming the file; the epoch permutation is a reproducible, unbiased
 * permutation that changes with epoch and seed; every micro-batch of a step has exactly one
 * owner for any worker count. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "data/data.h"

/* ---- the real dataset ---- */

static void load(bool train, struct ts_dataset *d)
{
    struct ts_err err = { 0 };

    if (ts_fmnist_load(NULL, train, d, &err) != TS_OK)
        fail_msg("ts_fmnist_load(%s): %s", train ? "train" : "t10k", err.msg);
}

static void test_fmnist_real(void **state)
{
    struct ts_dataset tr, te;
    uint32_t count[10] = { 0 };
    bool saw0 = false, saw1 = false;

    load(true, &tr);
    load(false, &te);
    assert_int_equal(tr.n, 60000);
    assert_int_equal(te.n, 10000);
    assert_int_equal(tr.dim, 784);
    assert_int_equal(te.dim, 784);
    for (uint32_t i = 0; i < tr.n; i++)
        count[tr.y[i]]++;
    for (int k = 0; k < 10; k++)
        assert_int_equal(count[k], 6000);
    assert_int_equal(tr.y[0], 9);   /* the first training image is an ankle boot */
    for (size_t i = 0; i < (size_t)tr.n * tr.dim; i++) {
        float v = tr.x[i] * 255.0f;

        assert_true(tr.x[i] >= 0.0f && tr.x[i] <= 1.0f);
        assert_true(v == (float)(int)(v + 0.5f));   /* byte / 255, nothing else */
        saw0 |= tr.x[i] == 0.0f;
        saw1 |= tr.x[i] == 1.0f;
    }
    assert_true(saw0 && saw1);
    /* Golden fingerprints: any host that reads these files sees these values. */
    assert_int_equal(ts_data_digest(&tr), 0x061ba8bae20c1a96ull);
    assert_int_equal(ts_data_digest(&te), 0x404df6c25d3d9575ull);
    ts_data_free(&tr);
    assert_null(tr.x);
    assert_int_equal(tr.n, 0);
    ts_data_free(&tr);   /* twice is harmless */
    ts_data_free(NULL);
    ts_data_free(&te);
}

/* ---- broken files, written with zlib into a temporary directory ---- */

struct tmp {
    char dir[64];
};

static int tmp_setup(void **state)
{
    struct tmp *t = calloc(1, sizeof(*t));

    if (!t)
        return -1;
    snprintf(t->dir, sizeof(t->dir), "/tmp/ts_test_data.XXXXXX");
    if (!mkdtemp(t->dir)) {
        free(t);
        return -1;
    }
    *state = t;
    return 0;
}

static int tmp_teardown(void **state)
{
    struct tmp *t = *state;
    DIR *d = opendir(t->dir);
    struct dirent *e;
    char p[600];

    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof(p), "%s/%s", t->dir, e->d_name);
        unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(t->dir);
    free(t);
    return 0;
}

static void put_be32(unsigned char *b, uint32_t v)
{
    b[0] = (unsigned char)(v >> 24);
    b[1] = (unsigned char)(v >> 16);
    b[2] = (unsigned char)(v >> 8);
    b[3] = (unsigned char)v;
}

/* Writes dir/<stem>.gz: the magic, ndims big-endian dimensions, then len payload bytes. */
static void write_idx(const char *dir, const char *stem, uint32_t magic, const uint32_t *dims,
                      int ndims, const unsigned char *payload, size_t len)
{
    char path[128];
    unsigned char head[16];
    gzFile gz;

    snprintf(path, sizeof(path), "%s/%s.gz", dir, stem);
    gz = gzopen(path, "wb");
    assert_non_null(gz);
    put_be32(head, magic);
    for (int i = 0; i < ndims; i++)
        put_be32(head + 4 + 4 * i, dims[i]);
    assert_int_equal(gzwrite(gz, head, 4 + 4 * (unsigned)ndims), 4 + 4 * ndims);
    if (len)
        assert_int_equal(gzwrite(gz, payload, (unsigned)len), (int)len);
    assert_int_equal(gzclose(gz), Z_OK);
}

enum { N3 = 3, PIX = 784 };

/* A valid 3-sample "train" set: labels 0 1 9, pixel i of sample s = (s * 7 + i) % 256. */
static void write_good(const char *dir, size_t image_bytes, uint32_t image_count)
{
    static unsigned char px[N3 * PIX + 1];
    const unsigned char labels[N3] = { 0, 1, 9 };
    uint32_t ld[1] = { N3 }, id[3] = { image_count, 28, 28 };

    for (size_t i = 0; i < sizeof(px); i++)
        px[i] = (unsigned char)(((i / PIX) * 7 + i % PIX) % 256);
    write_idx(dir, "train-labels-idx1-ubyte", 2049, ld, 1, labels, N3);
    write_idx(dir, "train-images-idx3-ubyte", 2051, id, 3, px, image_bytes);
}

/* Loading dir as "train" fails with code, and the message names the file and contains want. */
static void expect_fail(const char *dir, ts_status code, const char *file, const char *want)
{
    struct ts_err err = { 0 };
    struct ts_dataset d = { .n = 77 };

    assert_int_equal(ts_fmnist_load(dir, true, &d, &err), code);
    assert_int_equal(err.code, code);
    assert_int_equal(d.n, 77);   /* *out untouched */
    if (!strstr(err.msg, file) || !strstr(err.msg, want))
        fail_msg("message '%s' should name %s and say '%s'", err.msg, file, want);
}

static void test_fmnist_small_valid(void **state)
{
    struct tmp *t = *state;
    struct ts_err err = { 0 };
    struct ts_dataset d;

    write_good(t->dir, N3 * PIX, N3);
    assert_int_equal(ts_fmnist_load(t->dir, true, &d, &err), TS_OK);
    assert_int_equal(d.n, N3);
    assert_int_equal(d.dim, PIX);
    assert_int_equal(d.y[2], 9);
    assert_true(d.x[0] == 0.0f);
    assert_true(d.x[PIX + 5] == 12.0f / 255.0f);
    assert_true(d.x[255] == 1.0f);
    ts_data_free(&d);
}

static void test_fmnist_missing(void **state)
{
    struct tmp *t = *state;
    char path[128];
    struct ts_err err = { 0 };
    struct ts_dataset d;

    expect_fail(t->dir, TS_ENOTFOUND, "train-labels-idx1-ubyte.gz",
                "install Debian's dataset-fashion-mnist (make deps does)");
    write_good(t->dir, N3 * PIX, N3);
    snprintf(path, sizeof(path), "%s/train-images-idx3-ubyte.gz", t->dir);
    assert_int_equal(unlink(path), 0);
    expect_fail(t->dir, TS_ENOTFOUND, path, "dataset-fashion-mnist");
    snprintf(path, sizeof(path), "%s/t10k-labels-idx1-ubyte.gz", t->dir);
    assert_int_equal(ts_fmnist_load(t->dir, false, &d, &err), TS_ENOTFOUND);
    assert_non_null(strstr(err.msg, path));
}

static void test_fmnist_corrupt(void **state)
{
    struct tmp *t = *state;
    const char *img = "train-images-idx3-ubyte.gz", *lab = "train-labels-idx1-ubyte.gz";
    const unsigned char bad_labels[N3] = { 0, 10, 1 };
    uint32_t ld[1] = { N3 }, id[3] = { N3, 28, 27 };
    unsigned char zeros[N3 * PIX] = { 0 };

    write_good(t->dir, N3 * PIX, N3);
    write_idx(t->dir, "train-labels-idx1-ubyte", 2051, ld, 1, bad_labels, N3);
    expect_fail(t->dir, TS_ECORRUPT, lab, "magic 2051, want 2049");

    write_idx(t->dir, "train-labels-idx1-ubyte", 2049, ld, 1, bad_labels, N3);
    expect_fail(t->dir, TS_ECORRUPT, lab, "label 10 of sample 1");

    write_good(t->dir, N3 * PIX, N3);
    write_idx(t->dir, "train-images-idx3-ubyte", 2051, id, 3, zeros, sizeof(zeros));
    expect_fail(t->dir, TS_ECORRUPT, img, "28x27");

    write_good(t->dir, N3 * PIX - 100, N3);
    expect_fail(t->dir, TS_ECORRUPT, img, "truncated");

    write_good(t->dir, N3 * PIX + 1, N3);
    expect_fail(t->dir, TS_ECORRUPT, img, "past the end");

    write_good(t->dir, 2 * PIX, 2);
    expect_fail(t->dir, TS_ECORRUPT, img, "2 images for 3 labels");

    ld[0] = 0;
    write_idx(t->dir, "train-labels-idx1-ubyte", 2049, ld, 1, NULL, 0);
    expect_fail(t->dir, TS_ECORRUPT, lab, "0 samples");
}

/* A gzip stream whose compressed bytes were damaged: zlib's error is reported, not a crash. */
static void test_fmnist_bad_gzip(void **state)
{
    struct tmp *t = *state;
    char path[128];
    FILE *f;
    long size;

    write_good(t->dir, N3 * PIX, N3);
    snprintf(path, sizeof(path), "%s/train-images-idx3-ubyte.gz", t->dir);
    f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    size = ftell(f);
    assert_true(size > 40);
    for (long off = 12; off < size - 8; off += 3) {
        assert_int_equal(fseek(f, off, SEEK_SET), 0);
        fputc(0xA5, f);
    }
    assert_int_equal(fclose(f), 0);
    expect_fail(t->dir, TS_ECORRUPT, "train-images-idx3-ubyte.gz", "corrupt gzip data");
}

/* ---- the schedule ---- */

static void test_schedule_check(void **state)
{
    struct ts_err err = { 0 };
    struct ts_schedule ok = { 1, 60000, 64, 16 }, s;

    assert_int_equal(ts_schedule_check(&ok, &err), TS_OK);
    assert_int_equal(ts_schedule_steps_per_epoch(&ok), 937);
    s = ok;
    s.micro = 24;
    assert_int_equal(ts_schedule_check(&s, &err), TS_EINVAL);
    assert_non_null(strstr(err.msg, "multiple"));
    s = ok;
    s.micro = 0;
    assert_int_equal(ts_schedule_check(&s, NULL), TS_EINVAL);
    s = ok;
    s.batch = 0;
    assert_int_equal(ts_schedule_check(&s, NULL), TS_EINVAL);
    assert_int_equal(ts_schedule_steps_per_epoch(&s), 0);
    s = ok;
    s.n = 10;
    assert_int_equal(ts_schedule_check(&s, NULL), TS_EINVAL);
}

static void test_perm(void **state)
{
    enum { N = 60000 };
    struct ts_schedule s = { 42, N, 64, 16 }, s2 = s;
    uint32_t *a = malloc(N * sizeof(*a)), *b = malloc(N * sizeof(*b));
    uint8_t *seen = calloc(N, 1);
    uint32_t same = 0;

    assert_true(a && b && seen);
    ts_schedule_perm(&s, 0, a);
    for (uint32_t i = 0; i < N; i++) {
        assert_true(a[i] < N);
        assert_int_equal(seen[a[i]], 0);
        seen[a[i]] = 1;
    }
    ts_schedule_perm(&s, 0, b);
    assert_memory_equal(a, b, N * sizeof(*a));

    ts_schedule_perm(&s, 1, b);
    for (uint32_t i = 0; i < N; i++)
        same += a[i] == b[i];
    assert_true(same < 100);   /* about 1 fixed point expected */

    s2.seed = 43;
    ts_schedule_perm(&s2, 0, b);
    same = 0;
    for (uint32_t i = 0; i < N; i++)
        same += a[i] == b[i];
    assert_true(same < 100);
    free(a);
    free(b);
    free(seen);
}

/* Pinned values: the shuffle is part of the cross-host contract, so a change must be seen. */
static void test_perm_golden(void **state)
{
    struct ts_schedule s = { 42, 10, 2, 1 };
    uint32_t p[10], one = 99;
    const uint32_t want[10] = { 5, 1, 4, 8, 6, 3, 9, 2, 0, 7 };   /* also from a Python port */

    ts_schedule_perm(&s, 0, p);
    assert_memory_equal(p, want, sizeof(p));
    s.n = 1;
    ts_schedule_perm(&s, 5, &one);
    assert_int_equal(one, 0);
    s.n = 0;
    ts_schedule_perm(&s, 5, &one);   /* writes nothing */
    assert_int_equal(one, 0);
}

/* Each of the 6 orders of 3 items comes up about equally often over many epochs. */
static void test_perm_uniform(void **state)
{
    enum { EPOCHS = 60000 };
    struct ts_schedule s = { 7, 3, 1, 1 };
    uint32_t p[3], hist[9] = { 0 };

    for (uint32_t e = 0; e < EPOCHS; e++) {
        ts_schedule_perm(&s, e, p);
        hist[p[0] * 3 + p[1]]++;
    }
    for (int i = 0; i < 9; i++) {
        if (i / 3 == i % 3) {
            assert_int_equal(hist[i], 0);
            continue;
        }
        if (hist[i] < 9500 || hist[i] > 10500)
            fail_msg("order %d,%d came up %u times in %d, want about 10000", i / 3, i % 3,
                     hist[i], EPOCHS);
    }
}

/* For W in {1,2,3,4} and B/m in {1,4,8}: each micro-batch has exactly one owner, j % W. */
static void test_micro_cover(void **state)
{
    const uint32_t ws[] = { 1, 2, 3, 4 }, counts[] = { 1, 4, 8 }, m = 16;
    uint32_t first[8];

    for (size_t a = 0; a < 4; a++) {
        for (size_t c = 0; c < 3; c++) {
            struct ts_schedule s = { 1, 60000, counts[c] * m, m };
            uint32_t owner[8], w = ws[a], total = 0;

            for (uint32_t j = 0; j < 8; j++)
                owner[j] = UINT32_MAX;
            for (uint32_t r = 0; r < w; r++) {
                uint32_t k = ts_schedule_micro(&s, r, w, first);

                assert_int_equal(k, (counts[c] + w - 1 - r) / w);
                for (uint32_t i = 0; i < k; i++) {
                    uint32_t j = first[i] / m;

                    assert_int_equal(first[i] % m, 0);
                    assert_true(j < counts[c]);
                    assert_int_equal(owner[j], UINT32_MAX);
                    assert_int_equal(j % w, r);
                    assert_true(i == 0 || first[i] > first[i - 1]);
                    owner[j] = r;
                }
                total += k;
            }
            assert_int_equal(total, counts[c]);
            assert_int_equal(ts_schedule_micro(&s, w, w, first), 0);
        }
    }
    {
        struct ts_schedule s = { 1, 100, 64, 16 };

        assert_int_equal(ts_schedule_micro(&s, 0, 0, first), 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fmnist_real),
        cmocka_unit_test_setup_teardown(test_fmnist_small_valid, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_fmnist_missing, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_fmnist_corrupt, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_fmnist_bad_gzip, tmp_setup, tmp_teardown),
        cmocka_unit_test(test_schedule_check),
        cmocka_unit_test(test_perm),
        cmocka_unit_test(test_perm_golden),
        cmocka_unit_test(test_perm_uniform),
        cmocka_unit_test(test_micro_cover),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
