/* test_audit.c - lib/audit: two model states compared at three levels (docs/verify.md), from
 * files and from states built in memory. The snapshot path and the MLP's probe batch are
 * covered by the integration tests (test_verify_cli, test_verify_service, test_verify_scipy);
 * here: the level names, loading .npy and raw files (and refusing what is not there or not
 * float32), and the verdicts of bits, cosine and dist on tensors that are equal, one ULP apart,
 * scaled, or missing on one side; tables' rows: the sample of the common rows (by the id's
 * hash: the same rows whatever the order or the run), their cosines (zero and NaN rows), and
 * two tables with other ids failing bits but compared by cosine over the rows both hold. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audit/audit.h"
#include "data/splitmix.h"

#define N 4096

static void level_names(void **state)
{
    (void)state;
    assert_int_equal(ts_audit_level("bits"), TS_AUDIT_BITS);
    assert_int_equal(ts_audit_level("cosine"), TS_AUDIT_COSINE);
    assert_int_equal(ts_audit_level("dist"), TS_AUDIT_DIST);
    assert_int_equal(ts_audit_level("all"), TS_AUDIT_ALL);
    assert_int_equal(ts_audit_level(NULL), TS_AUDIT_ALL);
    assert_int_equal(ts_audit_level(""), TS_AUDIT_ALL);
    assert_int_equal(ts_audit_level("bit"), -1);
}

static float *values(uint32_t seed)
{
    float *v = malloc(N * sizeof(*v));

    assert_non_null(v);
    for (int i = 0; i < N; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = (float)((int32_t)seed >> 8) / (float)(1 << 23);   /* about -1..1 */
    }
    return v;
}

/* Adds a tensor named name, holding a copy of v, to s. */
static void add(struct ts_audit_state *s, const char *name, const float *v)
{
    struct ts_audit_tensor_data *t = realloc(s->t, (s->n + 1) * sizeof(*s->t));

    assert_non_null(t);
    s->t = t;
    t = &s->t[s->n++];
    *t = (struct ts_audit_tensor_data){ 0 };   /* a tensor: no table rows */
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->numel = N;
    assert_non_null(t->v = malloc(N * sizeof(float)));
    memcpy(t->v, v, N * sizeof(float));
}

/* A state of one tensor. */
static void one(struct ts_audit_state *s, const char *name, const float *v)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->label, sizeof(s->label), "%s", name);
    add(s, name, v);
}

static void load_npy_and_raw_files(void **state)
{
    char dir[] = "/tmp/tessera-audit.XXXXXX", npy[64], raw[64], f64[64], gone[64];
    float *v = values(1);
    double d[4] = { 1, 2, 3, 4 };
    struct ts_verify_array a = { .dtype = TS_VERIFY_F32, .ndim = 2, .shape = { 64, N / 64 },
                                 .n = N, .data = v };
    struct ts_verify_array a64 = { .dtype = TS_VERIFY_F64, .ndim = 1, .shape = { 4 }, .n = 4,
                                   .data = d };
    struct ts_audit_state s = { 0 };
    struct ts_err e = { 0 };
    FILE *f;

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(npy, sizeof(npy), "%s/w.npy", dir);
    snprintf(raw, sizeof(raw), "%s/w.f32", dir);
    snprintf(f64, sizeof(f64), "%s/d.npy", dir);
    snprintf(gone, sizeof(gone), "%s/none.npy", dir);
    assert_int_equal(ts_verify_npy_write(npy, &a, &e), TS_OK);
    assert_int_equal(ts_verify_npy_write(f64, &a64, &e), TS_OK);
    assert_non_null(f = fopen(raw, "wb"));
    assert_int_equal(fwrite(v, sizeof(float), N, f), N);
    fclose(f);

    assert_int_equal(ts_audit_load(npy, NULL, NULL, &s, &e), TS_OK);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.t[0].name, "w.npy");
    assert_int_equal(s.t[0].numel, N);
    assert_memory_equal(s.t[0].v, v, N * sizeof(float));
    assert_non_null(strstr(s.label, ".npy"));
    ts_audit_state_free(&s);
    assert_int_equal(ts_audit_load(raw, NULL, NULL, &s, &e), TS_OK);
    assert_int_equal(s.t[0].numel, N);
    assert_memory_equal(s.t[0].v, v, N * sizeof(float));
    assert_non_null(strstr(s.label, "raw"));
    ts_audit_state_free(&s);
    /* float64 would hide bits when compared as float32: refused, naming the file. */
    assert_int_equal(ts_audit_load(f64, NULL, NULL, &s, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, f64));
    /* Neither a file nor (without a store) a snapshot: NOT_FOUND naming it. */
    ts_err_clear(&e);
    assert_int_not_equal(ts_audit_load(gone, NULL, NULL, &s, &e), TS_OK);
    assert_non_null(strstr(e.msg, "none.npy"));
    unlink(npy);
    unlink(raw);
    unlink(f64);
    assert_int_equal(rmdir(dir), 0);
    free(v);
}

static void compare(const struct ts_audit_state *a, const struct ts_audit_state *b, int levels,
                    struct ts_audit_report *r)
{
    struct ts_audit_opts o = { .levels = levels };
    struct ts_err e = { 0 };

    memset(r, 0, sizeof(*r));
    assert_int_equal(ts_audit_compare(a, b, &o, r, &e), TS_OK);
}

static void verdicts(void **state)
{
    float *v = values(2), *w = malloc(N * sizeof(float));
    struct ts_audit_state a, b;
    struct ts_audit_report r;
    uint32_t bits;

    (void)state;
    assert_non_null(w);
    one(&a, "fc.weight", v);

    /* The same bits: every level passes. */
    one(&b, "fc.weight", v);
    compare(&a, &b, TS_AUDIT_ALL, &r);
    assert_false(r.model);
    assert_string_equal(r.dist_of, "values");
    assert_true(r.pass_bits && r.pass_cosine && r.pass_dist && r.pass);
    assert_int_equal(r.tensors[0].bits.ndiff, 0);
    assert_true(fabs(r.tensors[0].cosine - 1.0) < 1e-12);
    ts_audit_report_free(&r);
    ts_audit_state_free(&b);

    /* One element one ULP apart: bits fail and say where; cosine and dist pass. */
    memcpy(w, v, N * sizeof(float));
    memcpy(&bits, &w[1234], sizeof(bits));
    bits++;
    memcpy(&w[1234], &bits, sizeof(bits));
    one(&b, "fc.weight", w);
    compare(&a, &b, TS_AUDIT_ALL, &r);
    assert_false(r.pass_bits);
    assert_true(r.pass_cosine && r.pass_dist);
    assert_false(r.pass);
    assert_int_equal(r.tensors[0].bits.ndiff, 1);
    assert_int_equal(r.tensors[0].bits.first_index, 1234);
    assert_int_equal(r.tensors[0].bits.max_ulp, 1);
    ts_audit_report_free(&r);
    /* The same, asked for cosine alone: it passes. */
    compare(&a, &b, TS_AUDIT_COSINE, &r);
    assert_true(r.pass);
    ts_audit_report_free(&r);
    ts_audit_state_free(&b);

    /* Another model altogether: cosine and dist fail too. */
    free(w);
    w = values(3);
    one(&b, "fc.weight", w);
    compare(&a, &b, TS_AUDIT_ALL, &r);
    assert_false(r.pass_bits || r.pass_cosine);
    assert_true(fabs(r.tensors[0].cosine) < 0.1);
    assert_false(r.pass);
    ts_audit_report_free(&r);
    ts_audit_state_free(&b);

    /* A tensor only one side has fails bits and cosine, named. (Two states of one tensor
     * each are compared whatever the names: two files.) */
    add(&a, "fc.weight2", v);
    one(&b, "fc.weight", v);
    add(&b, "fc.bias", v);
    compare(&a, &b, TS_AUDIT_BITS | TS_AUDIT_COSINE, &r);
    assert_false(r.pass_bits || r.pass_cosine);
    {
        bool only_a = false, only_b = false;
        for (size_t i = 0; i < r.n; i++) {
            only_a |= r.tensors[i].only_a && !strcmp(r.tensors[i].name, "fc.weight2");
            only_b |= r.tensors[i].only_b && !strcmp(r.tensors[i].name, "fc.bias");
        }
        assert_true(only_a && only_b);
    }
    ts_audit_report_free(&r);
    ts_audit_state_free(&b);
    ts_audit_state_free(&a);
    free(v);
    free(w);
}

/* ids[n]: first, first + step, ... */
static uint64_t *id_range(uint64_t first, uint64_t step, size_t n)
{
    uint64_t *ids = malloc(n * sizeof(*ids));

    assert_non_null(ids);
    for (size_t i = 0; i < n; i++)
        ids[i] = first + i * step;
    return ids;
}

static int by_value(const void *x, const void *y)
{
    uint64_t p = *(const uint64_t *)x, q = *(const uint64_t *)y;

    return p < q ? -1 : p > q;
}

static void rows_sample(void **state)
{
    uint64_t *a = id_range(0, 1, 1000), *b = id_range(500, 1, 1000), h[500], want[10];
    struct ts_audit_rows r, s;
    struct ts_err e = { 0 };
    size_t nw = 0;

    (void)state;
    /* k 0: every common row (500..999), in ascending id, counted. */
    assert_int_equal(ts_audit_rows_sample(a, 1000, b, 1000, 0, &r, &e), TS_OK);
    assert_int_equal(r.n, 500);
    assert_int_equal(r.common, 500);
    assert_int_equal(r.only_a, 500);
    assert_int_equal(r.only_b, 500);
    for (size_t i = 0; i < r.n; i++) {
        assert_int_equal(r.ia[i], 500 + i);
        assert_int_equal(r.ib[i], i);
    }
    ts_audit_rows_free(&r);

    /* k 10: exactly the 10 common ids of the smallest hashes, in ascending id. */
    for (size_t i = 0; i < 500; i++)
        h[i] = ts_mix64(500 + i);
    qsort(h, 500, sizeof(h[0]), by_value);
    for (uint64_t id = 500; id < 1000; id++)
        if (ts_mix64(id) <= h[9])
            want[nw++] = id;
    assert_int_equal(nw, 10);
    assert_int_equal(ts_audit_rows_sample(a, 1000, b, 1000, 10, &r, &e), TS_OK);
    assert_int_equal(r.n, 10);
    assert_int_equal(r.common, 500);
    for (size_t i = 0; i < 10; i++) {
        assert_int_equal(a[r.ia[i]], want[i]);
        assert_int_equal(b[r.ib[i]], want[i]);
    }
    /* a and b swapped: the same rows; 11: those 10 and one more. */
    assert_int_equal(ts_audit_rows_sample(b, 1000, a, 1000, 10, &s, &e), TS_OK);
    assert_int_equal(s.n, 10);
    for (size_t i = 0; i < 10; i++)
        assert_int_equal(b[s.ia[i]], want[i]);
    ts_audit_rows_free(&s);
    assert_int_equal(ts_audit_rows_sample(a, 1000, b, 1000, 11, &s, &e), TS_OK);
    assert_int_equal(s.n, 11);
    nw = 0;
    for (size_t i = 0; i < 11; i++)
        nw += nw < 10 && a[s.ia[i]] == want[nw];
    assert_int_equal(nw, 10);
    ts_audit_rows_free(&s);
    ts_audit_rows_free(&r);

    /* k above the common rows: all of them. Sparse ids of another stride: 0, 6, 12, ... in
     * common. Nothing on one side: nothing common, everything only in the other. */
    free(b);
    b = id_range(0, 3, 1000);
    assert_int_equal(ts_audit_rows_sample(a, 1000, b, 1000, 100000, &r, &e), TS_OK);
    assert_int_equal(r.n, 334);   /* multiples of 3 below 1000 */
    assert_int_equal(r.only_a, 666);
    assert_int_equal(r.only_b, 666);
    for (size_t i = 0; i < r.n; i++)
        assert_int_equal(a[r.ia[i]], 3 * i);
    ts_audit_rows_free(&r);
    assert_int_equal(ts_audit_rows_sample(NULL, 0, b, 1000, 10, &r, &e), TS_OK);
    assert_true(r.n == 0 && r.common == 0 && r.only_a == 0 && r.only_b == 1000);
    ts_audit_rows_free(&r);
    free(a);
    free(b);
}

static void rows_cosine(void **state)
{
    /* 4 rows of dim 2: the same; zero on both sides; b = 2a (cosine 1); orthogonal. */
    const float va[] = { 1, 2, 0, 0, 3, -1, 1, 0 }, vb[] = { 1, 2, 0, 0, 6, -2, 0, 5 };
    size_t all[] = { 0, 1, 2, 3 }, first3[] = { 0, 1, 2 };
    struct ts_audit_rows r = { .ia = all, .ib = all, .n = 4, .common = 4 };
    struct ts_err e = { 0 };
    double c, m, dot = 1 + 4 + 18 + 2, na = 1 + 4 + 9 + 1 + 1, nb = 1 + 4 + 36 + 4 + 25;
    float nan_row[] = { 1, 2, 0, 0, NAN, 1, 1, 0 };

    (void)state;
    assert_int_equal(ts_audit_rows_cosine(va, vb, 2, &r, &c, &m, &e), TS_OK);
    assert_true(fabs(c - dot / sqrt(na * nb)) < 1e-12);
    assert_true(m == 0.0);   /* the orthogonal row */
    /* Without it: every row's cosine is 1 (zero rows on both sides count as the same), but
     * not the concatenation's (one row scaled): (5 + 20) / sqrt(15 * 45). */
    r = (struct ts_audit_rows){ .ia = first3, .ib = first3, .n = 3, .common = 3, .only_a = 1 };
    assert_int_equal(ts_audit_rows_cosine(va, vb, 2, &r, &c, &m, &e), TS_OK);
    assert_true(fabs(m - 1.0) < 1e-12);
    assert_true(fabs(c - 25 / sqrt(15.0 * 45)) < 1e-12);
    /* A row zero on one side only: 0. */
    r = (struct ts_audit_rows){ .ia = (size_t[]){ 1 }, .ib = (size_t[]){ 0 }, .n = 1 };
    assert_int_equal(ts_audit_rows_cosine(va, vb, 2, &r, &c, &m, &e), TS_OK);
    assert_true(c == 0.0 && m == 0.0);
    /* A NaN: both NaN, so both fail any threshold. */
    r = (struct ts_audit_rows){ .ia = all, .ib = all, .n = 4, .common = 4 };
    assert_int_equal(ts_audit_rows_cosine(nan_row, vb, 2, &r, &c, &m, &e), TS_OK);
    assert_true(isnan(c) && isnan(m));
    /* No rows in common: 0 when either side holds one, 1 when neither does. */
    r = (struct ts_audit_rows){ .only_b = 3 };
    assert_int_equal(ts_audit_rows_cosine(va, vb, 2, &r, &c, &m, &e), TS_OK);
    assert_true(c == 0.0 && m == 0.0);
    r = (struct ts_audit_rows){ 0 };
    assert_int_equal(ts_audit_rows_cosine(va, vb, 2, &r, &c, &m, &e), TS_OK);
    assert_true(c == 1.0 && m == 1.0);
}

/* A state of one table "table:emb" of rows ids[n] (dim 4), row i's values i+1, i+2, ... */
static void table(struct ts_audit_state *s, const uint64_t *ids, size_t n, uint64_t dim)
{
    struct ts_audit_tensor_data *t;

    memset(s, 0, sizeof(*s));
    assert_non_null(s->t = t = calloc(1, sizeof(*t)));
    s->n = 1;
    snprintf(t->name, sizeof(t->name), "table:emb");
    t->rows = n;
    t->dim = dim;
    t->numel = n * dim;
    assert_non_null(t->ids = malloc(n * sizeof(*ids) + 1));
    memcpy(t->ids, ids, n * sizeof(*ids));
    assert_non_null(t->v = malloc(n * dim * sizeof(float) + 1));
    for (size_t i = 0; i < n; i++)
        for (size_t d = 0; d < dim; d++)
            t->v[i * dim + d] = (float)(ids[i] % 97 + d + 1) * (d % 2 ? 1.f : -1.f);
}

static void tables_by_rows(void **state)
{
    uint64_t *ids = id_range(7, 11, 300);
    struct ts_audit_state a, b;
    struct ts_audit_report r;
    struct ts_audit_opts o = { .levels = TS_AUDIT_BITS | TS_AUDIT_COSINE };
    struct ts_err e = { 0 };
    const struct ts_audit_tensor *t;

    (void)state;
    /* The same rows: bits and cosine pass, every row sampled. */
    table(&a, ids, 300, 4);
    table(&b, ids, 300, 4);
    assert_int_equal(ts_audit_compare(&a, &b, &o, &r, &e), TS_OK);
    t = &r.tensors[0];
    assert_true(r.pass_bits && r.pass_cosine && t->table && !t->rows_differ);
    assert_int_equal(t->rows_common, 300);
    assert_int_equal(t->rows_sampled, 300);
    assert_true(t->cosine == 1.0 && t->row_cosine_min == 1.0);
    ts_audit_report_free(&r);
    ts_audit_state_free(&b);

    /* B has 5 rows more (a later snapshot) and row 0 negated: bits fails on the ids, cosine
     * is over the 300 common rows and says which row moved; a sample of 10 is 10. */
    {
        uint64_t *more = id_range(7, 11, 305);
        table(&b, more, 305, 4);
        free(more);
    }
    for (int d = 0; d < 4; d++)
        b.t[0].v[d] = -b.t[0].v[d];
    assert_int_equal(ts_audit_compare(&a, &b, &o, &r, &e), TS_OK);
    t = &r.tensors[0];
    assert_false(r.pass_bits);
    assert_true(t->rows_differ && !t->shape_differs);
    assert_int_equal(t->rows_common, 300);
    assert_int_equal(t->rows_only_a, 0);
    assert_int_equal(t->rows_only_b, 5);
    assert_int_equal(t->rows_sampled, 300);
    assert_true(fabs(t->row_cosine_min + 1.0) < 1e-12);
    assert_true(t->cosine < TS_VERIFY_COSINE_MIN_F32 && t->cosine > 0.99);
    assert_false(r.pass_cosine);
    ts_audit_report_free(&r);
    o.rows_sample = 10;
    assert_int_equal(ts_audit_compare(&a, &b, &o, &r, &e), TS_OK);
    assert_int_equal(r.tensors[0].rows_sampled, 10);
    assert_int_equal(r.tensors[0].rows_common, 300);
    ts_audit_report_free(&r);
    /* Undo the negation: the common rows are the same, so cosine passes; bits still fails. */
    for (int d = 0; d < 4; d++)
        b.t[0].v[d] = -b.t[0].v[d];
    o.rows_sample = TS_AUDIT_ALL_ROWS;
    assert_int_equal(ts_audit_compare(&a, &b, &o, &r, &e), TS_OK);
    assert_true(r.pass_cosine && !r.pass_bits);
    assert_true(r.tensors[0].cosine == 1.0);
    ts_audit_report_free(&r);
    ts_audit_state_free(&b);

    /* Another dim: another shape, both levels fail. */
    table(&b, ids, 300, 2);
    assert_int_equal(ts_audit_compare(&a, &b, &o, &r, &e), TS_OK);
    assert_true(r.tensors[0].shape_differs && !r.tensors[0].table);
    assert_false(r.pass_bits || r.pass_cosine);
    ts_audit_report_free(&r);
    ts_audit_state_free(&b);
    ts_audit_state_free(&a);
    free(ids);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(level_names),
        cmocka_unit_test(load_npy_and_raw_files),
        cmocka_unit_test(verdicts),
        cmocka_unit_test(rows_sample),
        cmocka_unit_test(rows_cosine),
        cmocka_unit_test(tables_by_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
