/* sdk_options.c - the options applied to a handle (checked by options.c first): the mode,
 * and the "NAME=VALUE,...[,DEFAULT]" lists of compress, sync_every and pull_compress
 * resolved per tensor at registration, with the per-tensor buffers they need
 * (docs/modes.md). */
#include "client/sdk_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "transport/transport.h"

static bool item_names(const struct sdk_spec_item *it, const char *name)
{
    return it->name_len && strlen(name) == it->name_len && !strncmp(it->name, name, it->name_len);
}

/* The value for tensor `name` from spec into out: its own item, else the unnamed default.
 * false when neither exists. */
static bool spec_value(const char *spec, const char *name, char *out, size_t n)
{
    struct sdk_spec_item it;
    bool found = false;

    for (const char *p = spec; sdk_spec_next(&p, &it);) {
        if (item_names(&it, name) || (!it.name_len && !found))
            snprintf(out, n, "%.*s", (int)it.value_len, it.value);
        if (item_names(&it, name))
            return true;
        found |= !it.name_len;
    }
    return found;
}

/* Every tensor the options name is registered (checked at the first step: names are known
 * only once every tensor is). */
ts_status sdk_check_names(struct tessera *t, struct ts_err *err)
{
    const char *specs[3] = { t->compress, t->sync_every, t->pull_compress };
    const char *fields[3] = { "compress", "sync_every", "pull_compress" };
    struct sdk_spec_item it;

    for (int s = 0; s < 3 && !t->names_checked; s++)
        for (const char *p = specs[s]; sdk_spec_next(&p, &it);) {
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

/* The mode, compression, sync periods and loss scaling of the options, which
 * sdk_options_check has accepted. */
void sdk_set_modes(struct tessera *t, const struct tessera_options *o)
{
    enum ts_mode mode = TS_MODE_BSP;
    struct ts_err err;

    if (ts_mode_parse(o->mode, &mode, &err))
        return;   /* checked already */
    t->dynamic = o->dynamic;
    t->dynamic_ssp = o->dynamic && mode == TS_MODE_SSP;
    t->ssp_staleness = o->staleness;
    /* dynamic ssp: the shards run the job as asp, the queue keeps the bound */
    if (ts_job_set_mode(&t->job, t->dynamic_ssp ? TS_MODE_ASP : mode,
                        t->dynamic_ssp ? 0 : o->staleness, &err))
        return;
    snprintf(t->compress, sizeof(t->compress), "%s", o->compress ? o->compress : "");
    snprintf(t->sync_every, sizeof(t->sync_every), "%s", o->sync_every ? o->sync_every : "");
    snprintf(t->pull_compress, sizeof(t->pull_compress), "%s",
             o->pull_compress ? o->pull_compress : "");
    t->push_f32 = o->exact_push == TESSERA_EXACT_PUSH_FLOAT;
    t->elastic = o->elastic && !t->local;
    t->loss_mode = o->loss_scale;
    t->scale_exp = o->loss_scale ? LOSS_SCALE_INIT_EXP : 0;
}

/* The tensor's sync period and codec, from the options. */
ts_status sdk_tensor_options(struct tessera *t, struct sdk_tensor *x, struct ts_err *err)
{
    char v[256];
    ts_status st;

    x->sync_every = 1;
    if (spec_value(t->sync_every, x->name, v, sizeof(v)) &&
        (st = sdk_parse_sync(v, &x->sync_every, err)))
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
             (x->have = calloc(x->nparts + 1, sizeof(uint64_t))) &&
             (x->torn = calloc(x->nparts + 1, sizeof(bool)));
        if (good) {
            x->local_version = 0;
            return ts_tensor_init(req->tensor->initializer, req->tensor->seed, x->name,
                                  req->fan_in, req->fan_out, 0, x->numel, x->value, err);
        }
    }
    return good ? TS_OK : ts_err_set(err, TS_ENOMEM, "tensor '%s': out of memory", x->name);
}
