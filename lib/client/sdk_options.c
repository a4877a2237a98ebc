/* sdk_options.c - the SDK's modes, compression and sync-period options (docs/modes.md):
 * "NAME=VALUE,...[,DEFAULT]" lists checked at connect and resolved per tensor at
 * registration, and the per-tensor buffers they need. */
#include "client/sdk_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "transport/transport.h"

/* ---- options: "NAME=VALUE,...[,DEFAULT]" lists (compress, sync_every) ---- */

/* One item of such a list: the tensor name (none for the default) and the value. */
struct spec_item {
    const char *name, *value;
    size_t name_len, value_len;
};

/* Reads the item at *p and moves *p past it; false at the end of the list. */
static bool next_item(const char **p, struct spec_item *it)
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

static bool item_names(const struct spec_item *it, const char *name)
{
    return it->name_len && strlen(name) == it->name_len && !strncmp(it->name, name, it->name_len);
}

/* The value for tensor `name` from spec into out: its own item, else the unnamed default.
 * false when neither exists. */
static bool spec_value(const char *spec, const char *name, char *out, size_t n)
{
    struct spec_item it;
    bool found = false;

    for (const char *p = spec; next_item(&p, &it);) {
        if (item_names(&it, name) || (!it.name_len && !found))
            snprintf(out, n, "%.*s", (int)it.value_len, it.value);
        if (item_names(&it, name))
            return true;
        found |= !it.name_len;
    }
    return found;
}

static ts_status check_codec(const char *v, struct ts_err *err)
{
    struct ts_codec c;
    return ts_codec_parse(v, &c, err);
}

static ts_status parse_sync(const char *v, uint32_t *k, struct ts_err *err)
{
    char *end;
    unsigned long n = strtoul(v, &end, 10);

    if (!v[0] || *end || n < 1 || n > TS_SYNC_MAX)
        return ts_err_set(err, TS_EINVAL, "'%s' is not a step count in 1..%d", v,
                          TS_SYNC_MAX);
    *k = (uint32_t)n;
    return TS_OK;
}

static ts_status check_sync(const char *v, struct ts_err *err)
{
    uint32_t k;
    return parse_sync(v, &k, err);
}

/* Copies spec into copy (cap bytes) after checking that every item (field names it in errors)
 * has a name if it has an '=', and a value check accepts. */
static ts_status check_spec(const char *field, const char *spec, char *copy, size_t cap,
                            ts_status (*check)(const char *v, struct ts_err *err),
                            struct ts_err *err)
{
    struct spec_item it;
    ts_status st;

    if (!spec)
        spec = "";
    if (strlen(spec) >= cap)
        return ts_err_set(err, TS_EINVAL, "%s: longer than %zu bytes", field, cap - 1);
    snprintf(copy, cap, "%s", spec);
    for (const char *p = spec; next_item(&p, &it);) {
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

/* Every tensor the options name is registered (checked at the first step: names are known
 * only once every tensor is). */
ts_status sdk_check_names(struct tessera *t, struct ts_err *err)
{
    const char *specs[3] = { t->compress, t->sync_every, t->pull_compress };
    const char *fields[3] = { "compress", "sync_every", "pull_compress" };
    struct spec_item it;

    for (int s = 0; s < 3 && !t->names_checked; s++)
        for (const char *p = specs[s]; next_item(&p, &it);) {
            bool known = !it.name_len;
            for (int i = 0; i < t->ntensors && !known; i++)
                known = item_names(&it, t->tensors[i]->name);
            if (!known)
                return ts_err_set(err, TS_EINVAL, "%s: no tensor '%.*s' is registered",
                                  fields[s], (int)it.name_len, it.name);
        }
    t->names_checked = true;
    return TS_OK;
}

/* Pull compression where the parameters a worker holds must be the shard's bits (exact
 * mode, elastic slots), or where a pull carries a gradient (reduce): refused, naming it. */
static ts_status check_pull(const struct tessera *t, enum ts_mode mode, int elastic,
                            struct ts_err *err)
{
    struct spec_item it;
    const char *why = t->job.exact ? "exact mode promises the same parameter bits everywhere"
                      : mode == TS_MODE_REDUCE ? "a reduce job's pulls carry a step's gradient, "
                                                 "not parameters"
                      : elastic ? "an elastic job's slots must compute the same bits on any "
                                  "worker" : NULL;

    for (const char *p = t->pull_compress; why && next_item(&p, &it);)
        if (it.value_len != 4 || strncmp(it.value, "none", 4))
            return ts_err_set(err, TS_EINVAL, "pull_compress: '%.*s', but %s; pull in full "
                              "(drop --compress-pull)", (int)it.value_len, it.value, why);
    return TS_OK;
}

/* The mode, compression, sync periods and loss scaling of the options. */
ts_status sdk_set_modes(struct tessera *t, const struct tessera_options *o, struct ts_err *err)
{
    enum ts_mode mode;
    struct spec_item it;
    ts_status st;

    if ((st = ts_mode_parse(o->mode, &mode, err)))
        return st;
    if (o->dynamic && mode != TS_MODE_ASP && mode != TS_MODE_SSP)
        return ts_err_set(err, TS_EINVAL, "dynamic: the queue hands out units to asp and ssp "
                          "jobs, not %s (bsp: use balance)", ts_mode_name(mode));
    t->dynamic = o->dynamic;
    t->dynamic_ssp = o->dynamic && mode == TS_MODE_SSP;
    t->ssp_staleness = o->staleness;
    if (t->dynamic_ssp && (st = ts_job_set_mode(&t->job, TS_MODE_SSP, o->staleness, err)))
        return st;   /* the bound checked as ssp's, then kept by the queue */
    if ((st = ts_job_set_mode(&t->job, t->dynamic_ssp ? TS_MODE_ASP : mode,
                              t->dynamic_ssp ? 0 : o->staleness, err)) ||
        (st = check_spec("compress", o->compress, t->compress, sizeof(t->compress), check_codec,
                         err)) ||
        (st = check_spec("sync_every", o->sync_every, t->sync_every, sizeof(t->sync_every),
                         check_sync, err)) ||
        (st = check_spec("pull_compress", o->pull_compress, t->pull_compress,
                         sizeof(t->pull_compress), check_codec, err)) ||
        (st = check_pull(t, mode, o->elastic, err)))
        return st;
    for (const char *p = t->compress; t->job.exact && next_item(&p, &it);)
        if (it.value_len != 4 || strncmp(it.value, "none", 4))
            return ts_err_set(err, TS_EINVAL, "compress: '%.*s' in exact mode: exact sums are "
                              "of fixed-point integers, which compression would round; drop "
                              "--exact or --compress", (int)it.value_len, it.value);
    if (o->loss_scale < TESSERA_LOSS_SCALE_NONE || o->loss_scale > TESSERA_LOSS_SCALE_CALLER)
        return ts_err_set(err, TS_EINVAL, "loss_scale: %d is not none (0), sdk (1) or caller (2)",
                          o->loss_scale);
    if (o->loss_scale && t->job.exact)
        return ts_err_set(err, TS_EINVAL, "loss_scale: exact mode has no use for it (gradients "
                          "are fixed point, not fp16)");
    if (o->exact_push != TESSERA_EXACT_PUSH_FIXED && o->exact_push != TESSERA_EXACT_PUSH_FLOAT)
        return ts_err_set(err, TS_EINVAL, "exact_push: %d is not fixed (0) or float (1)",
                          o->exact_push);
    if (o->exact_push == TESSERA_EXACT_PUSH_FLOAT && !t->job.exact)
        return ts_err_set(err, TS_EINVAL, "exact_push: float is for exact mode (pushes are "
                          "float already without it); set exact or drop exact_push");
    /* A sync period sums several steps' gradients in the SDK: in fixed point only. */
    if (o->exact_push == TESSERA_EXACT_PUSH_FLOAT && t->sync_every[0])
        return ts_err_set(err, TS_EINVAL, "exact_push: float pushes one gradient per step, "
                          "sync_every sums several (in fixed point); drop one of them");
    t->push_f32 = o->exact_push == TESSERA_EXACT_PUSH_FLOAT;
    if (o->transport && o->transport[0] && !ts_transport_find(o->transport))
        return ts_err_set(err, TS_EINVAL, "transport: '%s' is not one of tcp, shm",
                          o->transport);
    /* A slot computed by another worker must be the same bits: no state of the worker's own. */
    if (o->elastic && (mode != TS_MODE_BSP || t->sync_every[0] || strstr(t->compress, "topk")))
        return ts_err_set(err, TS_EINVAL, "elastic: needs mode bsp, no sync_every and no top-k "
                          "compression (their state is one worker's own, which another worker "
                          "taking its slot would not have)");
    if (o->balance && !o->elastic)
        return ts_err_set(err, TS_EINVAL, "balance: needs elastic (slots move between live "
                          "workers the way a dead worker's move; docs/scheduler.md)");
    t->elastic = o->elastic && !t->local;
    t->loss_mode = o->loss_scale;
    t->scale_exp = o->loss_scale ? LOSS_SCALE_INIT_EXP : 0;
    return TS_OK;
}

/* The tensor's sync period and codec, from the options. */
ts_status sdk_tensor_options(struct tessera *t, struct sdk_tensor *x, struct ts_err *err)
{
    char v[256];
    ts_status st;

    x->sync_every = 1;
    if (spec_value(t->sync_every, x->name, v, sizeof(v)) &&
        (st = parse_sync(v, &x->sync_every, err)))
        return st;
    x->codec.kind = TS_CODEC_NONE;
    if (spec_value(t->compress, x->name, v, sizeof(v)) && (st = ts_codec_parse(v, &x->codec, err)))
        return st;
    x->pcodec.kind = TS_CODEC_NONE;
    if (spec_value(t->pull_compress, x->name, v, sizeof(v)) &&
        (st = ts_codec_parse(v, &x->pcodec, err)))
        return st;
    return TS_OK;
}

/* What the options need per tensor: the sync sum, encoded partitions, the top-k residual,
 * and in reduce mode this worker's parameters (initialised as a shard would) and optimizer
 * state. */
ts_status sdk_tensor_buffers(struct tessera *t, struct sdk_tensor *x,
                                const Tessera__V1__RegisterTensorRequest *req, struct ts_err *err)
{
    size_t enc = 0;
    bool good = (x->overflow = calloc(x->nparts + 1, 1)) != NULL;

    if (good && x->sync_every > 1)
        good = (x->acc = calloc(x->numel, sdk_push_bytes(t))) != NULL;
    if (good && x->codec.kind == TS_CODEC_TOPK)
        good = (x->residual = calloc(x->numel, sizeof(float))) != NULL;
    if (good && !t->job.exact && (x->codec.kind != TS_CODEC_NONE || t->loss_mode ==
                                TESSERA_LOSS_SCALE_SDK)) {
        good = (x->enc_off = calloc(x->nparts, sizeof(size_t))) &&
             (x->enc_len = calloc(x->nparts, sizeof(size_t)));
        for (uint32_t p = 0; good && p < x->nparts; p++) {
            uint64_t off, len;
            ts_partition_range(x->numel, sizeof(float), x->partition_bytes, p, &off, &len);
            x->enc_off[p] = enc;
            enc += ts_codec_max_bytes(&x->codec, len);
        }
        good = good && (x->enc = malloc(enc + 1));
    }
    if (good && (x->pcodec.kind != TS_CODEC_NONE) && sdk_pullc_buffers(t, x, err))
        return err->code;
    if (good && t->job.mode == TS_MODE_REDUCE) {
        size_t slen = ts_optim_state_len(t->job.optim.kind);
        good = (x->value = malloc(x->numel * sizeof(float))) &&
             (x->state = calloc(slen * x->numel + 1, sizeof(float))) &&
             (x->rgrad = calloc(x->numel + 1, sizeof(float))) &&
             (x->have = calloc(x->nparts + 1, sizeof(uint64_t)));
        if (good) {
            x->local_version = 0;
            return ts_tensor_init(req->tensor->initializer, req->tensor->seed, x->name,
                                  req->fan_in, req->fan_out, 0, x->numel, x->value, err);
        }
    }
    return good ? TS_OK : ts_err_set(err, TS_ENOMEM, "tensor '%s': out of memory", x->name);
}
