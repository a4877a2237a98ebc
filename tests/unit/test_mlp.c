/* test_mlp.c - lib/model/mlp: the analytic gradient matches central finite differences of an
 * independent double-precision reference, a batch's gradient is the sum of its samples',
 * repeated calls give identical bits, eval counts and losses are right, a fresh model starts
 * near ln(10), and bad input is refused without touching the outputs. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/mlp.h"

#define H1 256
#define H2 128
#define NC TS_MLP_CLASSES

struct net {
    float *p[TS_MLP_NTENSORS];
    float *g[TS_MLP_NTENSORS];
};

static uint64_t next64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s)
{
    return ((double)(next64(s) >> 11) + 0.5) * 0x1.0p-53;
}

static double gauss(uint64_t *s)
{
    double u = uniform01(s), v = uniform01(s);

    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

/* A stand-in for lib/tensor's initializers with the same distributions (not the same values):
 * this test is about the model, so it does not depend on that module. */
static void init_tensor(const struct ts_mlp_tensor *t, uint64_t *s, float *out)
{
    uint64_t n = t->rows * t->cols;

    for (uint64_t i = 0; i < n; i++) {
        if (strcmp(t->init, "zeros") == 0)
            out[i] = 0.0f;
        else if (strcmp(t->init, "he") == 0)
            out[i] = (float)(gauss(s) * sqrt(2.0 / (double)t->fan_in));
        else if (strcmp(t->init, "xavier") == 0)
            out[i] = (float)((2.0 * uniform01(s) - 1.0) *
                             sqrt(6.0 / (double)(t->fan_in + t->fan_out)));
        else
            fail_msg("%s: initializer '%s' unknown to this test", t->name, t->init);
    }
}

static void net_init(struct net *n, uint64_t seed)
{
    const struct ts_mlp_tensor *t = ts_mlp_tensors();

    for (int i = 0; i < TS_MLP_NTENSORS; i++) {
        n->p[i] = malloc(ts_mlp_numel(i) * sizeof(float));
        n->g[i] = malloc(ts_mlp_numel(i) * sizeof(float));
        assert_non_null(n->p[i]);
        assert_non_null(n->g[i]);
        init_tensor(&t[i], &seed, n->p[i]);
    }
}

static void net_fini(struct net *n)
{
    for (int i = 0; i < TS_MLP_NTENSORS; i++) {
        free(n->p[i]);
        free(n->g[i]);
    }
}

/* Image-like inputs: about a third of the pixels dark, the rest uniform in [0, 1]. */
static float *rand_x(int n, uint64_t seed, uint8_t *y)
{
    float *x = malloc((size_t)n * TS_MLP_IN * sizeof(float));

    assert_non_null(x);
    for (size_t i = 0; i < (size_t)n * TS_MLP_IN; i++) {
        double u = uniform01(&seed);

        x[i] = u < 0.33 ? 0.0f : (float)uniform01(&seed);
    }
    for (int i = 0; i < n; i++)
        y[i] = (uint8_t)(next64(&seed) % NC);
    return x;
}

static struct ts_mlp *mk(int max_batch)
{
    struct ts_err err = { 0 };
    struct ts_mlp *m = NULL;

    if (ts_mlp_create(max_batch, &m, &err) != TS_OK)
        fail_msg("ts_mlp_create: %s", err.msg);
    return m;
}

/* ---- an independent reference, in double and plain loops ---- */

static void ref_layer(const double *in, int k, const double *w, const double *b, int out,
                      int relu, double *o)
{
    for (int j = 0; j < out; j++) {
        double s = b[j];

        for (int i = 0; i < k; i++)
            s += w[(size_t)j * k + i] * in[i];
        o[j] = relu && s < 0 ? 0 : s;
    }
}

/* Summed cross-entropy of n samples under the double parameters dp. */
static double ref_loss(double *const dp[TS_MLP_NTENSORS], const float *x, const uint8_t *y,
                       int n)
{
    double in[TS_MLP_IN], h1[H1], h2[H2], z[NC], loss = 0;

    for (int s = 0; s < n; s++) {
        double mx, sum = 0;

        for (int i = 0; i < TS_MLP_IN; i++)
            in[i] = x[(size_t)s * TS_MLP_IN + i];
        ref_layer(in, TS_MLP_IN, dp[0], dp[1], H1, 1, h1);
        ref_layer(h1, H1, dp[2], dp[3], H2, 1, h2);
        ref_layer(h2, H2, dp[4], dp[5], NC, 0, z);
        mx = z[0];
        for (int k = 1; k < NC; k++)
            mx = z[k] > mx ? z[k] : mx;
        for (int k = 0; k < NC; k++)
            sum += exp(z[k] - mx);
        loss += mx + log(sum) - z[y[s]];
    }
    return loss;
}

static void to_double(const struct net *n, double *dp[TS_MLP_NTENSORS])
{
    for (int t = 0; t < TS_MLP_NTENSORS; t++) {
        dp[t] = malloc(ts_mlp_numel(t) * sizeof(double));
        assert_non_null(dp[t]);
        for (uint64_t i = 0; i < ts_mlp_numel(t); i++)
            dp[t][i] = n->p[t][i];
    }
}

static void free_double(double *dp[TS_MLP_NTENSORS])
{
    for (int t = 0; t < TS_MLP_NTENSORS; t++)
        free(dp[t]);
}

/* ---- tests ---- */

static void test_tensors(void **state)
{
    const struct ts_mlp_tensor *t = ts_mlp_tensors();
    uint64_t total = 0;

    assert_string_equal(t[0].name, "fc1.weight");
    assert_int_equal(t[0].rows, 256);
    assert_int_equal(t[0].cols, 784);
    assert_string_equal(t[5].name, "fc3.bias");
    assert_int_equal(t[5].rows * t[5].cols, 10);
    for (int i = 0; i < TS_MLP_NTENSORS; i++) {
        assert_int_equal(ts_mlp_numel(i), t[i].rows * t[i].cols);
        assert_true(t[i].fan_in > 0 && t[i].fan_out > 0);
        total += ts_mlp_numel(i);
    }
    assert_int_equal(total, 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
    assert_true(ts_mlp_blas_core() && ts_mlp_blas_core()[0]);
    assert_int_equal(ts_mlp_numel(-1), 0);
    assert_int_equal(ts_mlp_numel(TS_MLP_NTENSORS), 0);
}

/* Central differences of the double reference at a few random elements of every tensor. */
static void test_grad_vs_finite_differences(void **state)
{
    enum { N = 4, PER_TENSOR = 8 };
    const double h = 1e-5;
    uint8_t y[N];
    float *x = rand_x(N, 11, y);
    struct net n;
    struct ts_mlp *m = mk(N);
    double *dp[TS_MLP_NTENSORS], loss, ref;
    uint64_t s = 99;
    int nonzero = 0;

    net_init(&n, 7);
    to_double(&n, dp);
    loss = ts_mlp_grad(m, n.p, x, y, N, n.g);
    ref = ref_loss(dp, x, y, N);
    if (fabs(loss - ref) > 1e-5 * fabs(ref))
        fail_msg("loss %.9g, double reference %.9g", loss, ref);
    for (int t = 0; t < TS_MLP_NTENSORS; t++) {
        for (int k = 0; k < PER_TENSOR; k++) {
            uint64_t i = next64(&s) % ts_mlp_numel(t);
            double keep = dp[t][i], up, down, fd;

            dp[t][i] = keep + h;
            up = ref_loss(dp, x, y, N);
            dp[t][i] = keep - h;
            down = ref_loss(dp, x, y, N);
            dp[t][i] = keep;
            fd = (up - down) / (2 * h);
            if (fabs(n.g[t][i] - fd) > 1e-4 + 1e-3 * fabs(fd))
                fail_msg("%s[%llu]: grad %.9g, finite difference %.9g",
                         ts_mlp_tensors()[t].name, (unsigned long long)i, n.g[t][i], fd);
            nonzero += fabs(fd) > 1e-6;
        }
    }
    /* The check must not pass merely because most sampled elements have no gradient. */
    assert_true(nonzero >= TS_MLP_NTENSORS * PER_TENSOR / 2);
    free_double(dp);
    net_fini(&n);
    ts_mlp_free(m);
    free(x);
}

static void assert_close(const float *a, const float *b, uint64_t len, const char *what)
{
    for (uint64_t i = 0; i < len; i++)
        if (fabsf(a[i] - b[i]) > 1e-5f + 1e-4f * fabsf(b[i]))
            fail_msg("%s[%llu]: %.9g vs %.9g", what, (unsigned long long)i, a[i], b[i]);
}

/* The gradient of a batch is the sum of the per-sample gradients, whether the batch fits the
 * scratch space or is processed in chunks. */
static void test_batch_is_sum_of_samples(void **state)
{
    enum { N = 8 };
    uint8_t y[N];
    float *x = rand_x(N, 21, y), *sum[TS_MLP_NTENSORS];
    struct net n, chunked;
    struct ts_mlp *m = mk(N), *small = mk(3);
    double loss, loss_sum = 0;

    net_init(&n, 5);
    net_init(&chunked, 5);
    for (int t = 0; t < TS_MLP_NTENSORS; t++) {
        sum[t] = calloc(ts_mlp_numel(t), sizeof(float));
        assert_non_null(sum[t]);
    }
    for (int i = 0; i < N; i++) {
        loss_sum += ts_mlp_grad(m, n.p, x + (size_t)i * TS_MLP_IN, y + i, 1, n.g);
        for (int t = 0; t < TS_MLP_NTENSORS; t++)
            for (uint64_t k = 0; k < ts_mlp_numel(t); k++)
                sum[t][k] += n.g[t][k];
    }
    loss = ts_mlp_grad(m, n.p, x, y, N, n.g);
    assert_true(fabs(loss - loss_sum) <= 1e-5 * fabs(loss_sum));
    for (int t = 0; t < TS_MLP_NTENSORS; t++)
        assert_close(n.g[t], sum[t], ts_mlp_numel(t), ts_mlp_tensors()[t].name);

    loss = ts_mlp_grad(small, chunked.p, x, y, N, chunked.g);
    assert_true(fabs(loss - loss_sum) <= 1e-5 * fabs(loss_sum));
    for (int t = 0; t < TS_MLP_NTENSORS; t++)
        assert_close(chunked.g[t], sum[t], ts_mlp_numel(t), ts_mlp_tensors()[t].name);

    for (int t = 0; t < TS_MLP_NTENSORS; t++)
        free(sum[t]);
    net_fini(&n);
    net_fini(&chunked);
    ts_mlp_free(m);
    ts_mlp_free(small);
    free(x);
}

/* Same inputs, same bits: again on the same model after other work dirtied its scratch, and
 * on a second model. Exact mode's fixed-point sums rely on this. */
static void test_deterministic(void **state)
{
    enum { N = 16 };
    uint8_t y[N];
    float *x = rand_x(N, 31, y);
    struct net a, b;
    struct ts_mlp *m = mk(64), *m2 = mk(64);
    double la, lb, ea, eb;

    net_init(&a, 3);
    net_init(&b, 3);
    ts_mlp_single_thread();
    la = ts_mlp_grad(m, a.p, x, y, N, a.g);
    (void)ts_mlp_grad(m, a.p, x + TS_MLP_IN, y + 1, 5, b.g);
    lb = ts_mlp_grad(m, a.p, x, y, N, b.g);
    assert_memory_equal(&la, &lb, sizeof(la));
    for (int t = 0; t < TS_MLP_NTENSORS; t++)
        assert_memory_equal(a.g[t], b.g[t], ts_mlp_numel(t) * sizeof(float));
    lb = ts_mlp_grad(m2, a.p, x, y, N, b.g);
    assert_memory_equal(&la, &lb, sizeof(la));
    for (int t = 0; t < TS_MLP_NTENSORS; t++)
        assert_memory_equal(a.g[t], b.g[t], ts_mlp_numel(t) * sizeof(float));
    assert_int_equal(ts_mlp_eval(m, a.p, x, y, N, &ea), ts_mlp_eval(m2, a.p, x, y, N, &eb));
    assert_memory_equal(&ea, &eb, sizeof(ea));
    net_fini(&a);
    net_fini(&b);
    ts_mlp_free(m);
    ts_mlp_free(m2);
    free(x);
}

/* All weights zero and fc3.bias favouring class 3: every sample is called 3, and the loss is
 * known in closed form. Then random weights: eval agrees with the reference's argmax. */
static void test_eval_counts(void **state)
{
    enum { N = 50 };
    uint8_t y[N];
    float *x = rand_x(N, 41, y);
    struct net n;
    struct ts_mlp *m = mk(16);
    double loss, want = 0, lse = log(exp(2.0) + 9.0);
    int threes = 0;

    net_init(&n, 9);
    for (int t = 0; t < TS_MLP_NTENSORS; t++)
        memset(n.p[t], 0, ts_mlp_numel(t) * sizeof(float));
    n.p[5][3] = 2.0f;
    for (int i = 0; i < N; i++) {
        threes += y[i] == 3;
        want += lse - (y[i] == 3 ? 2.0 : 0.0);
    }
    assert_true(threes > 0 && threes < N);
    assert_int_equal(ts_mlp_eval(m, n.p, x, y, N, &loss), threes);
    assert_true(fabs(loss - want) < 1e-4 * want);
    assert_int_equal(ts_mlp_eval(m, n.p, x, y, N, NULL), threes);
    net_fini(&n);

    net_init(&n, 10);
    {
        double *dp[TS_MLP_NTENSORS];
        int ref_correct = 0;

        to_double(&n, dp);
        for (int i = 0; i < N; i++) {
            /* With label k the loss is smallest exactly when k is the argmax. */
            double best = INFINITY;
            int arg = -1;

            for (uint8_t k = 0; k < NC; k++) {
                double l = ref_loss(dp, x + (size_t)i * TS_MLP_IN, &k, 1);

                if (l < best) {
                    best = l;
                    arg = k;
                }
            }
            ref_correct += arg == y[i];
        }
        assert_int_equal(ts_mlp_eval(m, n.p, x, y, N, &loss), ref_correct);
        assert_true(fabs(loss - ref_loss(dp, x, y, N)) < 1e-5 * loss);
        free_double(dp);
    }
    net_fini(&n);
    ts_mlp_free(m);
    free(x);
}

/* A freshly initialised model is close to uniform over the 10 classes. */
static void test_initial_loss(void **state)
{
    enum { N = 256 };
    uint8_t y[N];
    float *x = rand_x(N, 51, y);
    struct net n;
    struct ts_mlp *m = mk(64);
    double loss;

    net_init(&n, 1234);
    (void)ts_mlp_eval(m, n.p, x, y, N, &loss);
    loss /= N;
    if (fabs(loss - log(10.0)) > 0.3)
        fail_msg("mean initial loss %.4f, want ln(10) = %.4f +- 0.3", loss, log(10.0));
    net_fini(&n);
    ts_mlp_free(m);
    free(x);
}

static void test_bad_input(void **state)
{
    struct ts_err err = { 0 };
    struct ts_mlp *m = (struct ts_mlp *)&err;
    uint8_t y[2] = { 1, 10 };
    float *x = calloc(2 * TS_MLP_IN, sizeof(float));
    struct net n;
    double loss = 42.0;

    assert_int_equal(ts_mlp_create(0, &m, &err), TS_EINVAL);
    assert_ptr_equal(m, (struct ts_mlp *)&err);   /* untouched on failure */
    assert_non_null(strstr(err.msg, "max_batch"));
    assert_int_equal(ts_mlp_create(TS_MLP_MAX_BATCH + 1, &m, NULL), TS_EINVAL);
    ts_mlp_free(NULL);

    m = mk(4);
    net_init(&n, 2);
    n.g[0][0] = 123.0f;
    assert_true(isnan(ts_mlp_grad(m, n.p, x, y, 2, n.g)));
    assert_true(n.g[0][0] == 123.0f);
    assert_int_equal(ts_mlp_eval(m, n.p, x, y, 2, &loss), -1);
    assert_true(loss == 42.0);
    assert_true(ts_mlp_grad(m, n.p, x, y, 0, n.g) == 0.0);
    for (int t = 0; t < TS_MLP_NTENSORS; t++)
        for (uint64_t i = 0; i < ts_mlp_numel(t); i++)
            assert_true(n.g[t][i] == 0.0f);
    net_fini(&n);
    ts_mlp_free(m);
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tensors),
        cmocka_unit_test(test_grad_vs_finite_differences),
        cmocka_unit_test(test_batch_is_sum_of_samples),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_eval_counts),
        cmocka_unit_test(test_initial_loss),
        cmocka_unit_test(test_bad_input),
    };

    ts_mlp_single_thread();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
