/* dp_rows.c - a sparse table's frames on the data plane (frame.h: ROWS_PUSH, ROWS_PULL,
 * ROWS_SCAN, ROWS_COPY; docs/embeddings.md, "Rows on the wire" and "Copies of rows").
 *
 * A push carries a rank's ids of a step, strictly ascending, and their gradients; lib/table
 * checks them and sums or applies them (table.h), and an ACK answers. A pull carries ids in
 * any order and is answered with their rows once its version may be read. A scan walks the
 * rows that exist in ascending id, a page a request, for a fingerprint: its first request
 * lists the ids (after the version it names), the next ones page through that list on this
 * connection.
 * Stores (rowcopy.h): a table's rows here may be in several stores, this shard's own and the
 * copies it took over from shards that left; a frame's ids are split among them (routed by
 * the ring the table was placed on), and an id no store here serves is refused (TS_ESTALE:
 * the worker's map and this shard's differ). The part of a push this shard heads is copied to
 * its followers (ROWS_COPY) once the stores took it and before the ACK; a copy it holds of
 * another shard's rows takes that shard's ROWS_COPY frames. A table with one store and no
 * copies (no replicas) takes frames whole, unrouted.
 * Waits are cut in slices, with the table's lock let go between them, so that the job's end
 * (dataplane_end_job), the shard's stop or a rollback (which places the table anew) is not
 * held up by them. */
#include "dp_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "dp_prefetch.h"
#include "durable.h"
#include "metrics/metrics.h"
#include "rowcopy.h"
#include "tables.h"
#include "transport/frame.h"
#include "util/log.h"
#include "util/proc.h"

#define ROWS_SLICE_MS 200           /* how soon a waiting frame lets the table go */
#define SCAN_PAGE_MAX 65536         /* rows a scan reply carries at most */
#define COPY_HEAD 8                 /* a ROWS_COPY's head shard id and sweep plan (4 bytes
                                     * each, little-endian), before its ids */
#define HOLD_SLICE_MS 20            /* how often a frame held for a join's move looks again */

/* The table a frame names, on a connection that named its job. On a shard that joined, a
 * join's move makes the job's tables: a frame that comes first (its worker took the new map
 * before the move reached this shard) waits for it while the job is held (tables.h). */
static ts_status table_of(struct dp_conn *dc, const struct ts_frame_hdr *h,
                          struct shard_table **st, struct ts_err *err)
{
    int64_t until = ts_now_ms() + DP_PULL_WAIT_MS;

    if (!dc->job)
        return ts_err_set(err, TS_ESTATE, "no job: send a HELLO naming a registered job first");
    while (!(*st = shard_params_table(dc->dp->params, dc->job, h->tensor)) &&
           ts_now_ms() < atomic_load(&dc->job->tables_held_until) && ts_now_ms() < until &&
           !(atomic_load(&dc->cancel) & DP_CANCEL_END))
        ts_sleep_ms(HOLD_SLICE_MS);
    if (!*st)
        return ts_err_set(err, TS_ENOTFOUND, "table_id: %u is not a table of job '%s' on this "
                          "shard (register it first)", h->tensor, dc->job->job.id);
    return TS_OK;
}

/* A connection begun under a map older than t's last move (a join's) may have placed rows
 * on the ring before it: TS_ESTALE, and its worker fails over to the new map. */
static ts_status moved_since(const struct dp_conn *dc, struct shard_table *t,
                             struct ts_err *err)
{
    uint64_t moved = atomic_load(&t->moved);

    if (moved <= dc->hello_epoch)
        return TS_OK;
    return ts_err_set(err, TS_ESTALE, "table '%s': its rows were placed anew at shard map epoch "
                      "%" PRIu64 " (a shard joined), after this connection began (epoch %"
                      PRIu64 "); refresh the shard map", t->name, moved, dc->hello_epoch);
}

/* Room for n elements of sz bytes in *p (of *cap). */
static ts_status grow(void *p, size_t *cap, size_t n, size_t sz, struct ts_err *err)
{
    void **at = p, *q;
    size_t c = *cap ? *cap : 64;

    if (n <= *cap)
        return TS_OK;
    while (c < n)
        c *= 2;
    if (!(q = realloc(*at, c * sz)))
        return ts_err_set(err, TS_ENOMEM, "no memory for %zu rows of a table frame", n);
    *at = q;
    *cap = c;
    return TS_OK;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* A frame's rows: n ids and, for a push, their gradients of `row` bytes each. */
struct rows_in {
    size_t n;
    const uint64_t *ids;
    const uint8_t *grad;
    size_t row;
};

/* Whether t takes frames whole: one store, no copies. */
static bool whole(const struct shard_table *t)
{
    return t->nstores == 1 && !t->replicated;
}

/* dc->split.served[k]: whether store k is served, read once for the whole frame (a copy may
 * be taken over while it is served: a push must not give it a part, nor split the frame by an
 * `owned` that changed half way). t->lock held. */
static ts_status serving(struct dp_conn *dc, struct shard_table *t, struct ts_err *err)
{
    ts_status st;

    if ((st = grow(&dc->split.served, &dc->split.served_cap, t->nstores, 1, err)))
        return st;
    for (size_t k = 0; k < t->nstores; k++)
        dc->split.served[k] = atomic_load(&t->stores[k].owned);
    return TS_OK;
}

/* dc->split.key[i]: the index of the store serving in->ids[i] (dc->split.served, set by
 * serving()); for an id none here serves, TS_EROLLBACK while the job has lost state (its
 * shard died with its copy: until the rollback makes it whole), else TS_ESTALE (the worker's
 * map and this shard's differ). A copy taken over serves only the rows whose chain has this
 * shard second (rowcopy_keeps): a row of the same head whose copy was on a shard that died
 * too is lost, not a new row. t->lock held. */
static ts_status route(struct dp_conn *dc, struct shard_table *t, const struct rows_in *in,
                       struct ts_err *err)
{
    uint32_t last_origin = 0, last_k = 0;
    ts_status st;

    if ((st = grow(&dc->split.key, &dc->split.key_cap, in->n, sizeof(uint32_t), err)))
        return st;
    for (size_t i = 0; i < in->n; i++) {
        uint32_t origin = rowcopy_origin(t, in->ids[i]);
        size_t k = 0;
        if (i && origin == last_origin && last_k == 0) {   /* this shard's own rows */
            dc->split.key[i] = last_k;
            continue;
        }
        while (k < t->nstores && (t->stores[k].origin != origin || !dc->split.served[k]))
            k++;
        if (k > 0 && k < t->nstores && !rowcopy_keeps(t, &t->stores[k], in->ids[i]))
            k = t->nstores;
        /* state_lost, not lost_report: that one is cleared once told to the master, and a
         * pull after that would read TS_ESTALE and wait for a map that never moves. */
        if (k == t->nstores && atomic_load(&dc->job->state_lost))
            return ts_err_set(err, TS_EROLLBACK, "table '%s': row %" PRIu64 " (ids[%zu]) lost "
                              "every copy with shard %u; job '%s' goes back to its last "
                              "snapshot: wait for the master, then continue from there",
                              t->name, in->ids[i], i, origin, dc->job->job.id);
        if (k == t->nstores)
            return ts_err_set(err, TS_ESTALE, "table '%s': row %" PRIu64 " (ids[%zu]) is "
                              "shard %u's, which this shard does not serve under map epoch %"
                              PRIu64 "; refresh the shard map", t->name, in->ids[i], i, origin,
                              ts_cluster_epoch(atomic_load(&dc->dp->cluster)));
        dc->split.key[i] = last_k = (uint32_t)k;
        last_origin = origin;
    }
    return TS_OK;
}

/* The rows of in whose key is k, in order, into dc->split's part (ids, positions, and with a
 * push their gradients); *m: how many. */
static ts_status gather(struct dp_conn *dc, const struct rows_in *in, const uint32_t *key,
                        uint32_t k, size_t *m, struct ts_err *err)
{
    ts_status st;

    *m = 0;
    if ((st = grow(&dc->split.ids, &dc->split.ids_cap, in->n, sizeof(uint64_t), err)) ||
        (st = grow(&dc->split.pos, &dc->split.pos_cap, in->n, sizeof(size_t), err)) ||
        (in->grad && (st = grow(&dc->split.grad, &dc->split.grad_cap, in->n * in->row, 1,
                                err))))
        return st;
    for (size_t i = 0; i < in->n; i++) {
        if (key[i] != k)
            continue;
        dc->split.ids[*m] = in->ids[i];
        dc->split.pos[*m] = i;
        if (in->grad)
            memcpy(dc->split.grad + *m * in->row, in->grad + i * in->row, in->row);
        (*m)++;
    }
    return TS_OK;
}

/* An operation on a table's stores, run with its lock held shared (in_slices). */
typedef ts_status (*locked_fn)(struct dp_conn *dc, struct shard_table *t, void *arg,
                               struct ts_err *err);

/* Runs fn with t's lock held shared, again while it waits (TS_ETIMEDOUT: a slice passed; the
 * lock is let go between slices) until DP_PULL_WAIT_MS pass or the job ends (TS_ECANCELLED);
 * a TS_ESTALE (a row no store here serves, a copy taken over) once more after this shard took
 * up the newest map. A worker's pull (`pull`) that waits ends with TS_ESLOTS when the job's
 * slots change hands (slots.c): the step it waits for may need a slot only this worker can
 * now compute. step: a push's or copy's, which waits while t is held for a join's move
 * (without the lock, which the move takes; fn checks the hold again under it); 0 for other
 * frames. what: the frame, for the message. */
static ts_status in_slices(struct dp_conn *dc, struct shard_table *t, locked_fn fn, void *arg,
                           uint64_t step, const char *what, bool pull, struct ts_err *err)
{
    int64_t until = ts_now_ms() + DP_PULL_WAIT_MS;
    bool remapped = false;
    ts_status st;

    for (;;) {
        if (step && shard_tables_held(t, step) && ts_now_ms() < until &&
            !(atomic_load(&dc->cancel) & DP_CANCEL_END)) {
            ts_sleep_ms(HOLD_SLICE_MS);
            continue;
        }
        pthread_rwlock_rdlock(&t->lock);
        /* A rollback loads the table under its lock, exclusive, while the job is fenced: a
         * frame that waited here through it (a hold, a copy store's step) is refused. */
        if (!(st = dp_rolled_back(dc, err)))
            st = fn(dc, t, arg, err);
        pthread_rwlock_unlock(&t->lock);
        if (st == TS_ESTALE && !remapped && dc->dp->remap) {
            remapped = true;
            dc->dp->remap(dc->dp->remap_ctx);
        } else if (st != TS_ETIMEDOUT || ts_now_ms() >= until) {
            return st;
        } else if (atomic_load(&dc->cancel) & DP_CANCEL_END) {
            return ts_err_set(err, TS_ECANCELLED, "table '%s': the %s ended with its job",
                              t->name, what);
        } else if (pull && dp_slots_woken(dc, err)) {
            return TS_ESLOTS;
        }
        ts_err_clear(err);
    }
}

/* t is held for a join's move (tables.h) at a step before `step` (t->lock held): TS_ETIMEDOUT,
 * so that in_slices waits on. */
static ts_status held(struct shard_table *t, uint64_t step, struct ts_err *err)
{
    if (!shard_tables_held(t, step))
        return TS_OK;
    return ts_err_set(err, TS_ETIMEDOUT, "table '%s': held at step %" PRIu64 " for a join's move "
                      "of its rows, which did not come in time", t->name,
                      atomic_load(&t->hold) - 1);
}

static bool is_async(const struct dp_conn *dc)
{
    return dc->job->job.mode == TS_MODE_SSP || dc->job->job.mode == TS_MODE_ASP;
}

/* Keeps the part of a push this shard heads (the m rows of dc->split's part, `row` bytes of
 * gradient each) with each row's follower, and t's followers, to copy down once t is let
 * go. t->lock held. */
static ts_status keep_own(struct dp_conn *dc, struct shard_table *t, size_t m, size_t row,
                          struct ts_err *err)
{
    ts_status st;

    if ((st = grow(&dc->split.own_ids, &dc->split.own_ids_cap, m, sizeof(uint64_t), err)) ||
        (st = grow(&dc->split.own_grad, &dc->split.own_grad_cap, m * row, 1, err)) ||
        (st = grow(&dc->split.own_f, &dc->split.own_f_cap, m, sizeof(uint32_t), err)) ||
        (st = grow(&dc->split.fol, &dc->split.fol_cap, t->nfollowers, sizeof(uint32_t), err)))
        return st;
    memcpy(dc->split.own_ids, dc->split.ids, m * sizeof(uint64_t));
    memcpy(dc->split.own_grad, dc->split.grad, m * row);
    for (size_t i = 0; i < m; i++)
        dc->split.own_f[i] = rowcopy_follower(t, dc->split.ids[i]);
    memcpy(dc->split.fol, t->followers, t->nfollowers * sizeof(uint32_t));
    dc->split.nfol = t->nfollowers;
    dc->split.own_n = m;
    dc->split.me = t->me;
    dc->split.since = t->placed_epoch;
    return TS_OK;
}

/* A worker's push (in_slices): each store served here takes its part (an empty one where the
 * push has none of its rows: BSP counts every rank's push), once the copies taken over are at
 * the push's step; the part of this shard's own rows is kept to copy down.
 * A push on a connection begun under a map older than a copy's taking over is refused whole,
 * TS_ESTALE, before any store takes a part: its worker may have placed the rows on the ring
 * that still had the copy's head, so the push holds none of the rows it sent that head, and
 * the copy would count an empty part as the rank's push of the step; the worker's retry of
 * them, under the new map, would then be acknowledged unchanged (table.h, retry) and the rows
 * lost. Refused, the worker fails over (reconnecting under the new map) and sends it again. */
struct push_arg {
    const struct ts_frame_hdr *h;
    struct rows_in in;
    bool applied;
};

static ts_status push_locked(struct dp_conn *dc, struct shard_table *t, void *arg,
                             struct ts_err *err)
{
    struct push_arg *a = arg;
    struct ts_row_push p = { .rank = a->h->rank, .step = a->h->step,
                             .encoding = a->h->encoding,
                             .retry = (a->h->flags & TS_PUSH_RETRY) != 0 };
    bool applied = false;
    ts_status st;

    dc->split.own_n = dc->split.nfol = 0;
    if ((st = held(t, p.step, err)) || (st = moved_since(dc, t, err)))
        return st;
    if (whole(t)) {
        p.n = a->in.n;
        p.ids = a->in.ids;
        p.grad = a->in.grad;
        st = ts_table_push(t->t, &p, &a->applied, err);
        return st;
    }
    if ((st = serving(dc, t, err)))
        return st;
    for (size_t k = 1; k < t->nstores; k++) {
        uint64_t taken = atomic_load(&t->stores[k].taken);
        if (dc->split.served[k] && taken > dc->hello_epoch)
            return ts_err_set(err, TS_ESTALE, "table '%s': this connection began under shard map "
                              "epoch %" PRIu64 ", before this shard took over shard %u's rows "
                              "(epoch %" PRIu64 "): the push may be placed on the ring with "
                              "that shard; fail over and send it again", t->name,
                              dc->hello_epoch, t->stores[k].origin, taken);
    }
    if ((st = route(dc, t, &a->in, err)))
        return st;
    for (size_t k = 1; !is_async(dc) && k < t->nstores; k++)
        if (dc->split.served[k] && ts_table_step(t->stores[k].t) < p.step &&
            (st = ts_table_wait(t->stores[k].t, p.step, ROWS_SLICE_MS, err)))
            return st;
    for (size_t k = 0; k < t->nstores; k++) {
        size_t m = 0;
        if (!dc->split.served[k])
            continue;
        if ((st = gather(dc, &a->in, dc->split.key, (uint32_t)k, &m, err)))
            return st;
        p.n = m;
        p.ids = dc->split.ids;
        p.grad = dc->split.grad;
        if ((st = ts_table_push(t->stores[k].t, &p, &applied, err)))
            return st;
        a->applied |= applied;
        if (k == 0 && t->replicated) {
            dc->split.sweep = ts_table_sweep_plan(t->stores[0].t, p.step);
            if ((st = keep_own(dc, t, m, a->in.row, err)))
                return st;
        }
    }
    return TS_OK;
}

/* The kept part of a push (keep_own) to each follower, as ROWS_COPY frames: the rows it holds
 * copies of, none where it holds none (its copy counts every rank's push, as a store does). */
static ts_status copy_down(struct dp_conn *dc, const struct ts_frame_hdr *h, size_t row,
                           struct ts_err *err)
{
    const struct rows_in own = { .n = dc->split.own_n, .ids = dc->split.own_ids,
                                 .grad = dc->split.own_grad, .row = row };
    uint8_t head[COPY_HEAD] = { 0 };
    ts_status st = TS_OK;

    for (int b = 0; b < 4; b++) {
        head[b] = (uint8_t)(dc->split.me >> (8 * b));
        head[4 + b] = (uint8_t)(dc->split.sweep >> (8 * b));
    }
    for (size_t f = 0; !st && f < dc->split.nfol; f++) {
        struct ts_frame_hdr c = { .type = TS_FRAME_ROWS_COPY, .tensor = h->tensor,
                                  .step = h->step, .rank = h->rank, .dtype = 1,
                                  .encoding = h->encoding, .flags = TS_PUSH_RETRY };
        size_t m = 0;
        if ((st = gather(dc, &own, dc->split.own_f, dc->split.fol[f], &m, err)))
            break;
        c.partition = (uint32_t)m;
        const struct iovec io[3] = { { head, COPY_HEAD },
                                     { dc->split.ids, m * sizeof(uint64_t) },
                                     { dc->split.grad, m * row } };
        st = dp_copy_rows(dc, dc->split.fol[f], dc->split.since, &c, io, 3, err);
    }
    return st;
}

ts_status dp_rows_push(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *buf,
                       struct ts_err *err)
{
    struct ts_frame_hdr ack = { .type = TS_FRAME_ACK, .tensor = h->tensor, .step = h->step };
    struct shard_table *sht;
    size_t n = h->partition, elem = h->encoding == TS_ENC_FIXED ? sizeof(int64_t)
                                                                : sizeof(float);
    struct push_arg a = { .h = h };
    ts_status st;

    if ((st = table_of(dc, h, &sht, err)) || (st = dp_owns(dc, h->rank, 0, err)))
        return st;
    if (n > TS_TABLE_PUSH_MAX || h->len != n * (sizeof(uint64_t) + (size_t)sht->dim * elem))
        return ts_err_set(err, TS_EINVAL, "table '%s': a push of %zu rows of %u elements of %zu "
                          "bytes, after their ids, is %zu bytes, not %" PRIu64, sht->name, n,
                          sht->dim, elem, n * (sizeof(uint64_t) + (size_t)sht->dim * elem),
                          h->len);
    a.in = (struct rows_in){ .n = n, .ids = buf, .row = (size_t)sht->dim * elem,
                             .grad = (const uint8_t *)buf + n * sizeof(uint64_t) };
    if ((st = in_slices(dc, sht, push_locked, &a, h->step, "push", false, err)) ||
        (st = copy_down(dc, h, a.in.row, err)))
        return st;
    atomic_fetch_add(&sht->pushed, n);
    ts_counter_add(dc->metrics.updates, a.applied);
    ts_counter_add(dc->metrics.push_bytes, h->len);
    return ts_frame_send(dc->c, &ack, NULL, 0, err);
}

/* A head's copy of a push (in_slices): into the copy of its rows here, once the copy is at
 * the push's step (the head takes rank r's next push, and copies it, as soon as its own rows
 * applied this step: another rank's copy of it may still be on its way). A copy that cannot
 * take one (an id it does not hold, its row budget, its step not coming) is broken from then
 * on: it says so, acknowledges what comes without taking it, and cannot take over
 * (rowcopy.h), so the head's acknowledgement never stands for rows a copy lacks unknown. A
 * copy taken over (this shard saw the head leave the map) refuses it TS_ESTALE: the head
 * must not acknowledge the push, whose worker sends it again under the new map. */
struct copy_arg {
    const struct ts_frame_hdr *h;
    uint32_t origin;
    uint32_t sweep;            /* the head's sweep plan of the step (0: none said) */
    struct rows_in in;
    int64_t until;             /* how long the copy's step is waited for */
};

/* Copy s of t could not take a push (why: err): broken from then on (above). */
static void copy_broken(struct shard_table *t, struct table_store *s, const struct ts_err *why)
{
    if (!atomic_exchange(&s->broken, true))
        ts_log(TS_WARN, "dataplane", "table '%s': the copy of shard %u's rows could not take a "
               "push (%s); it cannot take over if that shard goes (the job would go back to "
               "its last snapshot)", t->name, s->origin, why->msg);
}

static ts_status copy_locked(struct dp_conn *dc, struct shard_table *t, void *arg,
                             struct ts_err *err)
{
    struct copy_arg *a = arg;
    struct table_store *s = rowcopy_store(t, a->origin);
    /* A copy never plans a sweep by its own clock: none where the head said none. */
    struct ts_row_push p = { .rank = a->h->rank, .step = a->h->step, .n = a->in.n,
                             .ids = a->in.ids, .grad = a->in.grad,
                             .encoding = a->h->encoding, .retry = true,
                             .sweep = a->sweep ? a->sweep : TS_TABLE_SWEEP_NONE };
    bool applied;
    ts_status st = TS_OK;

    if ((st = held(t, p.step, err)))
        return st;
    if (!s || s == &t->stores[0])
        return ts_err_set(err, TS_ESTALE, "copy: this shard holds no copy of shard %u's rows of "
                          "table '%s' (placed under map epoch %" PRIu64 ")", a->origin, t->name,
                          t->placed_epoch);
    if (atomic_load(&s->owned))
        return ts_err_set(err, TS_ESTALE, "copy: this shard took over shard %u's rows of table "
                          "'%s' (it left the map)", a->origin, t->name);
    /* A step the copy has (a head sending a push on again, or a copy late past a join's move,
     * which loaded the step from a snapshot): acknowledged unchanged, as ts_table_push's retry
     * would, before its ids are checked against a placement that may have moved since. */
    if (atomic_load(&s->broken) || (!is_async(dc) && p.step < ts_table_step(s->t)))
        return TS_OK;
    for (size_t i = 0; !st && i < a->in.n; i++)
        if (rowcopy_origin(t, a->in.ids[i]) != a->origin ||
            rowcopy_follower(t, a->in.ids[i]) != t->me)
            st = ts_err_set(err, TS_EINVAL, "ids[%zu]: row %" PRIu64 " is not one whose copy "
                            "this shard holds for shard %u", i, a->in.ids[i], a->origin);
    if (!st && !is_async(dc) && ts_table_step(s->t) < p.step &&
        (st = ts_table_wait(s->t, p.step, ROWS_SLICE_MS, err)) == TS_ETIMEDOUT &&
        ts_now_ms() < a->until)
        return st;   /* in_slices waits on */
    if (!st)
        st = ts_table_push(s->t, &p, &applied, err);
    if (st)
        copy_broken(t, s, err);
    return TS_OK;
}

ts_status dp_rows_copy(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *buf,
                       struct ts_err *err)
{
    struct ts_frame_hdr ack = { .type = TS_FRAME_ACK, .tensor = h->tensor, .step = h->step };
    struct shard_table *sht;
    size_t n = h->partition, elem = h->encoding == TS_ENC_FIXED ? sizeof(int64_t)
                                                                : sizeof(float);
    struct copy_arg a = { .h = h, .until = ts_now_ms() + DP_PULL_WAIT_MS };
    const uint8_t *b = buf;
    ts_status st;

    if ((st = table_of(dc, h, &sht, err)))
        return st;
    if (n > TS_TABLE_PUSH_MAX ||
        h->len != COPY_HEAD + n * (sizeof(uint64_t) + (size_t)sht->dim * elem))
        return ts_err_set(err, TS_EINVAL, "copy: table '%s': %zu rows of %u elements of %zu "
                          "bytes, after the head's id and their ids, are %zu bytes, not %"
                          PRIu64, sht->name, n, sht->dim, elem,
                          COPY_HEAD + n * (sizeof(uint64_t) + (size_t)sht->dim * elem), h->len);
    for (int k = 0; k < 4; k++) {
        a.origin |= (uint32_t)b[k] << (8 * k);
        a.sweep |= (uint32_t)b[4 + k] << (8 * k);
    }
    a.in = (struct rows_in){ .n = n, .ids = (const uint64_t *)(b + COPY_HEAD),
                             .row = (size_t)sht->dim * elem,
                             .grad = b + COPY_HEAD + n * sizeof(uint64_t) };
    if ((st = in_slices(dc, sht, copy_locked, &a, h->step, "copy of a push", false, err)))
        return st;
    return ts_frame_send(dc->c, &ack, NULL, 0, err);
}

/* Rows of in->ids (rank's, at version want) into out (in_slices): from the one store, or
 * each store's ids gathered, read and put back at their positions. */
struct read_arg {
    uint32_t rank;
    uint64_t want;
    struct rows_in in;
    float *out;
};

static ts_status read_locked(struct dp_conn *dc, struct shard_table *t, void *arg,
                             struct ts_err *err)
{
    struct read_arg *a = arg;
    size_t dim = t->dim;
    ts_status st;

    if ((st = moved_since(dc, t, err)))
        return st;
    if (whole(t))
        return ts_table_pull(t->t, a->rank, a->want, ROWS_SLICE_MS, a->in.ids, a->in.n, a->out,
                             err);
    if ((st = serving(dc, t, err)) || (st = route(dc, t, &a->in, err)))
        return st;
    for (size_t k = 0; k < t->nstores; k++) {
        size_t m = 0;
        if (!dc->split.served[k])
            continue;
        if ((st = gather(dc, &a->in, dc->split.key, (uint32_t)k, &m, err)) ||
            (st = grow(&dc->split.rows, &dc->split.rows_cap, m * dim, sizeof(float), err)))
            return st;
        if (m && (st = ts_table_pull(t->stores[k].t, a->rank, a->want, ROWS_SLICE_MS,
                                     dc->split.ids, m, dc->split.rows, err)))
            return st;
        for (size_t i = 0; i < m; i++)
            memcpy(a->out + dc->split.pos[i] * dim, dc->split.rows + i * dim,
                   dim * sizeof(float));
    }
    return TS_OK;
}

/* Room for n rows of dim floats in dc->rows. */
static ts_status rows_room(struct dp_conn *dc, size_t n, uint32_t dim, struct ts_err *err)
{
    return grow(&dc->rows, &dc->rows_cap, n * dim, sizeof(float), err);
}

ts_status dp_rows_pull(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *buf,
                       struct ts_err *err)
{
    struct ts_frame_hdr out = { .type = TS_FRAME_ROWS, .tensor = h->tensor, .step = h->step,
                                .partition = h->partition, .dtype = 1 };
    struct shard_table *sht;
    size_t n = h->partition;
    ts_status st;

    if ((st = table_of(dc, h, &sht, err)))
        return st;
    if (n > TS_TABLE_PUSH_MAX || h->len != n * sizeof(uint64_t))
        return ts_err_set(err, TS_EINVAL, "table '%s': a pull of %zu ids is %zu bytes, not %"
                          PRIu64 " (at most %u ids)", sht->name, n, n * sizeof(uint64_t),
                          h->len, TS_TABLE_PUSH_MAX);
    /* The reply is one frame: no pull makes the shard hold more than a frame's rows. */
    if (n * sht->dim * sizeof(float) > TS_FRAME_MAX)
        return ts_err_set(err, TS_EINVAL, "table '%s': %zu rows of %u floats are more than one "
                          "reply frame holds (%u bytes); pull fewer at a time", sht->name, n,
                          sht->dim, TS_FRAME_MAX);
    struct read_arg a = { .rank = h->rank, .want = h->step, .in = { .n = n, .ids = buf } };
    if ((st = rows_room(dc, n, sht->dim, err)))
        return st;
    a.out = dc->rows;
    /* The rows read are answered once the steps that made them are on this shard's disk
     * (--redo-dir): a step a worker has seen is never lost with the shard (durable.h). */
    if ((st = in_slices(dc, sht, read_locked, &a, 0, "pull", true, err)) ||
        (st = shard_durable_wait(sht, DP_PULL_WAIT_MS, err)))
        return st;
    atomic_fetch_add(&sht->pulled, n);
    ts_counter_add(dc->metrics.pull_bytes, n * sht->dim * sizeof(float));
    return ts_frame_send(dc->c, &out, dc->rows, n * sht->dim * sizeof(float), err);
}

void dp_rows_prefetch(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *buf)
{
    struct rows_in in = { .n = h->partition, .ids = buf };
    struct shard_table *t;
    struct ts_err err = { 0 };

    if (!dc->dp->params->tables_budget.tier)   /* every row in memory: nothing to read */
        return;
    /* A hint: not waited for on a shard whose tables a join's move is still to make. */
    if (!dc->job || !(t = shard_params_table(dc->dp->params, dc->job, h->tensor)) ||
        in.n > TS_TABLE_PUSH_MAX ||
        h->len != in.n * sizeof(uint64_t) || !in.n)
        return;
    if (pthread_rwlock_tryrdlock(&t->lock))   /* placed anew right now: not worth a wait */
        return;
    if (whole(t)) {
        dp_prefetch_post(dc->dp->prefetch, dc->job, t, t->t, in.ids, in.n);
    } else if (!serving(dc, t, &err) && !route(dc, t, &in, &err)) {
        for (size_t k = 0; k < t->nstores; k++) {
            size_t m = 0;
            if (dc->split.served[k] &&
                !gather(dc, &in, dc->split.key, (uint32_t)k, &m, &err) && m)
                dp_prefetch_post(dc->dp->prefetch, dc->job, t, t->stores[k].t,
                                 dc->split.ids, m);
        }
    }
    pthread_rwlock_unlock(&t->lock);
}

static void scan_end(struct dp_conn *dc)
{
    free(dc->scan_ids);
    dc->scan_ids = NULL;
    dc->scan_n = dc->scan_at = 0;
    dc->scan_table = 0;
}

/* A scan's list (in_slices; *want the version): the ids of every store served here, once
 * each is at the version, ascending, into dc->scan_ids. */
static ts_status list_locked(struct dp_conn *dc, struct shard_table *t, void *arg,
                             struct ts_err *err)
{
    const uint64_t *want = arg;
    size_t served = 0;
    ts_status st = moved_since(dc, t, err);

    scan_end(dc);
    for (size_t k = 0; !st && k < t->nstores; k++) {
        uint64_t *ids = NULL, *all;
        size_t n = 0;
        if (!atomic_load(&t->stores[k].owned))
            continue;
        served++;
        if ((st = ts_table_ids(t->stores[k].t, *want, ROWS_SLICE_MS, &ids, &n, err)))
            break;
        if (n && !(all = realloc(dc->scan_ids, (dc->scan_n + n) * sizeof(*all)))) {
            free(ids);
            st = ts_err_set(err, TS_ENOMEM, "table '%s': no memory to list %zu rows", t->name,
                            dc->scan_n + n);
            break;
        }
        if (n) {
            memcpy(all + dc->scan_n, ids, n * sizeof(*ids));
            dc->scan_ids = all;
            dc->scan_n += n;
        }
        free(ids);
    }
    if (st)
        scan_end(dc);
    else if (served > 1)   /* the stores hold no id twice */
        qsort(dc->scan_ids, dc->scan_n, sizeof(*dc->scan_ids), cmp_u64);
    return st;
}

ts_status dp_rows_scan(struct dp_conn *dc, const struct ts_frame_hdr *h, struct ts_err *err)
{
    struct ts_frame_hdr out = { .type = TS_FRAME_ROWS, .tensor = h->tensor, .dtype = 1 };
    struct shard_table *sht;
    size_t k;
    ts_status st;

    if ((st = table_of(dc, h, &sht, err)))
        return st;
    if (h->partition < 1 || h->partition > SCAN_PAGE_MAX)
        return ts_err_set(err, TS_EINVAL, "table '%s': a scan page of %u rows; ask for 1..%d",
                          sht->name, h->partition, SCAN_PAGE_MAX);
    if (h->flags & TS_SCAN_FIRST) {
        uint64_t want = h->step;
        if ((st = in_slices(dc, sht, list_locked, &want, 0, "scan", false, err)) ||
            (st = shard_durable_wait(sht, DP_PULL_WAIT_MS, err)))
            return st;
        dc->scan_table = h->tensor + 1;
    }
    if (dc->scan_table != h->tensor + 1)
        return ts_err_set(err, TS_ESTATE, "table '%s': no scan of it is in progress on this "
                          "connection (begin one with TS_SCAN_FIRST)", sht->name);
    k = dc->scan_n - dc->scan_at;
    if (k > h->partition)
        k = h->partition;
    struct read_arg a = { .in = { .n = k, .ids = dc->scan_ids + dc->scan_at } };
    if (k && (st = rows_room(dc, k, sht->dim, err)))
        return st;
    a.out = dc->rows;
    if (k && (st = in_slices(dc, sht, read_locked, &a, 0, "scan", false, err)))
        return st;
    const struct iovec parts[2] = {
        { (void *)(dc->scan_ids + dc->scan_at), k * sizeof(uint64_t) },
        { dc->rows, k * sht->dim * sizeof(float) },
    };
    out.step = dc->scan_n;
    out.partition = h->partition;   /* the page asked for; the length says how many came */
    dc->scan_at += k;
    return ts_frame_sendv(dc->c, &out, parts, 2, err);
}

void dp_rows_free(struct dp_conn *dc)
{
    scan_end(dc);
    free(dc->rows);
    dc->rows = NULL;
    dc->rows_cap = 0;
    free(dc->split.served);
    free(dc->split.key);
    free(dc->split.ids);
    free(dc->split.pos);
    free(dc->split.grad);
    free(dc->split.rows);
    free(dc->split.own_ids);
    free(dc->split.own_grad);
    free(dc->split.own_f);
    free(dc->split.fol);
    memset(&dc->split, 0, sizeof(dc->split));
}
