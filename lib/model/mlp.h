/* mlp.h - the built-in trainer's model: an MLP 784-256-128-10, ReLU, softmax cross-entropy.
 *
 * Why here and not in the worker: tessera-worker, `tessera train --local` and the verify
 * service's probe-batch checks must run the identical arithmetic. GEMMs go through OpenBLAS
 * (cblas_sgemm); call ts_mlp_single_thread() once per process so that results do not depend on
 * the thread count (exact mode relies on that), and see ts_mlp_blas_core() for hosts whose
 * CPUs differ.
 *
 * Parameters are six tensors in a fixed order (ts_mlp_tensors): fc1.weight [256 x 784],
 * fc1.bias [256], fc2.weight [128 x 256], fc2.bias [128], fc3.weight [10 x 128], fc3.bias [10],
 * weights row-major [out x in] as PyTorch's nn.Linear.
 * Ownership: a ts_mlp holds scratch space for up to max_batch samples; parameter and gradient
 * arrays are the caller's. Threads: one ts_mlp per thread. */
#ifndef TS_MODEL_MLP_H
#define TS_MODEL_MLP_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define TS_MLP_NTENSORS 6
#define TS_MLP_IN 784
#define TS_MLP_CLASSES 10
#define TS_MLP_MAX_BATCH 65536    /* the largest max_batch ts_mlp_create accepts */

struct ts_mlp_tensor {
    const char *name;         /* "fc1.weight" */
    uint64_t rows, cols;      /* cols 1 for biases; numel = rows * cols */
    const char *init;         /* lib/tensor initializer, see below */
    uint64_t fan_in, fan_out;
};

/* TS_MLP_NTENSORS entries, static. Initializers: "he" for fc1 and fc2 weights (ReLU follows),
 * "xavier" for fc3.weight (no ReLU; starts the loss near ln 10), "zeros" for biases.
 * Measured with SGD momentum 0.9 over the mean gradient, B 64, 8 seeds: lr 0.02 gives test
 * accuracy 0.842-0.871 after 3 epochs (median 0.866) and 0.861-0.876 after 5; lr 0.03 gives
 * 0.863-0.872 after 4. A constant lr leaves the last epoch's result noisy by about 1%. */
const struct ts_mlp_tensor *ts_mlp_tensors(void);
uint64_t ts_mlp_numel(int tensor);
void ts_mlp_single_thread(void);
/* The OpenBLAS kernel picked for this CPU at load time ("Haswell", "SkylakeX", "Cooperlake").
 * GEMM results differ in the last bits between kernels, so exact mode across hosts needs the
 * same kernel everywhere: give every process the same OPENBLAS_CORETYPE in its environment
 * (read when the library loads, so it cannot be set from here), and log or compare this.
 * Static storage. */
const char *ts_mlp_blas_core(void);

struct ts_mlp;

/* Allocates the scratch space for batches of up to max_batch samples (1..TS_MLP_MAX_BATCH),
 * once, so that the calls below never allocate. *out: caller owns, free with ts_mlp_free().
 * TS_EINVAL for a bad max_batch, TS_ENOMEM. */
ts_status ts_mlp_create(int max_batch, struct ts_mlp **out, struct ts_err *err) TS_MUST_CHECK;
void ts_mlp_free(struct ts_mlp *m);   /* NULL is a no-op */

/* Forward and backward on n samples: x is n x 784 floats, y n labels (< 10).
 * Writes into grads[t] the SUM over the n samples of d(loss)/d(param) (not the mean: the caller
 * divides once by the global batch), overwriting it. Returns the summed loss (double).
 * Deterministic: the same (params, x, y, n, max_batch) give the same bits on every call.
 * n <= max_batch is the fast path; a larger n is processed in chunks of max_batch whose
 * gradients are accumulated in order (still deterministic, bits depend on max_batch).
 * n == 0 zeroes grads and returns 0. A label >= 10 or n < 0 returns NAN, grads untouched. */
double ts_mlp_grad(struct ts_mlp *m, float *const params[TS_MLP_NTENSORS], const float *x,
                   const uint8_t *y, int n, float *const grads[TS_MLP_NTENSORS]);

/* Forward only, on any n (chunks of max_batch): how many of the n samples are classified
 * correctly (argmax, the first on ties); *loss_sum, the summed cross-entropy, if not NULL.
 * Returns -1 for a label >= 10 or n < 0, *loss_sum untouched. */
int ts_mlp_eval(struct ts_mlp *m, float *const params[TS_MLP_NTENSORS], const float *x,
                const uint8_t *y, int n, double *loss_sum);

/* Forward only, n <= max_batch samples: copies each layer's outputs, those wanted (NULL: not),
 * into h1 (n x 256, after ReLU), h2 (n x 128, after ReLU) and logits (n x 10). For audits that
 * compare two models layer by layer (tessera verify). Returns -1 if n is out of range. */
int ts_mlp_forward(struct ts_mlp *m, float *const params[TS_MLP_NTENSORS], const float *x, int n,
                   float *h1, float *h2, float *logits);
#define TS_MLP_H1 256
#define TS_MLP_H2 128

#endif
