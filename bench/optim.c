/* optim.c - bench_optim: what does one optimizer update of a shard's values cost?
 *
 * Why: after the sums, the optimizer is the shard's other pass over every parameter each step
 * (issue 19 measured Adam at about 200 ms for 16 Mi elements, the largest remaining cost).
 * lib/tensor's update loops are vectorised (optim.c, TS_HOT in internal.h) and must give the
 * bits of the portable scalar loops. This program times, on one core, ts_optim_apply on --n
 * floats for SGD, momentum and Adam (each without and with weight decay) against the baseline:
 * the same optim.c compiled as the portable build (TS_TENSOR_NO_CLONES, no auto-vectorisation,
 * CMake target bench_optim_scalar), which is what the loops compiled to before they were
 * written for the vectoriser. Both run in turn within a rep so that drift hits them alike, on
 * their own copies of the same values, state and gradient; one warm-up rep is not counted; the
 * median of --reps is reported. After the reps, values and state of the two must be the same
 * bits, or the run fails. Output: a table, and bench/results/optim.json whose headline is
 * Adam's median ms against the scalar baseline's. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchlib.h"
#include "optim_scalar.h"
#include "tensor/tensor.h"
#include "util/flags.h"
#include "util/json.h"

#define MAX_REPS 101

static const char *const specs[] = {
    "sgd:lr=0.01", "sgd:lr=0.01,weight_decay=0.0001", "momentum:lr=0.01",
    "momentum:lr=0.01,weight_decay=0.0001", "adam:lr=0.001",
    "adam:lr=0.001,weight_decay=0.0001",
};
#define NSPECS (sizeof(specs) / sizeof(specs[0]))
#define HEADLINE 4                 /* adam:lr=0.001 */

struct opts {
    int64_t n, reps;
    const char *out;
    bool quick;
};

/* One side's arrays: values, state (2 n), gradient. */
struct side {
    float *p, *st, *g;
};

struct row {
    double ms[2][MAX_REPS], med[2];
};

static float rnd(uint64_t *s)
{
    return (float)((double)(bench_rng_next(s) >> 11) * 0x1p-53 * 2.0 - 1.0);
}

static bool side_alloc(struct side *a, size_t n)
{
    a->p = malloc(n * sizeof(float));
    a->st = calloc(2 * n, sizeof(float));
    a->g = malloc(n * sizeof(float));
    return a->p && a->st && a->g;
}

static void side_free(struct side *a)
{
    free(a->p);
    free(a->st);
    free(a->g);
}

/* Same values and gradient on both sides, zeroed state (every page written once). */
static void side_fill(struct side *v, struct side *s, size_t n)
{
    uint64_t r = 7;

    for (size_t i = 0; i < n; i++) {
        v->p[i] = s->p[i] = rnd(&r);
        v->g[i] = s->g[i] = rnd(&r) * 1e-2f;
    }
    memset(v->st, 0, 2 * n * sizeof(float));
    memset(s->st, 0, 2 * n * sizeof(float));
}

/* Rep -1 warms up; then both sides in turn, each rep one update (step rep + 2). */
static bool run_spec(const struct opts *o, const struct ts_optim_cfg *c, struct side *v,
                     struct side *s, struct row *r)
{
    size_t n = (size_t)o->n;

    side_fill(v, s, n);
    for (int64_t rep = -1; rep < o->reps; rep++) {
        uint64_t step = (uint64_t)(rep + 2);
        int64_t t0 = ts_now_ns();

        ts_optim_apply(c, step, v->p, v->st, v->g, n);
        int64_t t1 = ts_now_ns();
        bench_optim_apply_scalar(c, step, s->p, s->st, s->g, n);
        int64_t t2 = ts_now_ns();
        if (rep >= 0) {
            r->ms[0][rep] = (double)(t1 - t0) / 1e6;
            r->ms[1][rep] = (double)(t2 - t1) / 1e6;
        }
    }
    r->med[0] = bench_median(r->ms[0], (size_t)o->reps);
    r->med[1] = bench_median(r->ms[1], (size_t)o->reps);
    return !memcmp(v->p, s->p, n * sizeof(float)) &&
           !memcmp(v->st, s->st, 2 * n * sizeof(float));
}

static double round3(double x) { return (double)bench_round_i(x * 1e3) / 1e3; }

static ts_status write_json(const struct opts *o, const char *machine, const struct row *rows,
                            struct ts_err *err)
{
    struct ts_json j;

    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "name", "optim");
    ts_json_str(&j, "machine", machine);
    ts_json_bool(&j, "ok", true);
    ts_json_bool(&j, "quick", o->quick);
    ts_json_int(&j, "n", o->n);
    ts_json_int(&j, "reps", o->reps);
    ts_json_arr(&j, "rows");
    for (size_t k = 0; k < NSPECS; k++) {
        ts_json_obj(&j, NULL);
        ts_json_str(&j, "optimizer", specs[k]);
        ts_json_num(&j, "vector_median_ms", round3(rows[k].med[0]));
        ts_json_num(&j, "scalar_median_ms", round3(rows[k].med[1]));
        ts_json_end(&j);
    }
    ts_json_end(&j);
    ts_json_obj(&j, "headline");
    ts_json_num(&j, "ours", round3(rows[HEADLINE].med[0]));
    ts_json_num(&j, "baseline", round3(rows[HEADLINE].med[1]));
    ts_json_str(&j, "unit", "ms per Adam update of n floats, one core (vectorised vs the "
                            "portable scalar build, same bits; ratio: ours / baseline)");
    ts_json_num(&j, "ratio", round3(rows[HEADLINE].med[0] / rows[HEADLINE].med[1]));
    ts_json_end(&j);
    return bench_write_json(&j, o->out, err);
}

int main(int argc, char **argv)
{
    static const char about[] =
        "Times one optimizer update (ts_optim_apply) of N floats on one core, for\n"
        "SGD, momentum and Adam, against the portable scalar build of the same\n"
        "code (baseline), and checks both give the same bits. Prints a table and\n"
        "writes JSON whose headline is Adam's ms against the baseline's.";
    struct opts o = { 0 };
    const struct ts_flag flags[] = {
        { "n", TS_FLAG_INT, &o.n, "N", "parameters (default 16777216 = 64 MiB)", 1, 1ll << 32 },
        { "reps", TS_FLAG_INT, &o.reps, "R", "timed updates; the median is reported "
                                             "(default 5)", 1, MAX_REPS },
        { "out", TS_FLAG_STR, &o.out, "FILE", "results (default bench/results/optim.json)", 0,
          0 },
        { "quick", TS_FLAG_BOOL, &o.quick, NULL, "smoke run: 1 Mi floats, 3 reps (explicit "
                                                 "flags still win)", 0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    static struct row rows[NSPECS];
    struct side v = { 0 }, s = { 0 };
    struct ts_err err = { 0 };
    char machine[192];
    int done, rc = 1;

    if ((done = ts_flags_program("bench_optim", NULL, about, flags, argc, argv)) >= 0)
        return done;
    o.n = o.n ? o.n : o.quick ? 1 << 20 : 1 << 24;
    o.reps = o.reps ? o.reps : o.quick ? 3 : 5;
    o.out = o.out ? o.out : "bench/results/optim.json";
    bench_machine_desc(machine, sizeof(machine));
    if (!side_alloc(&v, (size_t)o.n) || !side_alloc(&s, (size_t)o.n)) {
        fprintf(stderr, "bench_optim: out of memory for 2 x %" PRId64 " x 4 floats\n", o.n);
        goto out_free;
    }
    printf("bench_optim: one update of %" PRId64 " floats (%.1f MiB), one core, median of %"
           PRId64 " reps (%s)\n\n", o.n, (double)o.n * 4 / 1048576, o.reps, machine);
    printf("%-40s | %10s | %10s | %7s\n", "optimizer", "vector ms", "scalar ms", "speedup");
    for (size_t k = 0; k < NSPECS; k++) {
        struct ts_optim_cfg c;

        if (ts_optim_parse(specs[k], &c, &err))
            goto out_free;
        if (!run_spec(&o, &c, &v, &s, &rows[k])) {
            ts_err_set(&err, TS_EINTERNAL, "%s: the vector and scalar updates gave other bits",
                       specs[k]);
            goto out_free;
        }
        printf("%-40s | %10.1f | %10.1f | %6.2fx\n", specs[k], rows[k].med[0], rows[k].med[1],
               rows[k].med[1] / rows[k].med[0]);
    }
    printf("\nbaseline: the same optim.c built portable (TS_TENSOR_NO_CLONES, "
           "-fno-tree-vectorize); values and state bit-identical: yes\n");
    if (!write_json(&o, machine, rows, &err)) {
        printf("wrote %s\n", o.out);
        rc = 0;
    }
out_free:
    if (rc)
        fprintf(stderr, "bench_optim: %s\n", err.msg);
    side_free(&v);
    side_free(&s);
    return rc;
}
