/* options.c - the options' schema and every rule about them (include/tessera.h,
 * tessera_options_schema): one row per field of struct tessera_options, in the struct's order
 * (nginx's directive tables), from which tessera-worker's and tessera train's flags, their
 * --help, the flags tessera train hands its workers and the Python Client's keywords all come;
 * and tessera_options_check, the one place a rule about a value or a combination is written.
 * The "NAME=VALUE,...[,DEFAULT]" lists of compress, sync_every and pull_compress are read here
 * too (sdk_spec_next), for the checks here and the per-tensor values of sdk_options.c. */
#include "client/sdk_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "transport/transport.h"

#define ROW(field, kw, flag, type, max, choices, meta, help)                                  \
    { #field, kw, flag, TESSERA_OPTION_##type, max, choices, meta, help,                     \
      offsetof(struct tessera_options, field), sizeof(((struct tessera_options *)0)->field) }

/* size is the struct's version, not an option: it has no row. */
static const struct tessera_option rows[] = {
    ROW(master, "master", "master", STRING, 0, NULL, "ADDR",
        "the master's host:port, or `local` for one process without a cluster (default: the "
        "launcher's $TESSERA_MASTER, else local)"),
    ROW(job, "job", "job", STRING, 0, NULL, "ID",
        "the job id, 1-64 of [A-Za-z0-9._-] (default: the launcher's, docs/launch.md; else "
        "`default`)"),
    ROW(rank, "rank", "rank", UINT, TS_JOB_MAX_WORKERS - 1, NULL, "R",
        "this worker's rank, below --workers (default: the launcher's, docs/launch.md; else 0)"),
    ROW(workers, "workers", "workers", UINT, TS_JOB_MAX_WORKERS, NULL, "N",
        "the job's workers (its slots in an elastic job; default: the launcher's; else 1)"),
    ROW(exact, "exact", "exact", BOOL, 1, NULL, NULL,
        "bit-identical results for any worker and shard count (fixed-point sums)"),
    ROW(optimizer, "optimizer", "optimizer", STRING, 0, NULL, "SPEC",
        "sgd, momentum or adam, with :lr=...,... (default momentum:lr=0.02,momentum=0.9 in "
        "the trainers; the SDK's default is momentum)"),
    ROW(batch, "batch", NULL, DOUBLE, 1000000000000ULL, NULL, "B",
        "the global batch: the summed gradient is divided by it"),
    ROW(transport, "transport", "transport", STRING, 0, NULL, "NAME",
        "data plane: shm, rdma or tcp (default: the best the shard and this host share; rdma "
        "where both have a verbs device)"),
    ROW(timeout_ms, "timeout_ms", NULL, UINT, INT32_MAX, NULL, "MS",
        "one push or pull (0: $TESSERA_TIMEOUT_MS, else 120000)"),
    ROW(data_seed, "data_seed", NULL, UINT, UINT64_MAX, NULL, "S",
        "the data schedule's seed, recorded in snapshots"),
    ROW(micro_batch, "micro_batch", NULL, UINT, UINT32_MAX, NULL, "M",
        "the micro-batch, recorded in snapshots"),
    ROW(mode, "mode", "mode", STRING, 0, NULL, "MODE",
        "bsp (default), ssp, asp, or reduce (the shards only sum; workers apply the optimizer)"),
    ROW(staleness, "staleness", "staleness", UINT, 1000000, NULL, "S",
        "ssp: how many steps a worker may run ahead of the slowest"),
    ROW(compress, "compress", "compress", LIST, 0, NULL, "CODEC",
        "gradients on the wire: none, fp16, bf16, int8, topk:RATIO, or TENSOR=CODEC,..."),
    ROW(sync_every, "sync_every", "sync-every", LIST, 0, NULL, "T=K,...",
        "tensor T syncs every K steps (e.g. fc1.weight=4)"),
    ROW(loss_scale, "loss_scale", NULL, CHOICE, 2, "none|sdk|caller", "KIND",
        "dynamic loss scaling of fp16 gradients: none, sdk or caller"),
    ROW(keep, "keep", "keep", BOOL, 1, NULL, NULL,
        "the shards keep the job when it finishes (to snapshot it or train it on with the same "
        "--job)"),
    ROW(restarts, NULL, "restarts", UINT, 1000000, NULL, "N",
        "times a supervisor restarted this rank's worker (default: the launcher's "
        "$TESSERA_RESTARTS; shown by tessera status)"),
    ROW(elastic, "elastic", NULL, BOOL, 1, NULL, NULL,
        "the job outlives a dead worker: live ones compute its slots (docs/elastic.md)"),
    ROW(balance, NULL, "balance", BOOL, 1, NULL, NULL,
        "the master moves slots between the workers by their measured speed (elastic; "
        "docs/scheduler.md)"),
    ROW(start_workers, NULL, "start-workers", UINT, TS_JOB_MAX_WORKERS, NULL, "N",
        "the workers the job starts with, below --workers (elastic; default all): the slots "
        "of ranks N and above go to them until a worker joins for that rank"),
    ROW(exact_push, "exact_push", NULL, CHOICE, 1, "fixed|float", "KIND",
        "exact mode's pushes: fixed (int64 sums) or float (the shards round)"),
    ROW(pull_compress, "compress_pull", "compress-pull", LIST, 0, NULL, "CODEC",
        "parameters on the wire, as deltas against each worker's copy: codecs as for "
        "--compress (tcp only)"),
    ROW(call_timeout_ms, "call_timeout_ms", NULL, UINT, INT32_MAX, NULL, "MS",
        "a control call to the master or a shard (0: $TESSERA_CALL_TIMEOUT_MS, else 5000)"),
    ROW(dynamic, "dynamic", "dynamic", BOOL, 1, NULL, NULL,
        "asp, ssp: the data comes from the master's queue as each worker becomes free "
        "(docs/scheduler.md)"),
};
#define NROWS (sizeof(rows) / sizeof(rows[0]))

/* The fields of the first struct that carried a size: a caller's size below this is not a
 * struct tessera_options. Fields added later lie past it. */
#define OPTIONS_SIZE_V1 (offsetof(struct tessera_options, dynamic) + sizeof(int))

const struct tessera_option *tessera_options_schema(size_t *count)
{
    if (count)
        *count = NROWS;
    return rows;
}

/* The row named name (its name, keyword or flag; "--" skipped), else NULL. */
static const struct tessera_option *find(const char *name)
{
    if (name && !strncmp(name, "--", 2))
        name += 2;
    for (size_t i = 0; name && i < NROWS; i++)
        if (!strcmp(rows[i].name, name) || (rows[i].keyword && !strcmp(rows[i].keyword, name)) ||
            (rows[i].flag && !strcmp(rows[i].flag, name)))
            return &rows[i];
    return NULL;
}

static void *field(struct tessera_options *o, const struct tessera_option *r)
{
    return (char *)o + r->offset;
}

static const void *cfield(const struct tessera_options *o, const struct tessera_option *r)
{
    return (const char *)o + r->offset;
}

static uint64_t get_uint(const struct tessera_options *o, const struct tessera_option *r)
{
    const void *p = cfield(o, r);

    return r->bytes == 8 ? *(const uint64_t *)p : *(const unsigned *)p;
}

static void put_uint(struct tessera_options *o, const struct tessera_option *r, uint64_t v)
{
    if (r->bytes == 8)
        *(uint64_t *)field(o, r) = v;
    else
        *(unsigned *)field(o, r) = (unsigned)v;   /* unsigned and int fields alike */
}

/* CHOICE: the index of value among r's choices ("none|sdk|caller"), or of its digits; -1. */
static int choice_index(const struct tessera_option *r, const char *value)
{
    const char *c = r->choices;
    char *end;
    long n;

    for (int i = 0; c && *c; i++) {
        size_t len = strcspn(c, "|");
        if (strlen(value) == len && !strncmp(c, value, len))
            return i;
        c += len + (c[len] == '|');
    }
    n = strtol(value, &end, 10);
    return value[0] && !*end && n >= 0 && (unsigned long long)n <= r->max ? (int)n : -1;
}

static ts_status set_row(struct tessera_options *o, const struct tessera_option *r,
                         const char *name, const char *value, struct ts_err *err)
{
    unsigned long long u;
    double d;
    char *end;
    int c;

    if (!value)
        return ts_err_set(err, TS_EINVAL, "%s: a value is required", name);
    switch (r->type) {
    case TESSERA_OPTION_STRING:
    case TESSERA_OPTION_LIST:
        *(const char **)field(o, r) = value;
        return TS_OK;
    case TESSERA_OPTION_BOOL:
        if (strcmp(value, "1") && strcmp(value, "0") && strcmp(value, "true") &&
            strcmp(value, "false"))
            return ts_err_set(err, TS_EINVAL, "%s: '%s' is not 1, 0, true or false", name,
                              value);
        *(int *)field(o, r) = !strcmp(value, "1") || !strcmp(value, "true");
        return TS_OK;
    case TESSERA_OPTION_CHOICE:
        if ((c = choice_index(r, value)) < 0)
            return ts_err_set(err, TS_EINVAL, "%s: '%s' is not one of %s", name, value,
                              r->choices);
        *(int *)field(o, r) = c;
        return TS_OK;
    case TESSERA_OPTION_DOUBLE:
        errno = 0;
        d = strtod(value, &end);
        if (errno || end == value || *end || !(d >= 0 && d <= (double)r->max))
            return ts_err_set(err, TS_EINVAL, "%s: '%s' is not a number in 0..%llu", name,
                              value, r->max);
        *(double *)field(o, r) = d;
        return TS_OK;
    default:
        errno = 0;
        u = value[0] == '-' ? 0 : strtoull(value, &end, 0);
        if (value[0] == '-' || errno || end == value || *end || u > r->max)
            return ts_err_set(err, TS_EINVAL, "%s: '%s' is not an integer in 0..%llu", name,
                              value, r->max);
        put_uint(o, r, u);
        return TS_OK;
    }
}

int tessera_options_set(struct tessera_options *o, const char *name, const char *value,
                        struct tessera_error *e)
{
    const struct tessera_option *r = find(name);
    struct ts_err err = { 0 };

    if (!r)
        ts_err_set(&err, TS_EINVAL, "%s: no such option (tessera_options_schema lists them)",
                   name ? name : "(null)");
    else
        set_row(o, r, name, value, &err);
    return err.code ? sdk_fail(e, &err) : sdk_ok(e);
}

int tessera_options_get(const struct tessera_options *o, const struct tessera_option *r,
                        char *buf, size_t cap)
{
    const char *s;
    int c;

    buf[0] = '\0';
    switch (r->type) {
    case TESSERA_OPTION_STRING:
    case TESSERA_OPTION_LIST:
        s = *(const char *const *)cfield(o, r);
        if (s && s[0])
            snprintf(buf, cap, "%s", s);
        break;
    case TESSERA_OPTION_BOOL:
        if (*(const int *)cfield(o, r))
            snprintf(buf, cap, "1");
        break;
    case TESSERA_OPTION_CHOICE:
        if ((c = *(const int *)cfield(o, r)) > 0) {
            const char *p = r->choices;
            for (int i = 0; i < c && p; i++)
                p = strchr(p, '|') ? strchr(p, '|') + 1 : NULL;
            if (p)
                snprintf(buf, cap, "%.*s", (int)strcspn(p, "|"), p);
            else
                snprintf(buf, cap, "%d", c);
        }
        break;
    case TESSERA_OPTION_DOUBLE:
        if (*(const double *)cfield(o, r))
            snprintf(buf, cap, "%.17g", *(const double *)cfield(o, r));
        break;
    default:
        if (get_uint(o, r))
            snprintf(buf, cap, "%" PRIu64, get_uint(o, r));
    }
    return buf[0] != '\0';
}

ts_status sdk_options_copy(const struct tessera_options *in, struct tessera_options *out,
                           struct ts_err *err)
{
    size_t n = in->size ? in->size : sizeof(*in);

    if (n < OPTIONS_SIZE_V1)
        return ts_err_set(err, TS_EINVAL, "options.size: %zu is not the size of a struct "
                          "tessera_options (start from TESSERA_OPTIONS_INIT)", in->size);
    /* A newer header's fields this SDK does not know: fine while the caller left them unset,
     * refused when it set one (it would be ignored without a word). */
    for (size_t i = sizeof(*out); i < n; i++)
        if (((const unsigned char *)in)[i])
            return ts_err_set(err, TS_EINVAL, "options: built against a newer tessera.h (size "
                              "%zu, this SDK's is %zu) and sets a field this SDK does not "
                              "have: install the newer libtessera", n, sizeof(*out));
    memset(out, 0, sizeof(*out));
    memcpy(out, in, n < sizeof(*out) ? n : sizeof(*out));
    out->size = sizeof(*out);
    return TS_OK;
}

/* ---- "NAME=VALUE,...[,DEFAULT]" lists (compress, sync_every, pull_compress) ---- */

bool sdk_spec_next(const char **p, struct sdk_spec_item *it)
{
    const char *end, *eq;
    size_t len;

    if (!*p || !**p)
        return false;
    end = strchr(*p, ',');
    len = end ? (size_t)(end - *p) : strlen(*p);
    eq = memchr(*p, '=', len);
    it->name = *p;
    it->name_len = eq ? (size_t)(eq - *p) : 0;
    it->value = eq ? eq + 1 : *p;
    it->value_len = eq ? len - it->name_len - 1 : len;
    *p = end ? end + 1 : *p + len;
    return true;
}

ts_status sdk_parse_sync(const char *v, uint32_t *k, struct ts_err *err)
{
    char *end;
    unsigned long n = strtoul(v, &end, 10);

    if (!v[0] || *end || n < 1 || n > TS_SYNC_MAX)
        return ts_err_set(err, TS_EINVAL, "'%s' is not a step count in 1..%d", v,
                          TS_SYNC_MAX);
    *k = (uint32_t)n;
    return TS_OK;
}

static ts_status check_codec(const char *v, struct ts_err *err)
{
    struct ts_codec c;
    return ts_codec_parse(v, &c, err);
}

static ts_status check_sync(const char *v, struct ts_err *err)
{
    uint32_t k;
    return sdk_parse_sync(v, &k, err);
}

/* Every item of spec (field names it in errors) has a name if it has an '=', and a value
 * check accepts; it fits in SPEC_MAX bytes. */
static ts_status check_spec(const char *field, const char *spec,
                            ts_status (*check)(const char *v, struct ts_err *err),
                            struct ts_err *err)
{
    struct sdk_spec_item it;
    ts_status st;

    if (!spec)
        return TS_OK;
    if (strlen(spec) >= SPEC_MAX)
        return ts_err_set(err, TS_EINVAL, "%s: longer than %d bytes", field, SPEC_MAX - 1);
    for (const char *p = spec; sdk_spec_next(&p, &it);) {
        char v[256];
        if (!it.value_len || (it.value != it.name && !it.name_len))
            return ts_err_set(err, TS_EINVAL, "%s: an empty item or tensor name in '%s' (want "
                              "NAME=VALUE,...[,DEFAULT])", field, spec);
        snprintf(v, sizeof(v), "%.*s", (int)it.value_len, it.value);
        if ((st = check(v, err))) {
            ts_err_prefix(err, "%s", field);
            return st;
        }
    }
    return TS_OK;
}

/* Whether a list names any codec but none. */
static bool compresses(const char *spec, struct sdk_spec_item *first)
{
    struct sdk_spec_item it;

    for (const char *p = spec; sdk_spec_next(&p, &it);)
        if (it.value_len != 4 || strncmp(it.value, "none", 4)) {
            *first = it;
            return true;
        }
    return false;
}

/* ---- the rules ---- */

/* A refusal whose text names options as "{field}": rendered as the field's name, or with
 * TESSERA_OPTIONS_NAME_FLAGS as its flag ("--compress-pull") where it has one. */
static ts_status TS_PRINTF(3, 4) refuse(struct ts_err *err, int how, const char *fmt, ...)
{
    char raw[sizeof(err->msg)], out[sizeof(err->msg)];
    size_t n = 0;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(raw, sizeof(raw), fmt, ap);
    va_end(ap);
    for (const char *p = raw; *p && n + 1 < sizeof(out); p++) {
        const char *close = *p == '{' ? strchr(p, '}') : NULL;
        char name[64];
        const struct tessera_option *r;
        if (close && (size_t)(close - p) < sizeof(name)) {
            snprintf(name, sizeof(name), "%.*s", (int)(close - p - 1), p + 1);
            if ((r = find(name))) {
                n += (size_t)snprintf(out + n, sizeof(out) - n, "%s%s",
                                      how & TESSERA_OPTIONS_NAME_FLAGS && r->flag ? "--" : "",
                                      how & TESSERA_OPTIONS_NAME_FLAGS && r->flag ? r->flag
                                                                                  : r->name);
                n = n < sizeof(out) ? n : sizeof(out) - 1;
                p = close;
                continue;
            }
        }
        out[n++] = *p;
    }
    out[n] = '\0';
    return ts_err_set(err, TS_EINVAL, "%s", out);
}

int tessera_options_can_be_elastic(const struct tessera_options *o)
{
    struct sdk_spec_item it;
    enum ts_mode mode;
    struct ts_err err;

    return !ts_mode_parse(o->mode, &mode, &err) && mode == TS_MODE_BSP &&
           !(o->sync_every && o->sync_every[0]) && !(o->compress && strstr(o->compress, "topk")) &&
           !compresses(o->pull_compress, &it);
}

/* Pull compression where the parameters a worker holds must be the shard's bits (exact
 * mode, elastic slots), or where a pull carries a gradient (reduce): refused, naming it. */
static ts_status check_pull(const struct tessera_options *o, enum ts_mode mode,
                            struct ts_err *err)
{
    struct sdk_spec_item it;
    const char *why = o->exact ? "exact mode promises the same parameter bits everywhere"
                      : mode == TS_MODE_REDUCE ? "a reduce job's pulls carry a step's gradient, "
                                                 "not parameters"
                      : o->elastic ? "an elastic job's slots must compute the same bits on any "
                                     "worker" : NULL;

    if (why && compresses(o->pull_compress, &it))
        return ts_err_set(err, TS_EINVAL, "pull_compress: '%.*s', but %s; pull in full "
                          "(drop --compress-pull)", (int)it.value_len, it.value, why);
    return TS_OK;
}

ts_status sdk_options_check(const struct tessera_options *o, int how, struct ts_err *err)
{
    bool local = !o->master || !o->master[0] || !strcmp(o->master, "local");
    struct sdk_spec_item it;
    struct ts_job job;
    enum ts_mode mode;
    bool dyn_ssp;
    ts_status st;

    if (!o->batch)
        return refuse(err, how, "{batch}: required: the global batch size, which the shards "
                      "divide the summed gradient by");
    if ((st = ts_job_init(&job, o->job ? o->job : "default", o->workers, o->exact != 0,
                          o->optimizer ? o->optimizer : "momentum", o->batch, err)) ||
        (st = ts_mode_parse(o->mode, &mode, err)))
        return st;
    if (o->dynamic && mode != TS_MODE_ASP && mode != TS_MODE_SSP)
        return refuse(err, how, "{dynamic} needs {mode} asp or ssp, not %s: the master's queue "
                      "hands out units to those (bsp: use {balance})", ts_mode_name(mode));
    /* dynamic ssp: the bound is checked as ssp's, then kept by the queue (the shards run the
     * job as asp; sdk_set_modes) */
    dyn_ssp = o->dynamic && mode == TS_MODE_SSP;
    if ((dyn_ssp && (st = ts_job_set_mode(&job, TS_MODE_SSP, o->staleness, err))) ||
        (st = ts_job_set_mode(&job, dyn_ssp ? TS_MODE_ASP : mode, dyn_ssp ? 0 : o->staleness,
                              err)) ||
        (st = check_spec("compress", o->compress, check_codec, err)) ||
        (st = check_spec("sync_every", o->sync_every, check_sync, err)) ||
        (st = check_spec("pull_compress", o->pull_compress, check_codec, err)) ||
        (st = check_pull(o, mode, err)))
        return st;
    if (o->exact && compresses(o->compress, &it))
        return ts_err_set(err, TS_EINVAL, "compress: '%.*s' in exact mode: exact sums are "
                          "of fixed-point integers, which compression would round; drop "
                          "--exact or --compress", (int)it.value_len, it.value);
    if (o->loss_scale < TESSERA_LOSS_SCALE_NONE || o->loss_scale > TESSERA_LOSS_SCALE_CALLER)
        return ts_err_set(err, TS_EINVAL, "loss_scale: %d is not none (0), sdk (1) or caller (2)",
                          o->loss_scale);
    if (o->loss_scale && o->exact)
        return ts_err_set(err, TS_EINVAL, "loss_scale: exact mode has no use for it (gradients "
                          "are fixed point, not fp16)");
    if (o->exact_push != TESSERA_EXACT_PUSH_FIXED && o->exact_push != TESSERA_EXACT_PUSH_FLOAT)
        return ts_err_set(err, TS_EINVAL, "exact_push: %d is not fixed (0) or float (1)",
                          o->exact_push);
    if (o->exact_push == TESSERA_EXACT_PUSH_FLOAT && !o->exact)
        return ts_err_set(err, TS_EINVAL, "exact_push: float is for exact mode (pushes are "
                          "float already without it); set exact or drop exact_push");
    /* A sync period sums several steps' gradients in the SDK: in fixed point only. */
    if (o->exact_push == TESSERA_EXACT_PUSH_FLOAT && o->sync_every && o->sync_every[0])
        return ts_err_set(err, TS_EINVAL, "exact_push: float pushes one gradient per step, "
                          "sync_every sums several (in fixed point); drop one of them");
    if (o->transport && o->transport[0] && !ts_transport_find(o->transport))
        return refuse(err, how, "{transport}: '%s' is not one of shm, %stcp", o->transport,
                      TS_HAVE_RDMA ? "rdma, " : "");
    /* A slot computed by another worker must be the same bits: no state of the worker's own. */
    if (o->elastic && !tessera_options_can_be_elastic(o))
        return refuse(err, how, "elastic: needs {mode} bsp, no {sync_every} and no top-k "
                      "compression (their state is one worker's own, which another worker "
                      "taking its slot would not have)");
    if (o->balance && !o->elastic)
        return refuse(err, how, "{balance} needs an elastic job (bsp, no {sync_every}, no "
                      "top-k, no {pull_compress}, not turned off): slots move between live "
                      "workers the way a dead worker's move (docs/scheduler.md)");
    if (o->rank >= o->workers)
        return refuse(err, how, "{rank}: %u is not below {workers} %u", o->rank, o->workers);
    if (local && o->workers != 1)
        return refuse(err, how, "{workers}: a local run has 1 worker, not %u", o->workers);
    return TS_OK;
}

int tessera_options_check(const struct tessera_options *o, int how, struct tessera_error *e)
{
    struct tessera_options c;
    struct ts_err err = { 0 };

    if (sdk_options_copy(o, &c, &err) || sdk_options_check(&c, how, &err))
        return sdk_fail(e, &err);
    return sdk_ok(e);
}
