/* sdk_rows.c - sparse embedding tables in the SDK (tessera.h, "Sparse embedding tables";
 * docs/embeddings.md, "Rows on the wire").
 *
 * A table is registered on every shard of the map (RegisterTable), whose rows the ring places
 * by (table, id) (lib/table/batch.h). The ring is copied at the first registration: every
 * push and pull places its ids on it without the cluster's lock.
 * When a shard dies: on a cluster with replicas its rows' copies on the next shards of their
 * chains take over (services/shard/rowcopy.h), and a call that meets the broken connection or
 * the moved map fails over as a dense step does (sdk_fail_over): under the new map it places
 * the rows on the new ring and sends the call again, a push flagged as a retry (a shard that
 * has it acknowledges it unchanged). When a shard joins, the master moves the tables' rows
 * to the shards of the new map (docs/embeddings.md, "When a shard joins"), and a call sent
 * meanwhile (held by its shard, then refused as placed on the old ring) is sent again on the
 * new ring the same way. Without replicas when a shard died, when some rows lost both copies,
 * or when a shard joined without that move (it holds none of the rows the ring would give
 * it), the shards report the job lost and the master takes it back to its last snapshot,
 * loading the rows on the ring as it is then; the call waits for that rollback, places the
 * rows on the new ring and returns TS_EROLLBACK with the step to go on from
 * (tessera_resume_step); the caller pulls its tensors there.
 * A push places, sorts and merges the batch's ids per shard and sends every shard its part
 * (an empty one where none of its rows was used: BSP counts every rank's push); a pull sends
 * each shard its unique ids only and scatters the rows back to the batch's positions. A
 * fingerprint pages through every shard's rows in ascending id and merges them
 * (sdk_rows_scan.c).
 * A local run keeps each table in one lib/table store in this process, with no budget. */
#include "sdk_internal.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/shard.h"
#include "transport/frame.h"
#include "util/hook.h"
#include "util/log.h"
#include "util/names.h"


static ts_status resend(struct tessera *t, struct ts_err *err);

/* A refusal made with ts_err_set (st, its status) reported to the caller. */
static int fail(struct tessera_error *e, const struct ts_err *err, ts_status st)
{
    (void)st;
    return sdk_fail(e, err);
}

static void table_free(struct sdk_table *x)
{
    if (!x)
        return;
    ts_table_free(x->local);
    ts_rows_batch_free(x->batch);
    free(x->rows);
    sdk_rows_kept_free(x);
    free(x);
}

void sdk_rows_free(struct tessera *t)
{
    for (int i = 0; i < t->ntables; i++)
        table_free(t->tables[i]);
    t->ntables = 0;
    ts_ring_free(t->rows_ring);
    t->rows_ring = NULL;
}

/* What tables cannot do yet (tessera.h). */
static ts_status supported(const struct tessera *t, struct ts_err *err)
{
    if (t->job.mode == TS_MODE_REDUCE)
        return ts_err_set(err, TS_ENOTSUP, "tables live on the shards; mode reduce keeps "
                          "parameters on the workers: use bsp, ssp or asp");
    return TS_OK;
}

/* The ring the tables' rows are placed on, made at the first registration (again after a
 * rollback). */
static ts_status rows_ring(struct tessera *t, struct ts_err *err)
{
    const uint32_t one = 1;

    if (t->rows_ring)
        return TS_OK;
    t->rows_generation = t->rec.followed;
    if (t->local)
        return ts_ring_create(&one, 1, 0, &t->rows_ring, err);
    return ts_cluster_ring_copy(t->cl, &t->rows_ring, &t->rows_epoch, err);
}

/* Whether a call may be sent again on the ring of the map now: no shard of the ring the rows
 * were placed on left it (shards only joined: a join's move placed the rows on the shards
 * of the new map, or the job goes back to a snapshot, which they then say), or the cluster
 * keeps copies of the rows (those of a shard that died took over). Else the rows of a shard
 * that died are lost, and the job goes back. *joined: a shard joined since. */
static bool may_resend(struct tessera *t, bool *joined)
{
    uint32_t ids[MAX_SHARDS];
    size_t n = ts_cluster_shard_ids(t->cl, ids, MAX_SHARDS), kept = 0;

    *joined = false;
    for (size_t i = 0; i < n; i++) {
        bool was = ts_ring_has(t->rows_ring, ids[i]);
        kept += was;
        *joined |= !was;
    }
    return kept == ts_ring_members(t->rows_ring) || ts_cluster_replicas(t->cl) >= 2;
}

/* A rollback since the ring was made (the dense step's, sdk_step.c) placed the rows on the
 * ring of its map, and so did a join's move, or copies took over where shards died
 * (may_resend): take the ring of the map now. Else a map that moved is TS_EUNAVAIL:
 * sdk_rows_recover waits for the rollback it brings. */
static ts_status same_map(struct tessera *t, const struct sdk_table *x, struct ts_err *err)
{
    uint64_t now;
    bool joined;

    if (t->local || (now = ts_cluster_epoch(t->cl)) == t->rows_epoch)
        return TS_OK;
    if (t->rec.followed != t->rows_generation || may_resend(t, &joined)) {
        ts_ring_free(t->rows_ring);
        t->rows_ring = NULL;
        return rows_ring(t, err);
    }
    return ts_err_set(err, TS_EUNAVAIL, "table '%s': its rows were placed under shard map epoch "
                      "%" PRIu64 ", and the map is at %" PRIu64 " now (a shard died or "
                      "joined)", x->name, t->rows_epoch, now);
}

static ts_status register_remote(struct tessera *t, int id, const struct ts_table_cfg *s,
                                 uint64_t *version, struct ts_err *err)
{
    Tessera__V1__JobSpec job = TESSERA__V1__JOB_SPEC__INIT;
    Tessera__V1__TableSpec spec = TESSERA__V1__TABLE_SPEC__INIT;
    Tessera__V1__RegisterTableRequest req = TESSERA__V1__REGISTER_TABLE_REQUEST__INIT;
    uint64_t lo = 0, hi = 0;
    uint32_t lo_shard = 0, hi_shard = 0;
    ts_status st = TS_OK;

    sdk_job_spec(t, &job);
    spec.name = (char *)s->name;
    spec.dim = s->dim;
    spec.max_id = s->max_id;
    spec.initializer = (char *)s->init;
    spec.seed = s->seed;
    spec.optimizer = (char *)s->optimizer;
    spec.ttl_steps = s->ttl_steps;
    spec.ttl_seconds = s->ttl_seconds;
    req.job = &job;
    req.table = &spec;
    req.table_id = (uint32_t)id;
    *version = 0;
    for (size_t i = 0; !st && i < t->conns.nshards; i++) {
        Tessera__V1__RegisterTableResponse *r = NULL;
        req.map_epoch = t->rows_epoch;
        st = ts_cluster_register_table(t->cl, t->conns.shards[i].id, &req, 0, &r, err);
        if (st)
            ts_err_prefix(err, "table '%s': shard %u", s->name, t->conns.shards[i].id);
        /* Every shard's store is at the table's step: a restored one at the snapshot's. A
         * worker joining a running elastic job may find one a step ahead of another (every
         * slot pushed its rows there, not yet everywhere): the table is at the lower. */
        if (!st && (!i || r->version < lo)) {
            lo = r->version;
            lo_shard = t->conns.shards[i].id;
        }
        if (!st && (!i || r->version > hi)) {
            hi = r->version;
            hi_shard = t->conns.shards[i].id;
        }
        if (!st && hi - lo > (t->elastic ? 1u : 0u))
            st = ts_err_set(err, TS_ESTATE, "table '%s': shard %u has it at step %" PRIu64
                            ", shard %u at %" PRIu64 ": the shards hold a mixed state; restart "
                            "the cluster", s->name, lo_shard, lo, hi_shard, hi);
        if (r)
            tessera__v1__register_table_response__free_unpacked(r, NULL);
    }
    if (!st)
        *version = lo;
    return st;
}

int tessera_table_register(tessera *t, const struct tessera_table_spec *s, int *table,
                           struct tessera_error *e)
{
    struct ts_err err = { 0 };
    struct sdk_table *x = NULL;
    struct ts_table_cfg cfg;
    ts_status st;

    if (!s || !table)
        return fail(e, &err, ts_err_set(&err, TS_EINVAL, "spec and table are required"));
    if (s->size && s->size < offsetof(struct tessera_table_spec, optimizer) + sizeof(char *))
        return fail(e, &err, ts_err_set(&err, TS_EINVAL, "spec.size: %zu is smaller than "
                                        "any version of struct tessera_table_spec (start "
                                        "from TESSERA_TABLE_SPEC_INIT)", s->size));
    cfg = (struct ts_table_cfg){ .name = s->name, .dim = s->dim, .max_id = s->max_id,
                                 .init = s->init ? s->init : "normal:0.01", .seed = s->seed,
                                 .optimizer = s->optimizer ? s->optimizer : t->job.optimizer };
    /* Fields a caller's older struct has not: their defaults. */
    if (s->size >= offsetof(struct tessera_table_spec, ttl_steps) + sizeof(s->ttl_steps))
        cfg.ttl_steps = s->ttl_steps;
    if (s->size >= offsetof(struct tessera_table_spec, ttl_seconds) + sizeof(s->ttl_seconds))
        cfg.ttl_seconds = s->ttl_seconds;
    if ((st = supported(t, &err)) || (st = ts_job_id_check("table.name", s->name, &err)))
        return sdk_fail(e, &err);
    /* The same spec again (every rank registers; a script may twice): the same handle. */
    for (int i = 0; i < t->ntables; i++)
        if (strcmp(t->tables[i]->name, s->name) == 0) {
            if (t->tables[i]->dim != s->dim || t->tables[i]->max_id != s->max_id)
                return fail(e, &err, ts_err_set(&err, TS_EEXIST, "table.name: '%s' is "
                                                "registered with dim %u and max_id %" PRIu64,
                                                s->name, t->tables[i]->dim,
                                                t->tables[i]->max_id));
            *table = i;
            return sdk_ok(e);
        }
    if (t->ntables == SDK_MAX_TABLES)
        return fail(e, &err, ts_err_set(&err, TS_EINVAL, "table: a job has at most %d "
                                        "tables", SDK_MAX_TABLES));
    if (!(x = calloc(1, sizeof(*x))))
        return fail(e, &err, ts_err_set(&err, TS_ENOMEM, "out of memory"));
    snprintf(x->name, sizeof(x->name), "%s", s->name);
    x->dim = s->dim;
    x->max_id = s->max_id;
    if (t->local)
        st = ts_table_create(&t->job, &cfg, NULL, &x->local, &err);
    if (!st)
        st = rows_ring(t, &err);
    if (!st && !t->local)
        st = register_remote(t, t->ntables, &cfg, &x->version, &err);
    if (!st && !t->local && !t->hello.done)
        st = sdk_hello_or_remap(t, &err);
    if (st) {
        table_free(x);
        return sdk_fail(e, &err);
    }
    *table = t->ntables;
    t->tables[t->ntables++] = x;
    if (!t->local)
        t->rec.resend = resend;   /* a failover sends the tables' kept pushes again */
    return sdk_ok(e);
}

ts_status sdk_rows_table_for(struct tessera *t, int id, size_t n, struct sdk_table **out,
                             struct ts_err *err)
{
    struct sdk_table *x;
    ts_status st;

    if (id < 0 || id >= t->ntables)
        return ts_err_set(err, TS_EINVAL, "table: %d is not a registered table (0..%d)", id,
                          t->ntables - 1);
    x = t->tables[id];
    if (n > TS_TABLE_PUSH_MAX)
        return ts_err_set(err, TS_EINVAL, "n: %zu rows, at most %u a call", n,
                          TS_TABLE_PUSH_MAX);
    if ((st = sdk_usable(t, err)) || (st = same_map(t, x, err)))
        return st;
    if (!x->batch || x->cap < n) {
        size_t cap = x->cap ? x->cap : 1024;
        while (cap < n)
            cap *= 2;
        if (cap > TS_TABLE_PUSH_MAX)
            cap = TS_TABLE_PUSH_MAX;
        ts_rows_batch_free(x->batch);
        x->batch = NULL;
        x->cap = 0;
        if ((st = ts_rows_batch_create(x->dim, cap, t->job.exact, &x->batch, err)))
            return st;
        x->cap = cap;
    }
    *out = x;
    return TS_OK;
}

/* A part of n ids whose frame (a push's ids and rows, a pull's reply) fits in TS_FRAME_MAX;
 * else TS_EINVAL saying how many do. */
static ts_status fits(const struct sdk_table *x, size_t n, size_t row_bytes, const char *what,
                      struct ts_err *err)
{
    if (n * row_bytes <= TS_FRAME_MAX)
        return TS_OK;
    return ts_err_set(err, TS_EINVAL, "n: table '%s': %zu rows of one shard in one %s are more "
                      "than a frame holds (%u bytes: %zu rows); split the call", x->name, n,
                      what, TS_FRAME_MAX, (size_t)TS_FRAME_MAX / row_bytes);
}

/* Room for n rows in x->rows. */
static ts_status rows_room(struct sdk_table *x, size_t n, struct ts_err *err)
{
    size_t want = n * x->dim;

    if (want <= x->rows_cap)
        return TS_OK;
    float *r = realloc(x->rows, want * sizeof(float));
    if (!r)
        return ts_err_set(err, TS_ENOMEM, "table '%s': no memory for %zu rows", x->name, n);
    x->rows = r;
    x->rows_cap = want;
    return TS_OK;
}

/* Reads the replies of the requests sent to slots[0..n) (each of type want, into dst[k] of
 * cap[k] bytes), all of them even after an error, so that the connections stay in step; the
 * first error is the answer. */
static ts_status read_all(struct tessera *t, const uint32_t *slots, size_t n, uint16_t want,
                          uint32_t table, const uint32_t *part, void *const *dst,
                          const size_t *cap, ts_status st, struct ts_err *err)
{
    for (size_t k = 0; k < n; k++) {
        struct ts_err one = { 0 };
        ts_status rs = sdk_read_reply(t, slots[k], want, table, part ? part[k] : 0,
                                      dst ? dst[k] : NULL, cap ? cap[k] : 0, NULL, &one);
        if (rs && !st) {
            st = rs;
            *err = one;
        }
        if (rs && sdk_transport_failed(rs))
            break;   /* out of step: nothing more can be read */
    }
    return st;
}

/* A push or a pull of rows, as the caller made it: what a failover sends again. */
struct rows_call {
    int table;
    struct sdk_table *x;
    uint32_t slot;             /* a push's: the rank, or in an elastic job a slot it owns */
    uint64_t step;             /* a push's step, a pull's version */
    size_t n;
    const uint64_t *ids;
    const float *grads;        /* a push's; NULL for a pull */
    float *out;                /* a pull's */
};

/* Places the call's ids on t->rows_ring (and a pull's room); every shard's part fits in its
 * frame. */
static ts_status place(struct tessera *t, struct rows_call *c, struct ts_err *err)
{
    struct sdk_table *x = c->x;
    struct ts_rows_part part;
    size_t row = c->grads ? sizeof(uint64_t) + x->dim * (t->job.exact ? sizeof(int64_t)
                                                                      : sizeof(float))
                          : x->dim * sizeof(float);
    ts_status st;

    if ((st = ts_rows_batch_prepare(x->batch, t->rows_ring, x->name, x->max_id, c->ids, c->n,
                                    c->grads, err)) ||
        (!c->grads && (st = rows_room(x, ts_rows_batch_unique(x->batch), err)))) {
        ts_err_prefix(err, "table '%s'", x->name);
        return st;
    }
    for (size_t k = 0; !t->local && k < ts_rows_batch_shards(x->batch); k++) {
        ts_rows_batch_shard(x->batch, k, &part);
        if ((st = fits(x, part.n, row, c->grads ? "push" : "pull", err)))
            return st;
    }
    return TS_OK;
}

/* Sends the placed push to every shard of the map (its part, parts in ascending shard id, or
 * none) and reads the ACKs; a push sent again after a failover says so (TS_PUSH_RETRY), as
 * every push of an elastic job does: two workers may push a slot that changed hands, and
 * whichever comes first counts (docs/elastic.md, "Exactly once"). */
static ts_status push_placed(struct tessera *t, struct rows_call *c, struct ts_err *err)
{
    struct sdk_table *x = c->x;
    struct ts_rows_part part;
    uint32_t slots[MAX_SHARDS];
    size_t sent = 0, next = 0, nparts = ts_rows_batch_shards(x->batch);
    size_t esz = t->job.exact ? sizeof(int64_t) : sizeof(float);
    ts_status st = TS_OK;

    for (size_t s = 0; !st && s < t->conns.nshards; s++) {
        struct ts_frame_hdr h = { .type = TS_FRAME_ROWS_PUSH, .tensor = (uint32_t)c->table,
                                  .step = c->step, .rank = c->slot, .dtype = 1,
                                  .encoding = t->job.exact ? TS_ENC_FIXED : TS_ENC_RAW,
                                  .flags = t->rec.retrying || t->elastic ? TS_PUSH_RETRY : 0 };
        struct iovec io[2] = { { NULL, 0 }, { NULL, 0 } };

        for (size_t k = 0; k < nparts; k++) {
            ts_rows_batch_shard(x->batch, k, &part);
            if (part.shard == t->conns.shards[s].id) {
                h.partition = (uint32_t)part.n;
                io[0] = (struct iovec){ (void *)part.ids, part.n * sizeof(uint64_t) };
                io[1] = (struct iovec){ (void *)part.grad, part.n * x->dim * esz };
                next++;
                break;
            }
        }
        if ((st = ts_frame_sendv(t->conns.shards[s].conn, &h, io, 2, err)))
            sdk_note_broken(t, s, st);
        else
            slots[sent++] = (uint32_t)s;
    }
    if (!st && next != nparts)   /* a part for a shard not connected: the map moved */
        st = ts_err_set(err, TS_ESTALE, "table '%s': rows placed on a shard this worker is not "
                        "connected to (the map moved)", x->name);
    return read_all(t, slots, sent, TS_FRAME_ACK, (uint32_t)c->table, NULL, NULL, NULL, st,
                    err);
}

/* Sends each shard its part of the placed pull, reads the rows and scatters them to the
 * call's positions. */
static ts_status pull_placed(struct tessera *t, struct rows_call *c, struct ts_err *err)
{
    struct sdk_table *x = c->x;
    struct ts_rows_part part;
    uint32_t slots[MAX_SHARDS], parts[MAX_SHARDS];
    void *dst[MAX_SHARDS];
    size_t cap[MAX_SHARDS], sent = 0, nparts = ts_rows_batch_shards(x->batch);
    ts_status st = TS_OK;

    for (size_t k = 0; !st && k < nparts; k++) {
        ts_rows_batch_shard(x->batch, k, &part);
        if (t->local) {
            st = ts_table_pull(x->local, t->rank, c->step, t->timeout_ms, part.ids, part.n,
                               x->rows + part.first * x->dim, err);
            continue;
        }
        struct ts_frame_hdr h = { .type = TS_FRAME_ROWS_PULL, .tensor = (uint32_t)c->table,
                                  .partition = (uint32_t)part.n, .step = c->step,
                                  .rank = t->rank };
        uint32_t s;
        if ((st = sdk_slot_of(t, part.shard, &s, err))) {
            st = TS_ESTALE;   /* placed on a shard this worker is not connected to */
            break;
        }
        if ((st = ts_frame_send(t->conns.shards[s].conn, &h, part.ids,
                                part.n * sizeof(uint64_t), err))) {
            sdk_note_broken(t, s, st);
            break;
        }
        slots[sent] = s;
        parts[sent] = (uint32_t)part.n;
        dst[sent] = x->rows + part.first * x->dim;
        cap[sent++] = part.n * x->dim * sizeof(float);
    }
    if (!t->local)
        st = read_all(t, slots, sent, TS_FRAME_ROWS, (uint32_t)c->table, parts, dst, cap, st,
                      err);
    if (!st)
        ts_rows_batch_scatter(x->batch, x->rows, c->out);
    return st;
}

/* Whether the map now rings the shards the rows were placed on (a shard that came back from
 * its log keeps its place: only its address may have moved). */
static bool same_ring(struct tessera *t)
{
    uint32_t ids[MAX_SHARDS];
    size_t n = ts_cluster_shard_ids(t->cl, ids, MAX_SHARDS);

    if (!t->rows_ring || n != ts_ring_members(t->rows_ring))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!ts_ring_has(t->rows_ring, ids[i]))
            return false;
    return true;
}

/* Kept push k of table `table` sent again, flagged a retry (sdk_rows_resend's send). */
static ts_status push_again(struct tessera *t, int table, const struct sdk_kept *k,
                            struct ts_err *err)
{
    struct rows_call c = { .table = table, .x = t->tables[table], .slot = k->slot,
                           .step = k->step, .n = k->n, .ids = k->ids, .grads = k->grads };
    ts_status st;

    if (!same_ring(t))
        return ts_err_set(err, TS_ESTALE, "table '%s': the ring its rows were placed on "
                          "changed", c.x->name);
    if ((st = place(t, &c, err)))
        return st;
    return push_placed(t, &c, err);
}

static ts_status resend(struct tessera *t, struct ts_err *err)
{
    return sdk_rows_resend(t, push_again, err);
}

/* A failover's resend (sdk_fail_over): the rows placed on the new map's ring (may_resend);
 * else the call is misplaced and the job goes back to its last snapshot. A shard that joined
 * and does not know the table was not given its rows (no join's move: docs/embeddings.md,
 * "When a shard joins"): the job goes back too. */
static ts_status redo(struct tessera *t, void *ctx, struct ts_err *err)
{
    struct rows_call *c = ctx;
    bool joined;
    ts_status st;

    if (!may_resend(t, &joined))
        return ts_err_set(err, TS_EROLLBACK, "table '%s': a shard holding its rows left the "
                          "map (epoch %" PRIu64 ") and the cluster keeps no copies of them",
                          c->x->name, ts_cluster_epoch(t->cl));
    ts_ring_free(t->rows_ring);
    t->rows_ring = NULL;
    if ((st = ts_cluster_ring_copy(t->cl, &t->rows_ring, &t->rows_epoch, err)) ||
        (st = place(t, c, err)))
        return st;
    st = c->grads ? push_placed(t, c, err) : pull_placed(t, c, err);
    if (st == TS_ENOTFOUND && joined)
        return ts_err_set(err, TS_EROLLBACK, "table '%s': a shard that joined the map (epoch %"
                          PRIu64 ") holds none of its rows (%s); the job goes back to a "
                          "snapshot", c->x->name, ts_cluster_epoch(t->cl), err->msg);
    return st;
}

ts_status sdk_rows_recover(struct tessera *t, ts_status st, const char *what, uint64_t n,
                           sdk_redo_fn again, void *ctx, struct ts_err *err)
{
    uint64_t back = 0;

    if (t->local || !sdk_can_fail_over(t) ||
        (st != TS_EUNAVAIL && st != TS_ECORRUPT && st != TS_EROLLBACK && st != TS_ESTALE))
        return st;
    if (again && st != TS_EROLLBACK) {   /* redo says whether the rows may be sent again */
        if (st == TS_ECORRUPT)
            st = TS_EUNAVAIL;
        st = sdk_fail_over(t, what, n, st, again, ctx, err);
        if (st != TS_EROLLBACK)
            return st;
    }
    ts_log(TS_WARN, "sdk", "%s: %s; waiting for the job to go back to its last snapshot", what,
           err->msg);
    memset(err, 0, sizeof(*err));
    /* A broken connection: report the shard and wait for the map without it (which sends the
     * job back), as a dense step does; then wait for the rollback. */
    if (t->conns.broken && (st = sdk_failover(t, err)))
        return st;
    if ((st = sdk_rollback(t, NULL, &back, err)))
        return st;
    t->rec.resume_step = back;
    ts_ring_free(t->rows_ring);
    t->rows_ring = NULL;
    if ((st = rows_ring(t, err)))
        return st;
    return ts_err_set(err, TS_EROLLBACK, "%s: the cluster took job '%s' back to step %" PRIu64
                      " of its last snapshot (a shard holding table rows went or came); pull "
                      "the tensors at tessera_resume_step and go on from there", what,
                      t->job.id, back);
}

/* A test hook (util/hook.h): $TESSERA_TEST_DIE_IN_ROWS=RANK:STEP:N kills the worker of rank
 * RANK with SIGKILL after its Nth push of rows of step STEP, between two tables' pushes
 * (tests/integration/test_ctr_elastic.py: the tables it pushed may apply the step while the
 * others wait for its slot). */
#if TS_TEST_HOOKS
static void test_die_in_rows(const struct tessera *t, uint64_t step)
{
    static unsigned pushed;
    const char *v = ts_hook("TESSERA_TEST_DIE_IN_ROWS");
    unsigned rank, n;
    unsigned long long at;

    if (!v || sscanf(v, "%u:%llu:%u", &rank, &at, &n) != 3 || rank != t->rank || step != at ||
        ++pushed < n)
        return;
    ts_log(TS_WARN, "sdk", "test hook: rank %u dies after %u pushes of rows of step %llu "
           "(TESSERA_TEST_DIE_IN_ROWS)", rank, n, at);
    raise(SIGKILL);
}
#else
#define test_die_in_rows(t, step) ((void)0)
#endif

int tessera_push_rows(tessera *t, int table, uint64_t step, size_t n, const uint64_t *ids,
                      const float *grads, struct tessera_error *e)
{
    return tessera_push_rows_slot(t, table, step, t->rank, n, ids, grads, e);
}

int tessera_push_rows_slot(tessera *t, int table, uint64_t step, uint32_t slot, size_t n,
                           const uint64_t *ids, const float *grads, struct tessera_error *e)
{
    struct ts_err err = { 0 };
    struct rows_call c = { .table = table, .slot = slot, .step = step, .n = n, .ids = ids,
                           .grads = grads };
    ts_status st;

    if ((n && (!ids || !grads)))
        return fail(e, &err, ts_err_set(&err, TS_EINVAL, "ids and grads are required (n %zu)",
                                        n));
    if (slot != t->rank && (!t->elastic || slot >= t->job.workers))
        return fail(e, &err, ts_err_set(&err, TS_EINVAL, "slot: %u; want %s", slot, t->elastic
                                        ? "a slot of the job (below its workers)"
                                        : "this worker's rank (slots change hands in elastic "
                                          "jobs only)"));
    if ((st = sdk_rows_table_for(t, table, n, &c.x, &err)) == TS_EUNAVAIL)
        return fail(e, &err, sdk_rows_recover(t, st, "push of rows", step, NULL, NULL, &err));
    if (st || (st = place(t, &c, &err)))
        return sdk_fail(e, &err);
    if (t->local) {
        struct ts_row_push in = { .rank = slot, .step = step,
                                  .encoding = t->job.exact ? TS_ENC_FIXED : TS_ENC_RAW };
        struct ts_rows_part part;
        bool applied;
        if (ts_rows_batch_shards(c.x->batch)) {
            ts_rows_batch_shard(c.x->batch, 0, &part);
            in.n = part.n;
            in.ids = part.ids;
            in.grad = part.grad;
        }
        return ts_table_push(c.x->local, &in, &applied, &err) ? sdk_fail(e, &err) : sdk_ok(e);
    }
    if ((st = push_placed(t, &c, &err)) &&
        (st = sdk_rows_recover(t, st, "push of rows", step, redo, &c, &err)) != TS_EROLLBACK)
        ts_err_prefix(&err, "table '%s' step %" PRIu64, c.x->name, step);
    if (!st)
        st = sdk_rows_keep(t, c.x, slot, step, n, ids, grads, &err);
    if (!st)
        test_die_in_rows(t, step);
    return st ? sdk_fail(e, &err) : sdk_ok(e);
}

int tessera_pull_rows(tessera *t, int table, uint64_t version, size_t n, const uint64_t *ids,
                      float *out, struct tessera_error *e)
{
    struct ts_err err = { 0 };
    struct rows_call c = { .table = table, .step = version, .n = n, .ids = ids, .out = out };
    ts_status st;

    if (n && (!ids || !out))
        return fail(e, &err, ts_err_set(&err, TS_EINVAL, "ids and out are required (n %zu)", n));
    if ((st = sdk_rows_table_for(t, table, n, &c.x, &err)) == TS_EUNAVAIL)
        return fail(e, &err, sdk_rows_recover(t, st, "pull of rows", version, NULL, NULL, &err));
    if (st || (st = place(t, &c, &err)))
        return sdk_fail(e, &err);
    if ((st = pull_placed(t, &c, &err)) &&
        (st = sdk_rows_recover(t, st, "pull of rows", version, redo, &c, &err)) != TS_EROLLBACK)
        ts_err_prefix(&err, "table '%s' version %" PRIu64, c.x->name, version);
    if (!st)
        sdk_rows_pulled(c.x, version);
    return st ? sdk_fail(e, &err) : sdk_ok(e);
}

int tessera_prefetch_rows(tessera *t, int table, size_t n, const uint64_t *ids,
                          struct tessera_error *e)
{
    struct ts_err err = { 0 };
    struct rows_call c = { .table = table, .n = n, .ids = ids };
    struct ts_rows_part part;
    ts_status st;

    if (n && !ids)
        return fail(e, &err, ts_err_set(&err, TS_EINVAL, "ids: required (n %zu)", n));
    if (!n || (st = sdk_rows_table_for(t, table, n, &c.x, &err)) == TS_EUNAVAIL)
        return sdk_ok(e);   /* a hint: the pull that comes later recovers */
    if (st || (st = place(t, &c, &err)))
        return sdk_fail(e, &err);
    for (size_t k = 0; k < ts_rows_batch_shards(c.x->batch); k++) {
        struct ts_frame_hdr h = { .type = TS_FRAME_ROWS_PREFETCH, .tensor = (uint32_t)table,
                                  .rank = t->rank };
        uint32_t s;

        ts_rows_batch_shard(c.x->batch, k, &part);
        h.partition = (uint32_t)part.n;
        if (t->local)
            ts_table_prefetch(c.x->local, part.ids, part.n);
        else if (sdk_slot_of(t, part.shard, &s, &err) == TS_OK &&
                 (st = ts_frame_send(t->conns.shards[s].conn, &h, part.ids,
                                     part.n * sizeof(uint64_t), &err)))
            sdk_note_broken(t, s, st);   /* the next call on it recovers */
        ts_err_clear(&err);
    }
    return sdk_ok(e);
}
