/* durable_replay.c - see durable_replay.h. */
#include "durable_replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor.h"

/* Room for one more of *v (each sz bytes), zeroed; NULL without memory. */
static void *more(void **v, size_t *n, size_t *cap, size_t sz)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 8;
        void *nv = realloc(*v, c * sz);
        if (!nv)
            return NULL;
        *v = nv;
        *cap = c;
    }
    return memset((char *)*v + (*n)++ * sz, 0, sz);
}

/* The table of rows' key tkey ("t/JOB/TABLE"), made when `make`; NULL if none (or no memory
 * for it). */
static struct durable_rtable *find_table(struct durable_replay *rp, const char *tkey, bool make)
{
    struct durable_rtable *e;

    for (size_t i = 0; i < rp->ntables; i++)
        if (!strcmp(rp->tables[i].key, tkey))
            return &rp->tables[i];
    if (!make || !(e = more((void **)&rp->tables, &rp->ntables, &rp->tables_cap, sizeof(*e))))
        return NULL;
    snprintf(e->key, sizeof(e->key), "%s", tkey);
    return e;
}

/* First pass: every table's last registration, and the drops of its rows' key. */
static ts_status collect(void *ctx, const struct ts_redo_rec *r, struct ts_err *err)
{
    struct durable_replay *rp = ctx;
    struct durable_rtable *e;
    char tkey[TS_REDO_KEY_MAX + 1];
    bool reg = r->kind == TS_REDO_BLOB && !strncmp(r->key, "r/", 2);

    if (!reg && !(r->kind == TS_REDO_DROP && !strncmp(r->key, "t/", 2)))
        return TS_OK;
    snprintf(tkey, sizeof(tkey), "t/%s", r->key + 2);
    if (!(e = find_table(rp, tkey, true)))
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    if (!reg) {
        e->drops++;
        return TS_OK;
    }
    free(e->reg);
    if (!(e->reg = malloc(r->n ? r->n : 1)))
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    memcpy(e->reg, r->records, r->n);
    e->reg_len = r->n;
    return TS_OK;
}

uint64_t durable_numel(const Tessera__V1__TensorSpec *s)
{
    uint64_t numel = 1;

    for (size_t d = 0; d < s->n_shape; d++)
        numel *= s->shape[d];
    return numel;
}

uint32_t durable_image_generation(const uint8_t *blob)
{
    uint32_t gen;

    memcpy(&gen, blob, sizeof(gen));
    return gen;
}

ts_status durable_job_of(const Tessera__V1__JobSpec *js, struct ts_job *j, struct ts_err *err)
{
    ts_status st;

    if ((st = ts_job_init(j, js->id, js->workers, js->exact, js->optimizer, js->batch, err)))
        return st;
    return ts_job_set_mode(j, js->mode ? (enum ts_mode)js->mode : TS_MODE_BSP, js->staleness,
                           err);
}

/* e's table made from its registration, by the caller's make. */
static ts_status make_table(struct durable_replay *rp, struct durable_rtable *e,
                            struct ts_err *err)
{
    Tessera__V1__RegisterTableRequest *req =
        e->reg ? tessera__v1__register_table_request__unpack(NULL, e->reg_len, e->reg) : NULL;
    ts_status st;

    if (!req || !req->job || !req->table) {
        if (req)
            tessera__v1__register_table_request__free_unpacked(req, NULL);
        return ts_err_set(err, TS_ECORRUPT, "%s: %s", e->key, e->reg ? "its registration in "
                          "the log does not parse" : "records of a table the log holds no "
                          "registration of");
    }
    st = rp->make(rp->ctx, e, req, err);
    tessera__v1__register_table_request__free_unpacked(req, NULL);
    if (st)
        ts_err_prefix(err, "%s", e->key);
    return st;
}

/* The tensor of key "JOB/ID" (made when `make`), or NULL. */
static struct durable_rtensor *find_tensor(struct durable_replay *rp, const char *key, bool make)
{
    struct durable_rtensor *e;

    for (size_t i = 0; i < rp->ntensors; i++)
        if (!strcmp(rp->tensors[i].key, key))
            return &rp->tensors[i];
    if (!make || !(e = more((void **)&rp->tensors, &rp->ntensors, &rp->tensors_cap,
                            sizeof(*e))))
        return NULL;
    snprintf(e->key, sizeof(e->key), "%s", key);
    return e;
}

static void tensor_clear(struct durable_rtensor *e)
{
    for (uint32_t p = 0; e->image && p < e->nparts; p++)
        free(e->image[p]);
    free(e->image);
    free(e->image_len);
    free(e->values);
    if (e->req)
        tessera__v1__register_tensor_request__free_unpacked(e->req, NULL);
    e->req = NULL;
    e->image = NULL;
    e->image_len = NULL;
    e->values = NULL;
    e->nparts = 0;
}

/* A tensor's registration ("R/JOB/ID"): its partitions' images so far are another
 * registration's unless the same one again (a checkpoint's carry). */
static ts_status tensor_blob(struct durable_replay *rp, const struct ts_redo_rec *r,
                             struct ts_err *err)
{
    struct durable_rtensor *e = find_tensor(rp, r->key + 2, true);
    Tessera__V1__RegisterTensorRequest *req;

    if (!e)
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    if (!(req = tessera__v1__register_tensor_request__unpack(NULL, r->n, r->records)) ||
        !req->job || !req->tensor) {
        if (req)
            tessera__v1__register_tensor_request__free_unpacked(req, NULL);
        return ts_err_set(err, TS_ECORRUPT, "%s: its registration in the log does not parse",
                          r->key);
    }
    if (e->req) {   /* the same registration again keeps the images */
        tessera__v1__register_tensor_request__free_unpacked(req, NULL);
        return TS_OK;
    }
    e->req = req;
    e->nparts = ts_partition_count(durable_numel(req->tensor), sizeof(float),
                                   req->tensor->partition_bytes);
    if (!(e->image = calloc(e->nparts, sizeof(*e->image))) ||
        !(e->image_len = calloc(e->nparts, sizeof(*e->image_len))))
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    return TS_OK;
}

/* A partition's image ("p/JOB/ID/INDEX"), or its drop. */
static ts_status part_blob(struct durable_replay *rp, const struct ts_redo_rec *r,
                           struct ts_err *err)
{
    char key[TS_REDO_KEY_MAX + 1];
    const char *slash = strrchr(r->key, '/');
    struct durable_rtensor *e;
    uint32_t index;

    snprintf(key, sizeof(key), "%.*s", (int)(slash - (r->key + 2)), r->key + 2);
    index = (uint32_t)strtoul(slash + 1, NULL, 10);
    if (!(e = find_tensor(rp, key, false)) || !e->req || index >= e->nparts) {
        if (r->kind == TS_REDO_DROP)
            return TS_OK;
        return ts_err_set(err, TS_ECORRUPT, "%s: an image of a partition the log holds no "
                          "registration of", r->key);
    }
    free(e->image[index]);
    e->image[index] = NULL;
    if (r->kind == TS_REDO_DROP)
        return TS_OK;
    if (r->n < 8 || !(e->image[index] = malloc(r->n)))
        return ts_err_set(err, r->n < 8 ? TS_ECORRUPT : TS_ENOMEM, "%s: %s", r->key,
                          r->n < 8 ? "too short" : "out of memory");
    memcpy(e->image[index], r->records, r->n);
    e->image_len[index] = r->n;
    return TS_OK;
}

/* Second pass: the records of each table's last life applied in order (a drop before it
 * passed over), the tensors' registrations and images kept. */
static ts_status apply(void *ctx, const struct ts_redo_rec *r, struct ts_err *err)
{
    struct durable_replay *rp = ctx;
    struct durable_rtable *e;
    struct durable_rtensor *te;
    ts_status st;

    if (!strncmp(r->key, "t/", 2)) {
        if (!(rp->what & DURABLE_TABLES))
            return TS_OK;
        if (!(e = find_table(rp, r->key, false)))
            return ts_err_set(err, TS_ECORRUPT, "%s: records of a table the log holds no "
                              "registration of", r->key);
        if (r->kind == TS_REDO_DROP) {
            e->dropped++;
            return TS_OK;
        }
        if (e->dropped < e->drops)   /* an earlier life of the key: its job was released */
            return TS_OK;
        if (!e->t && (st = make_table(rp, e, err)))
            return st;
        e->records++;
        return ts_table_redo_apply(e->t, r, err);
    }
    if (!(rp->what & DURABLE_TENSORS))
        return TS_OK;
    if (!strncmp(r->key, "R/", 2)) {
        if (r->kind == TS_REDO_BLOB)
            return tensor_blob(rp, r, err);
        if ((te = find_tensor(rp, r->key + 2, false)))
            tensor_clear(te);
        return TS_OK;
    }
    if (!strncmp(r->key, "p/", 2) && strrchr(r->key, '/') > r->key + 2)
        return part_blob(rp, r, err);
    return TS_OK;
}

ts_status durable_replay_read(struct ts_redo *redo, struct durable_replay *rp, unsigned what,
                              struct ts_redo_replayed *got, struct ts_err *err)
{
    ts_status st;

    rp->what = what;
    if ((what & DURABLE_TABLES) && (st = ts_redo_replay(redo, collect, rp, NULL, err)))
        return st;
    return ts_redo_replay(redo, apply, rp, got, err);
}

void durable_replay_free(struct durable_replay *rp)
{
    for (size_t i = 0; i < rp->ntables; i++) {
        if (rp->tables[i].t && rp->unmake)
            rp->unmake(rp->ctx, &rp->tables[i]);
        free(rp->tables[i].reg);
    }
    free(rp->tables);
    for (size_t i = 0; i < rp->ntensors; i++)
        tensor_clear(&rp->tensors[i]);
    free(rp->tensors);
    memset(rp, 0, sizeof(*rp));
}
