/* test_part_sums.c - lib/ps: the step's sum against plain summation. A partition takes
 * shortcuts (the first push of a step sets the accumulator, the last raw push goes straight
 * into the update, a refused push is undone); whatever the path, for every encoding, mode and
 * optimizer, the bits must be those of a hand loop over the pushes in arrival order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "ps/part_internal.h"   /* white-box: refused pushes must leave every field */
#include "part_test.h"

/* ---- The step's sum (lib/ps/part.c): the first push of a step sets the accumulator, which
 * between steps holds the last step's leftovers; a raw last push goes straight into the
 * update. Whatever the path, the bits must be those of plain summation in arrival order. ---- */

#define MAXW 5
/* Elements of these tests' partitions: three of apply()'s 4096-element blocks, the last one
 * not a multiple of the 8 its loops take at a time. */
#define L (2 * 4096 + 13)

static struct ts_job job48(uint32_t workers, bool exact, const char *opt, enum ts_mode m)
{
    struct ts_job j;

    /* A batch of 48: 1/48 is not a power of two, so the scaling rounds. */
    assert_int_equal(ts_job_init(&j, "t", workers, exact, opt, 48, NULL), TS_OK);
    assert_int_equal(ts_job_set_mode(&j, m, 0, NULL), TS_OK);
    return j;
}

static struct ts_part *mk_len(const struct ts_job *j)
{
    struct ts_part *p;

    assert_int_equal(ts_part_create(j, 3, "w", 1, 500, L, "normal:0.1", 7, 0, 0, NULL, &p, NULL),
                     TS_OK);
    return p;
}

static uint64_t rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void permute(uint32_t *order, uint32_t n, uint64_t *s)
{
    for (uint32_t i = 0; i < n; i++)
        order[i] = i;
    for (uint32_t i = n; i > 1; i--) {
        uint32_t k = (uint32_t)(rng(s) % i), t = order[i - 1];

        order[i - 1] = order[k];
        order[k] = t;
    }
}

/* A gradient sum for seed: magnitudes 2^-20..2^7, random signs, so that float sums round
 * differently in different orders. Every 17th element is -0 in every gradient (the sum must
 * still be +0, as adding to a zeroed sum gives), every 13th -0 or +0 at random. */
static void fgrad(uint64_t seed, float *g)
{
    uint64_t s = seed;

    for (int i = 0; i < L; i++) {
        uint64_t r = rng(&s);
        float v = ldexpf(1.0f + (float)(r & 0xffffff) / 0x1p24f, (int)((r >> 24) % 27) - 20);

        g[i] = (r >> 63) ? -v : v;
        if (i % 17 == 0)
            g[i] = -0.0f;
        else if (i % 13 == 0)
            g[i] = ((r >> 62) & 1) ? -0.0f : 0.0f;
    }
}

/* The gradients of one step: rank r's in fg[r] and, in exact mode, xg[r]; pl[r] the payload. */
struct grads {
    float fg[MAXW][L];
    int64_t xg[MAXW][L];
    const void *pl[MAXW];
};

static void make_grads(struct grads *gr, bool exact, uint32_t w, uint64_t seed)
{
    for (uint32_t r = 0; r < w; r++) {
        fgrad(seed * 64 + r, gr->fg[r]);
        if (exact)
            assert_int_equal(ts_fixed_from_f32(gr->fg[r], L, gr->xg[r], NULL), TS_OK);
        gr->pl[r] = exact ? (const void *)gr->xg[r] : gr->fg[r];
    }
}

/* The applied gradient by plain summation of pl[order[0..w)] in that order: a float sum from
 * +0 (ts_f32_add's rounding) times apply()'s 1 / (divisor * 2^scale_exp), or the integer sum
 * converted once. */
static void ref_grad(bool exact, const void *const *pl, const uint32_t *order, uint32_t w,
                     double divisor, int scale_exp, float *out)
{
    static int64_t xsum[L];
    static float fsum[L];
    float inv = (float)(1.0 / divisor) * ldexpf(1.0f, -scale_exp);

    memset(xsum, 0, sizeof(xsum));
    memset(fsum, 0, sizeof(fsum));
    for (uint32_t k = 0; k < w; k++)
        for (int i = 0; i < L; i++) {
            if (exact)
                xsum[i] += ((const int64_t *)pl[order[k]])[i];
            else
                fsum[i] += ((const float *)pl[order[k]])[i];
        }
    if (exact) {
        ts_fixed_to_f32(xsum, L, ldexp(divisor, scale_exp), out);
        return;
    }
    for (int i = 0; i < L; i++)
        out[i] = fsum[i] * inv;
}

static void push_all(struct ts_part *p, const struct grads *gr, const uint32_t *order,
                     uint32_t w, uint64_t step, bool exact)
{
    bool applied;

    for (uint32_t k = 0; k < w; k++) {
        assert_int_equal(push(p, order[k], step, exact ? TS_ENC_FIXED : TS_ENC_RAW,
                              gr->pl[order[k]], L * (exact ? 8 : 4), &applied, NULL), TS_OK);
        assert_int_equal(applied, k + 1 == w);
    }
}

/* 1 to 5 workers, random arrival orders, several steps (each with new gradients, so that a
 * sum left from the previous step would show): reduce returns the reduced gradient itself,
 * which must be the plain sum's bits, float and exact. */
static void sums_match_plain_summation(void **state)
{
    static struct grads gr;
    static float want[L], got[L];
    uint32_t order[MAXW];
    uint64_t s = 42, v;

    for (int exact = 0; exact < 2; exact++)
        for (uint32_t w = 1; w <= MAXW; w++) {
            struct ts_job j = job48(w, exact, "sgd", TS_MODE_REDUCE);
            struct ts_part *p = mk_len(&j);

            for (uint64_t step = 0; step < 4; step++) {
                permute(order, w, &s);
                make_grads(&gr, exact, w, rng(&s));
                push_all(p, &gr, order, w, step, exact);
                ref_grad(exact, gr.pl, order, w, 48, 0, want);
                assert_int_equal(read_at(p, step + 1, 10, got, &v, NULL), TS_OK);
                assert_int_equal(v, step + 1);
                assert_memory_equal(want, got, sizeof(got));
            }
            ts_part_free(p);
        }
}

/* Float steps mixing compressed and loss-scaled pushes with raw ones, in every position: these
 * take the accumulator (a codec adds into a zeroed one, TOPK only at its indices) and the
 * finiteness check; the plain sum of the decoded pushes in arrival order is still the result,
 * and the raw steps between them (fused) are not disturbed by what they leave behind, an
 * Inf of a skipped step included. */
static void mixed_encodings_match_plain_summation(void **state)
{
    static const struct {
        unsigned enc[3];
        int scale_exp;
        int inf;            /* 1 + the arrival whose push holds an Inf: the step is skipped */
    } steps[] = {
        { { TS_CODEC_FP16, TS_ENC_RAW, TS_ENC_RAW }, 0, 0 },
        { { TS_ENC_RAW, TS_ENC_RAW, TS_CODEC_BF16 }, 0, 0 },
        { { TS_ENC_RAW, TS_ENC_RAW, TS_ENC_RAW }, 0, 0 },
        { { TS_ENC_RAW, TS_CODEC_TOPK, TS_ENC_RAW }, 0, 0 },
        { { TS_ENC_RAW, TS_ENC_RAW, TS_ENC_RAW }, 3, 0 },
        { { TS_CODEC_TOPK, TS_ENC_RAW, TS_ENC_RAW }, 0, 0 },
        { { TS_CODEC_INT8, TS_CODEC_FP16, TS_ENC_RAW }, 0, 0 },
        { { TS_CODEC_FP16, TS_ENC_RAW, TS_ENC_RAW }, 0, 1 },   /* 1e6 is Inf in FP16 */
        { { TS_ENC_RAW, TS_ENC_RAW, TS_ENC_RAW }, 0, 0 },
        { { TS_CODEC_BF16, TS_ENC_RAW, TS_ENC_RAW }, 0, 3 },   /* the raw last push */
        { { TS_ENC_RAW, TS_ENC_RAW, TS_ENC_RAW }, 0, 0 },
    };
    static struct grads gr;
    static float dec[3][L], want[L], got[L];
    static uint8_t enc[3][4 + 8 * L];
    struct ts_job j = job48(3, false, "sgd", TS_MODE_REDUCE);
    struct ts_part *p = mk_len(&j);
    const void *dpl[3] = { dec[0], dec[1], dec[2] };
    struct ts_pull_info info;
    uint32_t order[3];
    uint64_t s = 7;
    bool applied;

    for (uint64_t step = 0; step < sizeof(steps) / sizeof(steps[0]); step++) {
        permute(order, 3, &s);
        make_grads(&gr, false, 3, rng(&s));
        if (steps[step].inf)
            gr.fg[order[steps[step].inf - 1]][L / 2] = steps[step].inf == 1 ? 1e6f : INFINITY;
        for (uint32_t k = 0; k < 3; k++) {
            uint32_t r = order[k];
            unsigned e = steps[step].enc[k];
            struct ts_codec c = { .kind = (enum ts_codec_kind)e, .ratio = 0.1 };
            struct ts_push in = { .rank = r, .step = step, .encoding = e,
                                  .scale_exp = steps[step].scale_exp, .payload = gr.fg[r],
                                  .bytes = sizeof(gr.fg[r]) };

            memcpy(dec[r], gr.fg[r], sizeof(dec[r]));
            if (e != TS_ENC_RAW) {
                ts_codec_encode(&c, gr.fg[r], L, 1.0f, NULL, enc[r], &in.bytes);
                ts_codec_decode(e, enc[r], in.bytes, L, dec[r]);
                in.payload = enc[r];
            }
            assert_int_equal(ts_part_push(p, &in, &applied, NULL), TS_OK);
            assert_int_equal(applied, k == 2);
        }
        ref_grad(false, dpl, order, 3, 48, steps[step].scale_exp, want);
        if (steps[step].inf)
            memset(want, 0, sizeof(want));      /* reduce: a skipped step's gradient is 0 */
        assert_int_equal(ts_part_pull(p, 0, step + 1, 0, 10, NULL, got, &info, NULL), TS_OK);
        assert_int_equal(info.overflow, steps[step].inf != 0);
        assert_memory_equal(want, got, sizeof(got));
    }
    struct ts_part_ranks rk = { 0 };
    ts_part_fold_ranks(p, &rk);
    assert_int_equal(rk.skipped, 2);
    ts_part_free(p);

    /* One worker: its loss-scaled push is both first and last, and still checked; then an
     * unscaled one, fused, is not added to what the scaled one left in the accumulator. */
    uint32_t only = 0;
    struct ts_job j1 = job48(1, false, "sgd", TS_MODE_REDUCE);
    struct ts_push in = { .rank = 0, .encoding = TS_ENC_RAW, .scale_exp = 2,
                          .payload = gr.fg[0], .bytes = sizeof(gr.fg[0]) };

    p = mk_len(&j1);
    make_grads(&gr, false, 1, 5);
    for (in.step = 0; in.step < 3; in.step++) {
        gr.fg[0][L - 1] = in.step == 0 ? INFINITY : 1.0f;
        in.scale_exp = in.step < 2 ? 2 : 0;
        assert_int_equal(ts_part_push(p, &in, &applied, NULL), TS_OK);
        ref_grad(false, gr.pl, &only, 1, 48, in.scale_exp, want);
        if (in.step == 0)
            memset(want, 0, sizeof(want));
        assert_int_equal(ts_part_pull(p, 0, in.step + 1, 0, 10, NULL, got, &info, NULL), TS_OK);
        assert_int_equal(info.overflow, in.step == 0);
        assert_memory_equal(want, got, sizeof(got));
    }
    ts_part_free(p);
}

/* The state a refused push must leave alone. */
struct part_state {
    uint64_t version;
    uint32_t npushed;
    uint8_t pushed[MAXW];
    float value[L];
    int64_t acc_fixed[L];
    float acc_f32[L];
};

/* The exact sum so far as int64, whichever form the memory holds it in (part_internal.h): a
 * held float push stands for its fixed-point values, exact doubles for themselves. */
static void sum_so_far(const struct ts_part *p, int64_t *out)
{
    if (p->acc_form == TS_ACC_HELD) {
        assert_int_equal(ts_fixed_from_f32((const float *)(const void *)p->acc_fixed, L, out,
                                           NULL), TS_OK);
    } else {
        memcpy(out, p->acc_fixed, L * sizeof(int64_t));
        if (p->acc_form == TS_ACC_F64)
            ts_fixed_f64_to_i64(out, L);
    }
}

static void save_state(const struct ts_part *p, struct part_state *st)
{
    st->version = p->version;
    st->npushed = p->npushed;
    memcpy(st->pushed, p->pushed, p->job->workers);
    memcpy(st->value, p->value, sizeof(st->value));
    if (p->job->exact)
        sum_so_far(p, st->acc_fixed);
    else
        memcpy(st->acc_f32, p->acc_f32, sizeof(st->acc_f32));
}

static void assert_state(const struct ts_part *p, const struct part_state *st)
{
    static int64_t sum[L];

    assert_int_equal(p->version, st->version);
    assert_int_equal(p->npushed, st->npushed);
    assert_memory_equal(p->pushed, st->pushed, p->job->workers);
    assert_memory_equal(p->value, st->value, sizeof(st->value));
    if (p->job->exact && st->npushed) {   /* with no push yet, the sum is leftovers */
        sum_so_far(p, sum);
        assert_memory_equal(sum, st->acc_fixed, sizeof(st->acc_fixed));
    } else if (!p->job->exact) {
        assert_memory_equal(p->acc_f32, st->acc_f32, sizeof(st->acc_f32));
    }
}

/* Refusals of the push that would end a step (a fixed-point overflow found only when adding,
 * a wrong length, encoding or step) or begin one change nothing: version, values, the sum so
 * far, who pushed. The right push then completes the step with the update a hand loop makes. */
static void refused_push_changes_nothing(void **state)
{
    static struct grads gr;
    static struct part_state before;
    static int64_t huge[L];
    static float vals[L], mom[L], g[L], got[L];
    static const uint32_t order[3] = { 2, 0, 1 };
    struct ts_err e;
    uint64_t v;
    bool applied;

    for (int i = 0; i < L; i++)
        huge[i] = INT64_MAX;
    for (int exact = 0; exact < 2; exact++) {
        struct ts_job j = job48(3, exact, "momentum:lr=0.1", TS_MODE_BSP);
        struct ts_part *p = mk_len(&j);
        unsigned enc = exact ? TS_ENC_FIXED : TS_ENC_RAW;
        size_t bytes = L * (exact ? 8 : 4);
        struct {
            uint64_t step;
            unsigned enc;
            const void *data;
            size_t bytes;
            const char *says;
        } bad[] = {
            { 0, enc, NULL, bytes - 4, "payload" },
            { 0, exact ? TS_ENC_RAW : TS_ENC_FIXED, NULL, bytes, "encoding" },
            { 1, enc, NULL, bytes, "step" },
            { 0, enc, huge, bytes, exact ? "fixed-point range" : NULL },
        };

        memset(mom, 0, sizeof(mom));
        assert_int_equal(read_at(p, 0, 10, vals, &v, NULL), TS_OK);
        make_grads(&gr, exact, 3, 99);
        for (uint64_t step = 0; step < 2; step++) {
            /* Step 0: refused as the last push (ranks 2 and 0 are in); step 1: as the first. */
            uint32_t in_before = step == 0 ? 2 : 0;

            for (uint32_t k = 0; k < in_before; k++)
                assert_int_equal(push(p, order[k], step, enc, gr.pl[order[k]], bytes, &applied,
                                      NULL), TS_OK);
            save_state(p, &before);
            for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
                if (!bad[b].says || (bad[b].data == huge && step == 1))
                    continue;   /* no overflow in float mode, nor into a step's first push */
                memset(&e, 0, sizeof(e));
                assert_int_equal(push(p, order[in_before], step + bad[b].step, bad[b].enc,
                                      bad[b].data ? bad[b].data : gr.pl[order[in_before]],
                                      bad[b].bytes, &applied, &e), TS_EINVAL);
                assert_false(applied);
                assert_non_null(strstr(e.msg, bad[b].says));
                assert_state(p, &before);
            }
            for (uint32_t k = in_before; k < 3; k++)
                assert_int_equal(push(p, order[k], step, enc, gr.pl[order[k]], bytes, &applied,
                                      NULL), TS_OK);
            assert_true(applied);
            ref_grad(exact, gr.pl, order, 3, 48, 0, g);
            ts_optim_apply(&j.optim, step + 1, vals, mom, g, L);
            assert_int_equal(read_at(p, step + 1, 10, got, &v, NULL), TS_OK);
            assert_memory_equal(vals, got, sizeof(got));
        }
        ts_part_free(p);
    }
}

/* Exact jobs take float pushes (TS_ENC_FIXED_F32) beside int64 ones. Whatever the mix, the
 * order, the worker count and the path (a held first push paired with the last, converted for
 * a middle or an int64 push, a value of 2^30 or more that cannot pair, a push alone), a reduce
 * step's gradient has the bits of the int64 pushes' plain sum, and a momentum job fed float
 * pushes keeps the values of its twin fed the same gradients as int64. */
static void float_pushes_match_fixed(void **state)
{
    static struct grads gr;
    static float want[L], got[L], twin[L];
    uint32_t order[MAXW];
    uint64_t s = 77, v;
    bool applied;

    for (uint32_t w = 1; w <= MAXW; w++)
        for (int m = 0; m < 2; m++) {   /* exact mode rules out SSP and ASP */
            enum ts_mode mode = m == 0 ? TS_MODE_REDUCE : TS_MODE_BSP;
            const char *opt = m ? "momentum:lr=0.1,momentum=0.9" : "sgd";
            struct ts_job j = job48(w, true, opt, mode), jt = job48(w, true, opt, mode);
            struct ts_part *p = mk_len(&j), *t = mk_len(&jt);

            for (uint64_t step = 0; step < 6; step++) {
                permute(order, w, &s);
                make_grads(&gr, true, w, rng(&s));
                if (step % 3 == 2) {   /* one rank's element of 1.5 * 2^30: it cannot pair */
                    uint32_t r = order[rng(&s) % w];

                    gr.fg[r][L - 5] = 0x1.8p30f;
                    assert_int_equal(ts_fixed_from_f32(gr.fg[r], L, gr.xg[r], NULL), TS_OK);
                }
                for (uint32_t k = 0; k < w; k++) {
                    uint32_t r = order[k];
                    /* all float; the first only; at random */
                    bool f32 = step % 3 == 0 || (step % 3 == 1 ? k == 0 : (rng(&s) & 1));

                    assert_int_equal(push(p, r, step, f32 ? TS_ENC_FIXED_F32 : TS_ENC_FIXED,
                                          f32 ? (const void *)gr.fg[r] : gr.xg[r],
                                          L * (f32 ? 4 : 8), &applied, NULL), TS_OK);
                    assert_int_equal(applied, k + 1 == w);
                    assert_int_equal(push(t, r, step, TS_ENC_FIXED, gr.xg[r], L * 8, &applied,
                                          NULL), TS_OK);
                }
                if (mode == TS_MODE_REDUCE) {
                    ref_grad(true, gr.pl, order, w, 48, 0, want);
                    assert_int_equal(read_at(p, step + 1, 10, got, &v, NULL), TS_OK);
                    assert_memory_equal(want, got, sizeof(got));
                }
                memcpy(twin, t->value, sizeof(twin));
                assert_memory_equal(p->value, twin, sizeof(twin));
            }
            ts_part_free(t);
            ts_part_free(p);
        }
}

/* Refused float pushes of an exact job change nothing (the sum so far compared as int64,
 * whichever form a held push is in): a value out of range as the first push, as a middle one,
 * as the last one that would pair with the held first (checked before anything is applied);
 * a sum that overflows where a value of 2^30 or more cannot pair; a payload of int64 size; and
 * a float job refuses the encoding. The right pushes then give the hand loop's values. */
static void refused_float_push_changes_nothing(void **state)
{
    static struct grads gr;
    static struct part_state before;
    static float bad[L], vals[L], mom[L], g[L], got[L];
    static const float badv[] = { NAN, INFINITY, 0x1p31f };
    struct ts_err e;
    uint64_t v;
    bool applied;

    for (uint32_t w = 2; w <= 4; w++) {   /* a pair; held, then doubles; doubles, then more */
        struct ts_job j = job48(w, true, "momentum:lr=0.1", TS_MODE_BSP);
        struct ts_part *p = mk_len(&j);

        memset(mom, 0, sizeof(mom));
        assert_int_equal(read_at(p, 0, 10, vals, &v, NULL), TS_OK);
        for (uint64_t step = 0; step < 2; step++) {
            make_grads(&gr, true, w, 300 + step);
            if (step == 1) {   /* rank 0's held push cannot pair: a big element */
                gr.fg[0][9] = 0x1.fp30f;
                assert_int_equal(ts_fixed_from_f32(gr.fg[0], L, gr.xg[0], NULL), TS_OK);
            }
            for (uint32_t r = 0; r < w; r++) {
                /* each position refuses a bad value first; the last, also an overflow */
                for (size_t b = 0; b < sizeof(badv) / sizeof(badv[0]) + (r + 1 == w); b++) {
                    memcpy(bad, gr.fg[r], sizeof(bad));
                    if (b < sizeof(badv) / sizeof(badv[0]))
                        bad[L - 1 - b] = badv[b];
                    else if (step == 1)      /* 0x1.fp30 + 0x1.fp30 leaves the range */
                        bad[9] = 0x1.fp30f;
                    else
                        continue;
                    save_state(p, &before);
                    memset(&e, 0, sizeof(e));
                    assert_int_equal(push(p, r, step, TS_ENC_FIXED_F32, bad, L * 4, &applied,
                                          &e), TS_EINVAL);
                    assert_false(applied);
                    assert_non_null(strstr(e.msg, b < 3 ? "gradient element" : "fixed-point"));
                    assert_state(p, &before);
                }
                save_state(p, &before);
                memset(&e, 0, sizeof(e));
                assert_int_equal(push(p, r, step, TS_ENC_FIXED_F32, gr.fg[r], L * 8, &applied,
                                      &e), TS_EINVAL);
                if (!strstr(e.msg, "payload"))
                    fail_msg("%s", e.msg);
                assert_state(p, &before);
                assert_int_equal(push(p, r, step, TS_ENC_FIXED_F32, gr.fg[r], L * 4, &applied,
                                      NULL), TS_OK);
                assert_int_equal(applied, r + 1 == w);
            }
            ref_grad(true, gr.pl, (const uint32_t[]){ 0, 1, 2, 3 }, w, 48, 0, g);
            ts_optim_apply(&j.optim, step + 1, vals, mom, g, L);
            assert_int_equal(read_at(p, step + 1, 10, got, &v, NULL), TS_OK);
            assert_memory_equal(vals, got, sizeof(got));
        }
        ts_part_free(p);
    }

    struct ts_job jf = job48(2, false, "sgd", TS_MODE_BSP);
    struct ts_part *pf = mk_len(&jf);

    make_grads(&gr, false, 1, 5);
    memset(&e, 0, sizeof(e));
    assert_int_equal(push(pf, 0, 0, TS_ENC_FIXED_F32, gr.fg[0], L * 4, &applied, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "encoding"));
    ts_part_free(pf);
}

/* Momentum and Adam over several steps, with any arrival order, equal a hand loop of plain
 * sums and ts_optim_apply; so does ASP, which applies every push alone. */
static void optimizers_match_hand_loop(void **state)
{
    static const char *const opts[] = { "momentum:lr=0.1,momentum=0.9", "adam:lr=0.01" };
    static struct grads gr;
    static float vals[L], st[2 * L], g[L], got[L];
    uint32_t order[MAXW];
    uint64_t s = 1234, v;

    for (int exact = 0; exact < 2; exact++)
        for (int o = 0; o < 2; o++)
            for (uint32_t w = 1; w <= 3; w++) {
                struct ts_job j = job48(w, exact, opts[o], TS_MODE_BSP);
                struct ts_part *p = mk_len(&j);

                memset(st, 0, sizeof(st));
                assert_int_equal(read_at(p, 0, 10, vals, &v, NULL), TS_OK);
                for (uint64_t step = 0; step < 5; step++) {
                    permute(order, w, &s);
                    make_grads(&gr, exact, w, rng(&s));
                    push_all(p, &gr, order, w, step, exact);
                    ref_grad(exact, gr.pl, order, w, 48, 0, g);
                    ts_optim_apply(&j.optim, step + 1, vals, st, g, L);
                    assert_int_equal(read_at(p, step + 1, 10, got, &v, NULL), TS_OK);
                    assert_memory_equal(vals, got, sizeof(got));
                }
                ts_part_free(p);
            }

    /* ASP, 2 ranks: pushes applied one by one, in arrival order. */
    static const uint32_t ranks[] = { 0, 0, 1, 0, 1, 1, 1, 0 };
    struct ts_job j = job48(2, false, opts[1], TS_MODE_ASP);
    struct ts_part *p = mk_len(&j);
    struct ts_pull_info info;
    uint64_t clock[2] = { 0, 0 };
    bool applied;

    memset(st, 0, sizeof(st));
    assert_int_equal(ts_part_pull(p, 0, 0, 0, 10, NULL, vals, &info, NULL), TS_OK);
    for (uint64_t k = 0; k < sizeof(ranks) / sizeof(ranks[0]); k++) {
        uint32_t r = ranks[k];

        make_grads(&gr, false, 2, k + 500);
        assert_int_equal(push(p, r, clock[r]++, TS_ENC_RAW, gr.pl[r], sizeof(gr.fg[r]),
                              &applied, NULL), TS_OK);
        assert_true(applied);
        ref_grad(false, gr.pl, &r, 1, 48, 0, g);
        ts_optim_apply(&j.optim, k + 1, vals, st, g, L);
        assert_int_equal(ts_part_pull(p, 0, 0, 0, 10, NULL, got, &info, NULL), TS_OK);
        assert_int_equal(info.version, k + 1);
        assert_memory_equal(vals, got, sizeof(got));
    }
    ts_part_free(p);
}

/* ---- Combined pushes (docs/scheduler.md): one push carrying the sum of several slots, which
 * the partition counts as each of them. ---- */

static ts_status push_slots(struct ts_part *p, uint64_t slots, uint64_t step, unsigned enc,
                            const void *data, bool retry, bool *applied, struct ts_err *e)
{
    struct ts_push in = { .rank = (uint32_t)__builtin_ctzll(slots), .step = step,
                          .encoding = enc, .payload = data,
                          .bytes = L * (enc == TS_ENC_FIXED ? 8 : 4), .retry = retry,
                          .slots = slots };
    return ts_part_push(p, &in, applied, e);
}

/* The sum of the slots of mask, each slot's payload added in ascending order, into out. */
static void sum_slots(const struct grads *gr, bool exact, uint64_t mask, void *out)
{
    memset(out, 0, L * (exact ? 8 : 4));
    for (uint64_t m = mask; m; m &= m - 1)
        if (exact)
            assert_int_equal(ts_fixed_add(out, gr->xg[__builtin_ctzll(m)], L, NULL), TS_OK);
        else
            ts_f32_add(out, gr->fg[__builtin_ctzll(m)], L);
}

/* Five slots. Step 0: slots {0, 2, 3} in one push, then 1 and 4 alone: the step completes at
 * the last of them, not before, and an exact step has the bits of five single pushes (integer
 * addition regroups freely). Step 1, after slot 1 came alone: a retry of {1, 2} (slot 1 was
 * counted, 2 was not) is refused TS_ESLOTS, the same push not as a retry TS_ESTATE, with
 * nothing changed; {0, 2} and {3, 4} then complete the step, and retries of slots all counted
 * are duplicates, acknowledged with nothing added. Masks that are not a combined push are
 * refused naming the field. */
static void combined_pushes_count_each_slot(void **state)
{
    static struct grads gr;
    static struct part_state before;
    static int64_t sum[3][L];
    static float vals[L], g[L], got[L];
    static const uint32_t all[MAXW] = { 0, 1, 2, 3, 4 };
    struct ts_err e;
    uint64_t v;
    bool applied;

    for (int exact = 0; exact < 2; exact++) {
        struct ts_job j = job48(MAXW, exact, "sgd:lr=0.5", TS_MODE_BSP);
        struct ts_part *p = mk_len(&j);
        unsigned enc = exact ? TS_ENC_FIXED : TS_ENC_RAW;
        const void *pl[3] = { sum[0], NULL, NULL };
        uint32_t order[3] = { 0, 1, 2 };

        assert_int_equal(read_at(p, 0, 10, vals, &v, NULL), TS_OK);
        make_grads(&gr, exact, MAXW, 7);
        sum_slots(&gr, exact, 0x0d, sum[0]);
        assert_int_equal(push_slots(p, 0x0d, 0, enc, sum[0], true, &applied, NULL), TS_OK);
        assert_false(applied);
        assert_int_equal(p->npushed, 3);
        assert_int_equal(push(p, 1, 0, enc, gr.pl[1], L * (exact ? 8 : 4), &applied, NULL),
                         TS_OK);
        assert_false(applied);
        assert_int_equal(push(p, 4, 0, enc, gr.pl[4], L * (exact ? 8 : 4), &applied, NULL),
                         TS_OK);
        assert_true(applied);
        pl[1] = gr.pl[1];
        pl[2] = gr.pl[4];
        if (exact)   /* the bits of the five slots pushed one by one */
            ref_grad(true, gr.pl, all, MAXW, 48, 0, g);
        else
            ref_grad(false, pl, order, 3, 48, 0, g);
        ts_optim_apply(&j.optim, 1, vals, NULL, g, L);
        assert_int_equal(read_at(p, 1, 10, got, &v, NULL), TS_OK);
        assert_memory_equal(vals, got, sizeof(got));

        make_grads(&gr, exact, MAXW, 8);
        assert_int_equal(push(p, 1, 1, enc, gr.pl[1], L * (exact ? 8 : 4), &applied, NULL),
                         TS_OK);
        sum_slots(&gr, exact, 0x06, sum[1]);
        save_state(p, &before);
        memset(&e, 0, sizeof(e));
        assert_int_equal(push_slots(p, 0x06, 1, enc, sum[1], true, &applied, &e), TS_ESLOTS);
        assert_non_null(strstr(e.msg, "1 of these 2 were counted"));
        assert_state(p, &before);
        memset(&e, 0, sizeof(e));
        assert_int_equal(push_slots(p, 0x06, 1, enc, sum[1], false, &applied, &e), TS_ESTATE);
        assert_state(p, &before);
        {
            struct {
                uint64_t slots;
                uint32_t rank;
                unsigned enc;
                enum ts_mode mode;
                const char *says;
            } bad[] = {
                { 0x04, 2, enc, TS_MODE_BSP, "slots: 0x4 names one slot" },
                { 0x24, 2, enc, TS_MODE_BSP, "slot 5 is not below the job's 5" },
                { 0x05, 2, enc, TS_MODE_BSP, "rank: 2, but the lowest of slots 0x5 is 0" },
                { 0x05, 0, TS_ENC_FIXED_F32, TS_MODE_BSP, "encoding: 6 (float)" },
                { 0x05, 0, enc, TS_MODE_REDUCE, "needs mode bsp" },
            };
            for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
                struct ts_push in = { .rank = bad[b].rank, .step = 1, .encoding = bad[b].enc,
                                      .payload = sum[1], .bytes = L * 8, .retry = true,
                                      .slots = bad[b].slots };
                if (bad[b].enc == TS_ENC_FIXED_F32 && !exact)
                    continue;
                in.bytes = bad[b].enc == TS_ENC_FIXED ? L * 8 : L * 4;
                j.mode = bad[b].mode;   /* the partition reads its job's mode at each push */
                memset(&e, 0, sizeof(e));
                assert_int_equal(ts_part_push(p, &in, &applied, &e), TS_EINVAL);
                assert_non_null(strstr(e.msg, bad[b].says));
                assert_state(p, &before);
                j.mode = TS_MODE_BSP;
            }
        }
        sum_slots(&gr, exact, 0x05, sum[1]);
        sum_slots(&gr, exact, 0x18, sum[2]);
        assert_int_equal(push_slots(p, 0x05, 1, enc, sum[1], true, &applied, NULL), TS_OK);
        save_state(p, &before);   /* a retry of slots all counted: a duplicate */
        assert_int_equal(push_slots(p, 0x05, 1, enc, sum[1], true, &applied, NULL), TS_OK);
        assert_false(applied);
        assert_state(p, &before);
        assert_int_equal(push_slots(p, 0x18, 1, enc, sum[2], true, &applied, NULL), TS_OK);
        assert_true(applied);
        if (exact) {
            ref_grad(true, gr.pl, all, MAXW, 48, 0, g);
        } else {
            pl[0] = gr.pl[1];
            pl[1] = sum[1];
            pl[2] = sum[2];
            ref_grad(false, pl, order, 3, 48, 0, g);
        }
        ts_optim_apply(&j.optim, 2, vals, NULL, g, L);
        assert_int_equal(read_at(p, 2, 10, got, &v, NULL), TS_OK);
        assert_memory_equal(vals, got, sizeof(got));
        save_state(p, &before);   /* a late retry of an applied step: a duplicate too */
        assert_int_equal(push_slots(p, 0x18, 1, enc, sum[2], true, &applied, NULL), TS_OK);
        assert_state(p, &before);
        ts_part_free(p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sums_match_plain_summation),
        cmocka_unit_test(mixed_encodings_match_plain_summation),
        cmocka_unit_test(refused_push_changes_nothing),
        cmocka_unit_test(float_pushes_match_fixed),
        cmocka_unit_test(refused_float_push_changes_nothing),
        cmocka_unit_test(optimizers_match_hand_loop),
        cmocka_unit_test(combined_pushes_count_each_slot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
