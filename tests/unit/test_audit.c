/* test_audit.c - lib/audit: two model states compared at three levels (docs/verify.md), from
 * files and from states built in memory. The snapshot path and the MLP's probe batch are
 * covered by the integration tests (test_verify_cli, test_verify_service, test_verify_scipy);
 * here: the level names, loading .npy and raw files (and refusing what is not there or not
 * float32), and the verdicts of bits, cosine and dist on tensors that are equal, one ULP apart,
 * scaled, or missing on one side. */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(level_names),
        cmocka_unit_test(load_npy_and_raw_files),
        cmocka_unit_test(verdicts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
