/* tensor.h - the numerics every trainer and shard share: dtypes, partitioning, deterministic
 * initialisation, exact (order-independent) gradient sums, and the optimizers.
 *
 * Why one module: exact mode promises bit-identical parameters for any worker and shard count,
 * equal to a single-process run. That holds only if the shard, the worker and `tessera train
 * --local` run the very same code for each of these steps, so they all live here.
 *
 * Exact sums: a gradient is turned into fixed point, int64 with TS_FIXED_FRAC_BITS fraction
 * bits, and fixed-point values are summed as integers, which is associative and commutative:
 * the sum depends neither on order nor on grouping. Conversion refuses values whose magnitude
 * does not fit, and accumulation detects overflow; both are errors naming the element, never a
 * silent wrap (docs/exact-mode.md has the range and resolution).
 * Ownership: every buffer is the caller's. Threads: no shared state; functions are reentrant. */
#ifndef TS_TENSOR_TENSOR_H
#define TS_TENSOR_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* Values match tessera.v1.DType. */
enum ts_dtype { TS_DTYPE_F32 = 1, TS_DTYPE_F16 = 2, TS_DTYPE_BF16 = 3, TS_DTYPE_F64 = 4 };
size_t ts_dtype_size(enum ts_dtype dt);          /* 0 for an unknown dtype */
const char *ts_dtype_name(enum ts_dtype dt);     /* "f32", ...; "unknown"; static storage */

/* ---- partitioning: a tensor of numel elements cut into partitions of at most
 * partition_bytes (rounded down to whole elements, at least one element) ---- */
#define TS_PARTITION_BYTES_DEFAULT (4u << 20)
/* ceil(numel / per), per = max(1, partition_bytes / elem_size) (an elem_size of 0 counts as
 * 1): 0 for an empty tensor; UINT32_MAX when the count would not fit (callers bound numel).
 * Every partition but the last holds exactly per elements. */
uint32_t ts_partition_count(uint64_t numel, size_t elem_size, uint64_t partition_bytes);
/* The first element and the element count of partition p (p < count); for p >= count,
 * *offset = numel and *len = 0. */
void ts_partition_range(uint64_t numel, size_t elem_size, uint64_t partition_bytes, uint32_t p,
                        uint64_t *offset, uint64_t *len);
/* The partition size for a tensor of tensor_bytes whose shards are reached over links
 * between hosts (docs/placement.md, "Partition size"): tensor_bytes / (64 x shards), rounded
 * down to a multiple of 64 KiB, less 4 KiB, within 60 KiB .. 4 MiB - 4 KiB. 64 partitions a
 * shard let each partition's pull follow its push while later pushes go up; 4 KiB short of
 * 64 KiB segments leaves no frame a header-only last segment (lib/transport/tcp.c). shards
 * 0 counts as 1. */
uint64_t ts_partition_bytes_between_hosts(uint64_t tensor_bytes, uint32_t shards);

/* ---- initialisation: element i of a tensor gets a value that depends only on (seed, tensor
 * name, i, initializer), so any partitioning or placement initialises identically, on any
 * host (the arithmetic is + - * / and sqrt, no libm transcendental) ----
 * initializer: "zeros", "ones", "const:V", "uniform:A" (U(-A, A)), "normal:STD",
 * "xavier" (U(-a, a), a = sqrt(6 / (fan_in + fan_out))), "he" (normal, std = sqrt(2 / fan_in)),
 * "assigned" (zeros, which the trainer's assignment of step 0 replaces: lib/ps, part.h; its
 * optimizer counts steps from that assignment on, ts_init_assigned).
 * Numbers are C floats (strtod), finite; A and STD >= 0. xavier needs fan_in + fan_out > 0,
 * he fan_in > 0. Fills out[0..n) with elements [offset, offset + n). TS_EINVAL names a bad
 * initializer (and lists the valid ones) or the missing fan; out is then untouched. */
ts_status ts_tensor_init(const char *initializer, uint64_t seed, const char *tensor,
                         uint64_t fan_in, uint64_t fan_out, uint64_t offset, uint64_t n,
                         float *out, struct ts_err *err) TS_MUST_CHECK;
/* The syntax check of ts_tensor_init alone (fans are not known yet). */
ts_status ts_init_check(const char *initializer, struct ts_err *err) TS_MUST_CHECK;
/* Whether the initializer is "assigned": the tensor's values are the trainer's own, set by an
 * assignment at step 0 (version 0 -> 1), so Adam's bias correction counts its updates from
 * version 1 on (update t makes version t + 1), as torch.optim does from the model's weights. */
bool ts_init_assigned(const char *initializer);

/* ---- exact sums ---- */
#define TS_FIXED_FRAC_BITS 32
/* out[i] = round-half-even(g[i] * 2^TS_FIXED_FRAC_BITS). TS_EINVAL for NaN/Inf or a value whose
 * magnitude is 2^(63 - TS_FIXED_FRAC_BITS) or more, naming the first such index; out is then
 * unspecified. */
ts_status ts_fixed_from_f32(const float *g, size_t n, int64_t *out,
                            struct ts_err *err) TS_MUST_CHECK;
/* acc[i] += x[i] for all i, or nothing changes and TS_EINVAL names the first element whose sum
 * would overflow int64. acc and x must not overlap. */
ts_status ts_fixed_add(int64_t *acc, const int64_t *x, size_t n, struct ts_err *err) TS_MUST_CHECK;
/* The two calls above fused, without the int64 temporary: acc[i] += fixed(g[i]) for all i, or
 * nothing changes and TS_EINVAL names the first element ts_fixed_from_f32 would refuse or,
 * when all convert, the first whose sum would overflow. The same bits as the two calls, with
 * less than half their memory traffic: for whoever holds float gradients (a shard fed f32
 * pushes, `train --local`). */
ts_status ts_fixed_add_f32(int64_t *acc, const float *g, size_t n,
                           struct ts_err *err) TS_MUST_CHECK;
/* out[i] = (float)((double)acc[i] * 2^-TS_FIXED_FRAC_BITS / divisor): deterministic (each step
 * is one correctly rounded IEEE operation). divisor > 0; acc and out must not overlap. */
void ts_fixed_to_f32(const int64_t *acc, size_t n, double divisor, float *out);

/* Float pushes of exact jobs (docs/exact-mode.md, "Float pushes"). A shard keeps a step's
 * first float push as it is, and sums float pushes as doubles for as long as every sum is an
 * exact integer, which a bound on the values guarantees: the int64 sum then never exists in
 * memory, and exact mode moves float's bytes. Every result has the bits of the int64 path.
 * ts_fixed_f32_bound(W): the bound for a step of W pushes (2^30 for a pair, whose double sum
 * rounds the int64 sum once; below 2^(21 - ceil(log2 W)) for more, where sums are exact).
 * ts_fixed_hold_f32: held = g (a copy), or TS_EINVAL naming the first element
 * ts_fixed_from_f32 would refuse (held is then unspecified); *below: every |g[i]| < bound.
 * ts_fixed_check_f32: the same verdict, copying nothing. */
float ts_fixed_f32_bound(uint32_t pushes);
ts_status ts_fixed_hold_f32(const float *g, size_t n, float bound, float *held, bool *below,
                            struct ts_err *err) TS_MUST_CHECK;
ts_status ts_fixed_check_f32(const float *g, size_t n, float bound, bool *below,
                             struct ts_err *err) TS_MUST_CHECK;
/* For a and b below ts_fixed_f32_bound(2): out[i] = ts_fixed_to_f32 of fixed(a[i]) +
 * fixed(b[i]), the same bits (values above the bound give unspecified results). */
void ts_fixed_pair_to_f32(const float *a, const float *b, size_t n, double divisor, float *out);
/* Sums as exact doubles, for values below ts_fixed_f32_bound(W) and at most W terms in all:
 * acc = fixed(a) + fixed(b); acc += fixed(g); out = ts_fixed_to_f32 of acc + fixed(last), the
 * same bits; ts_fixed_f64_to_i64: such a sum as the int64 it is, in place (acc's memory). */
void ts_fixed_pair_f64(const float *a, const float *b, size_t n, double *acc);
void ts_fixed_add_f32_f64(double *acc, const float *g, size_t n);
void ts_fixed_f64_to_f32(const double *acc, const float *last, size_t n, double divisor,
                         float *out);
void ts_fixed_f64_to_i64(void *acc, size_t n);

/* Plain float sums (non-exact mode): acc[i] += x[i], in index order. acc and x must not
 * overlap. */
void ts_f32_add(float *acc, const float *x, size_t n);

/* ---- optimizers, applied element by element in index order ---- */
enum ts_optim_kind {
    TS_OPTIM_SGD = 1, TS_OPTIM_MOMENTUM = 2, TS_OPTIM_ADAM = 3,
    TS_OPTIM_NESTEROV = 4,   /* torch.optim.SGD(momentum, nesterov=True) */
    TS_OPTIM_ADAMW = 5,      /* torch.optim.AdamW: weight decay decoupled, default 0.01 */
    TS_OPTIM_ADAGRAD = 6,    /* torch.optim.Adagrad (lr_decay 0, initial accumulator 0) */
};

struct ts_optim_cfg {
    enum ts_optim_kind kind;
    float lr;
    float momentum;          /* MOMENTUM: v = momentum * v + g; p -= lr * v (PyTorch's SGD);
                              * NESTEROV: the same v, then p -= lr * (g + momentum * v) */
    float beta1, beta2, eps; /* ADAM: PyTorch's Adam with bias correction; ADAGRAD: eps
                              * (default 1e-10): s += g * g; p -= lr * (g / (sqrt(s) + eps)) */
    float weight_decay;      /* L2, added to the gradient: g += wd * p; ADAMW: decoupled,
                              * p *= 1 - lr * wd before the Adam step */
};

/* Floats of optimizer state per parameter element: 0 (SGD), 1 (momentum, nesterov; Adagrad:
 * the sum of squares), 2 (Adam, AdamW: m, v). */
size_t ts_optim_state_len(enum ts_optim_kind kind);
/* Fills defaults for kind (lr 0.01, momentum 0.9, betas 0.9/0.999, eps 1e-8, wd 0; adamw's wd
 * 0.01 and adagrad's eps 1e-10, torch's) and parses "sgd", "momentum", "nesterov", "adam",
 * "adamw", "adagrad" with optional ":lr=0.1,momentum=0.9,...". Options: lr, weight_decay
 * (all), momentum (momentum, nesterov), beta1, beta2 (adam, adamw), eps (adam, adamw,
 * adagrad), each at most once.
 * TS_EINVAL names an unknown optimizer or option, a malformed value, or one out of range
 * (lr > 0, momentum and betas in [0, 1), eps > 0, weight_decay >= 0); *cfg is set on TS_OK
 * only. */
ts_status ts_optim_parse(const char *spec, struct ts_optim_cfg *cfg,
                         struct ts_err *err) TS_MUST_CHECK;
/* One update with gradient grad; step is the 1-based update count (Adam's bias correction;
 * 0 counts as 1). state holds ts_optim_state_len(kind) * n floats, zeroed before step 1, laid
 * out [m0..mn) then [v0..vn). Element i depends only on element i of each array, so applying
 * it per partition gives the bits of applying it to the whole tensor. */
void ts_optim_apply(const struct ts_optim_cfg *cfg, uint64_t step, float *param, float *state,
                    const float *grad, size_t n);
/* The same update on elements [off, off + len) of arrays of n, with grad holding just those
 * len gradients: the bits of ts_optim_apply, a block at a time (lib/ps applies in blocks that
 * stay in cache). */
void ts_optim_apply_range(const struct ts_optim_cfg *cfg, uint64_t step, float *param,
                          float *state, size_t n, size_t off, const float *grad, size_t len);

#endif
