/* test_dlrm.c - lib/model/dlrm: the analytic gradients (of every parameter and of every
 * embedding row, one per sample and feature) match central finite differences of an
 * independent double-precision reference; a batch's gradient is the sum of its samples';
 * repeated calls give identical bits; predict is sigmoid of the reference's logit; bad shapes
 * and batch sizes are refused naming the field. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/dlrm.h"

#define F 3
#define DIM 4
#define D 2
#define H1 8
#define H2 5
#define IN (F * DIM + D)
#define N 6

static const struct ts_dlrm_shape SHAPE = { F, DIM, D, H1, H2 };

struct net {
    float *p[TS_DLRM_NTENSORS];
    float *g[TS_DLRM_NTENSORS];
    size_t len[TS_DLRM_NTENSORS];
};

static double gauss(uint64_t *s)
{
    /* a sum of uniforms: a rough normal is enough for test data */
    double v = 0;

    for (int k = 0; k < 6; k++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        v += (double)(*s >> 11) * 0x1.0p-53;
    }
    return v - 3.0;
}

static void net_init(struct net *n, uint64_t seed)
{
    for (int t = 0; t < TS_DLRM_NTENSORS; t++) {
        struct ts_mlp_tensor d = ts_dlrm_tensor(&SHAPE, t);
        n->len[t] = d.rows * d.cols;
        n->p[t] = malloc(n->len[t] * sizeof(float));
        n->g[t] = malloc(n->len[t] * sizeof(float));
        for (size_t i = 0; i < n->len[t]; i++)
            n->p[t][i] = (float)(0.5 * gauss(&seed));
    }
}

static void net_free(struct net *n)
{
    for (int t = 0; t < TS_DLRM_NTENSORS; t++) {
        free(n->p[t]);
        free(n->g[t]);
    }
}

/* The loss of one sample in double, from the parameters as floats (an independent
 * reference: plain loops, no BLAS). */
static double ref_loss(float *const p[TS_DLRM_NTENSORS], const double *x, double y, double *zout)
{
    double h1[H1], h2[H2], z = p[5][0];

    for (int j = 0; j < H1; j++) {
        double v = p[1][j];
        for (int k = 0; k < IN; k++)
            v += (double)p[0][j * IN + k] * x[k];
        h1[j] = v > 0 ? v : 0;
    }
    for (int j = 0; j < H2; j++) {
        double v = p[3][j];
        for (int k = 0; k < H1; k++)
            v += (double)p[2][j * H1 + k] * h1[k];
        h2[j] = v > 0 ? v : 0;
    }
    for (int k = 0; k < H2; k++)
        z += (double)p[4][k] * h2[k];
    if (zout)
        *zout = z;
    return (z > 0 ? z + log1p(exp(-z)) : log1p(exp(z))) - y * z;
}

struct data {
    float emb[N * F * DIM], dense[N * D], label[N];
};

static void data_init(struct data *d, uint64_t seed)
{
    for (int i = 0; i < N * F * DIM; i++)
        d->emb[i] = (float)gauss(&seed);
    for (int i = 0; i < N * D; i++)
        d->dense[i] = (float)gauss(&seed);
    for (int i = 0; i < N; i++)
        d->label[i] = (float)(i % 2);
}

static void input_of(const struct data *d, int i, double x[IN])
{
    for (int k = 0; k < F * DIM; k++)
        x[k] = d->emb[i * F * DIM + k];
    for (int k = 0; k < D; k++)
        x[F * DIM + k] = d->dense[i * D + k];
}

static double ref_batch(float *const p[TS_DLRM_NTENSORS], const struct data *d)
{
    double x[IN], sum = 0;

    for (int i = 0; i < N; i++) {
        input_of(d, i, x);
        sum += ref_loss(p, x, d->label[i], NULL);
    }
    return sum;
}

static void t_gradients_match_finite_differences(void **state)
{
    struct ts_dlrm *m;
    struct net n;
    struct data d;
    float demb[N * F * DIM];
    double loss;

    (void)state;
    ts_mlp_single_thread();
    net_init(&n, 1);
    data_init(&d, 2);
    assert_int_equal(ts_dlrm_create(&SHAPE, N, &m, NULL), TS_OK);
    loss = ts_dlrm_grad(m, n.p, d.emb, d.dense, d.label, N, n.g, demb);
    assert_true(fabs(loss - ref_batch(n.p, &d)) < 1e-4 * (1 + fabs(loss)));
    /* every parameter element */
    for (int t = 0; t < TS_DLRM_NTENSORS; t++)
        for (size_t i = 0; i < n.len[t]; i++) {
            float keep = n.p[t][i];
            double h = 1e-2, up, down, num;
            n.p[t][i] = (float)(keep + h);
            up = ref_batch(n.p, &d);
            n.p[t][i] = (float)(keep - h);
            down = ref_batch(n.p, &d);
            n.p[t][i] = keep;
            num = (up - down) / (2 * h);
            if (fabs(num - n.g[t][i]) > 2e-2 * (1 + fabs(num)))
                fail_msg("tensor %d [%zu]: analytic %g, numeric %g", t, i, (double)n.g[t][i],
                         num);
        }
    /* every sample's embedding rows: d loss_i / d x_i */
    for (int i = 0; i < N; i++)
        for (int k = 0; k < F * DIM; k++) {
            double x[IN], h = 1e-3, up, down;
            input_of(&d, i, x);
            x[k] += h;
            up = ref_loss(n.p, x, d.label[i], NULL);
            x[k] -= 2 * h;
            down = ref_loss(n.p, x, d.label[i], NULL);
            double num = (up - down) / (2 * h);
            if (fabs(num - demb[i * F * DIM + k]) > 1e-2 * (1 + fabs(num)))
                fail_msg("sample %d row element %d: analytic %g, numeric %g", i, k,
                         (double)demb[i * F * DIM + k], num);
        }
    ts_dlrm_free(m);
    net_free(&n);
}

static void t_sum_of_samples_and_same_bits(void **state)
{
    struct ts_dlrm *m;
    struct net n;
    struct data d;
    float demb[N * F * DIM], demb2[N * F * DIM], one[F * DIM];
    float *sum[TS_DLRM_NTENSORS], *again[TS_DLRM_NTENSORS];

    (void)state;
    net_init(&n, 3);
    data_init(&d, 4);
    assert_int_equal(ts_dlrm_create(&SHAPE, N, &m, NULL), TS_OK);
    for (int t = 0; t < TS_DLRM_NTENSORS; t++) {
        sum[t] = calloc(n.len[t], sizeof(float));
        again[t] = malloc(n.len[t] * sizeof(float));
    }
    double loss = ts_dlrm_grad(m, n.p, d.emb, d.dense, d.label, N, n.g, demb);
    double again_loss = ts_dlrm_grad(m, n.p, d.emb, d.dense, d.label, N, again, demb2);
    assert_true(loss == again_loss);
    assert_memory_equal(demb, demb2, sizeof(demb));
    for (int t = 0; t < TS_DLRM_NTENSORS; t++)
        assert_memory_equal(n.g[t], again[t], n.len[t] * sizeof(float));
    /* one sample at a time: the rows' gradients are each sample's, the parameters' sum */
    double parts = 0;
    for (int i = 0; i < N; i++) {
        parts += ts_dlrm_grad(m, n.p, d.emb + i * F * DIM, d.dense + i * D, d.label + i, 1,
                              again, one);
        for (int k = 0; k < F * DIM; k++)
            assert_true(fabs(one[k] - demb[i * F * DIM + k]) <= 1e-5 * (1 + fabs(one[k])));
        for (int t = 0; t < TS_DLRM_NTENSORS; t++)
            for (size_t j = 0; j < n.len[t]; j++)
                sum[t][j] += again[t][j];
    }
    assert_true(fabs(parts - loss) < 1e-5 * (1 + fabs(loss)));
    for (int t = 0; t < TS_DLRM_NTENSORS; t++)
        for (size_t j = 0; j < n.len[t]; j++)
            assert_true(fabs(sum[t][j] - n.g[t][j]) <= 1e-4 * (1 + fabs(n.g[t][j])));
    /* predict: sigmoid of the reference's logit */
    float p[N];
    assert_int_equal(ts_dlrm_predict(m, n.p, d.emb, d.dense, N, p), 0);
    for (int i = 0; i < N; i++) {
        double x[IN], z;
        input_of(&d, i, x);
        ref_loss(n.p, x, 0, &z);
        assert_true(fabs(p[i] - 1.0 / (1.0 + exp(-z))) < 1e-5);
    }
    for (int t = 0; t < TS_DLRM_NTENSORS; t++) {
        free(sum[t]);
        free(again[t]);
    }
    ts_dlrm_free(m);
    net_free(&n);
}

static void t_bad_input(void **state)
{
    struct ts_dlrm *m = NULL;
    struct ts_err err = { 0 };
    struct ts_dlrm_shape s = SHAPE;
    float p[1];

    (void)state;
    s.dim = 0;
    assert_int_equal(ts_dlrm_create(&s, 4, &m, &err), TS_EINVAL);
    assert_non_null(strstr(err.msg, "dlrm.dim"));
    s = SHAPE;
    s.features = 40000;
    err = (struct ts_err){ 0 };
    assert_int_equal(ts_dlrm_create(&s, 4, &m, &err), TS_EINVAL);
    assert_non_null(strstr(err.msg, "dlrm.features"));
    err = (struct ts_err){ 0 };
    assert_int_equal(ts_dlrm_create(&SHAPE, 0, &m, &err), TS_EINVAL);
    assert_non_null(strstr(err.msg, "max_batch"));
    assert_null(m);
    assert_int_equal(ts_dlrm_create(&SHAPE, 2, &m, &err), TS_OK);
    struct net n;
    net_init(&n, 5);
    float emb[3 * F * DIM] = { 0 }, dense[3 * D] = { 0 }, label[3] = { 0 }, demb[3 * F * DIM];
    assert_true(isnan(ts_dlrm_grad(m, n.p, emb, dense, label, 3, n.g, demb)));
    assert_int_equal(ts_dlrm_predict(m, n.p, emb, dense, 3, p), -1);
    ts_dlrm_free(m);
    net_free(&n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_gradients_match_finite_differences),
        cmocka_unit_test(t_sum_of_samples_and_same_bits),
        cmocka_unit_test(t_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
