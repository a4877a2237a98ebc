/* dlrm.h - the CTR trainer's dense part: a DLRM-style MLP over embedding rows and dense
 * features, with a logistic loss (issue 46; docs/embeddings.md, "The CTR trainer").
 *
 * A sample's input is the concatenation of its F embedding rows (dim floats each, pulled
 * from the F sparse tables) and its D dense features: x = [e_0 .. e_{F-1}, dense], in = F x
 * dim + D floats. Then h1 = relu(W1 x + b1), h2 = relu(W2 h1 + b2), z = w3 . h2 + b3, and the
 * loss is the binary cross-entropy of sigmoid(z) against the label, computed from z as
 * softplus(z) - y z (no overflow for any z).
 *
 * Parameters are six dense tensors in a fixed order (ts_dlrm_tensors): fc1.weight [h1 x in],
 * fc1.bias [h1], fc2.weight [h2 x h1], fc2.bias [h2], out.weight [1 x h2], out.bias [1],
 * row-major [out x in] as torch's nn.Linear. GEMMs go through OpenBLAS (call
 * ts_mlp_single_thread() once, as for lib/model/mlp.h, so results do not depend on threads):
 * for a given shape and the same inputs, the same bits, which is what exact mode needs of
 * each micro-batch.
 * Ownership: a ts_dlrm holds scratch for up to max_batch samples; parameters, inputs and
 * gradients are the caller's. Threads: one ts_dlrm per thread. */
#ifndef TS_MODEL_DLRM_H
#define TS_MODEL_DLRM_H

#include <stddef.h>
#include <stdint.h>

#include "model/mlp.h"
#include "util/err.h"

#define TS_DLRM_NTENSORS 6
#define TS_DLRM_MAX_IN 65536

struct ts_dlrm_shape {
    uint32_t features, dim, dense;   /* F, the rows' dim, D */
    uint32_t h1, h2;                 /* hidden widths */
};

/* The tensor t (0..5) of a model of shape s: name, rows, cols, initializer ("he" for the
 * hidden weights, "xavier" for out.weight, "zeros" for biases) and fans. */
struct ts_mlp_tensor ts_dlrm_tensor(const struct ts_dlrm_shape *s, int t);

struct ts_dlrm;

/* TS_EINVAL naming the field (dlrm.features, dlrm.dim, dlrm.h1, ...: each >= 1, in =
 * F x dim + D <= TS_DLRM_MAX_IN) or max_batch (1..TS_MLP_MAX_BATCH); TS_ENOMEM. */
ts_status ts_dlrm_create(const struct ts_dlrm_shape *s, int max_batch, struct ts_dlrm **out,
                         struct ts_err *err) TS_MUST_CHECK;
void ts_dlrm_free(struct ts_dlrm *m);   /* NULL: no-op */

/* Forward and backward on n <= max_batch samples: emb n x (F x dim) floats (sample i's rows
 * at emb + i x F x dim), dense n x D, label n (0 or 1). Writes into grads[t] the SUM over the
 * samples of d(loss)/d(param), overwriting it, and into demb (n x F x dim, same layout as emb)
 * each sample's d(loss)/d(row) for each of its rows: what push_rows takes, one row per
 * position. Returns the summed loss; NaN (nothing written) for n outside 0..max_batch. */
double ts_dlrm_grad(struct ts_dlrm *m, float *const params[TS_DLRM_NTENSORS], const float *emb,
                    const float *dense, const float *label, int n,
                    float *const grads[TS_DLRM_NTENSORS], float *demb);

/* Forward only, n <= max_batch: each sample's click probability sigmoid(z) into p. -1 for n
 * out of range, else 0. */
int ts_dlrm_predict(struct ts_dlrm *m, float *const params[TS_DLRM_NTENSORS], const float *emb,
                    const float *dense, int n, float *p);

#endif
