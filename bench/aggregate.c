/* aggregate.c - bench_aggregate: what does exact mode cost a shard's gradient aggregation?
 *
 * Why: exact mode (docs/exact-mode.md) replaces the float sum of the workers' gradients with a
 * fixed-point one: float -> int64 with 32 fraction bits, an overflow-checked int64 add, and
 * int64 -> float once at the end. These loops run over every gradient byte, so they must stay
 * close to the plain float sum. This program measures, on one core, the aggregation of
 * --inputs gradient vectors of --n floats into their mean:
 *   fp32         ts_f32_add of each input, then one scaling pass (the non-exact shard path);
 *   exact        ts_fixed_from_f32 + ts_fixed_add of each input, ts_fixed_to_f32 at the end
 *                (shown for comparison);
 *   exact fused  ts_fixed_add_f32 of each input (no int64 temporary), ts_fixed_to_f32: what
 *                tessera-worker does per micro-batch (headline_fused);
 *   exact shard  ts_fixed_add of inputs converted beforehand, ts_fixed_to_f32: the shard's
 *                share when workers convert and push int64 (8 bytes an element on the wire);
 *   exact f32    the shard's path for float pushes (exact_push float): the first input held
 *                as floats (ts_fixed_hold_f32), each later one checked against the bound
 *                (ts_fixed_check_f32) and summed as exact doubles, the last one on the way
 *                out (ts_fixed_pair_to_f32 for 2 inputs, else ts_fixed_pair_f64,
 *                ts_fixed_add_f32_f64 and ts_fixed_f64_to_f32): no int64 in memory. The
 *                headline: a shard's exact sum against the float sum.
 * Each rep zeroes the accumulator, adds every input, and writes the mean; the modes run in
 * turn within a rep so that drift hits them alike; one warm-up rep is not counted; the median
 * of --reps is reported as GB/s of float gradient input (inputs * n * 4 bytes / time).
 * The exact modes must give the same bits as each other and as the inputs summed in reverse
 * order, or the run fails. Output: a table on stdout and bench/results/aggregate.json. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "benchlib.h"
#include "tensor/tensor.h"
#include "util/flags.h"
#include "util/json.h"

#define MAX_REPS 101
#define MAX_INPUTS 64

enum mode { M_FP32, M_EXACT, M_FUSED, M_SHARD, M_F32PUSH, NMODES };
enum stage { S_FROM, S_ADD, S_TO, NSTAGES };

static const char *const mode_key[NMODES] = { "fp32", "exact", "exact_fused", "exact_shard",
                                              "exact_f32push" };
static const char *const mode_desc[NMODES] = {
    "fp32: f32_add + scale (baseline)", "exact: from_f32 + fixed_add + to_f32",
    "exact fused: fixed_add_f32 + to_f32", "exact shard: fixed_add + to_f32 (pre-converted)",
    "exact f32: hold + checks + exact double sums",
};

struct opts {
    int64_t n, inputs, reps;
    const char *out;
    bool quick;
};

struct bufs {
    float **g;                /* inputs x n gradients */
    int64_t **fx;             /* the same, converted (M_SHARD) */
    float *acc32, *mean32, *mean_fx, *check, *held;
    int64_t *acc, *tmp;
};

struct results {
    char machine[192];
    double ms[NMODES][MAX_REPS], med_ms[NMODES], gbps[NMODES];
    double stage_ms[NSTAGES][MAX_REPS], med_stage[NSTAGES];
    bool ok;
};

/* ---- setup ---- */

/* Gradients like the unit test's: magnitude 10^U(-8, 3), random sign. All buffers are
 * written once here, so no page fault lands in a timed loop. */
static ts_status make_bufs(const struct opts *o, struct bufs *b, struct ts_err *err)
{
    size_t n = (size_t)o->n, w = (size_t)o->inputs;
    uint64_t s = 42;

    b->g = calloc(w, sizeof(*b->g));
    b->fx = calloc(w, sizeof(*b->fx));
    b->acc32 = malloc(n * sizeof(float));
    b->mean32 = malloc(n * sizeof(float));
    b->mean_fx = malloc(n * sizeof(float));
    b->check = malloc(n * sizeof(float));
    b->held = malloc(n * sizeof(float));
    b->acc = malloc(n * sizeof(int64_t));
    b->tmp = malloc(n * sizeof(int64_t));
    if (!b->g || !b->fx || !b->acc32 || !b->mean32 || !b->mean_fx || !b->check || !b->held ||
        !b->acc || !b->tmp)
        return ts_err_set(err, TS_ENOMEM, "out of memory for %zu x %zu floats", w, n);
    for (size_t k = 0; k < w; k++) {
        if (!(b->g[k] = malloc(n * sizeof(float))) || !(b->fx[k] = malloc(n * sizeof(int64_t))))
            return ts_err_set(err, TS_ENOMEM, "out of memory for input %zu", k);
        for (size_t i = 0; i < n; i++) {
            uint64_t r = bench_rng_next(&s);
            float v = (float)exp2(((double)(r >> 11) * 0x1p-53 * 11.0 - 8.0) * 3.321928094887362);

            b->g[k][i] = r & 1 ? -v : v;
        }
        if (ts_fixed_from_f32(b->g[k], n, b->fx[k], err))
            return TS_EINTERNAL;
    }
    memset(b->acc32, 0, n * sizeof(float));
    memset(b->mean32, 0, n * sizeof(float));
    memset(b->mean_fx, 0, n * sizeof(float));
    memset(b->check, 0, n * sizeof(float));
    memset(b->held, 0, n * sizeof(float));
    memset(b->acc, 0, n * sizeof(int64_t));
    memset(b->tmp, 0, n * sizeof(int64_t));
    return TS_OK;
}

static void free_bufs(const struct opts *o, struct bufs *b)
{
    for (int64_t k = 0; b->g && k < o->inputs; k++)
        free(b->g[k]);
    for (int64_t k = 0; b->fx && k < o->inputs; k++)
        free(b->fx[k]);
    free(b->g);
    free(b->fx);
    free(b->acc32);
    free(b->mean32);
    free(b->mean_fx);
    free(b->check);
    free(b->held);
    free(b->acc);
    free(b->tmp);
}

/* ---- the aggregations ---- */

static void run_fp32(const struct opts *o, struct bufs *b)
{
    size_t n = (size_t)o->n;
    float inv = (float)(1.0 / (double)o->inputs);

    memset(b->acc32, 0, n * sizeof(float));
    for (int64_t k = 0; k < o->inputs; k++)
        ts_f32_add(b->acc32, b->g[k], n);
    for (size_t i = 0; i < n; i++)
        b->mean32[i] = b->acc32[i] * inv;
}

/* M_F32PUSH: what a shard does with float pushes (lib/ps/part.c), in the given input order:
 * the first held, a second paired with it (as exact doubles when more follow), the others
 * added as exact doubles, each checked against the bound first; above the bound, int64. */
static ts_status run_f32push(const struct opts *o, struct bufs *b, bool reverse, float *out,
                             struct ts_err *err)
{
    size_t n = (size_t)o->n, w = (size_t)o->inputs;
    float bound = ts_fixed_f32_bound((uint32_t)w);
    double *accd = (double *)(void *)b->acc;
    bool ok, below;
    ts_status s;

#define IN(j) (b->g[reverse ? w - 1 - (j) : (j)])
    if ((s = ts_fixed_hold_f32(IN(0), n, bound, b->held, &ok, err)))
        return s;
    for (size_t j = 1; j < w && ok; j++) {
        if ((s = ts_fixed_check_f32(IN(j), n, bound, &below, err)))
            return s;
        if (!(ok = below))
            break;
        if (j + 1 == w && w == 2)
            ts_fixed_pair_to_f32(b->held, IN(j), n, (double)w, out);
        else if (j + 1 == w)
            ts_fixed_f64_to_f32(accd, IN(j), n, (double)w, out);
        else if (j == 1)
            ts_fixed_pair_f64(b->held, IN(j), n, accd);
        else
            ts_fixed_add_f32_f64(accd, IN(j), n);
    }
    if (ok && w > 1)
        return TS_OK;
    /* above the bound (or one input): the int64 path, as the shard's to_i64 */
    if ((s = ts_fixed_from_f32(b->held, n, b->acc, err)))
        return s;
    for (size_t j = 1; j < w && !s; j++)
        s = ts_fixed_add_f32(b->acc, IN(j), n, err);
#undef IN
    if (!s)
        ts_fixed_to_f32(b->acc, n, (double)w, out);
    return s;
}

/* One exact aggregation in mode m into out; stage times go to st (M_EXACT only). With
 * reverse, the inputs are taken last to first. */
static ts_status run_exact(const struct opts *o, struct bufs *b, enum mode m, bool reverse,
                           double st[NSTAGES], float *out, struct ts_err *err)
{
    size_t n = (size_t)o->n;
    int64_t t0, t1;
    ts_status s = TS_OK;

    if (m == M_F32PUSH)
        return run_f32push(o, b, reverse, out, err);
    memset(b->acc, 0, n * sizeof(int64_t));
    for (int64_t j = 0; j < o->inputs && !s; j++) {
        int64_t k = reverse ? o->inputs - 1 - j : j;

        if (m == M_FUSED) {
            s = ts_fixed_add_f32(b->acc, b->g[k], n, err);
        } else if (m == M_SHARD) {
            s = ts_fixed_add(b->acc, b->fx[k], n, err);
        } else {
            t0 = ts_now_ns();
            s = ts_fixed_from_f32(b->g[k], n, b->tmp, err);
            t1 = ts_now_ns();
            s = s ? s : ts_fixed_add(b->acc, b->tmp, n, err);
            st[S_FROM] += (double)(t1 - t0) / 1e6;
            st[S_ADD] += (double)(ts_now_ns() - t1) / 1e6;
        }
    }
    t0 = ts_now_ns();
    if (!s)
        ts_fixed_to_f32(b->acc, n, (double)o->inputs, out);
    st[S_TO] += (double)(ts_now_ns() - t0) / 1e6;
    return s;
}

/* Rep -1 warms up; each rep runs every mode once. Then checks that the exact modes agree. */
static ts_status run_all(const struct opts *o, struct bufs *b, struct results *r,
                         struct ts_err *err)
{
    double st[NSTAGES], junk[NSTAGES];
    size_t bytes = (size_t)o->n * sizeof(float);
    ts_status s;

    for (int64_t rep = -1; rep < o->reps; rep++) {
        for (int m = 0; m < NMODES; m++) {
            int64_t t0 = ts_now_ns();

            memset(st, 0, sizeof(st));
            if (m == M_FP32)
                run_fp32(o, b);
            else if ((s = run_exact(o, b, (enum mode)m, false, st, b->mean_fx, err)))
                return s;
            if (rep < 0)
                continue;
            r->ms[m][rep] = (double)(ts_now_ns() - t0) / 1e6;
            if (m == M_EXACT)
                for (int k = 0; k < NSTAGES; k++)
                    r->stage_ms[k][rep] = st[k];
            if (m != M_FP32 && rep == 0)
                memcpy(b->check, b->mean_fx, bytes);
            else if (m != M_FP32 && memcmp(b->check, b->mean_fx, bytes))
                return ts_err_set(err, TS_EINTERNAL, "%s gave other bits than exact",
                                  mode_key[m]);
        }
    }
    for (int m = M_EXACT; m < NMODES; m++) {
        if ((s = run_exact(o, b, (enum mode)m, true, junk, b->mean_fx, err)))
            return s;
        if (memcmp(b->check, b->mean_fx, bytes))
            return ts_err_set(err, TS_EINTERNAL, "%s: reverse order gave other bits",
                              mode_key[m]);
    }
    for (int m = 0; m < NMODES; m++) {
        r->med_ms[m] = bench_median(r->ms[m], (size_t)o->reps);
        r->gbps[m] = (double)o->inputs * (double)bytes / (r->med_ms[m] / 1e3) / 1e9;
    }
    for (int k = 0; k < NSTAGES; k++)
        r->med_stage[k] = bench_median(r->stage_ms[k], (size_t)o->reps);
    return TS_OK;
}

/* ---- output ---- */

static double round3(double x) { return (double)bench_round_i(x * 1e3) / 1e3; }

static void print_table(const struct opts *o, const struct results *r)
{
    printf("bench_aggregate: mean of %" PRId64 " inputs x %" PRId64 " floats (%.1f MiB each), "
           "one core, median of %" PRId64 " reps (%s)\n\n", o->inputs, o->n,
           (double)o->n * 4 / 1048576, o->reps, r->machine);
    printf("%-50s | %9s | %8s | %7s\n", "mode", "ms", "GB/s", "vs fp32");
    for (int m = 0; m < NMODES; m++)
        printf("%-50s | %9.1f | %8.2f | %7.2f\n", mode_desc[m], r->med_ms[m], r->gbps[m],
               r->gbps[m] / r->gbps[M_FP32]);
    printf("\nexact, by stage (median ms per rep): from_f32 %.1f (%" PRId64 " calls), "
           "fixed_add %.1f (%" PRId64 " calls), to_f32 %.1f (1 call)\n", r->med_stage[S_FROM],
           o->inputs, r->med_stage[S_ADD], o->inputs, r->med_stage[S_TO]);
    printf("GB/s = inputs x n x 4 bytes of float gradient / time; bit-identical exact modes, "
           "in either input order: %s\n", r->ok ? "yes" : "NO");
}

static ts_status write_json(const struct opts *o, const struct results *r, struct ts_err *err)
{
    struct ts_json j;

    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "name", "aggregate");
    ts_json_str(&j, "machine", r->machine);
    ts_json_bool(&j, "ok", r->ok);
    ts_json_bool(&j, "quick", o->quick);
    ts_json_int(&j, "n", o->n);
    ts_json_int(&j, "inputs", o->inputs);
    ts_json_int(&j, "reps", o->reps);
    ts_json_int(&j, "threads", 1);
    ts_json_obj(&j, "modes");
    for (int m = 0; m < NMODES; m++) {
        ts_json_obj(&j, mode_key[m]);
        ts_json_str(&j, "what", mode_desc[m]);
        ts_json_num(&j, "median_ms", round3(r->med_ms[m]));
        ts_json_num(&j, "gbps", round3(r->gbps[m]));
        ts_json_arr(&j, "ms");
        for (int64_t k = 0; k < o->reps; k++)
            ts_json_num(&j, NULL, round3(r->ms[m][k]));
        ts_json_end(&j);
        ts_json_end(&j);
    }
    ts_json_end(&j);
    ts_json_obj(&j, "exact_stages_median_ms");
    ts_json_num(&j, "from_f32", round3(r->med_stage[S_FROM]));
    ts_json_num(&j, "fixed_add", round3(r->med_stage[S_ADD]));
    ts_json_num(&j, "to_f32", round3(r->med_stage[S_TO]));
    ts_json_end(&j);
    /* The headline is a shard's exact sum (float pushes, the shard's own path); the fused
     * conversion a worker does per micro-batch is headline_fused. */
    ts_json_obj(&j, "headline");
    ts_json_num(&j, "ours", round3(r->gbps[M_F32PUSH]));
    ts_json_num(&j, "baseline", round3(r->gbps[M_FP32]));
    ts_json_str(&j, "unit", "GB/s of gradient input (a shard's exact sum of float pushes vs "
                "fp32 sum)");
    ts_json_num(&j, "ratio", round3(r->gbps[M_F32PUSH] / r->gbps[M_FP32]));
    ts_json_end(&j);
    ts_json_obj(&j, "headline_fused");
    ts_json_num(&j, "ours", round3(r->gbps[M_FUSED]));
    ts_json_num(&j, "baseline", round3(r->gbps[M_FP32]));
    ts_json_str(&j, "unit", "GB/s of gradient input (exact fused vs fp32 sum)");
    ts_json_num(&j, "ratio", round3(r->gbps[M_FUSED] / r->gbps[M_FP32]));
    ts_json_end(&j);
    return bench_write_json(&j, o->out, err);
}

/* ---- main ---- */

int main(int argc, char **argv)
{
    static const char about[] =
        "Measures, on one core, the mean of W float gradient vectors: the plain\n"
        "float sum (baseline) against exact mode's fixed-point sum (conversion,\n"
        "overflow-checked int64 add, conversion back), and a shard's exact sum of\n"
        "float pushes (held, then exact double sums). Prints a table and writes\n"
        "JSON whose headline is that shard sum's GB/s against fp32 GB/s.";
    struct opts o = { 0 };
    const struct ts_flag flags[] = {
        { "n", TS_FLAG_INT, &o.n, "N", "floats per input (default 16777216 = 64 MiB)", 1,
          1ll << 32 },
        { "inputs", TS_FLAG_INT, &o.inputs, "W", "gradient vectors summed, as from W workers "
                                                 "(default 4)", 1, MAX_INPUTS },
        { "reps", TS_FLAG_INT, &o.reps, "R", "timed repetitions; the median is reported "
                                             "(default 5)", 1, MAX_REPS },
        { "out", TS_FLAG_STR, &o.out, "FILE", "results (default bench/results/aggregate.json)",
          0, 0 },
        { "quick", TS_FLAG_BOOL, &o.quick, NULL, "smoke run: 1 Mi floats, 3 reps (explicit "
                                                 "flags still win)", 0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    struct ts_err err = { 0 };
    struct results *r;
    struct bufs b = { 0 };
    int done, rc = 1;

    if ((done = ts_flags_program("bench_aggregate", NULL, about, flags, argc, argv)) >= 0)
        return done;
    if (!(r = calloc(1, sizeof(*r)))) {
        fprintf(stderr, "bench_aggregate: out of memory\n");
        return 2;
    }
    o.n = o.n ? o.n : o.quick ? 1 << 20 : 1 << 24;
    o.inputs = o.inputs ? o.inputs : 4;
    o.reps = o.reps ? o.reps : o.quick ? 3 : 5;
    o.out = o.out ? o.out : "bench/results/aggregate.json";
    bench_machine_desc(r->machine, sizeof(r->machine));
    fprintf(stderr, "bench_aggregate: preparing %" PRId64 " x %" PRId64 " gradients...\n",
            o.inputs, o.n);
    if (!make_bufs(&o, &b, &err)) {
        fprintf(stderr, "bench_aggregate: %" PRId64 " reps + 1 warm-up of %d modes...\n",
                o.reps, NMODES);
        r->ok = run_all(&o, &b, r, &err) == TS_OK;
    }
    free_bufs(&o, &b);
    if (r->ok) {
        print_table(&o, r);
        if (!write_json(&o, r, &err)) {
            printf("wrote %s\n", o.out);
            rc = 0;
        }
    }
    if (rc)
        fprintf(stderr, "bench_aggregate: %s\n", err.msg);
    free(r);
    return rc;
}
