/* sum.c - a partition's step sum (part_internal.h): the pushes of a step added into the
 * accumulator, float or exact (int64, a held float push, or exact doubles), and the gradient
 * they give, a block at a time, for part.c's apply(). Called with the partition's mu held. */
#include "ps/part_internal.h"

#include "codec/codec.h"

#include <assert.h>
#include <string.h>

#define LANES 8               /* elements per inner loop: a constant trip count -O2 vectorises */

/* Whether every element of the float sums is finite. */
bool part_sums_finite(const struct ts_part *p)
{
    const uint32_t *bits = (const uint32_t *)(const void *)p->acc_f32;
    uint32_t bad = 0;

    for (uint64_t i = 0; i < p->len; i++)   /* exponent all ones: Inf or NaN */
        bad |= (bits[i] & 0x7f800000u) == 0x7f800000u;
    return !bad;
}

/* The accumulator holds the sum of the step's pushes so far once the step has one (a step's
 * first push sets it, later ones add to it); between steps it holds whatever the last step
 * left, never read. So apply() need not clear it, and a raw float push that ends a step is not
 * added to it at all: apply() adds it block by block on the way to the gradient (`last`
 * below), which saves writing the sum and reading it back. Every path gives the bits of adding
 * each push to a zeroed accumulator, as ts_f32_add and ts_fixed_add do, then converting. */

/* acc[i] = g[i] + 0: what adding g to a zeroed sum gives, -0 included (0 + -0 is +0). */
static void set_f32(float *restrict acc, const float *restrict g, size_t n)
{
    size_t i = 0;

    for (; i + LANES <= n; i += LANES)
        for (size_t j = 0; j < LANES; j++)
            acc[i + j] = g[i + j] + 0.0f;
    for (; i < n; i++)
        acc[i] = g[i] + 0.0f;
}

/* acc = x: what adding x to a zeroed sum gives, for the first push of an exact step. A loop,
 * kept one: GCC would turn it into a memcpy call, and glibc's memcpy (2.36, on the AMD EPYC
 * bench machine) measured 30% slower than this loop and than the add it replaces. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
static void set_i64(int64_t *restrict acc, const int64_t *restrict x, size_t n)
{
    size_t i = 0;

    for (; i + LANES <= n; i += LANES)
        for (size_t j = 0; j < LANES; j++)
            acc[i + j] = x[i + j];
    for (; i < n; i++)
        acc[i] = x[i];
}

/* out[i] = (a[i] + b[i]) * mul: the rounding of ts_f32_add, then the scaling. */
static void sum_scale_f32(const float *restrict a, const float *restrict b, size_t n, float mul,
                          float *restrict out)
{
    size_t i = 0;

    for (; i + LANES <= n; i += LANES)
        for (size_t j = 0; j < LANES; j++)
            out[i + j] = (a[i + j] + b[i + j]) * mul;
    for (; i < n; i++)
        out[i] = (a[i] + b[i]) * mul;
}

/* out[i] = (a[i] + 0) * mul: a sum (never -0, see set_f32) scaled, or a lone push as if it
 * had been added to a zeroed sum. */
static void scale_f32(const float *restrict a, size_t n, float mul, float *restrict out)
{
    size_t i = 0;

    for (; i + LANES <= n; i += LANES)
        for (size_t j = 0; j < LANES; j++)
            out[i + j] = (a[i + j] + 0.0f) * mul;
    for (; i < n; i++)
        out[i] = (a[i] + 0.0f) * mul;
}

/* Sets *fuse: whether the last push of a step, `first` if it is the only one, can skip the
 * accumulator. Raw float: when no push of the step needs apply()'s finiteness check, which
 * reads the whole sum first. Fixed point: an int64 push alone, or a float push whose sum with
 * the float pushes before it (held, or summed as exact doubles) needs no int64: this checks it
 * first (one read of it), so that a value out of range refuses the push before anything is
 * applied, and one above the bound sends it the long way (part_accumulate). Otherwise its sum must
 * be known not to overflow before anything is applied (a refused push changes nothing), and
 * ts_fixed_add in place, read back by apply(), measured 5-10% faster than a read-only overflow
 * pass followed by a fused one (both read the sum and the push twice; the in-place add writes
 * the sum once instead). */
ts_status part_fusable(const struct ts_part *p, const struct ts_push *in, bool first,
                         bool *fuse, struct ts_err *err)
{
    *fuse = false;
    if (!p->job->exact)
        *fuse = in->encoding == TS_ENC_RAW && in->scale_exp == 0 && !p->check_finite;
    else if (first)
        *fuse = in->encoding == TS_ENC_FIXED;
    else if (in->encoding == TS_ENC_FIXED_F32 && p->acc_form != TS_ACC_I64 && p->held_below)
        return ts_fixed_check_f32(in->payload, p->len, ts_fixed_f32_bound(p->job->workers),
                                  fuse, err);
    return TS_OK;
}

/* The exact sum so far becomes int64, in place. Held floats are converted block by block from
 * the last: a block is copied out to the scratch p->grad first, and writing int64 elements
 * k.. overwrites floats 2k.., which lie in this block or a later one, all read already
 * (ts_fixed_hold_f32 checked every value: the conversion cannot fail). Exact doubles are
 * integers: converted element by element. */
void part_to_i64(struct ts_part *p)
{
    const float *held = (const float *)(const void *)p->acc_fixed;

    if (p->acc_form == TS_ACC_F64)
        ts_fixed_f64_to_i64(p->acc_fixed, p->len);
    for (uint64_t end = p->len, k; p->acc_form == TS_ACC_HELD && end > 0; end = k) {
        ts_status st;

        k = end > APPLY_BLOCK ? end - APPLY_BLOCK : 0;
        memcpy(p->grad, held + k, (end - k) * sizeof(float));
        st = ts_fixed_from_f32(p->grad, end - k, p->acc_fixed + k, NULL);
        assert(st == TS_OK);
        (void)st;
    }
    p->acc_form = TS_ACC_I64;
}

/* The held floats and g, both below the bound, become their sum as exact doubles, in place:
 * blocks from the last, each copied out first, as in part_to_i64. */
static void held_to_f64(struct ts_part *p, const float *g)
{
    const float *held = (const float *)(const void *)p->acc_fixed;
    double *acc = (double *)(void *)p->acc_fixed;

    for (uint64_t end = p->len, k; end > 0; end = k) {
        k = end > APPLY_BLOCK ? end - APPLY_BLOCK : 0;
        memcpy(p->grad, held + k, (end - k) * sizeof(float));
        ts_fixed_pair_f64(p->grad, g + k, end - k, acc + k);
    }
    p->acc_form = TS_ACC_F64;
}

/* Exact mode's accumulate. A first float push is held as floats (a step of two float pushes
 * never converts it: part_block_grad pairs them); later float pushes below the bound are summed
 * with it as exact doubles; anything else makes the sum int64 first. A float push is checked
 * before anything changes, so a refusal changes nothing but the form of the sum. */
static ts_status accumulate_fixed(struct ts_part *p, const struct ts_push *in, bool first,
                                  struct ts_err *err)
{
    float bound = ts_fixed_f32_bound(p->job->workers);
    bool f32 = in->encoding == TS_ENC_FIXED_F32, below = false;
    ts_status st;

    if (first && f32) {
        st = ts_fixed_hold_f32(in->payload, p->len, bound, (float *)(void *)p->acc_fixed,
                               &p->held_below, err);
        p->acc_form = st ? TS_ACC_I64 : TS_ACC_HELD;
        return st;
    }
    if (first) {
        set_i64(p->acc_fixed, in->payload, p->len);
        p->acc_form = TS_ACC_I64;
        return TS_OK;
    }
    if (f32 && p->acc_form != TS_ACC_I64 && p->held_below &&
        (st = ts_fixed_check_f32(in->payload, p->len, bound, &below, err)))
        return st;
    if (below && p->acc_form == TS_ACC_HELD) {
        held_to_f64(p, in->payload);
        return TS_OK;
    }
    if (below) {
        ts_fixed_add_f32_f64((double *)(void *)p->acc_fixed, in->payload, p->len);
        return TS_OK;
    }
    part_to_i64(p);
    return f32 ? ts_fixed_add_f32(p->acc_fixed, in->payload, p->len, err)
               : ts_fixed_add(p->acc_fixed, in->payload, p->len, err);
}

/* Adds a checked push to the step's sum, setting it on the step's first push. Fails only on a
 * fixed-point overflow or a float out of its range, which change nothing. */
ts_status part_accumulate(struct ts_part *p, const struct ts_push *in, bool first,
                            struct ts_err *err)
{
    bool codec = !p->job->exact && in->encoding != TS_ENC_RAW;

    if (p->job->exact)
        return accumulate_fixed(p, in, first, err);
    if (codec && first)     /* a codec only adds, and TOPK only at the indices it lists */
        memset(p->acc_f32, 0, p->len * sizeof(float));
    if (codec)
        ts_codec_add(in->encoding, in->payload, in->bytes, p->len, 1.0f, p->acc_f32);
    else if (first)
        set_f32(p->acc_f32, in->payload, p->len);
    else
        ts_f32_add(p->acc_f32, in->payload, p->len);
    return TS_OK;
}

/* The gradient of elements [off, off + n) into p->grad: the sum divided by fdiv (exact) or
 * times inv (float). The sum is the accumulator's or, with `last` (the step's last push, not
 * added; see part_fusable), acc + last, or last itself when it was also the first (`alone`).
 * Exact mode fuses an int64 push alone, or a float one with the float pushes before it. */
void part_block_grad(struct ts_part *p, const void *last, bool alone, uint64_t off,
                       size_t n, double fdiv, float inv)
{
    if (p->job->exact && last && !alone && p->acc_form == TS_ACC_HELD)
        ts_fixed_pair_to_f32((const float *)(const void *)p->acc_fixed + off,
                             (const float *)last + off, n, fdiv, p->grad);
    else if (p->job->exact && last && !alone)
        ts_fixed_f64_to_f32((const double *)(const void *)p->acc_fixed + off,
                            (const float *)last + off, n, fdiv, p->grad);
    else if (p->job->exact)
        ts_fixed_to_f32(last ? (const int64_t *)last + off : p->acc_fixed + off, n, fdiv,
                        p->grad);
    else if (last && !alone)
        sum_scale_f32(p->acc_f32 + off, (const float *)last + off, n, inv, p->grad);
    else
        scale_f32(last ? (const float *)last + off : p->acc_f32 + off, n, inv, p->grad);
}
