/* tensors.c - a job's tensors on this shard: a registration checked, placed on the map
 * (params_place_of), charged to the memory budget, its partitions made or restored from the
 * --restore snapshot, and installed (shard_params_register, params.h). The registry they go
 * into, the jobs, lookups and releases are params.c's. */
#include "params.h"
#include "params_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "durable.h"
#include "tensor/tensor.h"
#include "transport/frame.h"
#include "util/log.h"

#define MAX_NUMEL (UINT64_C(1) << 34)
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
    if (*numel / ((t->partition_bytes ? t->partition_bytes : TS_PARTITION_BYTES_DEFAULT) /
                  sizeof(float)) >= SHARD_MAX_PARTITIONS)
        return ts_err_set(err, TS_EINVAL, "tensor.partition_bytes: %" PRIu64 " cuts %" PRIu64
                          " elements into more than %d partitions; use larger partitions",
                          t->partition_bytes, *numel, SHARD_MAX_PARTITIONS);
    if (req->tensor_id >= SHARD_MAX_TENSORS)
        return ts_err_set(err, TS_EINVAL, "tensor_id: %u, at most %d", req->tensor_id,
                          SHARD_MAX_TENSORS - 1);
    if (!req->map_epoch)
        return ts_err_set(err, TS_EINVAL, "map_epoch: required (from GetShardMap)");
    if (req->sync_every > TS_SYNC_MAX)
        return ts_err_set(err, TS_EINVAL, "sync_every: %u, at most %d steps", req->sync_every,
                          TS_SYNC_MAX);
    return TS_OK;
}

/* A shard that joined after a rollback of sj learns it from the shard that introduces the
 * job (repair.c): sj and its copies, which hold nothing yet, take the job's count of
 * rollbacks. Called with mu held. */
static void follow_rollbacks(struct shard_job *sj, uint32_t rollbacks)
{
    if (rollbacks <= atomic_load(&sj->rollbacks))
        return;
    atomic_store(&sj->rollbacks, rollbacks);
    for (size_t i = 0; i < SHARD_MAX_TENSORS; i++)
        for (uint32_t p = 0; sj->tensors[i] && p < sj->tensors[i]->nparts; p++)
            if (sj->tensors[i]->parts[p])
                ts_part_set_generation(sj->tensors[i]->parts[p], rollbacks);
    ts_log(TS_INFO, "shard", "job %s: joined after %u rollbacks of it", sj->job.id, rollbacks);
}

/* Whether r registers t again. A size proposed with partition_auto is not compared: the
 * tensor keeps its own, and the answer tells the worker. */
static bool same_tensor(const struct shard_tensor *t, const Tessera__V1__RegisterTensorRequest *r)
{
    const Tessera__V1__TensorSpec *s = r->tensor;

    uint64_t pbytes = s->partition_bytes ? s->partition_bytes : TS_PARTITION_BYTES_DEFAULT;

    if (t->sync_every != (r->sync_every ? r->sync_every : 1) || strcmp(t->name, s->name) ||
        strcmp(t->init, s->initializer) || t->seed != s->seed || t->ndim != s->n_shape ||
        (t->partition_bytes != pbytes && !s->partition_auto))
        return false;
    return memcmp(t->shape, s->shape, t->ndim * sizeof(uint64_t)) == 0;
}

/* The tensor of m named name, or NULL. */
static const ts_tensor_manifest *manifest_named(const ts_manifest *m, const char *name)
{
    for (size_t i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i]->spec->name, name) == 0)
            return m->tensors[i];
    return NULL;
}

const ts_tensor_manifest *params_manifest_tensor(const ts_manifest *m,
                                                 const struct shard_tensor *t, ts_status *st,
                                                 struct ts_err *err)
{
    const ts_tensor_manifest *tm = manifest_named(m, t->name);

    if (!tm) {
        *st = ts_err_set(err, TS_ENOTFOUND, "tensor.name: '%s' is not in the snapshot",
                         t->name);
        return NULL;
    }
    if (tm->numel != t->numel || tm->spec->n_shape != t->ndim ||
        memcmp(tm->spec->shape, t->shape, t->ndim * sizeof(uint64_t)) ||
        tm->spec->partition_bytes != t->partition_bytes) {
        *st = ts_err_set(err, TS_ESTATE, "tensor '%s': the snapshot holds %" PRIu64 " elements "
                         "in %" PRIu64 "-byte partitions; register the same shape and "
                         "partition_bytes", t->name, tm->numel, tm->spec->partition_bytes);
        return NULL;
    }
    return tm;
}

/* t, being made with a proposed partition size: takes the size of the manifest's tensor of
 * its name and element count, where there is one (params_manifest_tensor then checks the
 * rest). */
static void restored_partition_size(const ts_manifest *m, struct shard_tensor *t)
{
    const ts_tensor_manifest *tm = manifest_named(m, t->name);

    if (!tm || tm->numel != t->numel || !tm->spec->partition_bytes ||
        tm->spec->partition_bytes == t->partition_bytes)
        return;
    ts_log(TS_INFO, "shard", "tensor '%s': restored in the snapshot's %" PRIu64 "-byte "
           "partitions, not the %" PRIu64 " proposed", t->name, tm->spec->partition_bytes,
           t->partition_bytes);
    t->partition_bytes = tm->spec->partition_bytes;
    t->nparts = ts_partition_count(t->numel, sizeof(float), t->partition_bytes);
}

/* Gives t a shared region for its values (params.h), or leaves it without one (private
 * values, copied to workers) where none can be made. */
static void share_values(struct shard_tensor *t)
{
    struct ts_err e = { 0 };

    if (ts_region_create("tessera-params", t->numel * sizeof(float), TS_REGION_OWNED,
                         &t->values, &e)) {
        ts_log(TS_DEBUG, "shard", "tensor '%s': %s; its values stay private", t->name, e.msg);
        t->values = TS_REGION_NONE;
    }
}

ts_status params_restore_load(void *ctx, float *value, float *state, uint64_t *updates,
                              struct ts_err *err)
{
    struct params_restore *rc = ctx;
    ts_status st = ts_snap_read_partition(rc->sp->store, rc->m, rc->tm, rc->pm, value, state,
                                          err);

    if (!st && rc->pm->optimizer_updates)   /* else the count the version implies */
        *updates = rc->pm->optimizer_updates->updates;
    return st;
}

ts_status params_place_of(struct ts_cluster *cl, uint32_t my_id, const struct shard_tensor *t,
                          uint32_t p, struct params_place *at, struct ts_err *err)
{
    uint32_t chain[TS_MAX_CHAIN];
    size_t ring = 0, n = ts_cluster_chain(cl, t->name, t->salt, p, chain, &ring), k = 0;

    if (!n)
        return ts_err_set(err, TS_EUNAVAIL, "no shard is alive (map epoch %" PRIu64 ")",
                          ts_cluster_epoch(cl));
    while (k < n && chain[k] != my_id)
        k++;
    *at = (struct params_place){ .held = k < n, .head = k == 0,
                                 .prev = k && k < n ? chain[k - 1] : 0,
                                 .next = k + 1 < n ? chain[k + 1] : 0, .len = n,
                                 .replicas = ts_cluster_replicas(cl),
                                 .joining = k < n && k >= ring, .joiners = n - ring };
    return TS_OK;
}

/* Charges what t's partitions on this shard will take to the budget, or refuses (TS_ENOMEM,
 * nothing charged) naming the budget and the jobs that use it, or the job's share of it
 * (--job-mem-share); mu held. */
static ts_status charge(struct shard_params *sp, struct shard_job *sj, struct ts_cluster *cl,
                        uint32_t my_id, struct shard_tensor *t, struct ts_err *err)
{
    uint64_t need = (uint64_t)t->nparts * (sizeof(*t->parts) + sizeof(*t->follows) +
                                           sizeof(*t->next) + sizeof(*t->resync) +
                                           sizeof(*t->lost) + sizeof(*t->held) +
                                           sizeof(*t->prev)), off, len;
    /* A job's tensors may take its share of the budget (at 100%, what the others leave). */
    uint64_t share = sp->job_mem_share < 100 ? sp->mem_budget / 100 * sp->job_mem_share
                                              : sp->mem_budget;
    char users[160] = "";
    size_t at = 0;
    bool room;
    ts_status st;

    for (uint32_t p = 0; p < t->nparts; p++) {
        struct params_place pl;
        if ((st = params_place_of(cl, my_id, t, p, &pl, err)))
            return st;
        if (!pl.held || pl.joining)   /* a joining shard's copies are charged as they come */
            continue;
        ts_partition_range(t->numel, sizeof(float), t->partition_bytes, p, &off, &len);
        need += ts_part_mem(&sj->job, len);
    }
    if ((room = need <= sp->mem_budget - sp->mem_used) && sj->mem + need <= share) {
        sp->mem_used += need;
        sj->mem += need;
        t->mem = need;
        return TS_OK;
    }
    if (room)   /* the budget has room, but not this job's part of it */
        return ts_err_set(err, TS_ENOMEM, "tensor '%s': job '%s' would hold %.1f MiB on this "
                          "shard, over its share of the --mem-budget (--job-mem-share %u%% of "
                          "%.1f MiB: %.1f MiB); register less, or raise --job-mem-share",
                          t->name, sj->job.id, (double)(sj->mem + need) / (1 << 20),
                          sp->job_mem_share, (double)sp->mem_budget / (1 << 20),
                          (double)share / (1 << 20));
    for (size_t j = 0; j < sp->njobs && at < sizeof(users) - 1; j++)
        at += (size_t)snprintf(users + at, sizeof(users) - at, "%s%s %.1f MiB", j ? ", " : "",
                               sp->jobs[j]->job.id, (double)sp->jobs[j]->mem / (1 << 20));
    return ts_err_set(err, TS_ENOMEM, "tensor '%s': needs %.1f MiB on this shard, but its "
                      "--mem-budget of %.1f MiB has %.1f MiB free (in use: %s); wait for a job "
                      "to end or raise --mem-budget", t->name, (double)need / (1 << 20),
                      (double)sp->mem_budget / (1 << 20),
                      (double)(sp->mem_budget - sp->mem_used) / (1 << 20),
                      users[0] ? users : "nothing");
}

ts_status shard_params_charge(struct shard_params *sp, struct shard_job *sj, int64_t bytes,
                              struct ts_err *err)
{
    uint64_t need = bytes > 0 ? (uint64_t)bytes : (uint64_t)-bytes;
    ts_status st = TS_OK;

    pthread_mutex_lock(&sp->mu);
    if (bytes < 0) {
        sp->mem_used -= need;
        sj->mem -= need;
    } else if (need <= sp->mem_budget - sp->mem_used) {
        sp->mem_used += need;
        sj->mem += need;
    } else {
        st = ts_err_set(err, TS_ENOMEM, "needs %.1f MiB on this shard, over its --mem-budget "
                        "of %.1f MiB (%.1f MiB free); raise --mem-budget or pull in full",
                        (double)need / (1 << 20), (double)sp->mem_budget / (1 << 20),
                        (double)(sp->mem_budget - sp->mem_used) / (1 << 20));
    }
    pthread_mutex_unlock(&sp->mu);
    return st;
}

/* A partition on a chain of more than one shard: its image must fit one data-plane frame, and
 * the head holds each update until the chain's tail has it (docs/replication.md). */
static ts_status replicable(const struct shard_tensor *t, struct ts_part *p, bool head,
                            struct ts_err *err)
{
    if (ts_part_image_bytes(p) > TS_FRAME_MAX)
        return ts_err_set(err, TS_EINVAL, "tensor.partition_bytes: %" PRIu64 "; a replicated "
                          "partition with its optimizer state must fit %u MiB, use smaller "
                          "partitions", t->partition_bytes, TS_FRAME_MAX >> 20);
    if (head)
        ts_part_hold(p, true);
    return TS_OK;
}

ts_status params_new_part(struct shard_job *sj, struct shard_tensor *t, uint32_t p,
                          const struct params_place *at, struct ts_err *err)
{
    uint64_t off, len;
    ts_status st;

    ts_partition_range(t->numel, sizeof(float), t->partition_bytes, p, &off, &len);
    if (!t->values.base && t->numel * sizeof(float) >= SHARD_REGION_MIN_BYTES)
        share_values(t);
    st = ts_part_create(&sj->job, t->id, t->name, p, off, len, t->init, t->seed, t->fan_in,
                        t->fan_out, t->values.base ? (float *)t->values.base + off : NULL,
                        &t->parts[p], err);
    if (!st) {
        ts_part_set_sync(t->parts[p], t->sync_every);
        ts_part_set_generation(t->parts[p], atomic_load(&sj->rollbacks));
    }
    if (!st && at->len > 1)
        st = replicable(t, t->parts[p], at->head, err);
    if (st) {
        ts_part_free(t->parts[p]);
        t->parts[p] = NULL;
    }
    return st;
}

/* A tensor tensor_new made and a failed registration drops, under mu: its charge back. */
static void tensor_unmake(struct shard_params *sp, struct shard_job *sj, struct shard_tensor *t)
{
    if (t->mem) {
        sp->mem_used -= t->mem;
        sj->mem -= t->mem;
    }
    params_tensor_free(t);
}

/* A tensor's registration, first step, under mu: the tensor with its fields, charged to the
 * budget, its per-partition arrays made; no partition yet (tensor_fill). */
static ts_status tensor_new(struct shard_params *sp, struct shard_job *sj,
                            struct ts_cluster *cl, uint32_t my_id,
                            const Tessera__V1__RegisterTensorRequest *req, uint64_t numel,
                            struct shard_tensor **out, struct ts_err *err)
{
    const Tessera__V1__TensorSpec *s = req->tensor;
    struct shard_tensor *t = calloc(1, sizeof(*t));
    const ts_tensor_manifest *tm = NULL;
    ts_status st = TS_OK;

    if (!t)
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    t->values = TS_REGION_NONE;
    t->id = req->tensor_id;
    snprintf(t->name, sizeof(t->name), "%s", s->name);
    snprintf(t->init, sizeof(t->init), "%s", s->initializer);
    t->seed = s->seed;
    t->fan_in = req->fan_in;
    t->fan_out = req->fan_out;
    t->sync_every = req->sync_every ? req->sync_every : 1;
    t->numel = numel;
    t->ndim = s->n_shape;
    memcpy(t->shape, s->shape, s->n_shape * sizeof(uint64_t));
    t->partition_bytes = s->partition_bytes ? s->partition_bytes : TS_PARTITION_BYTES_DEFAULT;
    t->nparts = ts_partition_count(numel, sizeof(float), t->partition_bytes);
    t->salt = s->placement_salt;
    /* A restored tensor goes on with its life, and so with the salt it had (the workers adopt
     * it from the answer): the manifest's, 0 in one from before salts. So does its partition
     * size, where the worker only proposed one. */
    if (sp->restore && s->partition_auto)
        restored_partition_size(sp->restore, t);
    if (sp->restore && !(tm = params_manifest_tensor(sp->restore, t, &st, err)))
        ts_err_prefix(err, "restore from snapshot %.12s", sp->restore_hex);
    if (tm)
        t->salt = tm->spec->placement_salt;
    if (!st && (st = charge(sp, sj, cl, my_id, t, err)) == TS_OK &&
        (!(t->parts = calloc(t->nparts, sizeof(*t->parts))) ||
         !(t->follows = calloc(t->nparts, sizeof(*t->follows))) ||
         !(t->next = calloc(t->nparts, sizeof(*t->next))) ||
         !(t->resync = calloc(t->nparts, sizeof(*t->resync))) ||
         !(t->lost = calloc(t->nparts, sizeof(*t->lost))) ||
         !(t->held = calloc(t->nparts, sizeof(*t->held))) ||
         !(t->prev = calloc(t->nparts, sizeof(*t->prev)))))
        st = ts_err_set(err, TS_ENOMEM, "out of memory");
    if (st) {
        tensor_unmake(sp, sj, t);
        return st;
    }
    *out = t;
    return TS_OK;
}

/* A tensor's registration, second step, without mu: the partitions the map gives this shard,
 * allocated and initialised (or restored); *resyncs counts those flagged to be sent to a
 * joining shard at once. The tensor is the caller's alone until it is installed. */
static ts_status tensor_fill(struct shard_params *sp, struct shard_job *sj,
                             struct ts_cluster *cl, uint32_t my_id, struct shard_tensor *t,
                             uint64_t *resyncs, struct ts_err *err)
{
    const ts_tensor_manifest *tm = NULL;
    ts_status st = TS_OK;

    if (sp->restore && !(tm = params_manifest_tensor(sp->restore, t, &st, err)))
        return st;
    for (uint32_t p = 0; !st && p < t->nparts; p++) {
        struct params_place at;
        if ((st = params_place_of(cl, my_id, t, p, &at, err)) || !at.held)
            continue;
        t->follows[p] = !at.head;
        t->next[p] = at.next;
        t->held[p] = true;
        t->prev[p] = at.prev;
        if (at.joining)   /* its copy comes with the head's image, never from the spec */
            continue;
        if (at.head && at.joiners) {   /* and the head sends it at once (repair.c) */
            t->resync[p] = true;
            (*resyncs)++;
        }
        st = params_new_part(sj, t, p, &at, err);
        if (!st && tm) {
            struct params_restore rc = { sp, sp->restore, tm, tm->partitions[p] };
            st = ts_part_restore(t->parts[p], sp->restore->step, params_restore_load, &rc, err);
        }
    }
    return st;
}

/* Whether the map now places every partition of t on this shard as tensor_fill found it. */
static bool placed_alike(struct ts_cluster *cl, uint32_t my_id, const struct shard_tensor *t)
{
    for (uint32_t p = 0; p < t->nparts; p++) {
        struct params_place at;
        struct ts_err e = { 0 };
        if (params_place_of(cl, my_id, t, p, &at, &e) || at.held != t->held[p])
            return false;
        if (at.held && (at.head == t->follows[p] || at.next != t->next[p] ||
                        at.prev != t->prev[p] || at.joining != !t->parts[p]))
            return false;
    }
    return true;
}

/* TS_EEXIST when a tensor of sj other than id has this name; mu held. */
static ts_status name_taken(const struct shard_job *sj, uint32_t id, const char *name,
                            struct ts_err *err)
{
    for (size_t i = 0; i < SHARD_MAX_TENSORS; i++) {
        const struct shard_tensor *o = sj->tensors[i];
        if (o && o->id != id && strcmp(o->name, name) == 0)
            return ts_err_set(err, TS_EEXIST, "tensor.name: '%s' is registered as tensor %u, "
                              "not %u", o->name, o->id, id);
    }
    return TS_OK;
}

static bool making(const struct shard_job *sj, uint32_t id)
{
    return (sj->making[id / 64] >> (id % 64)) & 1;
}

static void set_making(struct shard_job *sj, uint32_t id, bool on)
{
    if (on)
        sj->making[id / 64] |= 1ull << (id % 64);
    else
        sj->making[id / 64] &= ~(1ull << (id % 64));
}

/* Makes req's tensor (tensor_new, then tensor_fill with mu let go, so that heartbeats and the
 * other jobs' pushes and pulls go on while a big tensor's partitions are made) and installs it
 * in sj; mu held on entry and on return, and the caller holds sp->life for reading, so the
 * job outlives the wait. */
static ts_status create_tensor(struct shard_params *sp, struct shard_job *sj,
                               struct ts_cluster *cl, uint32_t my_id,
                               const Tessera__V1__RegisterTensorRequest *req, uint64_t numel,
                               struct shard_tensor **out, struct ts_err *err)
{
    struct shard_tensor *t = NULL;
    uint64_t resyncs = 0, chains = atomic_load(&sp->rechained);
    ts_status st;

    if ((st = tensor_new(sp, sj, cl, my_id, req, numel, &t, err)))
        return st;
    set_making(sj, t->id, true);
    pthread_mutex_unlock(&sp->mu);
    st = tensor_fill(sp, sj, cl, my_id, t, &resyncs, err);
    if (st && sp->restore)
        ts_err_prefix(err, "restore from snapshot %.12s", sp->restore_hex);
    if (!st)   /* --redo-dir: its registration and partitions logged before any push */
        st = shard_durable_tensor(sp->durable, sj, t, err);
    pthread_mutex_lock(&sp->mu);
    set_making(sj, t->id, false);
    pthread_cond_broadcast(&sp->made);
    /* The chains were taken up again meanwhile (rechain.c) without this tensor: placed under
     * the older map differently, it would be wrong; the worker registers it again. */
    if (!st)   /* another id took the name while this one was made */
        st = name_taken(sj, t->id, t->name, err);
    if (!st && atomic_load(&sp->rechained) != chains && !placed_alike(cl, my_id, t))
        st = ts_err_set(err, TS_ESTALE, "tensor '%s': the shard map moved while its partitions "
                        "were made; refresh the shard map and register again", t->name);
    if (st) {
        tensor_unmake(sp, sj, t);
        return st;
    }
    sp->resyncs += resyncs;
    *out = t;
    return TS_OK;
}

ts_status shard_params_register(struct shard_params *sp, struct ts_cluster *cl, uint32_t my_id,
                                const Tessera__V1__RegisterTensorRequest *req, uint32_t **owned,
                                size_t *nowned, uint32_t *nparts, uint64_t *version,
                                uint32_t *salt, uint64_t *partition_bytes, struct ts_err *err)
{
    struct shard_tensor *t = NULL;
    struct shard_job *sj = NULL;
    uint64_t numel = 0;
    bool made_job = false;
    ts_status st;

    if ((st = check_spec(req, &numel, err)) ||
        (st = ts_cluster_check_epoch(cl, req->map_epoch, err)))
        return st;
    if (req->tensor_id >= sp->max_tensors)
        return ts_err_set(err, TS_EINVAL, "tensor_id: %u; this shard takes at most %u tensors "
                          "per job (--max-tensors), ids 0..%u", req->tensor_id, sp->max_tensors,
                          sp->max_tensors - 1);
    pthread_rwlock_rdlock(&sp->life);   /* the job outlives create_tensor's unlocked part */
    pthread_mutex_lock(&sp->mu);
    st = params_get_job(sp, req->job, &sj, &made_job, err);
    /* Another registration is making this tensor: wait for it, then take what it made. */
    while (!st && !sj->tensors[req->tensor_id] && making(sj, req->tensor_id))
        pthread_cond_wait(&sp->made, &sp->mu);
    if (!st)
        st = name_taken(sj, req->tensor_id, req->tensor->name, err);
    if (!st) {
        t = sj->tensors[req->tensor_id];
        sj->orphan_since_ms = 0;   /* in use: the master's next word counts afresh (reclaim.c) */
    }
    if (!st && t && !same_tensor(t, req))
        st = ts_err_set(err, TS_EEXIST, "tensor_id: %u is '%s' with another shape, initializer, "
                        "seed, sync period or partition size (%" PRIu64 " bytes)", t->id,
                        t->name, t->partition_bytes);
    /* Another salt: a worker that chose under another map (or a restore). The first one stays,
     * so that the tensor is placed one way on every shard; the answer names it. */
    if (!st && t && t->salt != req->tensor->placement_salt)
        ts_log(TS_INFO, "shard", "job %s tensor '%s': registered with tensor.placement_salt "
               "%u; it keeps %u, the salt it was created with", sj->job.id, t->name,
               req->tensor->placement_salt, t->salt);
    if (!st && !t && !(st = create_tensor(sp, sj, cl, my_id, req, numel, &t, err))) {
        /* A snapshot armed before this tensor existed covers it too (shard_params_arm). */
        for (uint32_t p = 0; sj->armed && p < t->nparts; p++) {
            struct ts_err ignored = { 0 };
            if (t->parts[p] && ts_part_arm(t->parts[p], sj->armed_step, &ignored))
                ts_log(TS_WARN, "shard", "tensor '%s' partition %u: %s (the armed snapshot "
                       "will be incomplete)", t->name, p, ignored.msg);
        }
        sj->tensors[t->id] = t;
        sj->ntensors++;
        for (uint32_t p = 0; p < t->nparts; p++)
            if (t->parts[p]) {
                sp->partitions++;
                sp->bytes += ts_part_len(t->parts[p]) * sizeof(float);
            }
    }
    if (!st && !(*owned = malloc((t->nparts + 1) * sizeof(**owned))))
        st = ts_err_set(err, TS_ENOMEM, "out of memory");
    if (!st) {
        *nowned = 0;
        *version = UINT64_MAX;
        for (uint32_t p = 0; p < t->nparts; p++)
            if (t->parts[p] && !t->follows[p]) {
                (*owned)[(*nowned)++] = p;
                uint64_t at = ts_part_step(t->parts[p]);
                *version = at < *version ? at : *version;
            }
        if (*version == UINT64_MAX)
            *version = 0;
        *nparts = t->nparts;
        *salt = t->salt;
        *partition_bytes = t->partition_bytes;
        follow_rollbacks(sj, req->rollbacks);
    }
    if (st && made_job)
        params_drop_unused(sp, sj);
    pthread_mutex_unlock(&sp->mu);
    pthread_rwlock_unlock(&sp->life);
    return st;
}

void params_job_spec(const struct shard_job *sj, Tessera__V1__JobSpec *js)
{
    *js = (Tessera__V1__JobSpec)TESSERA__V1__JOB_SPEC__INIT;
    js->id = (char *)sj->job.id;
    js->workers = sj->job.workers;
    js->exact = sj->job.exact;
    js->optimizer = (char *)sj->job.optimizer;
    js->batch = sj->job.batch;
    js->data_seed = sj->data_seed;
    js->micro_batch = sj->micro;
    js->mode = (Tessera__V1__TrainMode)sj->job.mode;
    js->staleness = sj->job.staleness;
}

void params_tensor_request(const struct shard_job *sj, const struct shard_tensor *t,
                           Tessera__V1__JobSpec *js, Tessera__V1__TensorSpec *ts,
                           Tessera__V1__RegisterTensorRequest *req)
{
    params_job_spec(sj, js);
    *ts = (Tessera__V1__TensorSpec)TESSERA__V1__TENSOR_SPEC__INIT;
    *req = (Tessera__V1__RegisterTensorRequest)TESSERA__V1__REGISTER_TENSOR_REQUEST__INIT;
    ts->name = (char *)t->name;
    ts->dtype = TESSERA__V1__DTYPE__DTYPE_F32;
    ts->shape = (uint64_t *)t->shape;
    ts->n_shape = t->ndim;
    ts->initializer = (char *)t->init;
    ts->seed = t->seed;
    ts->partition_bytes = t->partition_bytes;
    ts->placement_salt = t->salt;   /* a joining shard places the tensor as this one does */
    req->job = js;
    req->tensor = ts;
    req->tensor_id = t->id;
    req->fan_in = t->fan_in;
    req->fan_out = t->fan_out;
    req->sync_every = t->sync_every;
    req->rollbacks = atomic_load(&sj->rollbacks);
}
