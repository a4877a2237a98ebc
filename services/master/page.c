/* page.c - the master's status page on its HTTP port (--metrics-port; docs/observability.md):
 * `/` is one self-contained HTML page (status.html, built in: no CDN, nothing fetched from
 * elsewhere) that polls `/api/status` every second and draws the cluster's tables and each
 * job's loss, accuracy and samples/s over its steps as inline SVG. */
#include "master.h"

#include <stdlib.h>
#include <string.h>

#include "metrics/http.h"
#include "util/json.h"
#include "util/proc.h"

extern unsigned char ts_status_html[];
extern unsigned int ts_status_html_len;

static char *page(void *ctx, size_t *len, const char **type)
{
    char *out = malloc(ts_status_html_len + 1);

    (void)ctx;
    if (!out)
        return NULL;
    memcpy(out, ts_status_html, ts_status_html_len);
    *len = ts_status_html_len;
    *type = "text/html; charset=utf-8";
    return out;
}

/* A worker's seat in the job table, for its row on the page. */
struct seat_of {
    uint32_t worker, rank;
    const char *job;             /* borrowed from the records */
};

static int by_worker(const void *a, const void *b)
{
    const struct seat_of *x = a, *y = b;

    return x->worker < y->worker ? -1 : x->worker > y->worker;
}

/* Every worker's seat (job and rank) from the job table, sorted by worker: one copy of the
 * table for the whole page rather than a walk of it per worker. *recs: the records the seats
 * point into (the caller frees them with jobs_records_free, *nrecs of them, then the seats);
 * NULL with *n 0 when out of memory (the page shows no jobs then). */
static struct seat_of *seats_of(struct master *m, struct job_record **recs, size_t *nrecs,
                                size_t *n)
{
    struct seat_of *s = NULL;
    size_t total = 0;

    *n = 0;
    if (jobs_export(m->jobs, recs, nrecs, NULL))
        return NULL;
    for (size_t i = 0; i < *nrecs; i++)
        total += (*recs)[i].nseats;
    if (total && !(s = malloc(total * sizeof(*s))))
        return NULL;
    for (size_t i = 0; i < *nrecs; i++)
        for (size_t k = 0; k < (*recs)[i].nseats; k++)
            s[(*n)++] = (struct seat_of){ (*recs)[i].seats[k].worker, (*recs)[i].seats[k].rank,
                                          (*recs)[i].info.id };
    if (*n)
        qsort(s, *n, sizeof(*s), by_worker);
    return s;
}

/* Past PAGE_WORKERS workers the page lists the PAGE_SLOWEST alive ones with the lowest
 * clocks and the PAGE_DEAD dead ones declared last, with the counts of all by state: a page
 * redrawn every second cannot carry ten thousand rows. */
#define PAGE_WORKERS 200
#define PAGE_SLOWEST 150
#define PAGE_DEAD 50

/* An alive worker by its clock, for the slowest first. */
struct by_clock {
    uint64_t clock;
    size_t at;                   /* its position in the view (ids ascend with it) */
};

static int slowest_first(const void *a, const void *b)
{
    const struct by_clock *x = a, *y = b;

    return x->clock < y->clock ? -1 : x->clock > y->clock ? 1 : x->at < y->at ? -1 : 1;
}

/* The positions in v of the workers the page lists (*n of them; malloc'd, NULL if none). */
static size_t *listed(const struct ts_members_view *v, size_t *n)
{
    size_t *idx = malloc((v->nworkers + 1) * sizeof(*idx)), alive = 0;
    struct by_clock *bc;

    *n = 0;
    if (!idx)
        return NULL;
    if (v->nworkers <= PAGE_WORKERS) {
        for (size_t i = 0; i < v->nworkers; i++)
            idx[(*n)++] = i;
        return idx;
    }
    if (!(bc = malloc(v->nworkers * sizeof(*bc)))) {
        free(idx);
        return NULL;
    }
    for (size_t i = 0; i < v->nworkers; i++)
        if (v->workers[i].state == TS_MEMBER_ALIVE)
            bc[alive++] = (struct by_clock){ v->workers[i].clock, i };
    qsort(bc, alive, sizeof(*bc), slowest_first);
    for (size_t k = 0; k < alive && k < PAGE_SLOWEST; k++)
        idx[(*n)++] = bc[k].at;
    free(bc);
    for (size_t i = v->nworkers; i-- > 0 && *n < PAGE_WORKERS;)
        if (v->workers[i].state == TS_MEMBER_DEAD)
            idx[(*n)++] = i;
    return idx;
}

static void workers_json(struct ts_json *j, struct master *m, const struct ts_members_view *v,
                         int64_t now)
{
    struct job_record *recs = NULL;
    size_t nrecs = 0, nseats, nlisted;
    struct seat_of *seats = seats_of(m, &recs, &nrecs, &nseats);
    size_t *idx = listed(v, &nlisted);

    ts_json_uint(j, "workers_alive", v->workers_in[TS_MEMBER_ALIVE]);
    ts_json_uint(j, "workers_dead", v->workers_in[TS_MEMBER_DEAD]);
    ts_json_uint(j, "workers_left", v->workers_in[TS_MEMBER_LEFT]);
    ts_json_uint(j, "workers_listed", nlisted);
    ts_json_arr(j, "workers");
    for (size_t k = 0; k < nlisted; k++) {
        const struct ts_member *w = &v->workers[idx[k]];
        struct seat_of key = { .worker = w->id };
        const struct seat_of *seat = nseats ? bsearch(&key, seats, nseats, sizeof(*seats),
                                                      by_worker) : NULL;
        ts_json_obj(j, NULL);
        ts_json_uint(j, "id", w->id);
        ts_json_str(j, "host", w->addr);
        ts_json_uint(j, "pid", w->pid);
        ts_json_str(j, "state", ts_member_state_name(w->state));
        ts_json_str(j, "job", seat ? seat->job : "");   /* "": none (released jobs keep none) */
        if (seat)
            ts_json_uint(j, "rank", seat->rank);
        ts_json_uint(j, "clock", w->clock);
        ts_json_num(j, "heartbeat_s_ago", (double)(now - w->last_heartbeat_ms) / 1000.0);
        ts_json_end(j);
    }
    ts_json_end(j);
    free(idx);
    free(seats);
    jobs_records_free(recs, nrecs);
}

static void members_json(struct ts_json *j, struct master *m, const struct ts_members_view *v,
                         int64_t now)
{
    ts_json_arr(j, "shards");
    for (size_t i = 0; i < v->nshards; i++) {
        const struct ts_member *s = &v->shards[i];
        ts_json_obj(j, NULL);
        ts_json_uint(j, "id", s->id);
        ts_json_str(j, "addr", s->addr);
        ts_json_str(j, "state", s->joining ? "joining"
                                : s->state == TS_MEMBER_ALIVE && s->away_ms ? "away"
                                : ts_member_state_name(s->state));
        if (s->state == TS_MEMBER_ALIVE && s->away_ms)
            ts_json_num(j, "away_s", (double)(now - s->away_ms) / 1000.0);
        ts_json_uint(j, "lease_ms", s->lease_ms);
        ts_json_num(j, "heartbeat_s_ago", (double)(now - s->last_heartbeat_ms) / 1000.0);
        ts_json_uint(j, "restarts", s->restarts);
        ts_json_str(j, "death", s->death);
        if (s->state == TS_MEMBER_ALIVE)
            views_json(m->views, s->id, j);
        ts_json_end(j);
    }
    ts_json_end(j);
    workers_json(j, m, v, now);
}

static void jobs_json(struct ts_json *j, struct master *m)
{
    struct job_info *jobs = NULL;
    size_t n = 0;

    ts_json_arr(j, "jobs");
    if (!jobs_list(m->jobs, &jobs, &n, NULL)) {
        for (size_t i = 0; i < n; i++) {
            ts_json_obj(j, NULL);
            ts_json_str(j, "id", jobs[i].id);
            ts_json_str(j, "state", jobs_state_name(jobs[i].state));
            ts_json_uint(j, "workers", jobs[i].workers);
            ts_json_uint(j, "alive", jobs[i].alive);
            ts_json_uint(j, "finished", jobs[i].finished);
            ts_json_uint(j, "rollbacks", jobs[i].rollbacks);
            ts_json_str(j, "params_sha256", jobs[i].fingerprint);
            ts_json_str(j, "reason", jobs[i].reason);
            progress_json(m->progress, jobs[i].id, j);
            ts_json_end(j);
        }
        free(jobs);
    }
    ts_json_end(j);
}

static char *status(void *ctx, size_t *len, const char **type)
{
    struct master *m = ctx;
    struct ts_members_view v;
    struct ts_json j;
    int64_t now = ts_now_ms();
    char *out;

    views_watched(m->views);
    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_num(&j, "uptime_s", (double)(now - m->started_ms) / 1000.0);
    if (!ts_members_view(m->members, false, &v, NULL)) {
        ts_json_uint(&j, "epoch", v.epoch);
        ts_json_uint(&j, "replicas", v.replicas);
        ts_json_uint(&j, "shard_failures", v.shard_failures);
        members_json(&j, m, &v, now);
        ts_members_view_free(&v);
    }
    jobs_json(&j, m);
    views_tables_json(m->views, &j);
    ts_json_end(&j);
    out = ts_json_take(&j);
    *len = strlen(out);
    *type = "application/json";
    return out;
}

void master_page_init(struct master *m)
{
    m->progress = progress_create();
    m->views = views_start(m->members);
    ts_metrics_http_route("/", page, m);
    ts_metrics_http_route("/api/status", status, m);
}
