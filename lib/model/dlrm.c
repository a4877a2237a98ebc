/* dlrm.c - the CTR trainer's MLP (dlrm.h): row-major cblas GEMMs over the batch (samples are
 * rows), the same shapes for the same batch size, so the same bits. */
#include "model/dlrm.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct ts_dlrm {
    struct ts_dlrm_shape s;
    uint32_t in;
    int max;
    float *x, *h1, *h2, *z, *dz, *dh1, *dh2, *dx;   /* max_batch rows each */
};

static uint32_t in_of(const struct ts_dlrm_shape *s)
{
    return s->features * s->dim + s->dense;
}

struct ts_mlp_tensor ts_dlrm_tensor(const struct ts_dlrm_shape *s, int t)
{
    uint32_t in = in_of(s);

    switch (t) {
    case 0: return (struct ts_mlp_tensor){ "fc1.weight", s->h1, in, "he", in, s->h1 };
    case 1: return (struct ts_mlp_tensor){ "fc1.bias", s->h1, 1, "zeros", 0, 0 };
    case 2: return (struct ts_mlp_tensor){ "fc2.weight", s->h2, s->h1, "he", s->h1, s->h2 };
    case 3: return (struct ts_mlp_tensor){ "fc2.bias", s->h2, 1, "zeros", 0, 0 };
    case 4: return (struct ts_mlp_tensor){ "out.weight", 1, s->h2, "xavier", s->h2, 1 };
    default: return (struct ts_mlp_tensor){ "out.bias", 1, 1, "zeros", 0, 0 };
    }
}

ts_status ts_dlrm_create(const struct ts_dlrm_shape *s, int max_batch, struct ts_dlrm **out,
                         struct ts_err *err)
{
    struct ts_dlrm *m;
    size_t b = (size_t)max_batch;

    if (!s->features || !s->dim || !s->h1 || !s->h2)
        return ts_err_set(err, TS_EINVAL, "dlrm.%s: 0; every width is at least 1",
                          !s->features ? "features" : !s->dim ? "dim" : !s->h1 ? "h1" : "h2");
    if ((uint64_t)s->features * s->dim + s->dense > TS_DLRM_MAX_IN)
        return ts_err_set(err, TS_EINVAL, "dlrm.features: %u x dim %u + dense %u inputs, above "
                          "%d", s->features, s->dim, s->dense, TS_DLRM_MAX_IN);
    if (max_batch < 1 || max_batch > TS_MLP_MAX_BATCH)
        return ts_err_set(err, TS_EINVAL, "max_batch: %d is outside 1..%d", max_batch,
                          TS_MLP_MAX_BATCH);
    if (!(m = calloc(1, sizeof(*m))))
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    m->s = *s;
    m->in = in_of(s);
    m->max = max_batch;
    m->x = malloc(b * m->in * sizeof(float));
    m->dx = malloc(b * m->in * sizeof(float));
    m->h1 = malloc(b * s->h1 * sizeof(float));
    m->dh1 = malloc(b * s->h1 * sizeof(float));
    m->h2 = malloc(b * s->h2 * sizeof(float));
    m->dh2 = malloc(b * s->h2 * sizeof(float));
    m->z = malloc(b * sizeof(float));
    m->dz = malloc(b * sizeof(float));
    if (!m->x || !m->dx || !m->h1 || !m->dh1 || !m->h2 || !m->dh2 || !m->z || !m->dz) {
        ts_dlrm_free(m);
        return ts_err_set(err, TS_ENOMEM, "out of memory for a batch of %d", max_batch);
    }
    *out = m;
    return TS_OK;
}

void ts_dlrm_free(struct ts_dlrm *m)
{
    if (!m)
        return;
    free(m->x);
    free(m->dx);
    free(m->h1);
    free(m->dh1);
    free(m->h2);
    free(m->dh2);
    free(m->z);
    free(m->dz);
    free(m);
}

/* y = relu(x W^T + b) for n rows: x n x k, W out x k, y n x out. */
static void dense_relu(const float *x, int n, int k, const float *w, const float *b, int out,
                       float *y)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, k, 1.0f, x, k, w, k, 0.0f, y,
                out);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < out; j++) {
            float v = y[(size_t)i * out + j] + b[j];
            y[(size_t)i * out + j] = v > 0.0f ? v : 0.0f;
        }
}

/* The forward pass into m's scratch: x, h1, h2, z. */
static void forward(struct ts_dlrm *m, float *const p[TS_DLRM_NTENSORS], const float *emb,
                    const float *dense, int n)
{
    uint32_t e = m->s.features * m->s.dim;

    for (int i = 0; i < n; i++) {
        memcpy(m->x + (size_t)i * m->in, emb + (size_t)i * e, e * sizeof(float));
        if (m->s.dense)
            memcpy(m->x + (size_t)i * m->in + e, dense + (size_t)i * m->s.dense,
                   m->s.dense * sizeof(float));
    }
    dense_relu(m->x, n, (int)m->in, p[0], p[1], (int)m->s.h1, m->h1);
    dense_relu(m->h1, n, (int)m->s.h1, p[2], p[3], (int)m->s.h2, m->h2);
    cblas_sgemv(CblasRowMajor, CblasNoTrans, n, (int)m->s.h2, 1.0f, m->h2, (int)m->s.h2, p[4], 1,
                0.0f, m->z, 1);
    for (int i = 0; i < n; i++)
        m->z[i] += p[5][0];
}

/* The column sums of a (n x k) into out (k). */
static void col_sums(const float *a, int n, int k, float *out)
{
    memset(out, 0, (size_t)k * sizeof(float));
    for (int i = 0; i < n; i++)
        for (int j = 0; j < k; j++)
            out[j] += a[(size_t)i * k + j];
}

/* d *= (y > 0), elementwise over n x k: the ReLU's gradient. */
static void relu_back(float *d, const float *y, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (!(y[i] > 0.0f))
            d[i] = 0.0f;
}

/* A layer y = x W^T + b backwards, for n rows: dW = dy^T x (out x k), db = the column sums of
 * dy, dx = dy W (n x k). */
static void dense_back(const float *dy, int n, int out, const float *x, int k, const float *w,
                       float *dw, float *db, float *dx)
{
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, k, n, 1.0f, dy, out, x, k, 0.0f,
                dw, k);
    col_sums(dy, n, out, db);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, k, out, 1.0f, dy, out, w, k, 0.0f,
                dx, k);
}

/* sigmoid(z), without overflow for any z. */
static double sigmoid(double z)
{
    return z >= 0 ? 1.0 / (1.0 + exp(-z)) : exp(z) / (1.0 + exp(z));
}

double ts_dlrm_grad(struct ts_dlrm *m, float *const p[TS_DLRM_NTENSORS], const float *emb,
                    const float *dense, const float *label, int n,
                    float *const g[TS_DLRM_NTENSORS], float *demb)
{
    int in = (int)m->in, h1 = (int)m->s.h1, h2 = (int)m->s.h2;
    uint32_t e = m->s.features * m->s.dim;
    double loss = 0.0;

    if (n < 0 || n > m->max)
        return NAN;
    if (n == 0) {
        for (int t = 0; t < TS_DLRM_NTENSORS; t++) {
            struct ts_mlp_tensor d = ts_dlrm_tensor(&m->s, t);
            memset(g[t], 0, d.rows * d.cols * sizeof(float));
        }
        return 0.0;
    }
    forward(m, p, emb, dense, n);
    for (int i = 0; i < n; i++) {
        double z = m->z[i], y = label[i];
        /* softplus(z) - y z, and its derivative sigmoid(z) - y, without overflow */
        loss += (z > 0 ? z + log1p(exp(-z)) : log1p(exp(z))) - y * z;
        m->dz[i] = (float)(sigmoid(z) - y);
    }
    /* out: dW3 = dz^T h2, db3 = sum dz; dh2 = dz w3, through the ReLU */
    cblas_sgemv(CblasRowMajor, CblasTrans, n, h2, 1.0f, m->h2, h2, m->dz, 1, 0.0f, g[4], 1);
    col_sums(m->dz, n, 1, g[5]);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, h2, 1, 1.0f, m->dz, 1, p[4], h2,
                0.0f, m->dh2, h2);
    relu_back(m->dh2, m->h2, (size_t)n * h2);
    /* fc2, then fc1 (whose dx's first F x dim columns are the rows') */
    dense_back(m->dh2, n, h2, m->h1, h1, p[2], g[2], g[3], m->dh1);
    relu_back(m->dh1, m->h1, (size_t)n * h1);
    dense_back(m->dh1, n, h1, m->x, in, p[0], g[0], g[1], m->dx);
    for (int i = 0; i < n; i++)
        memcpy(demb + (size_t)i * e, m->dx + (size_t)i * m->in, e * sizeof(float));
    return loss;
}

int ts_dlrm_predict(struct ts_dlrm *m, float *const p[TS_DLRM_NTENSORS], const float *emb,
                    const float *dense, int n, float *out)
{
    if (n < 0 || n > m->max)
        return -1;
    forward(m, p, emb, dense, n);
    for (int i = 0; i < n; i++)
        out[i] = (float)sigmoid(m->z[i]);
    return 0;
}
