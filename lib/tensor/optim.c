/* optim.c - SGD, momentum, Nesterov, Adam, AdamW and Adagrad, as PyTorch defines them, in float,
 * element by element.
 *
 * The shard applies these to its partitions and `tessera train --local` to whole tensors; in
 * exact mode both must produce the same bits. So every element goes through the same fp32
 * operations in the same order, with nothing that depends on n or on the partition: no
 * reductions, no reassociation, no a * b + c contracted into an FMA (internal.h), and the
 * per-step scalars (Adam's bias corrections) computed the same way everywhere. Element-wise
 * IEEE operations give the same result vectorised or not.
 *
 *   SGD       g = grad + wd * p;  p -= lr * g
 *   momentum  g as above;  v = mu * v + g;  p -= lr * v       (torch.optim.SGD, momentum=mu,
 *             dampening 0, no Nesterov; PyTorch starts with v = g, which v = mu * 0 + g is)
 *   nesterov  g and v as momentum's;  p -= lr * (g + mu * v)  (torch.optim.SGD, nesterov=True)
 *   Adam      g as above;  m = b1 * m + (1 - b1) * g;  v = b2 * v + (1 - b2) * g * g;
 *             mhat = m / (1 - b1^t);  vhat = v / (1 - b2^t);  p -= lr * mhat / (sqrt(vhat) + eps)
 *             (torch.optim.Adam, amsgrad off; equal to PyTorch's formula up to rounding)
 *   AdamW     p *= (float)(1 - lr * wd) (the product in double, as Python computes torch's
 *             scalar), then Adam with g = grad, no L2 term  (torch.optim.AdamW)
 *   Adagrad   g as above;  s = s + g * g;  p -= lr * (g / (sqrt(s) + eps))
 *             (torch.optim.Adagrad with lr_decay 0 and initial_accumulator_value 0; torch's
 *             CPU kernel may fuse s + g * g into an FMA, one ulp away at times: tests/unit) */
#include "tensor/tensor.h"
#include "tensor/internal.h"

#include <ctype.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- parsing ---- */

enum { O_LR = 1, O_MOMENTUM = 2, O_BETA1 = 4, O_BETA2 = 8, O_EPS = 16, O_WD = 32 };

static const struct {
    const char *name;
    unsigned bit;
    size_t off;
} options[] = {
    { "lr", O_LR, offsetof(struct ts_optim_cfg, lr) },
    { "momentum", O_MOMENTUM, offsetof(struct ts_optim_cfg, momentum) },
    { "beta1", O_BETA1, offsetof(struct ts_optim_cfg, beta1) },
    { "beta2", O_BETA2, offsetof(struct ts_optim_cfg, beta2) },
    { "eps", O_EPS, offsetof(struct ts_optim_cfg, eps) },
    { "weight_decay", O_WD, offsetof(struct ts_optim_cfg, weight_decay) },
};

static const struct {
    const char *name;
    enum ts_optim_kind kind;
    unsigned allowed;
    const char *list;
} optims[] = {
    { "sgd", TS_OPTIM_SGD, O_LR | O_WD, "lr, weight_decay" },
    { "momentum", TS_OPTIM_MOMENTUM, O_LR | O_MOMENTUM | O_WD, "lr, momentum, weight_decay" },
    { "adam", TS_OPTIM_ADAM, O_LR | O_BETA1 | O_BETA2 | O_EPS | O_WD,
      "lr, beta1, beta2, eps, weight_decay" },
    { "nesterov", TS_OPTIM_NESTEROV, O_LR | O_MOMENTUM | O_WD, "lr, momentum, weight_decay" },
    { "adamw", TS_OPTIM_ADAMW, O_LR | O_BETA1 | O_BETA2 | O_EPS | O_WD,
      "lr, beta1, beta2, eps, weight_decay" },
    { "adagrad", TS_OPTIM_ADAGRAD, O_LR | O_EPS | O_WD, "lr, eps, weight_decay" },
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

size_t ts_optim_state_len(enum ts_optim_kind kind)
{
    switch (kind) {
    case TS_OPTIM_SGD:
        return 0;
    case TS_OPTIM_MOMENTUM:
    case TS_OPTIM_NESTEROV:
    case TS_OPTIM_ADAGRAD:
        return 1;
    case TS_OPTIM_ADAM:
    case TS_OPTIM_ADAMW:
        return 2;
    }
    return 0;
}

/* One "name=value" of len bytes at s into c; *seen collects the options given. */
static ts_status parse_opt(const char *spec, const char *s, size_t len, unsigned allowed,
                           const char *list, unsigned *seen, struct ts_optim_cfg *c,
                           struct ts_err *err)
{
    const char *eq = memchr(s, '=', len);
    char num[64], *end;
    size_t k, nlen = eq ? (size_t)(eq - s) : len;
    double v;

    for (k = 0; k < NELEM(options); k++)
        if (strlen(options[k].name) == nlen && !strncmp(s, options[k].name, nlen))
            break;
    if (k == NELEM(options) || !(options[k].bit & allowed))
        return ts_err_set(err, TS_EINVAL, "optimizer '%.64s': unknown option '%.*s'; this "
                          "optimizer takes %s", spec, (int)(nlen > 32 ? 32 : nlen), s, list);
    if (*seen & options[k].bit)
        return ts_err_set(err, TS_EINVAL, "optimizer '%.64s': option %s given twice", spec,
                          options[k].name);
    *seen |= options[k].bit;
    if (!eq || len - nlen - 1 == 0 || len - nlen - 1 >= sizeof(num))
        return ts_err_set(err, TS_EINVAL, "optimizer '%.64s': option %s needs a value, as in "
                          "%s=0.1", spec, options[k].name, options[k].name);
    memcpy(num, eq + 1, len - nlen - 1);
    num[len - nlen - 1] = '\0';
    v = strtod(num, &end);
    if (*end || isspace((unsigned char)num[0]) || !isfinite((float)v))
        return ts_err_set(err, TS_EINVAL, "optimizer '%.64s': %s=%s is not a finite number",
                          spec, options[k].name, num);
    *(float *)((char *)c + options[k].off) = (float)v;
    return TS_OK;
}

/* The ranges PyTorch accepts, except that lr and eps must be positive. */
static ts_status check_cfg(const char *spec, const struct ts_optim_cfg *c, struct ts_err *err)
{
    if (!(c->lr > 0))
        return ts_err_set(err, TS_EINVAL, "optimizer '%.64s': lr must be > 0", spec);
    if (!(c->momentum >= 0 && c->momentum < 1))
        return ts_err_set(err, TS_EINVAL, "optimizer '%.64s': momentum must be in [0, 1)",
                          spec);
    if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1))
        return ts_err_set(err, TS_EINVAL, "optimizer '%.64s': beta1 and beta2 must be in "
                          "[0, 1)", spec);
    if (!(c->eps > 0))
        return ts_err_set(err, TS_EINVAL, "optimizer '%.64s': eps must be > 0", spec);
    if (!(c->weight_decay >= 0))
        return ts_err_set(err, TS_EINVAL, "optimizer '%.64s': weight_decay must be >= 0",
                          spec);
    return TS_OK;
}

ts_status ts_optim_parse(const char *spec, struct ts_optim_cfg *cfg, struct ts_err *err)
{
    struct ts_optim_cfg c = { .lr = 0.01f, .momentum = 0.9f, .beta1 = 0.9f, .beta2 = 0.999f,
                              .eps = 1e-8f, .weight_decay = 0.0f };
    const char *colon, *s;
    unsigned seen = 0;
    size_t k, len;
    ts_status st;

    if (!spec)
        return ts_err_set(err, TS_EINVAL, "optimizer: missing; want sgd, momentum, nesterov, "
                          "adam, adamw or adagrad");
    colon = strchr(spec, ':');
    len = colon ? (size_t)(colon - spec) : strlen(spec);
    for (k = 0; k < NELEM(optims); k++)
        if (strlen(optims[k].name) == len && !strncmp(spec, optims[k].name, len))
            break;
    if (k == NELEM(optims))
        return ts_err_set(err, TS_EINVAL, "optimizer '%.64s': unknown; want sgd, momentum, "
                          "nesterov, adam, adamw or adagrad, optionally with :lr=0.1,...", spec);
    c.kind = optims[k].kind;
    if (c.kind == TS_OPTIM_ADAMW)
        c.weight_decay = 0.01f;   /* torch.optim.AdamW's default */
    if (c.kind == TS_OPTIM_ADAGRAD)
        c.eps = 1e-10f;           /* torch.optim.Adagrad's */
    if (colon && !colon[1])
        return ts_err_set(err, TS_EINVAL, "optimizer '%.64s': nothing after ':'; drop it or "
                          "add options (%s)", spec, optims[k].list);
    for (s = colon ? colon + 1 : NULL; s; s = s[len] ? s + len + 1 : NULL) {
        len = strcspn(s, ",");
        if ((st = parse_opt(spec, s, len, optims[k].allowed, optims[k].list, &seen, &c, err)))
            return st;
    }
    if ((st = check_cfg(spec, &c, err)))
        return st;
    *cfg = c;
    return TS_OK;
}

/* ---- updates ---- */

/* b^t by squaring, in double: a few exact-rounded multiplications, the same on every host
 * (pow() from libm need not be). */
static double pow_step(double b, uint64_t t)
{
    double r = 1.0;

    for (; t; t >>= 1, b *= b)
        if (t & 1)
            r *= b;
    return r;
}

/* The loops below are written for the vectoriser as exact.c's are (blocks of TS_LANES with an
 * inner loop of constant trip count, a scalar tail, no branch inside), and compiled for the
 * x86-64 baseline and x86-64-v3 (TS_HOT, internal.h). Each element goes through the same IEEE
 * operations in the same order in either version and in the tail: + - * / and sqrtf are
 * correctly rounded in SSE and AVX as in scalar code, nothing is contracted (internal.h), and
 * the weight-decay test is hoisted out of the loops rather than turned into a select, because
 * g + 0 * p is not g (p infinite, or g = -0). sqrtf vectorises only without errno, which
 * CMakeLists.txt turns off for lib/tensor (-fno-math-errno: sqrtf of a negative value is never
 * reached here, v being a sum of squares, and nothing in lib/tensor reads errno after math). */

static inline void sgd_el(float *restrict p, const float *restrict grad, size_t i, float lr,
                          float wd)
{
    p[i] -= lr * (grad[i] + wd * p[i]);
}

static inline void sgd0_el(float *restrict p, const float *restrict grad, size_t i, float lr)
{
    p[i] -= lr * grad[i];
}

TS_HOT
static void sgd(const struct ts_optim_cfg *c, float *restrict p, const float *restrict grad,
                size_t n)
{
    const float lr = c->lr, wd = c->weight_decay;
    size_t i = 0;

    if (wd != 0.0f) {
        for (; i + TS_LANES <= n; i += TS_LANES)
            for (size_t j = 0; j < TS_LANES; j++)
                sgd_el(p, grad, i + j, lr, wd);
        for (; i < n; i++)
            sgd_el(p, grad, i, lr, wd);
        return;
    }
    for (; i + TS_LANES <= n; i += TS_LANES)
        for (size_t j = 0; j < TS_LANES; j++)
            sgd0_el(p, grad, i + j, lr);
    for (; i < n; i++)
        sgd0_el(p, grad, i, lr);
}

/* g is grad[i], plus wd * p[i] when the caller has weight decay (see above). */
static inline void momentum_el(float *restrict p, float *restrict v, float g, size_t i,
                               float lr, float mu)
{
    v[i] = mu * v[i] + g;
    p[i] -= lr * v[i];
}

TS_HOT
static void momentum(const struct ts_optim_cfg *c, float *restrict p, float *restrict v,
                     const float *restrict grad, size_t n)
{
    const float lr = c->lr, wd = c->weight_decay, mu = c->momentum;
    size_t i = 0;

    if (wd != 0.0f) {
        for (; i + TS_LANES <= n; i += TS_LANES)
            for (size_t j = 0; j < TS_LANES; j++)
                momentum_el(p, v, grad[i + j] + wd * p[i + j], i + j, lr, mu);
        for (; i < n; i++)
            momentum_el(p, v, grad[i] + wd * p[i], i, lr, mu);
        return;
    }
    for (; i + TS_LANES <= n; i += TS_LANES)
        for (size_t j = 0; j < TS_LANES; j++)
            momentum_el(p, v, grad[i + j], i + j, lr, mu);
    for (; i < n; i++)
        momentum_el(p, v, grad[i], i, lr, mu);
}

static inline void nesterov_el(float *restrict p, float *restrict v, float g, size_t i,
                               float lr, float mu)
{
    v[i] = mu * v[i] + g;
    p[i] -= lr * (g + mu * v[i]);
}

TS_HOT
static void nesterov(const struct ts_optim_cfg *c, float *restrict p, float *restrict v,
                     const float *restrict grad, size_t n)
{
    const float lr = c->lr, wd = c->weight_decay, mu = c->momentum;
    size_t i = 0;

    if (wd != 0.0f) {
        for (; i + TS_LANES <= n; i += TS_LANES)
            for (size_t j = 0; j < TS_LANES; j++)
                nesterov_el(p, v, grad[i + j] + wd * p[i + j], i + j, lr, mu);
        for (; i < n; i++)
            nesterov_el(p, v, grad[i] + wd * p[i], i, lr, mu);
        return;
    }
    for (; i + TS_LANES <= n; i += TS_LANES)
        for (size_t j = 0; j < TS_LANES; j++)
            nesterov_el(p, v, grad[i + j], i + j, lr, mu);
    for (; i < n; i++)
        nesterov_el(p, v, grad[i], i, lr, mu);
}

/* Adam's per-step constants. */
struct adam_k {
    float lr, b1, b2, eps, c1, c2, bc1, bc2;
};

static inline void adam_el(float *restrict p, float *restrict m, float *restrict v, float g,
                           size_t i, const struct adam_k *k)
{
    float mhat, vhat;

    m[i] = k->b1 * m[i] + k->c1 * g;
    v[i] = k->b2 * v[i] + k->c2 * g * g;
    mhat = m[i] / k->bc1;
    vhat = v[i] / k->bc2;
    p[i] -= k->lr * mhat / (sqrtf(vhat) + k->eps);
}

/* Bias corrections: per step, in double as PyTorch does, then rounded to float once. */
static struct adam_k adam_k_of(const struct ts_optim_cfg *c, uint64_t step)
{
    return (struct adam_k){ .lr = c->lr, .b1 = c->beta1, .b2 = c->beta2, .eps = c->eps,
                            .c1 = 1.0f - c->beta1, .c2 = 1.0f - c->beta2,
                            .bc1 = (float)(1.0 - pow_step(c->beta1, step ? step : 1)),
                            .bc2 = (float)(1.0 - pow_step(c->beta2, step ? step : 1)) };
}

TS_HOT
static void adamw(const struct ts_optim_cfg *c, uint64_t step, float *restrict p,
                  float *restrict m, float *restrict v, const float *restrict grad, size_t n)
{
    const struct adam_k k = adam_k_of(c, step);
    const float decay = (float)(1.0 - (double)c->lr * (double)c->weight_decay);
    size_t i = 0;

    for (; i + TS_LANES <= n; i += TS_LANES)
        for (size_t j = 0; j < TS_LANES; j++) {
            p[i + j] *= decay;
            adam_el(p, m, v, grad[i + j], i + j, &k);
        }
    for (; i < n; i++) {
        p[i] *= decay;
        adam_el(p, m, v, grad[i], i, &k);
    }
}

TS_HOT
static void adam(const struct ts_optim_cfg *c, uint64_t step, float *restrict p,
                 float *restrict m, float *restrict v, const float *restrict grad, size_t n)
{
    const struct adam_k k = adam_k_of(c, step);
    const float wd = c->weight_decay;
    size_t i = 0;

    if (wd != 0.0f) {
        for (; i + TS_LANES <= n; i += TS_LANES)
            for (size_t j = 0; j < TS_LANES; j++)
                adam_el(p, m, v, grad[i + j] + wd * p[i + j], i + j, &k);
        for (; i < n; i++)
            adam_el(p, m, v, grad[i] + wd * p[i], i, &k);
        return;
    }
    for (; i + TS_LANES <= n; i += TS_LANES)
        for (size_t j = 0; j < TS_LANES; j++)
            adam_el(p, m, v, grad[i + j], i + j, &k);
    for (; i < n; i++)
        adam_el(p, m, v, grad[i], i, &k);
}

static inline void adagrad_el(float *restrict p, float *restrict s, float g, size_t i,
                              float lr, float eps)
{
    s[i] = s[i] + g * g;
    p[i] -= lr * (g / (sqrtf(s[i]) + eps));
}

TS_HOT
static void adagrad(const struct ts_optim_cfg *c, float *restrict p, float *restrict s,
                    const float *restrict grad, size_t n)
{
    const float lr = c->lr, wd = c->weight_decay, eps = c->eps;
    size_t i = 0;

    if (wd != 0.0f) {
        for (; i + TS_LANES <= n; i += TS_LANES)
            for (size_t j = 0; j < TS_LANES; j++)
                adagrad_el(p, s, grad[i + j] + wd * p[i + j], i + j, lr, eps);
        for (; i < n; i++)
            adagrad_el(p, s, grad[i] + wd * p[i], i, lr, eps);
        return;
    }
    for (; i + TS_LANES <= n; i += TS_LANES)
        for (size_t j = 0; j < TS_LANES; j++)
            adagrad_el(p, s, grad[i + j], i + j, lr, eps);
    for (; i < n; i++)
        adagrad_el(p, s, grad[i], i, lr, eps);
}

void ts_optim_apply_range(const struct ts_optim_cfg *cfg, uint64_t step, float *param,
                          float *state, size_t n, size_t off, const float *grad, size_t len)
{
    switch (cfg->kind) {
    case TS_OPTIM_SGD:
        sgd(cfg, param + off, grad, len);
        break;
    case TS_OPTIM_MOMENTUM:
        momentum(cfg, param + off, state + off, grad, len);
        break;
    case TS_OPTIM_ADAM:
        adam(cfg, step, param + off, state + off, state + n + off, grad, len);
        break;
    case TS_OPTIM_NESTEROV:
        nesterov(cfg, param + off, state + off, grad, len);
        break;
    case TS_OPTIM_ADAMW:
        adamw(cfg, step, param + off, state + off, state + n + off, grad, len);
        break;
    case TS_OPTIM_ADAGRAD:
        adagrad(cfg, param + off, state + off, grad, len);
        break;
    }
}

void ts_optim_apply(const struct ts_optim_cfg *cfg, uint64_t step, float *param, float *state,
                    const float *grad, size_t n)
{
    ts_optim_apply_range(cfg, step, param, state, n, 0, grad, n);
}
