/* rechain.c - the chains after the map changed: failover, joining shards, dropped copies.
 * See params.h (shard_params_rechain, shard_params_reap, shard_params_moves) and
 * docs/replication.md ("Failover", "Joining"). */
#include <inttypes.h>
#include <stdlib.h>

#include "params.h"
#include "params_internal.h"
#include "durable.h"
#include "tables.h"
#include "util/log.h"

/* Partition p leaves this shard (why, for the log): out of its tensor and uncharged, its
 * waiting pulls sent to the new head; freed by shard_params_reap once no one uses it. mu
 * held. */
static void drop(struct shard_params *sp, struct shard_job *sj, struct shard_tensor *t,
                 uint32_t p, const char *why)
{
    struct ts_part *part = t->parts[p];
    uint64_t off, len, need;

    if (sp->ndrops == sp->drops_cap) {
        size_t cap = sp->drops_cap ? 2 * sp->drops_cap : 16;
        struct shard_dropped *d = realloc(sp->drops, cap * sizeof(*d));
        if (!d) {   /* kept, unused, until the job ends */
            ts_part_set_head(part, false);
            return;
        }
        sp->drops = d;
        sp->drops_cap = cap;
    }
    ts_part_set_head(part, false);
    shard_durable_forget_part(t, p);
    ts_partition_range(t->numel, sizeof(float), t->partition_bytes, p, &off, &len);
    need = ts_part_mem(&sj->job, len);
    sp->mem_used -= need;
    sj->mem -= need;
    t->mem -= need;
    sp->partitions--;
    sp->bytes -= len * sizeof(float);
    sp->drops[sp->ndrops++] = (struct shard_dropped){ sj, part };
    t->parts[p] = NULL;
    sp->dropped++;
    ts_log(TS_INFO, "shard", "job %s tensor '%s' partition %u: dropped at version %" PRIu64
           " (%s)", sj->job.id, t->name, p, ts_part_version(part), why);
}

/* Partition p of a reduce job, which this shard now heads and of which every copy is lost:
 * a fresh copy that its ranks seed (lib/ps/seed.c; the workers hold the parameters, the
 * shard only the step's sum). NULL if it cannot be made (then it is lost as in other modes).
 * mu held. */
static struct ts_part *reseed(struct shard_params *sp, struct shard_job *sj,
                              struct shard_tensor *t, uint32_t p, const struct params_place *at)
{
    struct ts_err e = { 0 };
    bool made = !params_add_copy(sp, sj, t, p, at, &e);

    if (made && ts_part_seed_begin(t->parts[p], at->replicas, &e))
        drop(sp, sj, t, p, "it could not be seeded");
    if (!t->parts[p]) {
        ts_log(TS_ERROR, "shard", "job %s tensor '%s' partition %u: every copy is lost, and a "
               "fresh one for its workers to seed could not be made: %s", sj->job.id, t->name,
               p, e.msg);
        return NULL;
    }
    ts_log(TS_WARN, "shard", "job %s tensor '%s' partition %u: every copy is lost; a fresh one "
           "waits for the job's workers to seed it (reduce mode: they hold the parameters)",
           sj->job.id, t->name, p);
    sp->lost++;
    sp->reseeded++;
    return t->parts[p];
}

/* Partition p of t under the new map: its role and next shard follow the new chain. A follower
 * that now heads the chain is promoted (it holds the newest version the chain acknowledged);
 * a head that no longer does is demoted (its pulls and pushes go to the new head). A member
 * with a new next shard sends it its image at once (repair.c): a head's new follower, or a
 * joining shard appended after the tail, whose predecessor may have passed the head's last
 * images on before it knew of it. A head holds its updates while its chain is longer than
 * one. A chain this shard joined gets its copy with the head's next image
 * (shard_params_adopt). Called with mu held. */
static void rechain_part(struct shard_params *sp, struct shard_job *sj, struct shard_tensor *t,
                         uint32_t p, const struct params_place *at)
{
    struct ts_part *part = t->parts[p];
    bool promoted = part && t->follows[p] && at->head;
    uint32_t old_next = t->next[p];

    t->held[p] = at->held;
    t->prev[p] = at->prev;
    if (!at->held) {
        if (part)
            drop(sp, sj, t, p, "its chain left this shard");
        t->lost[p] = false;   /* whichever shard heads it now knows */
        return;
    }
    if (!part && at->head && sj->job.mode == TS_MODE_REDUCE && !t->lost[p])
        part = reseed(sp, sj, t, p, at);
    if (!part && at->head) {
        if (!t->lost[p]) {
            ts_log(TS_ERROR, "shard", "job %s tensor '%s' partition %u: every copy is lost "
                   "(this shard heads its chain and holds none); the job goes back to its "
                   "last snapshot if it has one", sj->job.id, t->name, p);
            sp->lost++;
            t->lost[p] = true;
            atomic_store(&sj->lost_gen, atomic_load(&sj->rollbacks));
            atomic_store(&sj->state_lost, true);
            atomic_store(&sj->lost_report, true);
        }
        return;
    }
    t->follows[p] = !at->head;
    t->next[p] = at->next;
    if (!part)   /* a follower: its copy comes with the head's images */
        return;
    ts_part_set_head(part, at->head);
    if (at->next && at->next != old_next && !t->resync[p]) {
        t->resync[p] = true;   /* a new member after it: send it the image now */
        sp->resyncs++;
    }
    if (!at->head) {
        shard_durable_forget_part(t, p);   /* its head logs it now */
        return;
    }
    bool hold = at->len > 1 || shard_durable_holds(t);   /* durable.h: the log's too */
    if (promoted || hold != ts_part_holding(part))
        ts_part_hold(part, hold);
    sp->promotions += promoted;
    if (promoted)
        ts_log(TS_INFO, "shard", "job %s tensor '%s' partition %u: promoted to head at version "
               "%" PRIu64, sj->job.id, t->name, p, ts_part_version(part));
}

void shard_params_rechain(struct shard_params *sp, struct ts_cluster *cl, uint32_t my_id)
{
    uint64_t epoch = ts_cluster_epoch(cl);
    bool self = ts_cluster_is_joining(cl, my_id), stale;

    pthread_mutex_lock(&sp->mu);
    /* Joining again (declared dead, and back): what it held may be behind its chains, which
     * went on without it. Its copies come afresh from their heads' images. */
    stale = self && !sp->joining;
    sp->joining = self;
    for (size_t j = 0; j < sp->njobs; j++) {
        struct shard_job *sj = sp->jobs[j];
        for (size_t i = 0; i < SHARD_MAX_TENSORS; i++) {
            struct shard_tensor *t = sj->tensors[i];
            for (uint32_t p = 0; t && p < t->nparts; p++) {
                struct params_place at;
                struct ts_err e = { 0 };
                if (stale && t->parts[p])
                    drop(sp, sj, t, p, "this shard joins again: a copy comes from the head");
                if (!params_place_of(cl, my_id, t, p, &at, &e))
                    rechain_part(sp, sj, t, p, &at);
            }
        }
    }
    shard_tables_rechain(sp, cl);   /* rows lost with a shard: back to a snapshot */
    if (epoch > sp->rechained)
        sp->rechained = epoch;
    pthread_mutex_unlock(&sp->mu);
}

void shard_params_reap(struct shard_params *sp)
{
    bool freed = false;

    pthread_mutex_lock(&sp->mu);
    for (size_t i = 0; i < sp->ndrops; )
        if (!ts_part_pinned(sp->drops[i].p)) {
            ts_part_free(sp->drops[i].p);
            sp->drops[i] = sp->drops[--sp->ndrops];
            freed = true;
        } else {
            i++;
        }
    if (freed && sp->on_release)   /* the data plane caches by partition address */
        sp->on_release(sp->release_ctx, NULL);
    pthread_mutex_unlock(&sp->mu);
}

/* Whether joining shard id has every tensor sj has now; mu held. */
bool params_introduced(const struct shard_job *sj, uint32_t id)
{
    for (size_t i = 0; i < sj->nintroduced; i++)
        if (sj->introduced[i].id == id)
            return sj->introduced[i].tensors == sj->ntensors;
    return false;
}

uint64_t shard_params_moves(struct shard_params *sp, struct ts_cluster *cl, uint32_t my_id,
                            uint64_t *epoch)
{
    uint32_t joining[SHARD_MAX_JOINING];
    size_t nj = ts_cluster_joining(cl, joining, SHARD_MAX_JOINING);
    bool self = ts_cluster_is_joining(cl, my_id);
    uint64_t n;

    /* The heartbeat asks: it must not wait behind a registration creating a large tensor
     * under the lock (it would miss its lease). Busy counts as a move left. */
    if (pthread_mutex_trylock(&sp->mu)) {
        *epoch = atomic_load(&sp->rechained);
        return 1;
    }
    *epoch = sp->rechained;
    n = sp->resyncs + sp->inflight;
    for (size_t j = 0; nj && j < sp->njobs; j++) {
        struct shard_job *sj = sp->jobs[j];
        for (size_t k = 0; k < nj && !self; k++)
            n += !params_introduced(sj, joining[k]);
        for (size_t i = 0; i < SHARD_MAX_TENSORS; i++) {
            struct shard_tensor *t = sj->tensors[i];
            for (uint32_t p = 0; t && p < t->nparts; p++) {
                if (t->held[p] && !t->parts[p] && !t->lost[p])
                    n++;   /* a copy still to come */
            }
        }
    }
    pthread_mutex_unlock(&sp->mu);
    return n;
}
