/* params.c - see params.h: the registry (the jobs, their lifetimes, lookups of their tensors
 * and partitions, releases, copies added and adopted). A tensor's registration is tensors.c's. */
#include "params.h"
#include "params_internal.h"

#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chain.h"
#include "durable.h"
#include "tables.h"
#include "tensor/tensor.h"

_Static_assert(CHAIN_MAX_TENSORS == SHARD_MAX_TENSORS, "a chain link knows every tensor");
#include "util/log.h"
#include "util/proc.h"

void shard_params_init(struct shard_params *sp)
{
    memset(sp, 0, sizeof(*sp));
    pthread_mutex_init(&sp->mu, NULL);
    pthread_cond_init(&sp->made, NULL);
    pthread_mutex_init(&sp->snap_mu, NULL);
    pthread_rwlock_init(&sp->life, NULL);
    sp->mem_budget = UINT64_MAX;
    sp->max_tensors = SHARD_MAX_TENSORS;
    sp->job_mem_share = 100;
    ts_table_budget_init(&sp->tables_budget, 0);
    sp->joining = true;   /* a new shard holds nothing stale: see shard_params_rechain */
}

/* Frees t, its partitions and its shared region; NULL is a no-op. */
void params_tensor_free(struct shard_tensor *t)
{
    if (!t)
        return;
    shard_durable_forget_tensor(t);
    for (uint32_t i = 0; t->parts && i < t->nparts; i++)
        ts_part_free(t->parts[i]);
    free(t->parts);
    free(t->follows);
    free(t->next);
    free(t->resync);
    free(t->lost);
    free(t->held);
    free(t->prev);
    free(t->redo_seq);
    ts_region_free(&t->values);   /* after the partitions that lived in it */
    free(t);
}

/* Frees a job and everything in it; *bytes: its parameter bytes. */
static void job_free(struct shard_params *sp, struct shard_job *sj, uint64_t *bytes)
{
    *bytes = 0;
    for (size_t i = 0; i < sp->ndrops; )   /* no connection is attached: none is pinned */
        if (sp->drops[i].sj == sj) {
            ts_part_free(sp->drops[i].p);
            sp->drops[i] = sp->drops[--sp->ndrops];
        } else {
            i++;
        }
    for (size_t i = 0; i < SHARD_MAX_TENSORS; i++) {
        struct shard_tensor *t = sj->tensors[i];
        for (uint32_t p = 0; t && p < t->nparts; p++)
            if (t->parts[p]) {
                sp->partitions--;
                *bytes += ts_part_len(t->parts[p]) * sizeof(float);
            }
        params_tensor_free(t);
    }
    shard_tables_free(sj);
    sp->bytes -= *bytes;
    sp->mem_used -= sj->mem;
    free(sj);
}

void shard_params_fini(struct shard_params *sp)
{
    uint64_t bytes;

    for (size_t j = 0; j < sp->njobs; j++)
        job_free(sp, sp->jobs[j], &bytes);
    free(sp->drops);
    ts_manifest_free(sp->restore);
    pthread_mutex_destroy(&sp->mu);
    pthread_cond_destroy(&sp->made);
    pthread_mutex_destroy(&sp->snap_mu);
    pthread_rwlock_destroy(&sp->life);
}

struct shard_job *params_find_job(struct shard_params *sp, const char *id)
{
    struct shard_job *found = NULL;

    pthread_mutex_lock(&sp->mu);
    for (size_t i = 0; i < sp->njobs && !found; i++)
        if (strcmp(sp->jobs[i]->job.id, id) == 0)
            found = sp->jobs[i];
    pthread_mutex_unlock(&sp->mu);
    return found;
}

/* A JobSpec's mode: unset is bsp. */
static enum ts_mode mode_of(const Tessera__V1__JobSpec *js)
{
    return js->mode ? (enum ts_mode)js->mode : TS_MODE_BSP;
}

/* A job that starts from the --restore snapshot must run as the snapshot's did: the same
 * optimizer (its state is in the snapshot), mode, batch and data schedule. The worker count
 * may differ: exact mode gives the same bits for any. */
static ts_status check_restore_job(const struct shard_params *sp, const Tessera__V1__JobSpec *js,
                                   struct ts_err *err)
{
    const Tessera__V1__JobSpec *mj = sp->restore->job;
    const Tessera__V1__ScheduleState *ms = sp->restore->schedule;
    const char *field = NULL;
    char want[160] = "", got[160] = "";

    if (strcmp(mj->optimizer, js->optimizer)) {
        field = "optimizer";
        snprintf(want, sizeof(want), "%s", mj->optimizer);
        snprintf(got, sizeof(got), "%s", js->optimizer);
    } else if (mj->exact != js->exact) {
        field = "exact";
        snprintf(want, sizeof(want), "%s", mj->exact ? "true" : "false");
        snprintf(got, sizeof(got), "%s", js->exact ? "true" : "false");
    } else if (mode_of(js) != mode_of(mj) || js->staleness != mj->staleness) {
        field = "mode";
        snprintf(want, sizeof(want), "%s (staleness %u)", ts_mode_name(mode_of(mj)),
                 mj->staleness);
        snprintf(got, sizeof(got), "%s (staleness %u)", ts_mode_name(mode_of(js)),
                 js->staleness);
    } else if (mj->batch != js->batch) {
        field = "batch";
        snprintf(want, sizeof(want), "%g", mj->batch);
        snprintf(got, sizeof(got), "%g", js->batch);
    } else if (ms->seed && js->data_seed && ms->seed != js->data_seed) {
        field = "data_seed";
        snprintf(want, sizeof(want), "%" PRIu64, ms->seed);
        snprintf(got, sizeof(got), "%" PRIu64, js->data_seed);
    } else if (ms->micro_batch && js->micro_batch && ms->micro_batch != js->micro_batch) {
        field = "micro_batch";
        snprintf(want, sizeof(want), "%u", ms->micro_batch);
        snprintf(got, sizeof(got), "%u", js->micro_batch);
    }
    if (!field)
        return TS_OK;
    return ts_err_set(err, TS_ESTATE, "job.%s: %s, but snapshot %.12s was trained with %s; "
                      "continue with the snapshot's settings", field, got, sp->restore_hex, want);
}

ts_status params_get_job(struct shard_params *sp, const Tessera__V1__JobSpec *js,
                         struct shard_job **out, bool *made, struct ts_err *err)
{
    struct ts_job j;
    ts_status st;

    *made = false;
    if (!js)
        return ts_err_set(err, TS_EINVAL, "job: required");
    if ((st = ts_job_init(&j, js->id, js->workers, js->exact, js->optimizer, js->batch, err)) ||
        (st = ts_job_set_mode(&j, mode_of(js), js->staleness, err)))
        return st;
    for (size_t i = 0; i < sp->njobs; i++) {
        struct shard_job *sj = sp->jobs[i];
        if (strcmp(sj->job.id, j.id))
            continue;
        if (!ts_job_equal(&j, &sj->job) || sj->data_seed != js->data_seed ||
            sj->micro != js->micro_batch)
            return ts_err_set(err, TS_ESTATE, "job: '%s' runs with %u workers, %s mode, "
                              "optimizer %s, batch %g, data seed %" PRIu64 ", micro-batch %u, "
                              "mode %s (staleness %u); use those or another job id", sj->job.id,
                              sj->job.workers, sj->job.exact ? "exact" : "float",
                              sj->job.optimizer, sj->job.batch, sj->data_seed, sj->micro,
                              ts_mode_name(sj->job.mode), sj->job.staleness);
        *out = sj;
        return TS_OK;
    }
    if (sp->restore && (st = check_restore_job(sp, js, err)))
        return st;
    if (sp->njobs == SHARD_MAX_JOBS)
        return ts_err_set(err, TS_ENOMEM, "job: this shard holds %d jobs, its most; wait for "
                          "one to end (tessera status lists them)", SHARD_MAX_JOBS);
    if (!(*out = calloc(1, sizeof(**out))))
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    (*out)->job = j;
    (*out)->data_seed = js->data_seed;
    (*out)->micro = js->micro_batch;
    sp->jobs[sp->njobs++] = *out;
    *made = true;
    ts_log(TS_INFO, "shard", "job %s: %u workers, %s mode, optimizer %s, batch %g, %s", j.id,
           j.workers, j.exact ? "exact" : "float", j.optimizer, j.batch, ts_mode_name(j.mode));
    return TS_OK;
}

/* Whether a registration is making any tensor of sj (tensors.c); mu held. */
static bool any_making(const struct shard_job *sj)
{
    for (size_t k = 0; k < sizeof(sj->making) / sizeof(sj->making[0]); k++)
        if (sj->making[k])
            return true;
    return false;
}

void params_drop_unused(struct shard_params *sp, struct shard_job *sj)
{
    uint64_t none;

    if (sj->ntensors || sj->ntables || any_making(sj))
        return;
    for (size_t j = 0; j < sp->njobs; j++)
        if (sp->jobs[j] == sj) {
            sp->jobs[j] = sp->jobs[--sp->njobs];
            sp->jobs[sp->njobs] = NULL;
            job_free(sp, sj, &none);
            return;
        }
}

struct shard_tensor *shard_params_tensor(struct shard_params *sp, struct shard_job *sj,
                                         uint32_t tensor)
{
    struct shard_tensor *t = NULL;

    if (!sj || tensor >= SHARD_MAX_TENSORS)
        return NULL;
    pthread_mutex_lock(&sp->mu);
    t = sj->tensors[tensor];
    pthread_mutex_unlock(&sp->mu);
    return t;
}

struct ts_part *shard_params_find(struct shard_params *sp, struct shard_job *sj,
                                  uint32_t tensor, uint32_t part, bool *follows, uint32_t *next)
{
    struct shard_tensor *t;
    struct ts_part *p = NULL;

    if (!sj || tensor >= SHARD_MAX_TENSORS)
        return NULL;
    pthread_mutex_lock(&sp->mu);
    if ((t = sj->tensors[tensor]) && part < t->nparts && (p = t->parts[part])) {
        ts_part_pin(p);
        if (follows)
            *follows = t->follows[part];
        if (next)
            *next = t->next[part];
    }
    pthread_mutex_unlock(&sp->mu);
    return p;
}

uint32_t shard_params_prev(struct shard_params *sp, struct shard_job *sj, uint32_t tensor,
                           uint32_t part)
{
    struct shard_tensor *t;
    uint32_t prev = 0;

    if (!sj || tensor >= SHARD_MAX_TENSORS)
        return 0;
    pthread_mutex_lock(&sp->mu);
    if ((t = sj->tensors[tensor]) && part < t->nparts && t->held[part])
        prev = t->prev[part];
    pthread_mutex_unlock(&sp->mu);
    return prev;
}

void shard_params_put(struct ts_part *p)
{
    if (p)
        ts_part_unpin(p);
}

bool shard_params_lost(struct shard_params *sp, struct shard_job *sj, uint32_t tensor,
                       uint32_t part)
{
    struct shard_tensor *t;
    bool lost = false;

    if (!sj || tensor >= SHARD_MAX_TENSORS)
        return false;
    pthread_mutex_lock(&sp->mu);
    if ((t = sj->tensors[tensor]) && part < t->nparts)
        lost = t->lost[part];
    pthread_mutex_unlock(&sp->mu);
    return lost;
}

struct shard_job *shard_params_attach(struct shard_params *sp, const char *id)
{
    struct shard_job *found = NULL;

    pthread_mutex_lock(&sp->mu);
    for (size_t i = 0; i < sp->njobs && !found; i++)
        if (strcmp(sp->jobs[i]->job.id, id) == 0)
            found = sp->jobs[i];
    if (found)
        atomic_fetch_add(&found->conns, 1);
    pthread_mutex_unlock(&sp->mu);
    return found;
}

void shard_params_detach(struct shard_params *sp, struct shard_job *sj)
{
    (void)sp;
    if (sj)
        atomic_fetch_sub(&sj->conns, 1);
}

ts_status shard_params_release(struct shard_params *sp, const char *id, bool *held,
                               uint64_t *bytes, struct ts_err *err)
{
    struct shard_job *sj = NULL;
    size_t at = 0;
    unsigned conns;
    ts_status st = TS_OK;

    *held = false;
    *bytes = 0;
    /* Lock order: snapshots, then walks, then the registry. */
    pthread_mutex_lock(&sp->snap_mu);
    pthread_rwlock_wrlock(&sp->life);
    pthread_mutex_lock(&sp->mu);
    for (size_t i = 0; i < sp->njobs && !sj; i++)
        if (strcmp(sp->jobs[i]->job.id, id) == 0)
            sj = sp->jobs[at = i];
    if (sj && (conns = atomic_load(&sj->conns)) > 0)
        st = ts_err_set(err, TS_ESTATE, "job '%s': %u data-plane connections of its workers are "
                        "still open; release it once they close", id, conns);
    else if (sj && sj->armed)
        st = ts_err_set(err, TS_ESTATE, "job '%s': a snapshot of step %" PRIu64 " is armed; "
                        "release it once the snapshot is written", id, (uint64_t)sj->armed_step);
    if (sj && !st) {
        sp->jobs[at] = sp->jobs[--sp->njobs];
        sp->jobs[sp->njobs] = NULL;
        job_free(sp, sj, bytes);
        *held = true;
        if (sp->on_release)
            sp->on_release(sp->release_ctx, id);
        ts_log(TS_INFO, "shard", "job %s released: %" PRIu64 " parameter bytes freed, %" PRIu64
               " bytes of the budget in use", id, *bytes, sp->mem_used);
    }
    pthread_mutex_unlock(&sp->mu);
    pthread_rwlock_unlock(&sp->life);
    pthread_mutex_unlock(&sp->snap_mu);
    /* Give what the job's connection threads and partitions left in malloc's per-thread
     * arenas back to the system: a shard that served 20 jobs at once otherwise keeps their
     * peak for good (the soak test saw +40 MiB after 520 jobs, with nothing in use). */
    if (*held)
        malloc_trim(0);
    return st;
}

ts_status params_add_copy(struct shard_params *sp, struct shard_job *sj, struct shard_tensor *t,
                          uint32_t part, const struct params_place *at, struct ts_err *err)
{
    uint64_t off, len, need;
    ts_status st;

    ts_partition_range(t->numel, sizeof(float), t->partition_bytes, part, &off, &len);
    need = ts_part_mem(&sj->job, len);
    if (need > sp->mem_budget - sp->mem_used)
        return ts_err_set(err, TS_ENOMEM, "tensor '%s' partition %u: a new copy needs %.1f "
                          "MiB, over this shard's --mem-budget", t->name, part,
                          (double)need / (1 << 20));
    if ((st = params_new_part(sj, t, part, at, err)))
        return st;
    sp->mem_used += need;
    sj->mem += need;
    t->mem += need;
    sp->partitions++;
    sp->bytes += len * sizeof(float);
    return TS_OK;
}

struct ts_part *shard_params_adopt(struct shard_params *sp, struct shard_job *sj,
                                   uint32_t tensor, uint32_t part, struct ts_err *err)
{
    struct shard_tensor *t;
    struct params_place at = { .held = true, .len = 2 };
    struct ts_part *p = NULL;

    pthread_mutex_lock(&sp->mu);
    t = tensor < SHARD_MAX_TENSORS ? sj->tensors[tensor] : NULL;
    if (!t || part >= t->nparts) {
        ts_err_set(err, TS_ENOTFOUND, "image of tensor %u partition %u: no such tensor or "
                   "partition in job '%s'", tensor, part, sj->job.id);
    } else if (t->parts[part]) {
        p = t->parts[part];
    } else if (!t->held[part] || !t->follows[part]) {
        ts_err_set(err, TS_ESTALE, "image of tensor %u partition %u: this shard is not in its "
                   "chain under the shard map it holds; refresh the shard map", tensor, part);
    } else if (!params_add_copy(sp, sj, t, part, &at, err)) {
        p = t->parts[part];
        ts_log(TS_INFO, "shard", "job %s tensor '%s' partition %u: joined its chain (a new "
               "copy)", sj->job.id, t->name, part);
    }
    pthread_mutex_unlock(&sp->mu);
    return p;
}
