/* table_redo.c - bench_table_redo: what does the tables' redo log (lib/table/redo.c) cost a
 * step, and how fast does a shard read it back?
 *
 * Why: a shard that comes back from its own disk needs every step it answered on the disk
 * (docs/embeddings.md, "Restarting from its own disk"): after each BSP step the images of the
 * rows it changed go to the log, and the answer to the pull of the next version waits for
 * their sync. That wait is on the step's path; this measures it.
 * Each step, --ranks ranks push --rows ids each (uniform over --ids, sorted) of --dim floats
 * to one table (Adagrad, exact), on a log in --dir. Three runs of the same steps: no log (the
 * baseline), the log written and not waited for, and the log waited for after each step (what
 * a shard does before it answers). Then a checkpoint of the table (its image) and a replay of
 * the whole log into a new table, timed.
 * Output: a table and bench/results/table_redo.json; headline = the durable step against the
 * step with no log. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "benchlib.h"
#include "table/redo.h"
#include "table/table.h"
#include "util/flags.h"
#include "util/json.h"

#define MAX_STEPS 2000

struct opts {
    int64_t ranks, rows, dim, ids, steps, warmup;
    const char *dir, *out;
    bool quick;
};

enum { NONE, WRITTEN, DURABLE, MODES };
static const char *const names[MODES] = { "no log", "logged", "durable" };

struct mode_res {
    double step_ms, p90_ms;
    double mb_step;              /* bytes logged a step */
    double syncs_step;
};

struct run {
    struct opts o;
    char machine[192];
    char logdir[4200];
    uint64_t *ids;               /* ranks x rows */
    float *grad;                 /* rows x dim */
    struct mode_res res[MODES];
    double checkpoint_ms, replay_ms, log_mb, rows;
};

static double r3(double x) { return (double)bench_round_i(x * 1e3) / 1e3; }

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static ts_status make(const struct run *r, struct ts_job *job, struct ts_table **t,
                      struct ts_err *err)
{
    struct ts_table_cfg cfg = { .name = "bench", .dim = (uint32_t)r->o.dim,
                                .max_id = (uint64_t)r->o.ids + (uint64_t)r->o.rows,
                                .init = "normal:0.01", .seed = 1,
                                .optimizer = "adagrad:lr=0.05" };
    ts_status st;

    if ((st = ts_job_init(job, "bench", (uint32_t)r->o.ranks, true, "sgd", 256, err)))
        return st;
    return ts_table_create(job, &cfg, NULL, t, err);
}

static ts_status wipe(const struct run *r)
{
    char cmd[4300];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", r->logdir);
    return system(cmd) ? TS_EIO : TS_OK;
}

static ts_status replay_fn(void *ctx, const struct ts_redo_rec *rec, struct ts_err *err)
{
    return ts_table_redo_apply(ctx, rec, err);
}

static ts_status one_mode(struct run *r, int mode, struct ts_err *err)
{
    struct mode_res *m = &r->res[mode];
    struct ts_redo *redo = NULL;
    struct ts_redo_stats rs0 = { 0 }, rs1 = { 0 };
    struct ts_job job;
    struct ts_table *t;
    double ms[MAX_STEPS];
    uint64_t seed = 7;
    int64_t bytes0 = 0;
    ts_status st;

    if (wipe(r))
        return ts_err_set(err, TS_EIO, "cannot empty %s", r->logdir);
    if ((st = make(r, &job, &t, err)))
        return st;
    if (mode != NONE && (!(st = ts_redo_open(r->logdir, &redo, err))))
        st = ts_table_redo(t, redo, "bench/bench", err);
    for (int64_t s = 0; !st && s < r->o.warmup + r->o.steps; s++) {
        int64_t t0;

        for (int64_t k = 0; k < r->o.ranks; k++)
            bench_sorted_ids(&seed, (uint64_t)r->o.ids, (size_t)r->o.rows,
                             r->ids + k * r->o.rows);
        if (s == r->o.warmup && redo) {
            ts_redo_stats(redo, &rs0);
            bytes0 = (int64_t)rs0.bytes;
        }
        t0 = ts_now_ns();
        for (int64_t k = 0; !st && k < r->o.ranks; k++) {
            struct ts_row_push in = { .rank = (uint32_t)k, .step = (uint64_t)s,
                                      .n = (size_t)r->o.rows, .ids = r->ids + k * r->o.rows,
                                      .encoding = TS_ENC_FIXED_F32, .grad = r->grad };
            bool applied;

            st = ts_table_push(t, &in, &applied, err);
        }
        if (!st && mode == DURABLE)
            st = ts_table_redo_wait(t, 10000, err);
        if (s >= r->o.warmup)
            ms[s - r->o.warmup] = (double)(ts_now_ns() - t0) / 1e6;
    }
    if (!st && redo) {   /* whatever is queued, out before the figures */
        st = ts_table_redo_wait(t, 60000, err);
        ts_redo_stats(redo, &rs1);
        m->mb_step = (double)((int64_t)rs1.bytes - bytes0) / 1e6 / (double)r->o.steps;
        m->syncs_step = (double)(rs1.syncs - rs0.syncs) / (double)r->o.steps;
    }
    if (!st) {
        m->step_ms = bench_median(ms, (size_t)r->o.steps);
        qsort(ms, (size_t)r->o.steps, sizeof(*ms), cmp_double);
        m->p90_ms = ms[(size_t)r->o.steps * 9 / 10];
    }
    if (!st && mode == DURABLE) {   /* a checkpoint, then the whole log read back */
        struct ts_redo_stats rs;
        struct ts_table *back = NULL;
        struct ts_job job2;
        int64_t t0 = ts_now_ns();

        if (!(st = ts_redo_checkpoint(redo, err)) && !(st = ts_table_redo_wait(t, 60000, err)))
            r->checkpoint_ms = (double)(ts_now_ns() - t0) / 1e6;
        ts_redo_stats(redo, &rs);
        r->rows = (double)ts_table_count(t);
        ts_redo_close(redo);
        redo = NULL;
        if (!st && !(st = ts_redo_open(r->logdir, &redo, err)) &&
            !(st = make(r, &job2, &back, err))) {
            struct ts_redo_replayed got;

            t0 = ts_now_ns();
            if (!(st = ts_redo_replay(redo, replay_fn, back, &got, err))) {
                r->replay_ms = (double)(ts_now_ns() - t0) / 1e6;
                r->log_mb = (double)got.bytes / 1e6;
                if (ts_table_count(back) != ts_table_count(t))
                    st = ts_err_set(err, TS_EINTERNAL, "the replay holds %" PRIu64 " rows, "
                                    "the table %" PRIu64, ts_table_count(back),
                                    ts_table_count(t));
            }
        }
        ts_table_free(back);
    }
    ts_table_free(t);
    ts_redo_close(redo);
    return st;
}

static ts_status measure(void *arg, struct ts_err *err)
{
    struct run *r = arg;
    ts_status st = TS_OK;

    for (int m = 0; m < MODES && !st; m++)
        st = one_mode(r, m, err);
    wipe(r);
    return st;
}

static void print_table(const void *arg)
{
    const struct run *r = arg;
    double rows = (double)(r->o.ranks * r->o.rows);

    printf("bench_table_redo: %" PRId64 " ranks x %" PRId64 " rows of dim %" PRId64 " a step, "
           "ids uniform over %" PRId64 ", Adagrad, exact; median of %" PRId64 " steps after %"
           PRId64 "; log in %s (%s)\n\n", r->o.ranks, r->o.rows, r->o.dim, r->o.ids,
           r->o.steps, r->o.warmup, r->o.dir, r->machine);
    printf("%-8s | %8s | %8s | %12s | %8s | %8s | %6s\n", "log", "step ms", "p90 ms",
           "rows/s pushed", "MB/step", "syncs/st", "x none");
    for (int m = 0; m < MODES; m++)
        printf("%-8s | %8.2f | %8.2f | %12.0f | %8.3f | %8.2f | %6.2f\n", names[m],
               r->res[m].step_ms, r->res[m].p90_ms, rows / (r->res[m].step_ms / 1e3),
               r->res[m].mb_step, r->res[m].syncs_step,
               r->res[NONE].step_ms / r->res[m].step_ms);
    printf("\ncheckpoint of %.0f rows: %.1f ms; replay of the log (%.1f MB): %.1f ms, "
           "%.0f MB/s\n", r->rows, r->checkpoint_ms, r->log_mb, r->replay_ms,
           r->log_mb / (r->replay_ms / 1e3));
}

static ts_status write_json(const void *arg, struct ts_err *err)
{
    const struct run *r = arg;
    static const char *const keys[MODES] = { "none", "logged", "durable" };
    struct ts_json j;

    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "name", "table_redo");
    ts_json_str(&j, "machine", r->machine);
    ts_json_bool(&j, "quick", r->o.quick);
    ts_json_int(&j, "ranks", r->o.ranks);
    ts_json_int(&j, "rows", r->o.rows);
    ts_json_int(&j, "dim", r->o.dim);
    ts_json_int(&j, "ids", r->o.ids);
    ts_json_int(&j, "steps", r->o.steps);
    ts_json_str(&j, "dir", r->o.dir);
    for (int m = 0; m < MODES; m++) {
        ts_json_obj(&j, keys[m]);
        ts_json_num(&j, "step_ms", r3(r->res[m].step_ms));
        ts_json_num(&j, "p90_ms", r3(r->res[m].p90_ms));
        ts_json_num(&j, "mb_step", r3(r->res[m].mb_step));
        ts_json_num(&j, "syncs_step", r3(r->res[m].syncs_step));
        ts_json_end(&j);
    }
    ts_json_num(&j, "rows_held", r->rows);
    ts_json_num(&j, "checkpoint_ms", r3(r->checkpoint_ms));
    ts_json_num(&j, "replay_ms", r3(r->replay_ms));
    ts_json_num(&j, "log_mb", r3(r->log_mb));
    ts_json_obj(&j, "headline");
    ts_json_num(&j, "ours", r3(r->res[DURABLE].step_ms));
    ts_json_num(&j, "baseline", r3(r->res[NONE].step_ms));
    ts_json_str(&j, "unit", "ms");
    ts_json_str(&j, "what", "an exact sparse step whose rows are synced to the redo log before "
                "it returns, against the same step with no log");
    ts_json_num(&j, "ratio", r3(r->res[DURABLE].step_ms / r->res[NONE].step_ms));
    ts_json_end(&j);
    return bench_write_json(&j, r->o.out, err);
}

static ts_status prepare(void *arg, struct ts_err *err)
{
    struct run *r = arg;
    size_t n = (size_t)(r->o.rows * r->o.dim);
    uint64_t seed = 3;

    snprintf(r->logdir, sizeof(r->logdir), "%s/tessera-bench-redo-%d", r->o.dir, (int)getpid());
    r->ids = malloc((size_t)(r->o.ranks * r->o.rows) * sizeof(*r->ids));
    r->grad = malloc(n * sizeof(float));
    if (!r->ids || !r->grad)
        return ts_err_set(err, TS_ENOMEM, "out of memory for %zu elements", n);
    for (size_t i = 0; i < n; i++)
        r->grad[i] = (float)((double)(bench_rng_next(&seed) >> 11) * 0x1p-53 - 0.5) * 0.01f;
    return TS_OK;
}

static void release(void *arg)
{
    struct run *r = arg;

    free(r->ids);
    free(r->grad);
    free(r);
}

int main(int argc, char **argv)
{
    static const char about[] =
        "Measures what the tables' redo log costs a BSP step of a sparse table: the\n"
        "same steps with no log, with the log written, and with each step's record\n"
        "synced before the step returns (a shard's answer waits for that); then a\n"
        "checkpoint and a replay of the log. Prints a table and writes JSON whose\n"
        "headline is the durable step against the step with no log.";
    struct opts o = { 0 };
    const struct ts_flag flags[] = {
        { "ranks", TS_FLAG_INT, &o.ranks, "N", "ranks pushing each step (default 2)", 1, 1024 },
        { "rows", TS_FLAG_INT, &o.rows, "N", "rows each rank pushes a step (default 512: the "
          "CTR trainer's 8 tables x batch 128 over 2 ranks)", 1, 1 << 20 },
        { "dim", TS_FLAG_INT, &o.dim, "N", "floats a row (default 16)", 1, TS_TABLE_DIM_MAX },
        { "ids", TS_FLAG_INT, &o.ids, "N", "ids drawn from 0..N-1 (default 100000)", 1,
          1ll << 40 },
        { "steps", TS_FLAG_INT, &o.steps, "N", "timed steps, the median reported (default "
          "500)", 1, MAX_STEPS },
        { "warmup", TS_FLAG_INT, &o.warmup, "N", "untimed steps first (default 50)", 0, 1000 },
        { "dir", TS_FLAG_STR, &o.dir, "DIR", "where the log goes: a disk like the shards' "
          "(default /var/tmp)", 0, 0 },
        { "out", TS_FLAG_STR, &o.out, "FILE", "results (default bench/results/table_redo.json)",
          0, 0 },
        { "quick", TS_FLAG_BOOL, &o.quick, NULL, "smoke run: 20 steps after 5 (explicit flags "
          "still win)", 0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    static const struct bench_phases phases = {
        "bench_table_redo", prepare, measure, print_table, write_json, release };
    struct run *r;
    int done;

    if ((done = ts_flags_program("bench_table_redo", NULL, about, flags, argc, argv)) >= 0)
        return done;
    if (!(r = calloc(1, sizeof(*r)))) {
        fprintf(stderr, "bench_table_redo: out of memory\n");
        return 2;
    }
    o.ranks = o.ranks ? o.ranks : 2;
    o.rows = o.rows ? o.rows : 512;
    o.dim = o.dim ? o.dim : 16;
    o.ids = o.ids ? o.ids : 100000;
    o.steps = o.steps ? o.steps : o.quick ? 20 : 500;
    o.warmup = o.warmup ? o.warmup : o.quick ? 5 : 50;
    o.dir = o.dir ? o.dir : "/var/tmp";
    o.out = o.out ? o.out : "bench/results/table_redo.json";
    r->o = o;
    bench_machine_desc(r->machine, sizeof(r->machine));
    return bench_run(&phases, r, o.out);
}
