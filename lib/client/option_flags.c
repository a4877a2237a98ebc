/* option_flags.c - see option_flags.h. */
#include "client/option_flags.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "table/table.h"

static bool skipped(const char *flag, const char *const *skip)
{
    for (; skip && *skip; skip++)
        if (!strcmp(*skip, flag))
            return true;
    return false;
}

size_t ts_option_flags_add(struct ts_option_flags *s, struct ts_flag *flags, size_t *n,
                           size_t cap, const char *const *skip)
{
    size_t rows, added = 0;
    const struct tessera_option *r = tessera_options_schema(&rows);

    for (size_t i = 0; i < rows && i < TS_OPTION_FLAGS_MAX && *n < cap; i++) {
        if (!r[i].flag || skipped(r[i].flag, skip))
            continue;
        flags[(*n)++] = r[i].type == TESSERA_OPTION_BOOL
                            ? (struct ts_flag){ r[i].flag, TS_FLAG_BOOL, &s->set[i], NULL,
                                                r[i].help, 0, 0 }
                            : (struct ts_flag){ r[i].flag, TS_FLAG_STR, &s->text[i],
                                                r[i].metavar, r[i].help, 0, 0 };
        added++;
    }
    return added;
}

ts_status ts_option_flags_apply(const struct ts_option_flags *s, struct tessera_options *o,
                                struct ts_err *err)
{
    size_t rows;
    const struct tessera_option *r = tessera_options_schema(&rows);
    struct tessera_error e;
    char name[64];

    for (size_t i = 0; i < rows && i < TS_OPTION_FLAGS_MAX; i++) {
        if (!s->text[i] && !s->set[i])
            continue;
        snprintf(name, sizeof(name), "--%s", r[i].flag);
        if (tessera_options_set(o, name, s->text[i] ? s->text[i] : "1", &e))
            return ts_err_set(err, (ts_status)e.code, "%s", e.message);
    }
    return TS_OK;
}

ts_status ts_option_argv(const struct tessera_options *o, const char *const *skip, char **argv,
                         int *n, int cap, char *buf, size_t bufcap, struct ts_err *err)
{
    size_t rows, used = 0;
    const struct tessera_option *r = tessera_options_schema(&rows);

    for (size_t i = 0; i < rows; i++) {
        char v[4096];
        size_t len;
        if (!r[i].flag || skipped(r[i].flag, skip) || !tessera_options_get(o, &r[i], v, sizeof(v)))
            continue;
        len = strlen(r[i].flag) + 3 + (r[i].type == TESSERA_OPTION_BOOL ? 0 : strlen(v) + 1);
        if (*n + 2 >= cap || used + len > bufcap)
            return ts_err_set(err, TS_EINVAL, "--%s: no room for the worker's flags",
                              r[i].flag);
        argv[(*n)++] = buf + used;
        used += (size_t)snprintf(buf + used, bufcap - used, "--%s", r[i].flag) + 1;
        if (r[i].type != TESSERA_OPTION_BOOL) {
            argv[(*n)++] = buf + used;
            used += (size_t)snprintf(buf + used, bufcap - used, "%s", v) + 1;
        }
    }
    return TS_OK;
}

/* ---- the built-in trainer's own options ---- */

#define TROW(flag, kind, field, meta, help, min, max)                                          \
    { flag, kind, offsetof(struct ts_trainer_opts, field), meta, help, min, max }

static const struct trainer_row {
    const char *flag;
    enum ts_flag_kind kind;
    size_t offset;
    const char *metavar, *help;
    int64_t min, max;
} trainer_rows[] = {
    TROW("epochs", TS_FLAG_INT, epochs, "E", "epochs to train (default: 3 for tessera train, "
         "1 for a worker started alone)", 1, 1000),
    TROW("steps", TS_FLAG_INT, steps, "K", "exactly K global steps instead of epochs", 0,
         100000000),
    TROW("seed", TS_FLAG_INT, seed, "S", "seed of the init and the data order (default 1)", 0,
         INT64_MAX),
    TROW("batch", TS_FLAG_INT, batch, "B", "global batch (default 64)", 1, 60000),
    TROW("micro", TS_FLAG_INT, micro, "M", "micro-batch, divides B (default 16)", 1, 60000),
    TROW("partition-kb", TS_FLAG_INT, partition_kb, "KB", "partition size (default: 4096 with "
         "every shard on this host, smaller between hosts; docs/placement.md)", 0, 131072),
    TROW("delay-ms", TS_FLAG_INT, delay_ms, "MS", "a slower link, for benchmarks: each "
         "data-plane send sleeps MS first", 0, 60000),
    TROW("overlap", TS_FLAG_BOOL, overlap, NULL, "asp: each worker pushes and pulls a step "
         "while it computes the next, on values predicted from its last two pulls "
         "(docs/modes.md)", 0, 0),
    TROW("no-elastic", TS_FLAG_BOOL, no_elastic, NULL, "a worker that dies stops the job "
         "(default: its slot moves to a live worker; elastic needs bsp, no --sync-every, no "
         "top-k, no --compress-pull)", 0, 0),
    TROW("model", TS_FLAG_STR, model, "NAME", "mlp (default: the MLP on Fashion-MNIST) or ctr "
         "(a DLRM-style CTR model through sparse tables on a generated click log; "
         "docs/embeddings.md)", 0, 0),
    TROW("ctr-features", TS_FLAG_INT, ctr_features, "F", "--model ctr: categorical features, "
         "one table each (default 8)", 1, 64),
    TROW("ctr-rows", TS_FLAG_INT, ctr_rows, "N", "--model ctr: rows of each table (default "
         "100000)", 2, INT64_C(1) << 40),
    TROW("ctr-dim", TS_FLAG_INT, ctr_dim, "D", "--model ctr: floats a row (default 16)", 1,
         256),
    TROW("table-optimizer", TS_FLAG_STR, table_optimizer, "SPEC", "--model ctr: the tables' "
         "optimizer: sgd, adagrad or adam with options (default adagrad:lr=0.05)", 0, 0),
    TROW("eval-samples", TS_FLAG_INT, eval_samples, "N", "--model ctr: held-out samples "
         "scored at the end (default 20000)", 1, 10000000),
    TROW("prefetch-depth", TS_FLAG_INT, prefetch_depth, "D", "--model ctr: each step "
         "announces the rows of the batch D steps ahead (tessera_prefetch_rows), which "
         "shards with a disk tier read into memory meanwhile (default 2; 0: none; "
         "docs/embeddings.md, \"Prefetch\")", 0, 64),
    TROW("row-ttl", TS_FLAG_STR, row_ttl, "T|Ns|Nm|Nh|Nd", "--model ctr: drop a table row "
         "no step updated in the last T steps (at each multiple of T), or, without --exact, "
         "one not updated in N seconds, minutes, hours or days (within about twice that); "
         "made again from its initializer when touched; default: never; docs/embeddings.md, "
         "\"Row lifetime\"", 0, 0),
    TROW("json", TS_FLAG_BOOL, json, NULL, "one JSON document on stdout at the end (job, "
         "params_sha256, test_accuracy, steps, samples_per_s, ...; tessera train: nothing if "
         "the run fails; a worker: rank 0's only); progress goes to stderr", 0, 0),
};
#define NTRAINER (sizeof(trainer_rows) / sizeof(trainer_rows[0]))

void ts_trainer_flags_add(struct ts_trainer_opts *o, struct ts_flag *flags, size_t *n,
                          size_t cap)
{
    for (size_t i = 0; i < NTRAINER && *n < cap; i++) {
        const struct trainer_row *r = &trainer_rows[i];
        flags[(*n)++] = (struct ts_flag){ r->flag, r->kind, (char *)o + r->offset, r->metavar,
                                          r->help, r->min, r->max };
    }
}

ts_status ts_trainer_argv(const struct ts_trainer_opts *o, char **argv, int *n, int cap,
                          char *buf, size_t bufcap, struct ts_err *err)
{
    size_t used = 0;

    for (size_t i = 0; i < NTRAINER; i++) {
        const struct trainer_row *r = &trainer_rows[i];
        const void *p = (const char *)o + r->offset;
        const char *text = r->kind == TS_FLAG_STR ? *(const char *const *)p : NULL;
        if ((r->kind == TS_FLAG_BOOL && !*(const bool *)p) ||
            (r->kind == TS_FLAG_STR && !text))
            continue;
        if (*n + 2 >= cap || used + strlen(r->flag) + 26 + (text ? strlen(text) : 0) > bufcap)
            return ts_err_set(err, TS_EINVAL, "--%s: no room for the worker's flags", r->flag);
        argv[(*n)++] = buf + used;
        used += (size_t)snprintf(buf + used, bufcap - used, "--%s", r->flag) + 1;
        if (r->kind == TS_FLAG_INT) {
            argv[(*n)++] = buf + used;
            used += (size_t)snprintf(buf + used, bufcap - used, "%" PRId64,
                                     *(const int64_t *)p) + 1;
        } else if (text) {
            argv[(*n)++] = buf + used;
            used += (size_t)snprintf(buf + used, bufcap - used, "%s", text) + 1;
        }
    }
    return TS_OK;
}

ts_status ts_row_ttl_parse(const char *text, uint64_t *steps, uint64_t *seconds,
                           struct ts_err *err)
{
    static const struct {
        char unit;
        uint64_t seconds;
    } units[] = { { 's', 1 }, { 'm', 60 }, { 'h', 3600 }, { 'd', 86400 } };
    char *end = NULL;
    unsigned long long v;

    *steps = *seconds = 0;
    if (!text)
        return TS_OK;
    errno = 0;
    v = text[0] >= '0' && text[0] <= '9' ? strtoull(text, &end, 10) : 0;
    if (end && !errno && !*end && v <= (UINT64_C(1) << 40)) {
        *steps = v;
        return TS_OK;
    }
    for (size_t i = 0; end && !errno && end[0] && !end[1] && i < 4; i++)
        if (end[0] == units[i].unit && v >= 1 && v <= TS_TABLE_TTL_SECONDS_MAX / units[i].seconds) {
            *seconds = v * units[i].seconds;
            return TS_OK;
        }
    return ts_err_set(err, TS_EINVAL, "--row-ttl %s: want T (steps, at most 2^40) or a time, "
                      "N followed by s, m, h or d (e.g. 30m, 7d; at most 10 years)", text);
}

ts_status ts_trainer_check(const struct ts_trainer_opts *o, const struct tessera_options *sdk,
                           struct ts_err *err)
{
    uint64_t steps, seconds;
    ts_status st;

    if (o->batch % o->micro)
        return ts_err_set(err, TS_EINVAL, "--micro %" PRId64 " must divide --batch %" PRId64,
                          o->micro, o->batch);
    if (o->overlap && (!sdk->mode || strcmp(sdk->mode, "asp")))
        return ts_err_set(err, TS_EINVAL, "--overlap needs --mode asp (bsp and ssp wait for "
                          "each step's values before the next)");
    if (strcmp(o->model, "mlp") && strcmp(o->model, "ctr"))
        return ts_err_set(err, TS_EINVAL, "--model %s: want mlp or ctr", o->model);
    if (!strcmp(o->model, "ctr") && (o->overlap || sdk->dynamic ||
                                     (sdk->mode && !strcmp(sdk->mode, "reduce"))))
        return ts_err_set(err, TS_EINVAL, "--model ctr: sparse tables take bsp, ssp or asp "
                          "without --overlap or --dynamic");
    if ((st = ts_row_ttl_parse(o->row_ttl, &steps, &seconds, err)))
        return st;
    if (seconds && sdk->exact)
        return ts_err_set(err, TS_EINVAL, "--row-ttl %s: an exact job drops rows by steps "
                          "(--row-ttl T), not by a clock, which would make its rows depend on "
                          "timing", o->row_ttl);
    return TS_OK;
}
