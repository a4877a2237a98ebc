/* sdk.c - include/tessera.h: the trainer's view of a cluster, or of an in-process store.
 *
 * Remote: at connect, the SDK joins the cluster as a worker (heartbeats show its step in
 * `tessera status`), reads the shard map, and opens one data-plane connection per shard, over
 * the first transport both ends can use (shm on the same host, else tcp). Registration is a
 * gRPC call to every alive shard under the cached map (a stale map is refreshed by
 * ts_cluster_call); each partition is owned by the shard the ring names. A step sends every
 * PUSH to every shard before reading any ACK, then every PULL before reading any PARAMS, so the
 * shards work in parallel while the SDK stays single-threaded; replies on one connection come
 * in request order.
 * Local ("local"): the same partitions (lib/ps) live in this process, so `tessera train
 * --local` applies steps with exactly the shard's code.
 * Modes, compression, sync periods and loss scaling (docs/modes.md) live here on the worker's
 * side: a tensor's gradient is summed over its sync period, compressed per partition (with
 * the top-k residual kept here), and in reduce mode the reduced gradient goes through this
 * worker's copy of the optimizer, the same code a shard runs. */
#include "tessera.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/master_client.h"
#include "codec/codec.h"
#include "ps/part.h"
#include "transport/fault.h"
#include "verify/verify.h"
#include "transport/frame.h"
#include "util/log.h"

#define MAX_TENSORS 4096
#define MAX_SHARDS 256
#define LOSS_SCALE_INIT_EXP 16   /* GradScaler: init_scale 2^16, backoff 0.5, growth 2 ... */
#define LOSS_GROWTH_STEPS 2000   /* ... every 2000 steps without overflow */
#define SPEC_MAX 4096            /* the compress and sync_every option strings */

struct sdk_tensor {
    char name[129];
    uint64_t numel, partition_bytes;
    uint32_t nparts;
    uint32_t *owner;              /* remote: shard slot per partition */
    struct ts_part **parts;       /* local */
    uint64_t version;             /* the lowest version at registration (restored: > 0) */
    uint32_t sync_every;          /* steps per push and pull of this tensor */
    struct ts_codec codec;        /* how its gradient travels (float jobs) */
    void *acc;                    /* sync_every > 1: the gradient summed since the last sync */
    float *residual;              /* top-k: what was not sent yet (error feedback) */
    uint8_t *enc;                 /* encoded partitions, at enc_off[p], enc_len[p] bytes */
    size_t *enc_off, *enc_len;
    uint8_t *overflow;            /* per partition: the last pull said a step was skipped */
    float *value, *state, *rgrad; /* reduce mode: this worker's parameters, optimizer state and
                                   * the reduced gradient pulled */
    uint64_t local_version;       /* reduce mode: the version of value */
    /* The step in progress (plan_step, only): */
    bool active, encoded;
    uint64_t tstep, pull_version;
    const void *src;              /* the raw gradient pushed when not encoded */
};

struct sdk_shard {
    uint32_t id;
    struct ts_conn *conn;
};

struct tessera {
    struct ts_job job;
    uint64_t data_seed;           /* recorded in snapshots */
    uint32_t micro;
    uint32_t rank;
    int timeout_ms;
    bool local;
    char transport[16];
    struct ts_cluster *cl;
    struct ts_master *master;
    struct ts_membership *ms;
    struct sdk_shard shards[MAX_SHARDS];
    size_t nshards;
    struct sdk_tensor *tensors[MAX_TENSORS];
    int ntensors;
    bool hello_done;              /* every connection has named its job */
    char compress[SPEC_MAX], sync_every[SPEC_MAX];   /* the options, checked at connect */
    bool names_checked;           /* every tensor the options name is registered */
    int loss_mode;                /* enum tessera_loss_scale */
    int scale_exp;                /* the loss scale is 2^scale_exp */
    uint32_t good_steps;          /* steps since the last overflow or growth */
    bool step_overflow;           /* the step in progress: a partition was skipped */
    uint64_t step_stale;          /* ... the most staleness a reply reported */
    struct tessera_stats stats;
};

static ts_status hello(struct tessera *t, struct ts_err *err);

static int fail(struct tessera_error *out, const struct ts_err *e)
{
    if (out) {
        out->code = (int)e->code;
        snprintf(out->message, sizeof(out->message), "%s", e->msg);
    }
    return (int)e->code;
}

static int ok(struct tessera_error *out)
{
    if (out) {
        out->code = 0;
        out->message[0] = '\0';
    }
    return 0;
}

static size_t elem_bytes_job(const struct ts_job *j)
{
    return j->exact ? sizeof(int64_t) : sizeof(float);
}

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
static ts_status check_names(struct tessera *t, struct ts_err *err)
{
    const char *specs[2] = { t->compress, t->sync_every };
    const char *fields[2] = { "compress", "sync_every" };
    struct spec_item it;

    for (int s = 0; s < 2 && !t->names_checked; s++)
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

/* The mode, compression, sync periods and loss scaling of the options. */
static ts_status set_modes(struct tessera *t, const struct tessera_options *o, struct ts_err *err)
{
    enum ts_mode mode;
    struct spec_item it;
    ts_status st;

    if ((st = ts_mode_parse(o->mode, &mode, err)) ||
        (st = ts_job_set_mode(&t->job, mode, o->staleness, err)) ||
        (st = check_spec("compress", o->compress, t->compress, sizeof(t->compress), check_codec,
                         err)) ||
        (st = check_spec("sync_every", o->sync_every, t->sync_every, sizeof(t->sync_every),
                         check_sync, err)))
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
    if (o->transport && o->transport[0] && !ts_transport_find(o->transport))
        return ts_err_set(err, TS_EINVAL, "transport: '%s' is not one of tcp, shm",
                          o->transport);
    if (o->delay_ms < 0 || o->delay_ms > 60000)
        return ts_err_set(err, TS_EINVAL, "delay_ms: %d is outside 0..60000", o->delay_ms);
    t->loss_mode = o->loss_scale;
    t->scale_exp = o->loss_scale ? LOSS_SCALE_INIT_EXP : 0;
    return TS_OK;
}

/* ---- connecting ---- */

static ts_status pick_transport(const Tessera__V1__ShardInfo *s, const char *want,
                                const struct ts_transport_ops **ops, struct ts_blob *blob,
                                struct ts_err *err)
{
    for (size_t k = 0; ts_transports[k]; k++) {
        const struct ts_transport_ops *o = ts_transports[k];
        struct ts_err e = { 0 };
        if ((want && want[0] && strcmp(want, o->name)) || o->probe(&e))
            continue;
        for (size_t i = 0; i < s->n_data_planes; i++) {
            const Tessera__V1__DataPlaneEndpoint *d = s->data_planes[i];
            if (strcmp(d->transport, o->name) || d->address.len > sizeof(blob->data))
                continue;
            memcpy(blob->data, d->address.data, d->address.len);
            blob->len = d->address.len;
            if (!o->usable(blob))
                continue;
            *ops = o;
            return TS_OK;
        }
    }
    return ts_err_set(err, TS_ENODEV, "shard %u (%s): no data-plane transport in common%s%s",
                      s->id, s->addr, want ? " with --transport " : "", want ? want : "");
}

static ts_status connect_shards(struct tessera *t, const char *want, int delay_ms,
                                struct ts_err *err)
{
    Tessera__V1__ShardMap *map;
    ts_status st;

    if ((st = ts_master_shard_map(t->master, &map, err)))
        return st;
    if (!map->n_shards || map->n_shards > MAX_SHARDS)
        st = ts_err_set(err, TS_EUNAVAIL, "the cluster has %zu alive shards; start some "
                        "(tessera up --shards N)", map->n_shards);
    for (size_t i = 0; !st && i < map->n_shards; i++) {
        const struct ts_transport_ops *ops = NULL;
        struct ts_blob blob;
        struct sdk_shard *sh = &t->shards[t->nshards];

        if ((st = pick_transport(map->shards[i], want, &ops, &blob, err)) ||
            (st = ops->connect(&blob, 10000, &sh->conn, err)))
            break;
        if (delay_ms) { /* testing and benchmarks: a slower link (lib/transport/fault.h) */
            struct ts_fault_cfg fc = { .kind = TS_FAULT_NONE, .delay_ms = delay_ms };
            struct ts_conn *w;
            if ((st = ts_fault_wrap(sh->conn, &fc, &w, err))) {
                ts_tp_close(sh->conn);
                break;
            }
            sh->conn = w;
        }
        sh->id = map->shards[i]->id;
        t->nshards++;
        snprintf(t->transport, sizeof(t->transport), "%s", ops->name);
    }
    tessera__v1__shard_map__free_unpacked(map, NULL);
    return st;
}

static ts_status connect_remote(struct tessera *t, const struct tessera_options *o,
                                struct ts_err *err)
{
    struct ts_membership_cfg mc = { .kind = TESSERA__V1__MEMBER_KIND__MEMBER_KIND_WORKER };
    char host[256] = "localhost";
    ts_status st;

    gethostname(host, sizeof(host) - 1);
    mc.addr = host;
    if ((st = ts_master_open(o->master, &t->master, err)) ||
        (st = ts_membership_start(t->master, &mc, 10000, &t->ms, err)) ||
        (st = ts_cluster_open(o->master, &t->cl, err)))
        return st;
    return connect_shards(t, o->transport, o->delay_ms, err);
}

int tessera_connect(const struct tessera_options *o, tessera **out, struct tessera_error *e)
{
    struct ts_err err = { 0 };
    struct tessera *t = calloc(1, sizeof(*t));
    ts_status st;

    if (!t) {
        ts_err_set(&err, TS_ENOMEM, "out of memory");
        return fail(e, &err);
    }
    t->local = !o->master || !o->master[0] || strcmp(o->master, "local") == 0;
    t->rank = o->rank;
    t->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 120000;
    t->data_seed = o->data_seed;
    t->micro = o->micro_batch;
    st = ts_job_init(&t->job, o->job ? o->job : "default", o->workers, o->exact != 0,
                     o->optimizer ? o->optimizer : "momentum", o->batch, &err);
    if (!st)
        st = set_modes(t, o, &err);
    if (!st && o->rank >= o->workers)
        st = ts_err_set(&err, TS_EINVAL, "rank: %u is not below workers %u", o->rank,
                        o->workers);
    if (!st && t->local && o->workers != 1)
        st = ts_err_set(&err, TS_EINVAL, "workers: a local run has 1 worker, not %u",
                        o->workers);
    if (!st && t->local)
        snprintf(t->transport, sizeof(t->transport), "local");
    if (!st && !t->local)
        st = connect_remote(t, o, &err);
    if (st) {
        tessera_close(t);
        return fail(e, &err);
    }
    *out = t;
    return ok(e);
}

static void tensor_free(struct sdk_tensor *x)
{
    if (!x)
        return;
    for (uint32_t p = 0; x->parts && p < x->nparts; p++)
        ts_part_free(x->parts[p]);
    free(x->parts);
    free(x->owner);
    free(x->acc);
    free(x->residual);
    free(x->enc);
    free(x->enc_off);
    free(x->enc_len);
    free(x->overflow);
    free(x->value);
    free(x->state);
    free(x->rgrad);
    free(x);
}

void tessera_close(tessera *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->nshards; i++)
        ts_tp_close(t->shards[i].conn);
    ts_membership_stop(t->ms, true);
    ts_cluster_close(t->cl);
    ts_master_close(t->master);
    for (int i = 0; i < t->ntensors; i++)
        tensor_free(t->tensors[i]);
    free(t);
}

const char *tessera_transport(const tessera *t)
{
    return t->transport;
}

uint64_t tessera_numel(const tessera *t, int id)
{
    return id >= 0 && id < t->ntensors ? t->tensors[id]->numel : 0;
}

/* ---- registration ---- */

static ts_status slot_of(struct tessera *t, uint32_t shard_id, uint32_t *slot, struct ts_err *err)
{
    for (size_t i = 0; i < t->nshards; i++)
        if (t->shards[i].id == shard_id) {
            *slot = (uint32_t)i;
            return TS_OK;
        }
    return ts_err_set(err, TS_EUNAVAIL, "shard %u joined after this trainer connected: "
                      "reconnect", shard_id);
}

static ts_status register_remote(struct tessera *t, struct sdk_tensor *x,
                                 Tessera__V1__RegisterTensorRequest *req, struct ts_err *err)
{
    uint32_t seen = 0;
    ts_status st = TS_OK;

    x->version = UINT64_MAX;
    for (size_t i = 0; !st && i < t->nshards; i++) {
        Tessera__V1__RegisterTensorResponse *r;
        st = ts_cluster_call(t->cl, t->shards[i].id, "/tessera.v1.Shard/RegisterTensor",
                             &req->base, &req->map_epoch,
                             &tessera__v1__register_tensor_response__descriptor,
                             (ProtobufCMessage **)&r, err);
        if (st)
            break;
        for (size_t k = 0; k < r->n_partitions; k++)
            if (r->partitions[k] < x->nparts) {
                x->owner[r->partitions[k]] = (uint32_t)i;
                seen++;
            }
        if (r->n_partitions && r->version < x->version)
            x->version = r->version;
        tessera__v1__register_tensor_response__free_unpacked(r, NULL);
    }
    /* Every partition must have exactly one owner, the one our ring names. */
    for (uint32_t p = 0; !st && p < x->nparts; p++) {
        uint32_t id = 0, slot = 0;
        if (!(st = ts_cluster_locate(t->cl, x->name, p, &id, err)) &&
            !(st = slot_of(t, id, &slot, err)) && slot != x->owner[p])
            st = ts_err_set(err, TS_ESTATE, "tensor '%s' partition %u: the shards disagree on "
                            "its owner (map changing?): retry", x->name, p);
    }
    if (!st && seen != x->nparts)
        st = ts_err_set(err, TS_ESTATE, "tensor '%s': %u of %u partitions placed: retry",
                        x->name, seen, x->nparts);
    return st;
}

static ts_status register_local(struct tessera *t, struct sdk_tensor *x,
                                const Tessera__V1__RegisterTensorRequest *req,
                                struct ts_err *err)
{
    ts_status st = TS_OK;

    x->parts = calloc(x->nparts, sizeof(*x->parts));
    if (!x->parts)
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    for (uint32_t p = 0; !st && p < x->nparts; p++) {
        uint64_t off, len;
        ts_partition_range(x->numel, sizeof(float), x->partition_bytes, p, &off, &len);
        st = ts_part_create(&t->job, req->tensor_id, x->name, p, off, len,
                            req->tensor->initializer, req->tensor->seed, req->fan_in,
                            req->fan_out, &x->parts[p], err);
        if (!st)
            ts_part_set_sync(x->parts[p], x->sync_every);
    }
    return st;
}

/* The tensor's sync period and codec, from the options. */
static ts_status tensor_options(struct tessera *t, struct sdk_tensor *x, struct ts_err *err)
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
    return TS_OK;
}

/* What the options need per tensor: the sync sum, encoded partitions, the top-k residual,
 * and in reduce mode this worker's parameters (initialised as a shard would) and optimizer
 * state. */
static ts_status tensor_buffers(struct tessera *t, struct sdk_tensor *x,
                                const Tessera__V1__RegisterTensorRequest *req, struct ts_err *err)
{
    size_t enc = 0;
    bool ok = (x->overflow = calloc(x->nparts + 1, 1)) != NULL;

    if (ok && x->sync_every > 1)
        ok = (x->acc = calloc(x->numel, elem_bytes_job(&t->job))) != NULL;
    if (ok && x->codec.kind == TS_CODEC_TOPK)
        ok = (x->residual = calloc(x->numel, sizeof(float))) != NULL;
    if (ok && !t->job.exact && (x->codec.kind != TS_CODEC_NONE || t->loss_mode ==
                                TESSERA_LOSS_SCALE_SDK)) {
        ok = (x->enc_off = calloc(x->nparts, sizeof(size_t))) &&
             (x->enc_len = calloc(x->nparts, sizeof(size_t)));
        for (uint32_t p = 0; ok && p < x->nparts; p++) {
            uint64_t off, len;
            ts_partition_range(x->numel, sizeof(float), x->partition_bytes, p, &off, &len);
            x->enc_off[p] = enc;
            enc += ts_codec_max_bytes(&x->codec, len);
        }
        ok = ok && (x->enc = malloc(enc + 1));
    }
    if (ok && t->job.mode == TS_MODE_REDUCE) {
        size_t slen = ts_optim_state_len(t->job.optim.kind);
        ok = (x->value = malloc(x->numel * sizeof(float))) &&
             (x->state = calloc(slen * x->numel + 1, sizeof(float))) &&
             (x->rgrad = malloc(x->numel * sizeof(float)));
        if (ok) {
            x->local_version = 0;
            return ts_tensor_init(req->tensor->initializer, req->tensor->seed, x->name,
                                  req->fan_in, req->fan_out, 0, x->numel, x->value, err);
        }
    }
    return ok ? TS_OK : ts_err_set(err, TS_ENOMEM, "tensor '%s': out of memory", x->name);
}

int tessera_register(tessera *t, const char *name, const uint64_t *shape, int ndim,
                     const char *init, uint64_t seed, uint64_t fan_in, uint64_t fan_out,
                     uint64_t partition_bytes, int *id, struct tessera_error *e)
{
    Tessera__V1__JobSpec job = TESSERA__V1__JOB_SPEC__INIT;
    Tessera__V1__TensorSpec spec = TESSERA__V1__TENSOR_SPEC__INIT;
    Tessera__V1__RegisterTensorRequest req = TESSERA__V1__REGISTER_TENSOR_REQUEST__INIT;
    struct ts_err err = { 0 };
    struct sdk_tensor *x;
    ts_status st = TS_OK;

    if (t->ntensors == MAX_TENSORS || !name || strlen(name) >= sizeof(x->name) || ndim < 1 ||
        ndim > 8 || !shape) {
        ts_err_set(&err, TS_EINVAL, "tensor '%.64s': need a name under 129 bytes, 1..8 "
                   "dimensions, and at most %d tensors", name ? name : "", MAX_TENSORS);
        return fail(e, &err);
    }
    x = calloc(1, sizeof(*x));
    if (!x) {
        ts_err_set(&err, TS_ENOMEM, "out of memory");
        return fail(e, &err);
    }
    snprintf(x->name, sizeof(x->name), "%s", name);
    x->numel = 1;
    for (int i = 0; i < ndim; i++)
        x->numel *= shape[i];
    x->partition_bytes = partition_bytes ? partition_bytes : TS_PARTITION_BYTES_DEFAULT;
    x->nparts = ts_partition_count(x->numel, sizeof(float), x->partition_bytes);
    x->owner = calloc(x->nparts, sizeof(*x->owner));
    job.id = t->job.id;
    job.workers = t->job.workers;
    job.exact = t->job.exact;
    job.optimizer = t->job.optimizer;
    job.batch = t->job.batch;
    job.data_seed = t->data_seed;
    job.micro_batch = t->micro;
    spec.name = x->name;
    spec.dtype = TESSERA__V1__DTYPE__DTYPE_F32;
    spec.shape = (uint64_t *)shape;
    spec.n_shape = (size_t)ndim;
    spec.initializer = (char *)(init ? init : "zeros");
    spec.seed = seed;
    spec.partition_bytes = partition_bytes;
    req.job = &job;
    req.tensor = &spec;
    req.tensor_id = (uint32_t)t->ntensors;
    req.fan_in = fan_in;
    req.fan_out = fan_out;
    job.mode = (Tessera__V1__TrainMode)t->job.mode;
    job.staleness = t->job.staleness;
    if (!x->owner)
        st = ts_err_set(&err, TS_ENOMEM, "out of memory");
    if (!st)
        st = tensor_options(t, x, &err);
    req.sync_every = x->sync_every;
    if (!st)
        st = t->local ? register_local(t, x, &req, &err) : register_remote(t, x, &req, &err);
    if (!st)
        st = tensor_buffers(t, x, &req, &err);
    if (!st && !t->local && !t->hello_done)
        st = hello(t, &err);
    if (st) {
        tensor_free(x);
        return fail(e, &err);
    }
    /* SSP and ASP versions count updates, not steps; such jobs start at step 0 (they are not
     * snapshotted, so never restored). */
    if (x->version == UINT64_MAX || t->job.mode == TS_MODE_SSP || t->job.mode == TS_MODE_ASP)
        x->version = 0;
    *id = t->ntensors;
    t->tensors[t->ntensors++] = x;
    return ok(e);
}

int tessera_check_data(tessera *t, const struct tessera_data_checksum *cs, size_t n,
                       char *reference, size_t reference_len, struct tessera_error *e)
{
    Tessera__V1__CheckDataRequest req = TESSERA__V1__CHECK_DATA_REQUEST__INIT;
    Tessera__V1__CheckDataResponse *r = NULL;
    Tessera__V1__DataChecksum *items, **ptrs;
    struct ts_err err = { 0 };
    ts_status st;

    if (t->local) {
        if (reference && reference_len)
            snprintf(reference, reference_len, "local");
        return ok(e);
    }
    items = calloc(n + 1, sizeof(*items));
    ptrs = calloc(n + 1, sizeof(*ptrs));
    if (!items || !ptrs) {
        free(items);
        free(ptrs);
        ts_err_set(&err, TS_ENOMEM, "out of memory");
        return fail(e, &err);
    }
    for (size_t i = 0; i < n; i++) {
        Tessera__V1__DataChecksum init = TESSERA__V1__DATA_CHECKSUM__INIT;
        items[i] = init;
        items[i].name = (char *)cs[i].name;
        items[i].file = (char *)(cs[i].file ? cs[i].file : "");
        items[i].sha256.data = (uint8_t *)cs[i].sha256;
        items[i].sha256.len = 32;
        ptrs[i] = &items[i];
    }
    req.job = t->job.id;
    req.rank = t->rank;
    req.checksums = ptrs;
    req.n_checksums = n;
    st = ts_master_check_data(t->master, &req, &r, &err);
    if (!st && reference && reference_len)
        snprintf(reference, reference_len, "%s", r->reference);
    if (r)
        tessera__v1__check_data_response__free_unpacked(r, NULL);
    free(items);
    free(ptrs);
    return st ? fail(e, &err) : ok(e);
}

int tessera_verify_local(tessera *t, float *const *params, uint64_t version,
                         struct tessera_local_audit *out, struct tessera_error *e)
{
    struct ts_err err = { 0 };
    struct tessera_error pe = { 0 };

    memset(out, 0, sizeof(*out));
    out->first_tensor = -1;
    for (int id = 0; id < t->ntensors; id++) {
        uint64_t n = t->tensors[id]->numel;
        float *shard = malloc(n * sizeof(float) + 1);
        struct ts_verify_bits r;

        if (!shard) {
            ts_err_set(&err, TS_ENOMEM, "out of memory");
            return fail(e, &err);
        }
        if (tessera_pull(t, id, version, shard, &pe)) {
            free(shard);
            *e = pe;
            return pe.code;
        }
        if (ts_verify_bits_compare(params[id], shard, n, NULL, &r, NULL, &err)) {
            free(shard);
            return fail(e, &err);
        }
        out->elements += n;
        out->differing += r.ndiff;
        out->max_ulp = r.max_ulp > out->max_ulp ? r.max_ulp : out->max_ulp;
        if (r.has_diff && out->first_tensor < 0) {
            out->first_tensor = id;
            out->first_index = r.first_index;
            out->first_local = (float)r.first_a;
            out->first_shard = (float)r.first_b;
        }
        free(shard);
    }
    return ok(e);
}

uint64_t tessera_version(const tessera *t, int id)
{
    return id >= 0 && id < t->ntensors ? t->tensors[id]->version : 0;
}

/* ---- push and pull ---- */

static size_t elem_bytes(const struct tessera *t)
{
    return elem_bytes_job(&t->job);
}

/* What a reply said besides its payload. */
struct reply_info {
    uint32_t flags;           /* PARAMS: TS_PARAMS_* */
    uint32_t staleness;
};

/* Reads the reply to the oldest request on shard slot s; PARAMS land in dst (cap bytes). */
static ts_status read_reply(struct tessera *t, uint32_t s, uint16_t want, uint32_t tensor,
                            uint32_t part, void *dst, size_t cap, struct reply_info *ri,
                            struct ts_err *err)
{
    struct ts_frame_hdr h;
    char small[512];
    bool params = want == TS_FRAME_PARAMS;
    /* A reply is PARAMS of cap bytes or an ERROR of at most a message's length: small ones go
     * to a local buffer, so that an error always fits (a 10-float bias is 40 bytes). */
    bool direct = params && cap >= sizeof(small);
    char *buf = direct ? dst : small;
    ts_status st;

    st = ts_frame_recv(t->shards[s].conn, &h, buf, direct ? cap : sizeof(small), t->timeout_ms,
                       err);
    if (st)
        return st;
    if (h.type == TS_FRAME_ERROR) {
        char text[256];
        size_t n = h.len < sizeof(text) - 1 ? h.len : sizeof(text) - 1;
        memcpy(text, buf, n);
        text[n] = '\0';
        return ts_err_set(err, h.flags > 0 && h.flags <= TS_EINTERNAL ? (ts_status)h.flags
                          : TS_EINTERNAL, "shard %u: %s", t->shards[s].id, text);
    }
    if (h.type != want || h.tensor != tensor || h.partition != part)
        return ts_err_set(err, TS_ECORRUPT, "shard %u: reply type %u for tensor %u partition %u,"
                          " expected type %u for %u/%u", t->shards[s].id, h.type, h.tensor,
                          h.partition, want, tensor, part);
    if (params && h.len != cap)
        return ts_err_set(err, TS_ECORRUPT, "shard %u: %" PRIu64 " bytes for tensor %u partition "
                          "%u, want %zu", t->shards[s].id, h.len, tensor, part, cap);
    if (params && !direct)
        memcpy(dst, small, cap);
    if (ri) {
        ri->flags = h.flags;
        ri->staleness = h.rank;
    }
    return TS_OK;
}

/* Names the job on every connection, once the shards know it (after a registration). */
static ts_status hello(struct tessera *t, struct ts_err *err)
{
    ts_status st = TS_OK;

    for (size_t i = 0; !st && i < t->nshards; i++) {
        struct ts_frame_hdr h = { .type = TS_FRAME_HELLO, .rank = t->rank };
        st = ts_frame_send(t->shards[i].conn, &h, t->job.id, strlen(t->job.id), err);
    }
    for (size_t i = 0; !st && i < t->nshards; i++)
        st = read_reply(t, (uint32_t)i, TS_FRAME_ACK, 0, 0, NULL, 0, NULL, err);
    t->hello_done = !st;
    return st;
}

static int scale_exp_of(const struct tessera *t)
{
    return t->loss_mode == TESSERA_LOSS_SCALE_NONE ? 0 : t->scale_exp;
}

/* Readies tensor x's push of `grad` (numel int64 in exact mode, else floats): raw data goes
 * as it is; with a codec, or a scale the SDK applies, each partition is encoded into x->enc. */
static void prepare_push(struct tessera *t, struct sdk_tensor *x, const void *grad)
{
    float scale = t->loss_mode == TESSERA_LOSS_SCALE_SDK ? ldexpf(1.0f, t->scale_exp) : 1.0f;

    x->src = grad;
    x->encoded = !t->job.exact && (x->codec.kind != TS_CODEC_NONE || scale != 1.0f);
    for (uint32_t p = 0; p < x->nparts; p++) {
        uint64_t off, len;
        ts_partition_range(x->numel, sizeof(float), x->partition_bytes, p, &off, &len);
        if (x->encoded)
            ts_codec_encode(&x->codec, (const float *)grad + off, len, scale,
                            x->residual ? x->residual + off : NULL, x->enc + x->enc_off[p],
                            &x->enc_len[p]);
        t->stats.bytes_raw += len * elem_bytes(t);
        t->stats.bytes_pushed += x->encoded ? x->enc_len[p] : len * elem_bytes(t);
    }
}

/* Partition p's push as prepare_push left it. */
static struct ts_push push_of(const struct tessera *t, const struct sdk_tensor *x, uint32_t p)
{
    uint64_t off, len;
    struct ts_push in = { .rank = t->rank, .step = x->tstep, .scale_exp = scale_exp_of(t) };

    ts_partition_range(x->numel, sizeof(float), x->partition_bytes, p, &off, &len);
    if (x->encoded) {
        in.encoding = x->codec.kind;
        in.payload = x->enc + x->enc_off[p];
        in.bytes = x->enc_len[p];
    } else {
        in.encoding = t->job.exact ? TS_ENC_FIXED : TS_ENC_RAW;
        in.payload = (const char *)x->src + off * elem_bytes(t);
        in.bytes = len * elem_bytes(t);
    }
    return in;
}

/* Where partition p of a pull lands: the caller's params, or in reduce mode the reduced
 * gradient the SDK applies itself. */
static float *pull_dst(const struct tessera *t, struct sdk_tensor *x, float *params, uint64_t off)
{
    return t->job.mode == TS_MODE_REDUCE ? x->rgrad + off : params + off;
}

/* Notes what a pull reply said. */
static void note_reply(struct tessera *t, struct sdk_tensor *x, uint32_t p,
                       const struct reply_info *ri)
{
    x->overflow[p] = (ri->flags & TS_PARAMS_OVERFLOW) != 0;
    t->step_overflow |= x->overflow[p];
    t->step_stale = ri->staleness > t->step_stale ? ri->staleness : t->step_stale;
}

/* Sends a PUSH (push) or a PULL of each active tensor's version tstep + 1 (pull_version) for
 * every partition of tensors [first, last). A pull sent right behind this step's pushes says
 * so in its flags, so that a shard that refused one of them answers the pull at once instead
 * of waiting. */
static ts_status send_all(struct tessera *t, int first, int last, bool push, uint32_t flags,
                          struct ts_err *err)
{
    ts_status st = TS_OK;

    for (int i = first; !st && i < last; i++) {
        struct sdk_tensor *x = t->tensors[i];
        for (uint32_t p = 0; x->active && !st && p < x->nparts; p++) {
            struct ts_push in = push_of(t, x, p);
            struct ts_frame_hdr h = { .type = push ? TS_FRAME_PUSH : TS_FRAME_PULL,
                                      .tensor = (uint32_t)i, .partition = p,
                                      .step = push ? x->tstep : x->pull_version, .dtype = 1,
                                      .rank = t->rank,
                                      .flags = push ? TS_PUSH_SCALE(in.scale_exp) : flags,
                                      .encoding = push ? (uint16_t)in.encoding : 0 };
            st = ts_frame_send(t->shards[x->owner[p]].conn, &h, push ? in.payload : NULL,
                               push ? in.bytes : 0, err);
        }
    }
    return st;
}

/* Reads the replies to send_all's requests, in order: ACKs, or PARAMS into params[i - first]. A refused
 * request is remembered (the first in err) and reading goes on, so the streams stay in step;
 * a transport error ends it. */
static ts_status read_all(struct tessera *t, int first, int last, float *const *params,
                          ts_status *first_err, struct ts_err *err)
{
    for (int i = first; i < last; i++) {
        struct sdk_tensor *x = t->tensors[i];
        for (uint32_t p = 0; x->active && p < x->nparts; p++) {
            uint64_t off, len;
            struct reply_info ri = { 0 };
            struct ts_err e = { 0 };
            ts_status r;
            ts_partition_range(x->numel, sizeof(float), x->partition_bytes, p, &off, &len);
            r = read_reply(t, x->owner[p], params ? TS_FRAME_PARAMS : TS_FRAME_ACK,
                           (uint32_t)i, p, params ? pull_dst(t, x, params[i - first], off) : NULL,
                           len * sizeof(float), &ri, &e);
            if (!r && params)
                note_reply(t, x, p, &ri);
            if (r && !*first_err) {
                *first_err = r;
                ts_err_set(err, r, "%s", e.msg);
            }
            if (r == TS_EUNAVAIL || r == TS_ECORRUPT || r == TS_ETIMEDOUT)
                return r;
        }
    }
    return TS_OK;
}

/* The active tensors of [first, last) (arrays indexed from first): pushes (if push) and pulls
 * (if params). Remote: every request goes out before any reply is read, so the shards work in
 * parallel and a step costs one round trip. Local: the same partitions, in this process. */
static ts_status exchange(struct tessera *t, int first, int last, bool push,
                          float *const *params, struct ts_err *err)
{
    uint32_t flags = push ? TS_PULL_AFTER_PUSH : 0;
    ts_status st = TS_OK, first_err = TS_OK;

    if (t->local) {
        for (int i = first; !st && push && i < last; i++)
            for (uint32_t p = 0; t->tensors[i]->active && !st && p < t->tensors[i]->nparts;
                 p++) {
                struct ts_push in = push_of(t, t->tensors[i], p);
                bool applied;
                st = ts_part_push(t->tensors[i]->parts[p], &in, &applied, err);
            }
        for (int i = first; !st && params && i < last; i++) {
            struct sdk_tensor *x = t->tensors[i];
            for (uint32_t p = 0; x->active && !st && p < x->nparts; p++) {
                struct ts_part *pt = x->parts[p];
                struct ts_pull_info info;
                st = ts_part_pull(pt, t->rank, x->pull_version, t->timeout_ms, NULL,
                                  pull_dst(t, x, params[i - first], pt->offset), &info, err);
                if (!st)
                    note_reply(t, x, p, &(struct reply_info){
                        info.overflow ? TS_PARAMS_OVERFLOW : 0,
                        info.staleness > UINT32_MAX ? UINT32_MAX : (uint32_t)info.staleness });
            }
        }
        return st;
    }
    if (push)
        st = send_all(t, first, last, true, 0, err);
    if (!st && params)
        st = send_all(t, first, last, false, flags, err);
    if (!st && push)
        st = read_all(t, first, last, NULL, &first_err, err);
    if (!st && params)
        st = read_all(t, first, last, params, &first_err, err);
    return st ? st : first_err;
}

static ts_status check_id(const struct tessera *t, int id, struct ts_err *err)
{
    if (id < 0 || id >= t->ntensors)
        return ts_err_set(err, TS_EINVAL, "tensor id %d is not registered (%d tensors)", id,
                          t->ntensors);
    return TS_OK;
}

/* Only tensor id moves, at its own step `tstep` (pull: version tstep + 1 unless version). */
static void only(struct tessera *t, int id, uint64_t tstep, uint64_t version)
{
    for (int i = 0; i < t->ntensors; i++)
        t->tensors[i]->active = i == id;
    t->tensors[id]->tstep = tstep;
    t->tensors[id]->pull_version = version;
}

int tessera_push(tessera *t, int id, uint64_t step, const void *grad, struct tessera_error *e)
{
    struct ts_err err = { 0 };

    if (check_id(t, id, &err))
        return fail(e, &err);
    only(t, id, step, 0);
    prepare_push(t, t->tensors[id], grad);
    if (exchange(t, id, id + 1, true, NULL, &err))
        return fail(e, &err);
    return ok(e);
}

int tessera_pull(tessera *t, int id, uint64_t version, float *out, struct tessera_error *e)
{
    struct ts_err err = { 0 };

    if (check_id(t, id, &err))
        return fail(e, &err);
    if (t->job.mode == TS_MODE_REDUCE) {
        /* The parameters live here; the shards hold only sums. */
        struct sdk_tensor *x = t->tensors[id];
        if (version != x->local_version) {
            ts_err_set(&err, TS_ESTATE, "reduce mode: this worker holds tensor %d at version %"
                       PRIu64 " only, not %" PRIu64, id, x->local_version, version);
            return fail(e, &err);
        }
        memcpy(out, x->value, x->numel * sizeof(float));
        return ok(e);
    }
    only(t, id, 0, version);
    if (exchange(t, id, id + 1, false, &out, &err))
        return fail(e, &err);
    return ok(e);
}

/* Sync periods: which tensors move at global step `step`, each at its own step. A tensor with
 * a period K > 1 adds this step's gradient to its running sum, and moves that sum every Kth
 * step. */
static ts_status plan_step(struct tessera *t, uint64_t step, const void *const *grads,
                           struct ts_err *err)
{
    for (int i = 0; i < t->ntensors; i++) {
        struct sdk_tensor *x = t->tensors[i];
        const void *g = grads[i];
        ts_status st;

        x->active = (step + 1) % x->sync_every == 0;
        x->tstep = step / x->sync_every;
        x->pull_version = x->tstep + 1;
        if (x->sync_every > 1) {
            if (t->job.exact)
                st = ts_fixed_add(x->acc, g, x->numel, err);
            else
                ts_f32_add(x->acc, g, x->numel), st = TS_OK;
            if (st) {
                ts_err_prefix(err, "tensor '%s' (summed over its sync period)", x->name);
                return st;
            }
            g = x->acc;
        }
        if (x->active)
            prepare_push(t, x, g);
    }
    return TS_OK;
}

/* After a step's replies: sync sums restart, reduce mode applies the reduced gradients, the
 * loss scale follows GradScaler. */
static void finish_step(struct tessera *t, float *const *params)
{
    for (int i = 0; i < t->ntensors; i++) {
        struct sdk_tensor *x = t->tensors[i];
        size_t slen = ts_optim_state_len(t->job.optim.kind);

        if (!x->active)
            continue;
        if (x->sync_every > 1)
            memset(x->acc, 0, x->numel * elem_bytes(t));
        if (t->job.mode != TS_MODE_REDUCE)
            continue;
        /* The shard's own update, partition by partition, with the same code: the bits of a
         * PS-mode run. A partition whose sum overflowed is skipped, as a shard skips it. */
        for (uint32_t p = 0; p < x->nparts; p++) {
            uint64_t off, len;
            ts_partition_range(x->numel, sizeof(float), x->partition_bytes, p, &off, &len);
            if (!x->overflow[p])
                ts_optim_apply_range(&t->job.optim, x->tstep + 1, x->value + off,
                                     x->state + slen * off, len, 0, x->rgrad + off, len);
        }
        x->local_version = x->tstep + 1;
        memcpy(params[i], x->value, x->numel * sizeof(float));
    }
    if (t->step_overflow) {
        t->stats.steps_skipped++;
        if (t->loss_mode != TESSERA_LOSS_SCALE_NONE && t->scale_exp > -126)
            t->scale_exp--;
        t->good_steps = 0;
    } else if (t->loss_mode != TESSERA_LOSS_SCALE_NONE && ++t->good_steps == LOSS_GROWTH_STEPS) {
        if (t->scale_exp < 127)
            t->scale_exp++;
        t->good_steps = 0;
    }
    t->stats.steps++;
    t->stats.staleness_last = t->step_stale;
    if (t->step_stale > t->stats.staleness_max)
        t->stats.staleness_max = t->step_stale;
}

int tessera_step(tessera *t, uint64_t step, const void *const *grads, float *const *params,
                 struct tessera_error *e)
{
    struct ts_err err = { 0 };
    ts_status st;

    t->step_overflow = false;
    t->step_stale = 0;
    st = check_names(t, &err);
    if (!st)
        st = plan_step(t, step, grads, &err);
    if (!st)
        st = exchange(t, 0, t->ntensors, true, params, &err);
    if (st)
        return fail(e, &err);
    finish_step(t, params);
    if (t->ms) {
        struct ts_worker_report r = { t->stats.staleness_last, t->stats.staleness_max,
                                      t->stats.steps_skipped, tessera_loss_scale(t) };
        ts_membership_set_clock(t->ms, step + 1);
        ts_membership_set_report(t->ms, &r);
    }
    return ok(e);
}

float tessera_loss_scale(const tessera *t)
{
    return t->loss_mode == TESSERA_LOSS_SCALE_NONE ? 1.0f : ldexpf(1.0f, t->scale_exp);
}

void tessera_stats(const tessera *t, struct tessera_stats *out)
{
    *out = t->stats;
    out->loss_scale = tessera_loss_scale(t);
}

int tessera_to_fixed(const float *g, size_t n, int64_t *out, struct tessera_error *e)
{
    struct ts_err err = { 0 };
    return ts_fixed_from_f32(g, n, out, &err) ? fail(e, &err) : ok(e);
}

int tessera_fixed_add(int64_t *acc, const int64_t *x, size_t n, struct tessera_error *e)
{
    struct ts_err err = { 0 };
    return ts_fixed_add(acc, x, n, &err) ? fail(e, &err) : ok(e);
}

int tessera_fixed_add_f32(int64_t *acc, const float *g, size_t n, struct tessera_error *e)
{
    struct ts_err err = { 0 };
    return ts_fixed_add_f32(acc, g, n, &err) ? fail(e, &err) : ok(e);
}
