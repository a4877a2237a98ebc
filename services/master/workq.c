/* workq.c - the master's queues of dynamic jobs' data (workq.h). */
#include "workq.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/v1/state.pb-c.h"
#include "util/log.h"
#include "util/proc.h"

/* A rank's grant: units [first, first + count) as its push steps [clock, clock + count). */
struct grant {
    bool held;
    uint64_t clock, first;
    uint32_t count;
};

struct queue {
    char job[TS_JOB_ID_MAX + 1];
    int64_t run_ms;
    uint32_t workers;
    uint64_t units, next, done;
    struct workq_ssp ssp;
    struct grant *grants;          /* by rank */
    /* ssp: by rank, the first unit not done at its last claim (0: none yet). Not kept in the
     * file: a restarted master has each rank pull once more before its next grant. */
    uint64_t *mark;
};

struct workq {
    pthread_mutex_t mu;
    pthread_cond_t cv;             /* ssp: units were settled done */
    struct master_state *state;
    struct queue *v;               /* oldest first */
    size_t n;
};

static void queue_fini(struct queue *qu)
{
    free(qu->grants);
    free(qu->mark);
}

static ts_status queue_init(struct queue *qu, const char *job, int64_t run_ms, uint32_t workers,
                            uint64_t units, struct workq_ssp ssp, struct ts_err *err)
{
    memset(qu, 0, sizeof(*qu));
    snprintf(qu->job, sizeof(qu->job), "%s", job);
    qu->run_ms = run_ms;
    qu->workers = workers;
    qu->units = units;
    qu->ssp = ssp;
    qu->grants = calloc(workers, sizeof(*qu->grants));
    qu->mark = calloc(workers, sizeof(*qu->mark));
    if (!qu->grants || !qu->mark) {
        queue_fini(qu);
        return ts_err_set(err, TS_ENOMEM, "work queue of job '%s': out of memory", job);
    }
    return TS_OK;
}

/* ---- the file ---- */

static ts_status load(struct workq *q, struct ts_err *err)
{
    uint8_t *buf = NULL;
    size_t n = 0;
    Tessera__V1__WorkQueues *wq;
    ts_status st;

    if ((st = master_state_get(q->state, "work", &buf, &n, err)) || !buf)
        return st;
    wq = tessera__v1__work_queues__unpack(NULL, n, buf);
    free(buf);
    if (!wq)
        return ts_err_set(err, TS_ECORRUPT, "state file work: not a WorkQueues message");
    if (wq->n_queues > WORKQ_MAX_QUEUES ||
        !(q->v = calloc(wq->n_queues + 1, sizeof(*q->v))))
        st = ts_err_set(err, wq->n_queues > WORKQ_MAX_QUEUES ? TS_ECORRUPT : TS_ENOMEM,
                        "state file work: %zu queues", wq->n_queues);
    for (size_t i = 0; !st && i < wq->n_queues; i++) {
        const Tessera__V1__WorkQueue *w = wq->queues[i];
        struct queue *qu = &q->v[q->n];

        if (w->workers < 1 || w->workers > 4096 || !w->units || w->units > WORKQ_MAX_UNITS ||
            w->next > w->units || w->done > w->next || ts_job_id_check("job", w->job, NULL)) {
            st = ts_err_set(err, TS_ECORRUPT, "state file work: queue %zu ('%.64s') is not "
                            "consistent", i, w->job);
            break;
        }
        if ((st = queue_init(qu, w->job, w->run_unix_ms, w->workers, w->units,
                             (struct workq_ssp){ w->ssp, w->staleness }, err)))
            break;
        q->n++;
        qu->next = w->next;
        qu->done = w->done;
        for (size_t k = 0; !st && k < w->n_grants; k++) {
            const Tessera__V1__WorkGrant *g = w->grants[k];
            if (g->rank >= w->workers || !g->count || g->first + g->count > w->next)
                st = ts_err_set(err, TS_ECORRUPT, "state file work: job '%s': grant %zu is "
                                "not consistent", w->job, k);
            else
                qu->grants[g->rank] = (struct grant){ true, g->clock, g->first, g->count };
        }
    }
    tessera__v1__work_queues__free_unpacked(wq, NULL);
    return st;
}

/* Writes every queue to the state directory (mu held). */
static ts_status save(struct workq *q, struct ts_err *err)
{
    Tessera__V1__WorkQueues wq = TESSERA__V1__WORK_QUEUES__INIT;
    Tessera__V1__WorkQueue *qs = calloc(q->n + 1, sizeof(*qs)), **qp = calloc(q->n + 1,
                                                                                sizeof(*qp));
    size_t ngrants = 0, at = 0;
    Tessera__V1__WorkGrant *gs = NULL, **gp = NULL;
    uint8_t *buf = NULL;
    ts_status st = TS_OK;

    if (!master_state_durable_dir(q->state)) {
        free(qs);
        free(qp);
        return TS_OK;
    }
    for (size_t i = 0; i < q->n; i++)
        for (uint32_t r = 0; r < q->v[i].workers; r++)
            ngrants += q->v[i].grants[r].held;
    gs = calloc(ngrants + 1, sizeof(*gs));
    gp = calloc(ngrants + 1, sizeof(*gp));
    if (!qs || !qp || !gs || !gp) {
        st = ts_err_set(err, TS_ENOMEM, "work queues: out of memory");
        goto out_free;
    }
    for (size_t i = 0; i < q->n; i++) {
        const struct queue *qu = &q->v[i];
        Tessera__V1__WorkQueue *w = &qs[i];

        tessera__v1__work_queue__init(w);
        w->job = (char *)qu->job;
        w->run_unix_ms = qu->run_ms;
        w->workers = qu->workers;
        w->units = qu->units;
        w->next = qu->next;
        w->done = qu->done;
        w->ssp = qu->ssp.on;
        w->staleness = qu->ssp.staleness;
        w->grants = &gp[at];
        for (uint32_t r = 0; r < qu->workers; r++) {
            const struct grant *g = &qu->grants[r];
            if (!g->held)
                continue;
            tessera__v1__work_grant__init(&gs[at]);
            gs[at] = (Tessera__V1__WorkGrant){ gs[at].base, r, g->clock, g->first, g->count };
            gp[at] = &gs[at];
            at++;
            w->n_grants++;
        }
        qp[i] = w;
    }
    wq.queues = qp;
    wq.n_queues = q->n;
    if (!(buf = malloc(tessera__v1__work_queues__get_packed_size(&wq) + 1)))
        st = ts_err_set(err, TS_ENOMEM, "work queues: out of memory");
    else
        st = master_state_put(q->state, "work", buf, tessera__v1__work_queues__pack(&wq, buf),
                              err);
out_free:
    free(buf);
    free(gs);
    free(gp);
    free(qs);
    free(qp);
    return st;
}

ts_status workq_create(struct master_state *s, struct workq **out, struct ts_err *err)
{
    struct workq *q = calloc(1, sizeof(*q));
    ts_status st;

    if (!q)
        return ts_err_set(err, TS_ENOMEM, "work queues: out of memory");
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    q->state = s;
    if ((st = load(q, err))) {
        workq_free(q);
        return st;
    }
    *out = q;
    return TS_OK;
}

void workq_free(struct workq *q)
{
    if (!q)
        return;
    for (size_t i = 0; i < q->n; i++)
        queue_fini(&q->v[i]);
    free(q->v);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

/* ---- claims ---- */

static struct queue *find(struct workq *q, const char *job)
{
    for (size_t i = 0; i < q->n; i++)
        if (!strcmp(q->v[i].job, job))
            return &q->v[i];
    return NULL;
}

/* job's queue for this run, made (replacing another run's, or the oldest queue when there
 * are WORKQ_MAX_QUEUES) if it has none. mu held. */
static ts_status queue_of(struct workq *q, const struct workq_seat *seat, uint64_t units,
                          struct workq_ssp ssp, struct queue **out, struct ts_err *err)
{
    struct queue *qu = find(q, seat->job), fresh;
    ts_status st;

    if (qu && qu->run_ms == seat->run_ms) {
        *out = qu;
        return TS_OK;
    }
    if ((st = queue_init(&fresh, seat->job, seat->run_ms, seat->workers, units, ssp, err)))
        return st;
    if (!qu && q->n == WORKQ_MAX_QUEUES) {
        queue_fini(&q->v[0]);
        memmove(&q->v[0], &q->v[1], (q->n - 1) * sizeof(*q->v));
        q->n--;
    }
    if (!qu) {
        struct queue *v = realloc(q->v, (q->n + 1) * sizeof(*v));
        if (!v) {
            queue_fini(&fresh);
            return ts_err_set(err, TS_ENOMEM, "work queues: out of memory");
        }
        q->v = v;
        qu = &q->v[q->n++];
    } else {
        queue_fini(qu);
    }
    *qu = fresh;
    ts_log(TS_INFO, "master", "job %s: work queue of %" PRIu64 " units for %u workers%s",
           seat->job, units, seat->workers, ssp.on ? ", staleness bounded" : "");
    *out = qu;
    return TS_OK;
}

static void counts(const struct queue *qu, const bool *alive, struct workq_grant *g)
{
    g->units = qu->units;
    g->done = qu->done;
    g->outstanding = g->lost = 0;
    for (uint32_t r = 0; r < qu->workers; r++) {
        const struct grant *gr = &qu->grants[r];
        if (gr->held)
            *(!alive || alive[r] ? &g->outstanding : &g->lost) += gr->count;
    }
}

/* How many units to hand out: what the worker wants, fewer as the queue runs low (half of an
 * even share of what is left, at least one), so that the last units spread over the workers
 * and none finishes long after the others. */
static uint32_t grant_size(const struct queue *qu, uint32_t want)
{
    uint64_t left = qu->units - qu->next, fair = (left + 2ULL * qu->workers - 1) /
                                                 (2ULL * qu->workers);

    fair = fair ? fair : 1;
    fair = fair < left ? fair : left;
    return want < fair ? want : (uint32_t)fair;
}

/* ssp: the first unit not done for rank `self`: none handed out from it on, and no other
 * live rank holds it (its own it pushes before each pull; a dead rank's lost units count as
 * done: they never will be). */
static uint64_t first_open(const struct queue *qu, const bool *alive, uint32_t self)
{
    uint64_t low = qu->next;

    for (uint32_t r = 0; r < qu->workers; r++)
        if (r != self && qu->grants[r].held && alive[r] && qu->grants[r].first < low)
            low = qu->grants[r].first;
    return low;
}

/* ssp: whether a rank may compute unit u, given what was done at its previous claim (mark):
 * unit u of step u / W needs every unit of the steps before u / W - staleness. */
static bool ssp_ready(const struct queue *qu, uint64_t mark, uint64_t u)
{
    uint64_t step = u / qu->workers;

    return step <= qu->ssp.staleness || (step - qu->ssp.staleness) * qu->workers <= mark;
}

/* ssp: the rank's granted unit (it stays the rank's: its place in the queue) may start only
 * once ssp_ready holds for what the rank's values hold. Those predate this claim (mark: what
 * was done at the previous one); if the unit is not ready by them, waits up to WORKQ_SSP_WAIT_MS
 * for the other ranks to settle the units it needs, then either grants it with pull (the rank
 * pulls, after this reply, before it computes) or says retry (count 0: pull and claim again).
 * mu held; released while waiting. */
static void ssp_wait(struct workq *q, struct queue *qu, const struct workq_seat *seat,
                     struct workq_grant *out)
{
    struct timespec until;
    bool ready;

    if (ssp_ready(qu, qu->mark[seat->rank], out->first))
        return;
    ts_abstime_ms(&until, WORKQ_SSP_WAIT_MS);
    while (!(ready = ssp_ready(qu, first_open(qu, seat->alive, seat->rank), out->first)) &&
           pthread_cond_timedwait(&q->cv, &q->mu, &until) == 0)
        ;
    if (!ready)
        ready = ssp_ready(qu, first_open(qu, seat->alive, seat->rank), out->first);
    out->pull = ready;
    out->retry = !ready;
    if (!ready)
        out->count = 0;
}

/* The rank's grant after a claim at clock: the part below clock is done. Writes the grant to
 * hand out again into g (count 0: none left of it). mu held. */
static ts_status settle(struct queue *qu, uint32_t rank, uint64_t clock, struct workq_grant *g,
                        struct ts_err *err)
{
    struct grant *gr = &qu->grants[rank];
    uint64_t pushed;

    g->count = 0;
    if (!gr->held)
        return TS_OK;
    if (clock < gr->clock)
        return ts_err_set(err, TS_ESTATE, "clock: %" PRIu64 ", but rank %u of job '%s' was "
                          "granted units for its steps from %" PRIu64 " (its steps below were "
                          "pushed; a rank's clock never goes back)", clock, rank, qu->job,
                          gr->clock);
    pushed = clock - gr->clock < gr->count ? clock - gr->clock : gr->count;
    if (pushed < gr->count) {   /* a restarted worker: the rest of its grant */
        g->first = gr->first + pushed;
        g->clock = clock;
        g->count = (uint32_t)(gr->count - pushed);
    }
    return TS_OK;
}

ts_status workq_claim(struct workq *q, const struct workq_seat *seat, uint64_t clock,
                      uint32_t want, uint64_t units, struct workq_ssp ssp,
                      struct workq_grant *g, struct ts_err *err)
{
    struct queue *qu = NULL;
    uint64_t next_was, done_was;
    struct grant was;
    struct workq_grant out = { 0 };
    struct ts_err why = { 0 };
    ts_status st;

    if (want > WORKQ_MAX_WANT)
        return ts_err_set(err, TS_EINVAL, "want: %u units; at most %d", want, WORKQ_MAX_WANT);
    if (!units || units > WORKQ_MAX_UNITS || units % seat->workers)
        return ts_err_set(err, TS_EINVAL, "units: %" PRIu64 "; want a multiple of the job's %u "
                          "workers (steps x workers), 1..2^40", units, seat->workers);
    if (clock > UINT64_MAX - WORKQ_MAX_UNITS)
        return ts_err_set(err, TS_EINVAL, "clock: %" PRIu64 " is beyond any step", clock);
    if (ssp.staleness > 1000000)
        return ts_err_set(err, TS_EINVAL, "staleness: %u; at most 1000000", ssp.staleness);
    ssp.staleness = ssp.on ? ssp.staleness : 0;
    pthread_mutex_lock(&q->mu);
    if ((st = queue_of(q, seat, units, ssp, &qu, err)))
        goto out_unlock;
    if (qu->ssp.on != ssp.on || qu->ssp.staleness != ssp.staleness) {
        st = ts_err_set(err, TS_ESTATE, "ssp: %s (staleness %u), but job '%s' hands out units "
                        "%s (staleness %u): every worker of a run the same mode", ssp.on ?
                        "on" : "off", ssp.staleness, seat->job, qu->ssp.on ? "with ssp" :
                        "without ssp", qu->ssp.staleness);
        goto out_unlock;
    }
    if (qu->units != units || qu->workers != seat->workers) {
        st = ts_err_set(err, TS_ESTATE, "units: %" PRIu64 " for %u workers, but job '%s' hands "
                        "out %" PRIu64 " units for %u (every worker of a run must say the "
                        "same steps)", units, seat->workers, seat->job, qu->units, qu->workers);
        goto out_unlock;
    }
    if ((st = settle(qu, seat->rank, clock, &out, err)))
        goto out_unlock;
    next_was = qu->next;
    done_was = qu->done;
    was = qu->grants[seat->rank];
    if (was.held) {   /* the units below clock are done */
        qu->done += was.count - out.count;
        qu->grants[seat->rank].held = false;
    }
    if (!out.count && want && qu->next < qu->units) {
        out.first = qu->next;
        out.clock = clock;
        /* ssp: one at a time, so that a unit is known done at its rank's next claim */
        out.count = qu->ssp.on ? 1 : grant_size(qu, want);
        qu->next += out.count;
    }
    if (out.count)
        qu->grants[seat->rank] = (struct grant){ true, out.clock, out.first, out.count };
    if ((out.count || was.held) && save(q, &why)) {
        qu->next = next_was;   /* not durable: as if the claim never came */
        qu->done = done_was;
        qu->grants[seat->rank] = was;
        st = ts_err_set(err, TS_EUNAVAIL, "job %s: the grant could not be made durable (%s); "
                        "retry", seat->job, why.msg);
        goto out_unlock;
    }
    if (was.held)
        pthread_cond_broadcast(&q->cv);
    if (qu->ssp.on && out.count)
        ssp_wait(q, qu, seat, &out);
    if (qu->ssp.on)   /* what the rank's pulls after this reply hold at least */
        qu->mark[seat->rank] = first_open(qu, seat->alive, seat->rank);
    counts(qu, seat->alive, &out);
    out.units = qu->units;
    *g = out;
out_unlock:
    pthread_mutex_unlock(&q->mu);
    return st;
}

bool workq_counts(struct workq *q, const char *job, int64_t run_ms, const bool *alive,
                  struct workq_grant *g)
{
    struct queue *qu;
    bool found;

    pthread_mutex_lock(&q->mu);
    qu = find(q, job);
    found = qu && qu->run_ms == run_ms;
    if (found) {
        memset(g, 0, sizeof(*g));
        counts(qu, alive, g);
    }
    pthread_mutex_unlock(&q->mu);
    return found;
}
