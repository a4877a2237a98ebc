/* dp_access.c - what binds a job's data-plane connections to their senders: which worker owns
 * each of the job's slots, and under mutual TLS the job's key, as the master says (JobAccess;
 * docs/security.md, "Pushes bound to their sender").
 *
 * A connection names its worker in its HELLO (and proves it with that worker's key, derived
 * from the job's key, where the handshake is required); every push and seed it sends must be
 * of slots that worker owns, or owned before its owner now (a step in which an elastic slot
 * changed hands may carry either's push, and every shard must take the same one). The owners
 * change only when a worker dies or comes back (elastic jobs), so each job's table is asked
 * for once and kept: a push whose worker does not own its
 * slot under the table asks again, at most every ACCESS_REFRESH_MS, and a heartbeat that shows
 * the job's roster grew marks the table stale. One fetch at a time per job: the connection
 * threads that need the same job wait for it rather than each asking the master.
 *
 * Why the master, not the HELLO's word: without the table, a worker that claims another's
 * slot would be taken at its word wherever the data plane is not authenticated, and an elastic
 * job's hand-over of a slot (part.h, "Duplicates") could not be told from a forger's push. */
#include "dp_internal.h"

#include <inttypes.h>
#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>

#include "transport/auth.h"
#include "util/log.h"
#include "util/proc.h"

#define ACCESS_JOBS 256              /* jobs kept (JOBS_MAX on the master); the oldest goes */
#define ACCESS_REFRESH_MS 50         /* the least time between two fetches of one job */
#define ACCESS_WAIT_MS 10000         /* the longest a connection waits for the table */
#define ACCESS_PAST 3                /* JobAccessResponse.past_owners per slot */

struct dp_job_access {
    char job[TS_JOB_ID_MAX + 1];     /* "": a free entry */
    bool fetching, ready, stale, has_key;
    uint8_t key[TS_DP_KEY_LEN];
    uint32_t *owners;               /* n, by slot */
    uint32_t *past;                 /* n * ACCESS_PAST: each slot's earlier owners */
    size_t n;
    uint64_t roster;
    bool elastic;
    int64_t fetched_ms, used_ms;
};

struct dp_access {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    dp_access_fetch_fn fetch;        /* NULL until the shard registered */
    void *ctx;
    struct dp_job_access v[ACCESS_JOBS];
};

ts_status dp_access_create(struct dp_access **out, struct ts_err *err)
{
    struct dp_access *a = calloc(1, sizeof(*a));

    if (!a)
        return ts_err_set(err, TS_ENOMEM, "data plane: out of memory");
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    *out = a;
    return TS_OK;
}

static void entry_clear(struct dp_job_access *e)
{
    free(e->owners);
    free(e->past);
    OPENSSL_cleanse(e, sizeof(*e));
}

void dp_access_free(struct dp_access *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < ACCESS_JOBS; i++)
        entry_clear(&a->v[i]);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a);
}

void dp_access_set_fetch(struct dp_access *a, dp_access_fetch_fn fn, void *ctx)
{
    pthread_mutex_lock(&a->mu);
    a->fetch = fn;
    a->ctx = ctx;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

/* Job's entry, or a free one (the least recently used if none is free) named job. mu held. */
static struct dp_job_access *entry_of(struct dp_access *a, const char *job)
{
    struct dp_job_access *free_e = NULL, *old = NULL;

    for (size_t i = 0; i < ACCESS_JOBS; i++) {
        struct dp_job_access *e = &a->v[i];
        if (!strcmp(e->job, job))
            return e;
        if (!e->job[0] && !free_e)
            free_e = e;
        if (e->job[0] && !e->fetching && (!old || e->used_ms < old->used_ms))
            old = e;
    }
    if (!free_e && !old)
        return NULL;   /* every entry is being fetched: the caller retries */
    if (!free_e) {
        entry_clear(old);
        free_e = old;
    }
    snprintf(free_e->job, sizeof(free_e->job), "%s", job);
    return free_e;
}

/* Fills e from the master's answer. mu held. */
static ts_status entry_fill(struct dp_job_access *e, const Tessera__V1__JobAccessResponse *r,
                            struct ts_err *err)
{
    uint32_t *owners = malloc((r->n_owners + 1) * sizeof(*owners));
    uint32_t *past = calloc(r->n_owners * ACCESS_PAST + 1, sizeof(*past));

    if (!owners || !past) {
        free(owners);
        free(past);
        return ts_err_set(err, TS_ENOMEM, "data plane: out of memory");
    }
    if (r->n_owners)
        memcpy(owners, r->owners, r->n_owners * sizeof(*owners));
    if (r->n_past_owners == r->n_owners * ACCESS_PAST && r->n_past_owners)
        memcpy(past, r->past_owners, r->n_past_owners * sizeof(*past));
    free(e->owners);
    free(e->past);
    e->owners = owners;
    e->past = past;
    e->n = r->n_owners;
    e->roster = r->roster;
    e->elastic = r->elastic;
    e->has_key = r->data_key.len == TS_DP_KEY_LEN;
    if (e->has_key)
        memcpy(e->key, r->data_key.data, TS_DP_KEY_LEN);
    e->ready = true;
    e->stale = false;
    return TS_OK;
}

/* The entry of job, fetched from the master if there is none yet, or if it is not newer than
 * `after` (a ts_now_ms the caller's last look was fetched at; 0: any will do): a fetch then
 * waits until ACCESS_REFRESH_MS after the last one, unless a heartbeat marked the entry
 * stale, and a fetch by another thread meanwhile will do. Returns with mu held and *out set,
 * or an error with mu released. */
static ts_status get(struct dp_access *a, const char *job, int64_t after,
                     struct dp_job_access **out, struct ts_err *err)
{
    int64_t until = ts_now_ms() + ACCESS_WAIT_MS;
    struct dp_job_access *e = NULL;
    Tessera__V1__JobAccessResponse *r = NULL;
    dp_access_fetch_fn fetch;
    void *ctx;
    ts_status st;

    pthread_mutex_lock(&a->mu);
    for (;;) {
        int64_t now = ts_now_ms();
        struct timespec ts;

        e = a->fetch ? entry_of(a, job) : NULL;
        if (e && !e->fetching && e->ready && e->fetched_ms > after) {
            e->used_ms = now;
            *out = e;
            return TS_OK;
        }
        if (e && !e->fetching &&
            (!e->ready || e->stale || now - e->fetched_ms >= ACCESS_REFRESH_MS))
            break;   /* this thread fetches */
        if (now >= until) {
            pthread_mutex_unlock(&a->mu);
            return ts_err_set(err, TS_EUNAVAIL, "job '%s': %s", job, a->fetch ?
                              "no word from the master on who may push (JobAccess)" :
                              "this shard has not registered with the master yet; retry");
        }
        ts_abstime_ms(&ts, 10);
        pthread_cond_timedwait(&a->cv, &a->mu, &ts);
    }
    e->fetching = true;
    fetch = a->fetch;
    ctx = a->ctx;
    pthread_mutex_unlock(&a->mu);
    st = fetch(ctx, job, &r, err);
    pthread_mutex_lock(&a->mu);
    e->fetching = false;
    e->fetched_ms = e->used_ms = ts_now_ms();
    if (!st)
        st = entry_fill(e, r, err);
    if (r)
        tessera__v1__job_access_response__free_unpacked(r, NULL);
    pthread_cond_broadcast(&a->cv);
    if (st) {
        if (!e->ready)
            entry_clear(e);   /* nothing known: the next caller asks again */
        pthread_mutex_unlock(&a->mu);
        ts_err_prefix(err, "job '%s': who may push", job);
        return st;
    }
    *out = e;
    return TS_OK;
}

ts_status dp_access_key(struct dp_access *a, const char *job, bool chain, uint32_t member,
                        uint8_t out[TS_DP_KEY_LEN], struct ts_err *err)
{
    struct dp_job_access *e;
    ts_status st;

    if ((st = get(a, job, 0, &e, err)))
        return st;
    if (!e->has_key) {
        pthread_mutex_unlock(&a->mu);
        return ts_err_set(err, TS_ESTATE, "job '%s': the master gave no data-plane key (it "
                          "serves no mutual TLS): connect without the handshake", job);
    }
    if (chain)
        ts_dp_chain_key(e->key, out);
    else
        ts_dp_member_key(e->key, member, out);
    pthread_mutex_unlock(&a->mu);
    return TS_OK;
}

ts_status dp_access_chain_key(void *ctx, const char *job, uint8_t out[TS_DP_KEY_LEN],
                              struct ts_err *err)
{
    struct dataplane *dp = ctx;

    return dp_access_key(dp->access, job, true, 0, out, err);
}

/* Whether member owns slot k under e, or owned it before its owner now: a step in which the
 * slot changed hands may carry either's push (docs/elastic.md), and every shard must take
 * the same one, whenever it last asked the master. mu held. */
static bool may_push(const struct dp_job_access *e, uint32_t member, uint32_t k)
{
    if (k >= e->n)
        return false;
    if (e->owners[k] == member)
        return true;
    for (size_t i = 0; i < ACCESS_PAST; i++)
        if (e->past[k * ACCESS_PAST + i] == member)
            return true;
    return false;
}

/* The first of the slots (rank alone when slots is 0) that member may not push under e, or
 * -1. mu held. */
static int64_t not_owned(const struct dp_job_access *e, uint32_t member, uint32_t rank,
                         uint64_t slots)
{
    if (!slots)
        return may_push(e, member, rank) ? -1 : (int64_t)rank;
    for (uint64_t s = slots; s; s &= s - 1) {
        uint32_t k = (uint32_t)__builtin_ctzll(s);
        if (!may_push(e, member, k))
            return k;
    }
    return -1;
}

ts_status dp_access_check(struct dp_access *a, const char *job, uint32_t member, uint32_t rank,
                          uint64_t slots, struct ts_err *err)
{
    struct dp_job_access *e;
    int64_t seen = 0, k;
    uint32_t owner = 0;
    ts_status st;
    bool elastic = false;

    if (!member)
        return ts_err_set(err, TS_EPERM, "rank %u: this connection named no worker in its HELLO "
                          "(the worker id RegisterWorker gave, in its `tensor` field): "
                          "refused, nothing applied", rank);
    /* A table without this worker as the owner may be older than the worker's slot: ask
     * the master once more before refusing. */
    for (int pass = 0; pass < 2; pass++) {
        if ((st = get(a, job, seen, &e, err)))
            return st;
        k = not_owned(e, member, rank, slots);
        owner = k >= 0 && (uint64_t)k < e->n ? e->owners[k] : 0;
        elastic = e->elastic;
        seen = e->fetched_ms;
        pthread_mutex_unlock(&a->mu);
        if (k < 0)
            return TS_OK;
    }
    /* An elastic slot may have just changed hands: the worker asks the master and goes on. */
    if (elastic)
        return ts_err_set(err, TS_ESLOTS, "slot %" PRId64 " of job '%s' is worker %u's, not this "
                          "connection's worker %u: ask the master for this worker's slots",
                          k, job, owner, member);
    return ts_err_set(err, TS_EPERM, "rank %" PRId64 " of job '%s' is worker %u's; this "
                      "connection is worker %u's: refused, nothing applied", k, job, owner,
                      member);
}

void dp_access_roster(struct dp_access *a, const char *job, uint64_t roster)
{
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < ACCESS_JOBS; i++)
        if (!strcmp(a->v[i].job, job) && a->v[i].ready && a->v[i].roster < roster)
            a->v[i].stale = true;
    pthread_mutex_unlock(&a->mu);
}

void dp_access_forget(struct dp_access *a, const char *job)
{
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < ACCESS_JOBS; i++)
        if (!strcmp(a->v[i].job, job) && !a->v[i].fetching)
            entry_clear(&a->v[i]);
    pthread_mutex_unlock(&a->mu);
}
