/* mlp.c - forward and backward of the MLP 784-256-128-10 on OpenBLAS.
 *
 * Every layer is one row-major cblas_sgemm over the whole batch (samples are rows), followed by
 * a plain loop for the bias and the ReLU, so the work is in the BLAS kernel and the loops stay
 * trivially deterministic. The softmax cross-entropy is computed per sample in double with the
 * max subtracted first (a stable log-sum-exp), which keeps large logits from overflowing.
 *
 * Determinism: with OpenBLAS on one thread (ts_mlp_single_thread) a GEMM of given shapes always
 * adds in the same order, and every loop here runs in index order, so the same inputs give the
 * same bits on every call and in every process on the same build and the same OpenBLAS kernel
 * (ts_mlp_blas_core). */
#include "model/mlp.h"

#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define H1 TS_MLP_H1
#define H2 TS_MLP_H2
#define NC TS_MLP_CLASSES

/* Per-sample row widths of the scratch arrays, in the order they are carved from one block. */
#define SCRATCH_PER_SAMPLE (2 * (H1 + H2 + NC))

struct ts_mlp {
    int max_batch;
    float *block;             /* the one allocation the arrays below point into */
    float *h1, *h2, *z;       /* activations after ReLU (h1, h2) and the logits */
    float *d1, *d2, *dz;      /* d(loss)/d(pre-activation) of each layer */
};

static const struct ts_mlp_tensor tensors[TS_MLP_NTENSORS] = {
    { "fc1.weight", H1, TS_MLP_IN, "he", TS_MLP_IN, H1 },
    { "fc1.bias", H1, 1, "zeros", TS_MLP_IN, H1 },
    { "fc2.weight", H2, H1, "he", H1, H2 },
    { "fc2.bias", H2, 1, "zeros", H1, H2 },
    { "fc3.weight", NC, H2, "xavier", H2, NC },
    { "fc3.bias", NC, 1, "zeros", H2, NC },
};

const struct ts_mlp_tensor *ts_mlp_tensors(void)
{
    return tensors;
}

uint64_t ts_mlp_numel(int tensor)
{
    if (tensor < 0 || tensor >= TS_MLP_NTENSORS)
        return 0;
    return tensors[tensor].rows * tensors[tensor].cols;
}

void ts_mlp_single_thread(void)
{
    openblas_set_num_threads(1);
}

const char *ts_mlp_blas_core(void)
{
    return openblas_get_corename();
}

ts_status ts_mlp_create(int max_batch, struct ts_mlp **out, struct ts_err *err)
{
    struct ts_mlp *m;
    size_t per = SCRATCH_PER_SAMPLE, bytes;

    if (max_batch <= 0 || max_batch > TS_MLP_MAX_BATCH)
        return ts_err_set(err, TS_EINVAL, "mlp: max_batch %d, want 1..%d", max_batch,
                          TS_MLP_MAX_BATCH);
    m = calloc(1, sizeof(*m));
    if (!m)
        return ts_err_set(err, TS_ENOMEM, "mlp: out of memory");
    /* Rounded up to the 64-byte alignment that aligned_alloc requires of the size. */
    bytes = ((size_t)max_batch * per * sizeof(float) + 63) & ~(size_t)63;
    m->block = aligned_alloc(64, bytes);
    if (!m->block) {
        free(m);
        return ts_err_set(err, TS_ENOMEM, "mlp: scratch for batch %d: out of memory", max_batch);
    }
    m->max_batch = max_batch;
    m->h1 = m->block;
    m->h2 = m->h1 + (size_t)max_batch * H1;
    m->z = m->h2 + (size_t)max_batch * H2;
    m->d1 = m->z + (size_t)max_batch * NC;
    m->d2 = m->d1 + (size_t)max_batch * H1;
    m->dz = m->d2 + (size_t)max_batch * H2;
    *out = m;
    return TS_OK;
}

void ts_mlp_free(struct ts_mlp *m)
{
    if (!m)
        return;
    free(m->block);
    free(m);
}

/* out[n x cols] = in[n x k] * w^T, w being [cols x k] as nn.Linear stores it, plus bias; ReLU
 * when relu is set. */
static void linear(const float *in, int n, int k, const float *w, const float *b, int cols,
                   bool relu, float *out)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, cols, k, 1.0f, in, k, w, k, 0.0f,
                out, cols);
    for (int i = 0; i < n; i++) {
        float *row = out + (size_t)i * cols;

        for (int j = 0; j < cols; j++) {
            float v = row[j] + b[j];

            row[j] = relu && v < 0.0f ? 0.0f : v;
        }
    }
}

static void forward(struct ts_mlp *m, float *const p[TS_MLP_NTENSORS], const float *x, int n)
{
    linear(x, n, TS_MLP_IN, p[0], p[1], H1, true, m->h1);
    linear(m->h1, n, H1, p[2], p[3], H2, true, m->h2);
    linear(m->h2, n, H2, p[4], p[5], NC, false, m->z);
}

/* The stable log(sum(exp(z))) of one row of logits. */
static double log_sum_exp(const float *z)
{
    double mx = z[0], s = 0.0;

    for (int k = 1; k < NC; k++)
        mx = z[k] > mx ? z[k] : mx;
    for (int k = 0; k < NC; k++)
        s += exp((double)z[k] - mx);
    return mx + log(s);
}

/* Loss of the chunk, and dz = softmax(z) - onehot(y). */
static double head_backward(struct ts_mlp *m, const uint8_t *y, int n)
{
    double loss = 0.0;

    for (int i = 0; i < n; i++) {
        const float *z = m->z + (size_t)i * NC;
        float *dz = m->dz + (size_t)i * NC;
        double lse = log_sum_exp(z);

        loss += lse - z[y[i]];
        for (int k = 0; k < NC; k++)
            dz[k] = (float)exp((double)z[k] - lse);
        dz[y[i]] -= 1.0f;
    }
    return loss;
}

/* gw[out x k] (+)= d^T in, gb[out] (+)= column sums of d, for d [n x out] and in [n x k]. */
static void linear_grads(const float *d, const float *in, int n, int out, int k, bool acc,
                         float *gw, float *gb)
{
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, k, n, 1.0f, d, out, in, k,
                acc ? 1.0f : 0.0f, gw, k);
    if (!acc)
        memset(gb, 0, (size_t)out * sizeof(float));
    for (int i = 0; i < n; i++)
        for (int j = 0; j < out; j++)
            gb[j] += d[(size_t)i * out + j];
}

/* d_in[n x k] = d[n x out] * w[out x k], zeroed where the ReLU output h was 0 (the ReLU's
 * derivative, taken as 0 at 0 like PyTorch). */
static void relu_backprop(const float *d, const float *w, const float *h, int n, int out, int k,
                          float *d_in)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, k, out, 1.0f, d, out, w, k, 0.0f,
                d_in, k);
    for (size_t i = 0; i < (size_t)n * k; i++)
        if (h[i] <= 0.0f)
            d_in[i] = 0.0f;
}

static double grad_chunk(struct ts_mlp *m, float *const p[TS_MLP_NTENSORS], const float *x,
                         const uint8_t *y, int n, bool acc, float *const g[TS_MLP_NTENSORS])
{
    double loss;

    forward(m, p, x, n);
    loss = head_backward(m, y, n);
    linear_grads(m->dz, m->h2, n, NC, H2, acc, g[4], g[5]);
    relu_backprop(m->dz, p[4], m->h2, n, NC, H2, m->d2);
    linear_grads(m->d2, m->h1, n, H2, H1, acc, g[2], g[3]);
    relu_backprop(m->d2, p[2], m->h1, n, H2, H1, m->d1);
    linear_grads(m->d1, x, n, H1, TS_MLP_IN, acc, g[0], g[1]);
    return loss;
}

static bool labels_ok(const uint8_t *y, int n)
{
    for (int i = 0; i < n; i++)
        if (y[i] >= NC)
            return false;
    return true;
}

double ts_mlp_grad(struct ts_mlp *m, float *const params[TS_MLP_NTENSORS], const float *x,
                   const uint8_t *y, int n, float *const grads[TS_MLP_NTENSORS])
{
    double loss = 0.0;

    if (n < 0 || !labels_ok(y, n))
        return NAN;
    if (n == 0) {
        for (int t = 0; t < TS_MLP_NTENSORS; t++)
            memset(grads[t], 0, ts_mlp_numel(t) * sizeof(float));
        return 0.0;
    }
    for (int at = 0; at < n; at += m->max_batch) {
        int c = n - at < m->max_batch ? n - at : m->max_batch;

        loss += grad_chunk(m, params, x + (size_t)at * TS_MLP_IN, y + at, c, at > 0, grads);
    }
    return loss;
}

int ts_mlp_eval(struct ts_mlp *m, float *const params[TS_MLP_NTENSORS], const float *x,
                const uint8_t *y, int n, double *loss_sum)
{
    double loss = 0.0;
    int correct = 0;

    if (n < 0 || !labels_ok(y, n))
        return -1;
    for (int at = 0; at < n; at += m->max_batch) {
        int c = n - at < m->max_batch ? n - at : m->max_batch;

        forward(m, params, x + (size_t)at * TS_MLP_IN, c);
        for (int i = 0; i < c; i++) {
            const float *z = m->z + (size_t)i * NC;
            int best = 0;

            for (int k = 1; k < NC; k++)
                best = z[k] > z[best] ? k : best;
            correct += best == y[at + i];
            loss += log_sum_exp(z) - z[y[at + i]];
        }
    }
    if (loss_sum)
        *loss_sum = loss;
    return correct;
}

int ts_mlp_forward(struct ts_mlp *m, float *const params[TS_MLP_NTENSORS], const float *x, int n,
                   float *h1, float *h2, float *logits)
{
    if (n < 0 || n > m->max_batch)
        return -1;
    forward(m, params, x, n);
    if (h1)
        memcpy(h1, m->h1, (size_t)n * H1 * sizeof(float));
    if (h2)
        memcpy(h2, m->h2, (size_t)n * H2 * sizeof(float));
    if (logits)
        memcpy(logits, m->z, (size_t)n * NC * sizeof(float));
    return 0;
}
