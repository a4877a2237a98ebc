/* dp_prefetch.c - prefetch frames read off the connections' threads (dp_prefetch.h says why
 * and what it guarantees). */
#include "dp_prefetch.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "params.h"
#include "tables.h"
#include "table/table.h"
#include "util/log.h"

struct posted {
    struct posted *next;
    struct shard_job *sj;           /* pinned (conns) until done */
    struct shard_table *table;
    struct ts_table *store;
    size_t n;
    uint64_t ids[];
};

struct dp_prefetch {
    pthread_mutex_t mu;
    pthread_cond_t more;
    struct posted *head, *tail;     /* FIFO */
    size_t queued;                  /* ids in it */
    bool started, stop;
    pthread_t thread;
};

/* A store of table still (t's lock held). */
static bool has_store(const struct shard_table *t, const struct ts_table *store)
{
    for (size_t k = 0; k < t->nstores; k++)
        if (t->stores[k].t == store)
            return true;
    return false;
}

static void done(struct posted *p)
{
    atomic_fetch_sub(&p->sj->conns, 1);
    free(p);
}

static void *prefetch_main(void *arg)
{
    struct dp_prefetch *pf = arg;

    pthread_mutex_lock(&pf->mu);
    for (;;) {
        struct posted *p;

        while (!pf->head && !pf->stop)
            pthread_cond_wait(&pf->more, &pf->mu);
        if (pf->stop)
            break;
        p = pf->head;
        if (!(pf->head = p->next))
            pf->tail = NULL;
        pf->queued -= p->n;
        pthread_mutex_unlock(&pf->mu);
        pthread_rwlock_rdlock(&p->table->lock);
        if (has_store(p->table, p->store))
            ts_table_prefetch(p->store, p->ids, p->n);
        pthread_rwlock_unlock(&p->table->lock);
        done(p);
        pthread_mutex_lock(&pf->mu);
    }
    pthread_mutex_unlock(&pf->mu);
    return NULL;
}

ts_status dp_prefetch_create(struct dp_prefetch **out, struct ts_err *err)
{
    struct dp_prefetch *pf = calloc(1, sizeof(*pf));

    if (!pf)
        return ts_err_set(err, TS_ENOMEM, "no memory for the data plane's prefetcher");
    pthread_mutex_init(&pf->mu, NULL);
    pthread_cond_init(&pf->more, NULL);
    *out = pf;
    return TS_OK;
}

void dp_prefetch_free(struct dp_prefetch *pf)
{
    if (!pf)
        return;
    pthread_mutex_lock(&pf->mu);
    pf->stop = true;
    pthread_cond_signal(&pf->more);
    pthread_mutex_unlock(&pf->mu);
    if (pf->started)
        pthread_join(pf->thread, NULL);
    for (struct posted *p = pf->head, *next; p; p = next) {
        next = p->next;
        done(p);
    }
    pthread_cond_destroy(&pf->more);
    pthread_mutex_destroy(&pf->mu);
    free(pf);
}

void dp_prefetch_post(struct dp_prefetch *pf, struct shard_job *sj, struct shard_table *table,
                      struct ts_table *store, const uint64_t *ids, size_t n)
{
    struct posted *p;

    pthread_mutex_lock(&pf->mu);
    if (pf->stop || pf->queued + n > DP_PREFETCH_QUEUED ||
        !(p = malloc(sizeof(*p) + n * sizeof(*ids)))) {
        pthread_mutex_unlock(&pf->mu);
        return;   /* a hint: the pull reads what it needs itself */
    }
    if (!pf->started) {
        if (pthread_create(&pf->thread, NULL, prefetch_main, pf)) {
            pf->stop = true;   /* said once; every later post is dropped */
            pthread_mutex_unlock(&pf->mu);
            free(p);
            ts_log(TS_WARN, "dataplane", "no thread for prefetches: pulls read their rows "
                   "themselves");
            return;
        }
        pf->started = true;
    }
    atomic_fetch_add(&sj->conns, 1);   /* the caller's attachment keeps sj meanwhile */
    *p = (struct posted){ .sj = sj, .table = table, .store = store, .n = n };
    memcpy(p->ids, ids, n * sizeof(*ids));
    if (pf->tail)
        pf->tail->next = p;
    else
        pf->head = p;
    pf->tail = p;
    pf->queued += n;
    pthread_cond_signal(&pf->more);
    pthread_mutex_unlock(&pf->mu);
}
