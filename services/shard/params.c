/* params.c - see params.h. */
#include "params.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor.h"
#include "util/log.h"

#define MAX_NUMEL (UINT64_C(1) << 34)

void shard_params_init(struct shard_params *sp)
{
    memset(sp, 0, sizeof(*sp));
    pthread_mutex_init(&sp->mu, NULL);
}

static void tensor_free(struct shard_tensor *t)
{
    if (!t)
        return;
    for (uint32_t i = 0; t->parts && i < t->nparts; i++)
        ts_part_free(t->parts[i]);
    free(t->parts);
    free(t);
}

void shard_params_fini(struct shard_params *sp)
{
    for (size_t j = 0; j < sp->njobs; j++) {
        for (size_t i = 0; i < SHARD_MAX_TENSORS; i++)
            tensor_free(sp->jobs[j]->tensors[i]);
        free(sp->jobs[j]);
    }
    pthread_mutex_destroy(&sp->mu);
}

static ts_status check_spec(const Tessera__V1__RegisterTensorRequest *req, uint64_t *numel,
                            struct ts_err *err)
{
    const Tessera__V1__TensorSpec *t = req->tensor;
    ts_status st;

    if (!t)
        return ts_err_set(err, TS_EINVAL, "tensor: required");
    if (!t->name[0] || strlen(t->name) > 128)
        return ts_err_set(err, TS_EINVAL, "tensor.name: 1..128 bytes required");
    if (t->dtype != TESSERA__V1__DTYPE__DTYPE_F32)
        return ts_err_set(err, TS_EINVAL, "tensor.dtype: %d; only DTYPE_F32 (1) is supported",
                          (int)t->dtype);
    if (t->n_shape < 1 || t->n_shape > SHARD_MAX_DIMS)
        return ts_err_set(err, TS_EINVAL, "tensor.shape: 1..%d dimensions, got %zu",
                          SHARD_MAX_DIMS, t->n_shape);
    *numel = 1;
    for (size_t i = 0; i < t->n_shape; i++) {
        if (t->shape[i] < 1 || t->shape[i] > MAX_NUMEL || *numel * t->shape[i] > MAX_NUMEL)
            return ts_err_set(err, TS_EINVAL, "tensor.shape[%zu]: %" PRIu64 " (dimensions are "
                              ">= 1, %" PRIu64 " elements at most)", i, t->shape[i], MAX_NUMEL);
        *numel *= t->shape[i];
    }
    if ((st = ts_init_check(t->initializer, err)))
        return st;
    if (strlen(t->initializer) >= sizeof(((struct shard_tensor *)0)->init))
        return ts_err_set(err, TS_EINVAL, "tensor.initializer: too long");
    if (t->partition_bytes && (t->partition_bytes < 4 || t->partition_bytes > (128u << 20)))
        return ts_err_set(err, TS_EINVAL, "tensor.partition_bytes: %" PRIu64 " is outside "
                          "4..134217728 (0: 4 MiB)", t->partition_bytes);
    if (req->tensor_id >= SHARD_MAX_TENSORS)
        return ts_err_set(err, TS_EINVAL, "tensor_id: %u, at most %d", req->tensor_id,
                          SHARD_MAX_TENSORS - 1);
    if (!req->map_epoch)
        return ts_err_set(err, TS_EINVAL, "map_epoch: required (from GetShardMap)");
    return TS_OK;
}

struct shard_job *shard_params_job(struct shard_params *sp, const char *id)
{
    struct shard_job *found = NULL;

    pthread_mutex_lock(&sp->mu);
    for (size_t i = 0; i < sp->njobs && !found; i++)
        if (strcmp(sp->jobs[i]->job.id, id) == 0)
            found = sp->jobs[i];
    pthread_mutex_unlock(&sp->mu);
    return found;
}

/* The job the request names: the first registration creates it with its settings, later ones
 * must repeat them. Called with mu held. */
static ts_status get_job(struct shard_params *sp, const Tessera__V1__JobSpec *js,
                         struct shard_job **out, struct ts_err *err)
{
    struct ts_job j;
    ts_status st;

    if (!js)
        return ts_err_set(err, TS_EINVAL, "job: required");
    if ((st = ts_job_init(&j, js->id, js->workers, js->exact, js->optimizer, js->batch, err)))
        return st;
    for (size_t i = 0; i < sp->njobs; i++) {
        struct shard_job *sj = sp->jobs[i];
        if (strcmp(sj->job.id, j.id))
            continue;
        if (!ts_job_equal(&j, &sj->job))
            return ts_err_set(err, TS_ESTATE, "job: '%s' runs with %u workers, %s mode, "
                              "optimizer %s, batch %g; use those or another job id", sj->job.id,
                              sj->job.workers, sj->job.exact ? "exact" : "float",
                              sj->job.optimizer, sj->job.batch);
        *out = sj;
        return TS_OK;
    }
    if (sp->njobs == SHARD_MAX_JOBS)
        return ts_err_set(err, TS_ENOMEM, "job: this shard holds %d jobs already; restart it",
                          SHARD_MAX_JOBS);
    if (!(*out = calloc(1, sizeof(**out))))
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    (*out)->job = j;
    sp->jobs[sp->njobs++] = *out;
    ts_log(TS_INFO, "shard", "job %s: %u workers, %s mode, optimizer %s, batch %g", j.id,
           j.workers, j.exact ? "exact" : "float", j.optimizer, j.batch);
    return TS_OK;
}

/* The map the caller used must be the shard's current one. */
static ts_status check_epoch(struct ts_cluster *cl, uint64_t want, struct ts_err *err)
{
    uint64_t have = ts_cluster_epoch(cl);
    ts_status st;

    if (want > have && (st = ts_cluster_refresh(cl, err)))
        return st;
    have = ts_cluster_epoch(cl);
    if (want != have)
        return ts_err_set(err, want < have ? TS_ESTALE : TS_EUNAVAIL,
                          "map_epoch: %" PRIu64 " but this shard's map is at %" PRIu64 ": %s",
                          want, have, want < have ? "refresh the shard map and retry"
                                                  : "the shard is catching up; retry");
    return TS_OK;
}

static bool same_tensor(const struct shard_tensor *t, const Tessera__V1__TensorSpec *s)
{
    if (strcmp(t->name, s->name) || strcmp(t->init, s->initializer) || t->seed != s->seed ||
        t->ndim != s->n_shape || t->partition_bytes != (s->partition_bytes ? s->partition_bytes
                                                                         : TS_PARTITION_BYTES_DEFAULT))
        return false;
    return memcmp(t->shape, s->shape, t->ndim * sizeof(uint64_t)) == 0;
}

static ts_status create_tensor(struct shard_job *sj, struct ts_cluster *cl, uint32_t my_id,
                               const Tessera__V1__RegisterTensorRequest *req, uint64_t numel,
                               struct shard_tensor **out, struct ts_err *err)
{
    const Tessera__V1__TensorSpec *s = req->tensor;
    struct shard_tensor *t = calloc(1, sizeof(*t));
    ts_status st = TS_OK;

    if (!t)
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    t->id = req->tensor_id;
    snprintf(t->name, sizeof(t->name), "%s", s->name);
    snprintf(t->init, sizeof(t->init), "%s", s->initializer);
    t->seed = s->seed;
    t->fan_in = req->fan_in;
    t->fan_out = req->fan_out;
    t->numel = numel;
    t->ndim = s->n_shape;
    memcpy(t->shape, s->shape, s->n_shape * sizeof(uint64_t));
    t->partition_bytes = s->partition_bytes ? s->partition_bytes : TS_PARTITION_BYTES_DEFAULT;
    t->nparts = ts_partition_count(numel, sizeof(float), t->partition_bytes);
    t->parts = calloc(t->nparts, sizeof(*t->parts));
    if (!t->parts)
        st = ts_err_set(err, TS_ENOMEM, "out of memory");
    for (uint32_t p = 0; !st && p < t->nparts; p++) {
        uint64_t off, len;
        uint32_t owner;
        if ((st = ts_cluster_locate(cl, t->name, p, &owner, err)) || owner != my_id)
            continue;
        ts_partition_range(numel, sizeof(float), t->partition_bytes, p, &off, &len);
        st = ts_part_create(&sj->job, t->id, t->name, p, off, len, t->init, t->seed, t->fan_in,
                            t->fan_out, &t->parts[p], err);
    }
    if (st) {
        tensor_free(t);
        return st;
    }
    *out = t;
    return TS_OK;
}

ts_status shard_params_register(struct shard_params *sp, struct ts_cluster *cl, uint32_t my_id,
                                const Tessera__V1__RegisterTensorRequest *req, uint32_t **owned,
                                size_t *nowned, uint32_t *nparts, struct ts_err *err)
{
    struct shard_tensor *t = NULL;
    struct shard_job *sj = NULL;
    uint64_t numel = 0;
    ts_status st;

    if ((st = check_spec(req, &numel, err)) || (st = check_epoch(cl, req->map_epoch, err)))
        return st;
    pthread_mutex_lock(&sp->mu);
    st = get_job(sp, req->job, &sj, err);
    for (size_t i = 0; !st && i < SHARD_MAX_TENSORS; i++) {
        struct shard_tensor *o = sj->tensors[i];
        if (o && o->id != req->tensor_id && strcmp(o->name, req->tensor->name) == 0)
            st = ts_err_set(err, TS_EEXIST, "tensor.name: '%s' is registered as tensor %u, not "
                            "%u", o->name, o->id, req->tensor_id);
    }
    if (!st)
        t = sj->tensors[req->tensor_id];
    if (!st && t && !same_tensor(t, req->tensor))
        st = ts_err_set(err, TS_EEXIST, "tensor_id: %u is '%s' with another shape, initializer "
                        "or seed", t->id, t->name);
    if (!st && !t && !(st = create_tensor(sj, cl, my_id, req, numel, &t, err))) {
        sj->tensors[t->id] = t;
        for (uint32_t p = 0; p < t->nparts; p++)
            if (t->parts[p]) {
                sp->partitions++;
                sp->bytes += t->parts[p]->len * sizeof(float);
            }
    }
    if (!st && !(*owned = malloc((t->nparts + 1) * sizeof(**owned))))
        st = ts_err_set(err, TS_ENOMEM, "out of memory");
    if (!st) {
        *nowned = 0;
        for (uint32_t p = 0; p < t->nparts; p++)
            if (t->parts[p])
                (*owned)[(*nowned)++] = p;
        *nparts = t->nparts;
    }
    pthread_mutex_unlock(&sp->mu);
    return st;
}

struct ts_part *shard_params_find(struct shard_params *sp, struct shard_job *sj,
                                  uint32_t tensor, uint32_t part)
{
    struct ts_part *p = NULL;

    if (!sj || tensor >= SHARD_MAX_TENSORS)
        return NULL;
    pthread_mutex_lock(&sp->mu);
    if (sj->tensors[tensor] && part < sj->tensors[tensor]->nparts)
        p = sj->tensors[tensor]->parts[part];
    pthread_mutex_unlock(&sp->mu);
    return p;
}
