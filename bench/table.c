/* table.c - bench_table: what does a sparse step cost a shard's row store (lib/table)?
 *
 * Why: issue 46's tables hold up to 10^8 rows of which a step touches a few thousand, so a
 * step's cost should be the arithmetic of the rows it touches, not the map around them. Each
 * step, --ranks ranks push --rows distinct ids each (uniform over --ids, sorted; rows shared
 * across ranks as random draws make them) of --dim floats to one table, Adam, BSP, in exact
 * mode (float pushes rounded by the table) and in float mode; the last push applies the step.
 * Timed: the step (every rank's push and the update), and a pull of one rank's --rows ids.
 * The defaults measure a table whose rows exist (20000 ids, 50 steps first); --ids 1000000
 * --warmup 5 measures steps that create most of their rows.
 * Baseline from the same run: the arithmetic of such a step with no map, as a dense partition
 * does it: ts_fixed_add_f32 of each rank's --rows x --dim gradients into contiguous sums, then
 * ts_fixed_to_f32 and Adam over the step's distinct rows (their mean count over the timed
 * steps) x --dim elements. Rows are created in the first steps (--warmup, not timed); the
 * table's rows and bytes are reported at the end.
 * Output: a table and bench/results/table.json; headline = the exact step against the dense
 * arithmetic. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchlib.h"
#include "table/table.h"
#include "util/flags.h"
#include "util/json.h"

#define MAX_STEPS 1000

struct opts {
    int64_t ranks, rows, dim, ids, steps, warmup;
    const char *init, *out;
    bool quick;
};

struct mode_res {
    double step_ms, pull_ms;
    uint64_t count, bytes;
};

struct run {
    struct opts o;
    char machine[192];
    uint64_t *ids;           /* ranks x rows, each rank's sorted */
    float *grad;             /* rows x dim */
    float *out;              /* rows x dim */
    int64_t *acc;            /* baseline: rows x dim */
    float *param, *state, *g;
    struct mode_res res[2];  /* exact, float */
    double distinct;         /* rows a timed step touches, mean */
    double dense_ms;
};

static double r3(double x) { return (double)bench_round_i(x * 1e3) / 1e3; }

/* The distinct ids among the ranks' sorted lists of a step. */
static uint64_t distinct(const struct run *r)
{
    size_t nr = (size_t)r->o.ranks, n = (size_t)r->o.rows, pos[1024] = { 0 };
    uint64_t count = 0, last = UINT64_MAX;

    for (;;) {
        size_t best = nr;

        for (size_t k = 0; k < nr; k++)
            if (pos[k] < n && (best == nr || r->ids[k * n + pos[k]] < r->ids[best * n + pos[best]]))
                best = k;
        if (best == nr)
            return count;
        count += r->ids[best * n + pos[best]] != last;
        last = r->ids[best * n + pos[best]];
        pos[best]++;
    }
}

static ts_status one_mode(struct run *r, bool exact, struct mode_res *m, struct ts_err *err)
{
    struct ts_job job;
    struct ts_table_cfg cfg = { .name = "bench", .dim = (uint32_t)r->o.dim,
                                .max_id = (uint64_t)r->o.ids + (uint64_t)r->o.rows,
                                .init = r->o.init, .seed = 1, .optimizer = "adam:lr=0.001" };
    struct ts_table_budget budget;
    struct ts_table *t;
    double step_ms[MAX_STEPS], pull_ms[MAX_STEPS];
    uint64_t seed = 7;
    ts_status st;

    if ((st = ts_job_init(&job, "bench", (uint32_t)r->o.ranks, exact, "sgd", 256, err)))
        return st;
    ts_table_budget_init(&budget, 0);
    if ((st = ts_table_create(&job, &cfg, &budget, &t, err)))
        return st;
    for (int64_t s = 0; !st && s < r->o.warmup + r->o.steps; s++) {
        int64_t t0, t1;

        for (int64_t k = 0; k < r->o.ranks; k++)
            bench_sorted_ids(&seed, (uint64_t)r->o.ids, (size_t)r->o.rows,
                             r->ids + k * r->o.rows);
        t0 = ts_now_ns();
        for (int64_t k = 0; !st && k < r->o.ranks; k++) {
            struct ts_row_push in = { .rank = (uint32_t)k, .step = (uint64_t)s,
                                      .n = (size_t)r->o.rows, .ids = r->ids + k * r->o.rows,
                                      .encoding = exact ? TS_ENC_FIXED_F32 : TS_ENC_RAW,
                                      .grad = r->grad };
            bool applied;

            st = ts_table_push(t, &in, &applied, err);
        }
        t1 = ts_now_ns();
        if (!st)
            st = ts_table_pull(t, 0, (uint64_t)s + 1, 1000, r->ids, (size_t)r->o.rows, r->out,
                               err);
        if (s >= r->o.warmup) {
            r->distinct += (double)distinct(r) / (double)(2 * r->o.steps);   /* two modes */
            step_ms[s - r->o.warmup] = (double)(t1 - t0) / 1e6;
            pull_ms[s - r->o.warmup] = (double)(ts_now_ns() - t1) / 1e6;
        }
    }
    if (!st) {
        m->step_ms = bench_median(step_ms, (size_t)r->o.steps);
        m->pull_ms = bench_median(pull_ms, (size_t)r->o.steps);
        m->count = ts_table_count(t);
        m->bytes = ts_table_budget_used(&budget);
    }
    ts_table_free(t);
    return st;
}

/* The arithmetic of a step with no map (above). */
static ts_status dense(struct run *r, struct ts_err *err)
{
    struct ts_optim_cfg cfg;
    size_t n = (size_t)(r->o.rows * r->o.dim), u = (size_t)r->distinct * (size_t)r->o.dim;
    double ms[MAX_STEPS];
    ts_status st;

    if ((st = ts_optim_parse("adam:lr=0.001", &cfg, err)))
        return st;
    for (int64_t s = 0; s < r->o.steps; s++) {
        int64_t t0 = ts_now_ns();

        memset(r->acc, 0, n * sizeof(*r->acc));
        for (int64_t k = 0; k < r->o.ranks; k++)
            if ((st = ts_fixed_add_f32(r->acc, r->grad, n, err)))
                return st;
        ts_fixed_to_f32(r->acc, u, 256, r->g);
        ts_optim_apply(&cfg, (uint64_t)s + 1, r->param, r->state, r->g, u);
        ms[s] = (double)(ts_now_ns() - t0) / 1e6;
    }
    r->dense_ms = bench_median(ms, (size_t)r->o.steps);
    return TS_OK;
}

static ts_status measure(void *arg, struct ts_err *err)
{
    struct run *r = arg;
    ts_status st;

    if ((st = one_mode(r, true, &r->res[0], err)) || (st = one_mode(r, false, &r->res[1], err)))
        return st;
    return dense(r, err);
}

static void print_table(const void *arg)
{
    const struct run *r = arg;
    static const char *const names[2] = { "exact", "float" };
    double rows = (double)(r->o.ranks * r->o.rows);

    printf("bench_table: %" PRId64 " ranks x %" PRId64 " rows of dim %" PRId64 " a step, ids "
           "uniform over %" PRId64 ", init %s, Adam, BSP; median of %" PRId64 " steps after %"
           PRId64 " (%s)\n\n", r->o.ranks, r->o.rows, r->o.dim, r->o.ids, r->o.init, r->o.steps,
           r->o.warmup, r->machine);
    printf("%-6s | %8s | %12s | %9s | %10s | %10s\n", "mode", "step ms", "rows/s pushed",
           "pull ms", "rows held", "row MiB");
    for (int m = 0; m < 2; m++)
        printf("%-6s | %8.2f | %12.0f | %9.2f | %10" PRIu64 " | %10.1f\n", names[m],
               r->res[m].step_ms, rows / (r->res[m].step_ms / 1e3), r->res[m].pull_ms,
               r->res[m].count, (double)r->res[m].bytes / 1048576);
    printf("%-6s | %8.2f |  (no map: fixed-point sums of the pushes, Adam on %.0f distinct "
           "rows)\n", "dense", r->dense_ms, r->distinct);
}

static ts_status write_json(const void *arg, struct ts_err *err)
{
    const struct run *r = arg;
    static const char *const names[2] = { "exact", "float" };
    struct ts_json j;

    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "name", "table");
    ts_json_str(&j, "machine", r->machine);
    ts_json_bool(&j, "quick", r->o.quick);
    ts_json_int(&j, "ranks", r->o.ranks);
    ts_json_int(&j, "rows", r->o.rows);
    ts_json_int(&j, "dim", r->o.dim);
    ts_json_int(&j, "ids", r->o.ids);
    ts_json_str(&j, "init", r->o.init);
    ts_json_int(&j, "steps", r->o.steps);
    for (int m = 0; m < 2; m++) {
        ts_json_obj(&j, names[m]);
        ts_json_num(&j, "step_ms", r3(r->res[m].step_ms));
        ts_json_num(&j, "pull_ms", r3(r->res[m].pull_ms));
        ts_json_uint(&j, "rows_held", r->res[m].count);
        ts_json_uint(&j, "row_bytes", r->res[m].bytes);
        ts_json_end(&j);
    }
    ts_json_num(&j, "distinct_rows", r3(r->distinct));
    ts_json_num(&j, "dense_ms", r3(r->dense_ms));
    ts_json_obj(&j, "headline");
    ts_json_num(&j, "ours", r3(r->res[0].step_ms));
    ts_json_num(&j, "baseline", r3(r->dense_ms));
    ts_json_str(&j, "unit", "ms");
    ts_json_str(&j, "what", "an exact sparse step (every rank's push and the update) against "
                "the same arithmetic with no map (sums of the pushes, Adam on the distinct "
                "rows)");
    ts_json_num(&j, "ratio", r3(r->res[0].step_ms / r->dense_ms));
    ts_json_end(&j);
    return bench_write_json(&j, r->o.out, err);
}

static ts_status prepare(void *arg, struct ts_err *err)
{
    struct run *r = arg;
    size_t n = (size_t)(r->o.rows * r->o.dim), all = n * (size_t)r->o.ranks;
    uint64_t seed = 3;

    r->ids = malloc((size_t)(r->o.ranks * r->o.rows) * sizeof(*r->ids));
    r->grad = malloc(n * sizeof(float));
    r->out = malloc(n * sizeof(float));
    r->acc = calloc(all, sizeof(int64_t));
    r->param = calloc(all, sizeof(float));
    r->state = calloc(2 * all, sizeof(float));
    r->g = malloc(all * sizeof(float));
    if (!r->ids || !r->grad || !r->out || !r->acc || !r->param || !r->state || !r->g)
        return ts_err_set(err, TS_ENOMEM, "out of memory for %zu elements", all);
    for (size_t i = 0; i < n; i++)
        r->grad[i] = (float)((double)(bench_rng_next(&seed) >> 11) * 0x1p-53 - 0.5) * 0.01f;
    return TS_OK;
}

static void release(void *arg)
{
    struct run *r = arg;

    free(r->ids);
    free(r->grad);
    free(r->out);
    free(r->acc);
    free(r->param);
    free(r->state);
    free(r->g);
    free(r);
}

int main(int argc, char **argv)
{
    static const char about[] =
        "Measures a BSP step of a sparse embedding table's row store (lib/table):\n"
        "every rank's push and the update, exact and float, and a pull, beside the\n"
        "dense arithmetic of the same elements. Prints a table and writes JSON\n"
        "whose headline is the exact step against that arithmetic.";
    struct opts o = { 0 };
    const struct ts_flag flags[] = {
        { "ranks", TS_FLAG_INT, &o.ranks, "N", "ranks pushing each step (default 4)", 1, 1024 },
        { "rows", TS_FLAG_INT, &o.rows, "N", "rows each rank pushes a step (default 4096)", 1,
          1 << 20 },
        { "dim", TS_FLAG_INT, &o.dim, "N", "floats a row (default 64)", 1, TS_TABLE_DIM_MAX },
        { "ids", TS_FLAG_INT, &o.ids, "N", "ids drawn from 0..N-1 (default 20000)", 1,
          1ll << 40 },
        { "steps", TS_FLAG_INT, &o.steps, "N", "timed steps, the median reported (default 20)",
          1, MAX_STEPS },
        { "warmup", TS_FLAG_INT, &o.warmup, "N", "untimed steps first (default 50)", 0, 1000 },
        { "init", TS_FLAG_STR, &o.init, "SPEC", "the rows' initializer (default normal:0.01)", 0,
          0 },
        { "out", TS_FLAG_STR, &o.out, "FILE", "results (default bench/results/table.json)", 0,
          0 },
        { "quick", TS_FLAG_BOOL, &o.quick, NULL, "smoke run: 1024 rows, 5 steps (explicit "
          "flags still win)", 0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    static const struct bench_phases phases = {
        "bench_table", prepare, measure, print_table, write_json, release };
    struct run *r;
    int done;

    if ((done = ts_flags_program("bench_table", NULL, about, flags, argc, argv)) >= 0)
        return done;
    if (!(r = calloc(1, sizeof(*r)))) {
        fprintf(stderr, "bench_table: out of memory\n");
        return 2;
    }
    o.ranks = o.ranks ? o.ranks : 4;
    o.rows = o.rows ? o.rows : o.quick ? 1024 : 4096;
    o.dim = o.dim ? o.dim : 64;
    o.ids = o.ids ? o.ids : 20000;
    o.steps = o.steps ? o.steps : o.quick ? 5 : 20;
    o.warmup = o.warmup ? o.warmup : o.quick ? 5 : 50;
    o.init = o.init ? o.init : "normal:0.01";
    o.out = o.out ? o.out : "bench/results/table.json";
    r->o = o;
    bench_machine_desc(r->machine, sizeof(r->machine));
    return bench_run(&phases, r, o.out);
}
