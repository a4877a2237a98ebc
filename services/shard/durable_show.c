/* durable_show.c - `tessera-shard --replay DIR`: a stopped shard's redo log read into tables
 * and partitions in memory, and what they hold printed (durable.h, shard_durable_show).
 *
 * Two passes over the log (ts_redo_replay). The first finds each table's last registration
 * ("r/JOB/TABLE"): a checkpoint writes the tables' images before it carries the blobs over,
 * so a table's records can come before its registration in a generation. The second applies
 * the tables' records in order ("t/JOB/TABLE": an image resets, a step applies, a drop frees)
 * and keeps each tensor's last registration ("R/JOB/ID") and each partition's last image
 * ("p/JOB/ID/INDEX"), a drop forgetting them. Then each partition is made from its tensor's
 * registration and loaded with its image, and each job whose tensors are whole here gets
 * the dense fingerprint its trainer reports (ts_params_sha256 of its tensors by id). */
#include "durable.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/fingerprint.h"
#include "tensor/tensor.h"
#include "util/json.h"

/* A table made again from the log: its registration (the last one the log holds for the key,
 * found by the first pass), the job it names, the table. */
struct rtable {
    char key[TS_REDO_KEY_MAX + 1];   /* "t/JOB/TABLE" */
    uint8_t *reg;                    /* the packed RegisterTableRequest */
    size_t reg_len;
    struct ts_job job;
    struct ts_table *t;
    uint64_t records;
};

/* A tensor: its last registration and each partition's last image (NULL: none). */
struct rtensor {
    char key[TS_REDO_KEY_MAX + 1];   /* "JOB/ID" */
    Tessera__V1__RegisterTensorRequest *req;
    uint32_t nparts;
    uint8_t **image;                 /* by index: the blob (generation header, then image) */
    size_t *image_len;
    float *values;                   /* the tensor's values, where every partition is here */
    uint64_t version;                /* the lowest of its partitions' */
};

struct replay {
    struct rtable *tables;
    size_t ntables, tables_cap;
    struct rtensor *tensors;
    size_t ntensors, tensors_cap;
    struct ts_table_budget budget;
};

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

static struct rtable *find_table(struct replay *rp, const char *tkey)
{
    for (size_t i = 0; i < rp->ntables; i++)
        if (!strcmp(rp->tables[i].key, tkey))
            return &rp->tables[i];
    return NULL;
}

/* First pass: every table's last registration. */
static ts_status collect(void *ctx, const struct ts_redo_rec *r, struct ts_err *err)
{
    struct replay *rp = ctx;
    struct rtable *e;
    char tkey[TS_REDO_KEY_MAX + 1];

    if (r->kind != TS_REDO_BLOB || strncmp(r->key, "r/", 2))
        return TS_OK;
    snprintf(tkey, sizeof(tkey), "t/%s", r->key + 2);
    if (!(e = find_table(rp, tkey))) {
        if (!(e = more((void **)&rp->tables, &rp->ntables, &rp->tables_cap, sizeof(*e))))
            return ts_err_set(err, TS_ENOMEM, "out of memory");
        snprintf(e->key, sizeof(e->key), "%s", tkey);
    }
    free(e->reg);
    if (!(e->reg = malloc(r->n ? r->n : 1)))
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    memcpy(e->reg, r->records, r->n);
    e->reg_len = r->n;
    return TS_OK;
}

static uint64_t numel_of(const Tessera__V1__TensorSpec *s)
{
    uint64_t numel = 1;

    for (size_t d = 0; d < s->n_shape; d++)
        numel *= s->shape[d];
    return numel;
}

/* A job as js describes it. */
static ts_status job_of(const Tessera__V1__JobSpec *js, struct ts_job *j, struct ts_err *err)
{
    ts_status st;

    if ((st = ts_job_init(j, js->id, js->workers, js->exact, js->optimizer, js->batch, err)))
        return st;
    return ts_job_set_mode(j, js->mode ? (enum ts_mode)js->mode : TS_MODE_BSP, js->staleness,
                           err);
}

/* e's table made afresh from its registration. */
static ts_status make_table(struct replay *rp, struct rtable *e, struct ts_err *err)
{
    Tessera__V1__RegisterTableRequest *req =
        tessera__v1__register_table_request__unpack(NULL, e->reg_len, e->reg);
    ts_status st;

    if (!req || !req->job || !req->table) {
        if (req)
            tessera__v1__register_table_request__free_unpacked(req, NULL);
        return ts_err_set(err, TS_ECORRUPT, "%s: its registration in the log does not parse",
                          e->key);
    }
    const Tessera__V1__TableSpec *s = req->table;
    struct ts_table_cfg cfg = { .name = s->name, .dim = s->dim, .max_id = s->max_id,
                                .init = s->initializer, .seed = s->seed,
                                .optimizer = s->optimizer, .ttl_steps = s->ttl_steps,
                                .ttl_seconds = s->ttl_seconds };
    ts_table_free(e->t);
    e->t = NULL;
    if (!(st = job_of(req->job, &e->job, err)))
        st = ts_table_create(&e->job, &cfg, &rp->budget, &e->t, err);
    tessera__v1__register_table_request__free_unpacked(req, NULL);
    if (st)
        ts_err_prefix(err, "%s", e->key);
    return st;
}

/* The tensor of key "JOB/ID" (made when `make`), or NULL. */
static struct rtensor *find_tensor(struct replay *rp, const char *key, bool make)
{
    struct rtensor *e;

    for (size_t i = 0; i < rp->ntensors; i++)
        if (!strcmp(rp->tensors[i].key, key))
            return &rp->tensors[i];
    if (!make || !(e = more((void **)&rp->tensors, &rp->ntensors, &rp->tensors_cap,
                            sizeof(*e))))
        return NULL;
    snprintf(e->key, sizeof(e->key), "%s", key);
    return e;
}

static void tensor_clear(struct rtensor *e)
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
static ts_status tensor_blob(struct replay *rp, const struct ts_redo_rec *r, struct ts_err *err)
{
    struct rtensor *e = find_tensor(rp, r->key + 2, true);
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
    e->nparts = ts_partition_count(numel_of(req->tensor), sizeof(float),
                                   req->tensor->partition_bytes);
    if (!(e->image = calloc(e->nparts, sizeof(*e->image))) ||
        !(e->image_len = calloc(e->nparts, sizeof(*e->image_len))))
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    return TS_OK;
}

/* A partition's image ("p/JOB/ID/INDEX"), or its drop. */
static ts_status part_blob(struct replay *rp, const struct ts_redo_rec *r, struct ts_err *err)
{
    char key[TS_REDO_KEY_MAX + 1];
    const char *slash = strrchr(r->key, '/');
    struct rtensor *e;
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

/* Second pass: the tables' records applied in order (a registration again of a table that
 * exists changes nothing; a table's records before its registration make it from the one the
 * first pass found); the tensors' registrations and images kept. */
static ts_status apply(void *ctx, const struct ts_redo_rec *r, struct ts_err *err)
{
    struct replay *rp = ctx;
    struct rtable *e;
    struct rtensor *te;
    ts_status st;

    if (!strncmp(r->key, "t/", 2)) {
        if (!(e = find_table(rp, r->key)))
            return ts_err_set(err, TS_ECORRUPT, "%s: records of a table the log holds no "
                              "registration of", r->key);
        if (r->kind == TS_REDO_DROP) {
            ts_table_free(e->t);
            e->t = NULL;
            return TS_OK;
        }
        if (!e->t && (st = make_table(rp, e, err)))
            return st;
        e->records++;
        return ts_table_redo_apply(e->t, r, err);
    }
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

/* e's values from its partitions' images, where every one is here (e->values stays NULL
 * otherwise). */
static ts_status tensor_values(struct rtensor *e, struct ts_err *err)
{
    const Tessera__V1__RegisterTensorRequest *req = e->req;
    const Tessera__V1__TensorSpec *s = req->tensor;
    uint64_t numel = numel_of(s);
    struct ts_job job;
    ts_status st;

    for (uint32_t p = 0; p < e->nparts; p++)
        if (!e->image[p])
            return TS_OK;
    if ((st = job_of(req->job, &job, err)))
        return st;
    if (!(e->values = malloc((numel ? numel : 1) * sizeof(float))))
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    e->version = UINT64_MAX;
    for (uint32_t p = 0; p < e->nparts; p++) {
        uint64_t off, len;
        uint32_t gen;
        struct ts_part *part = NULL;

        ts_partition_range(numel, sizeof(float), s->partition_bytes, p, &off, &len);
        memcpy(&gen, e->image[p], sizeof(gen));
        if ((st = ts_part_create(&job, req->tensor_id, s->name, p, off, len, s->initializer,
                                 s->seed, req->fan_in, req->fan_out, NULL, &part, err)))
            return st;
        ts_part_set_sync(part, req->sync_every);
        ts_part_set_generation(part, gen);
        if (!(st = ts_part_load_image(part, e->image[p] + 8, e->image_len[p] - 8, err))) {
            memcpy(e->values + off, ts_part_values(part), len * sizeof(float));
            uint64_t v = ts_part_version(part);
            e->version = v < e->version ? v : e->version;
        }
        ts_part_free(part);
        if (st) {
            ts_err_prefix(err, "p/%s/%u", e->key, p);
            return st;
        }
    }
    return TS_OK;
}

static int by_id(const void *a, const void *b)
{
    const struct rtensor *x = *(struct rtensor *const *)a, *y = *(struct rtensor *const *)b;

    return x->req->tensor_id < y->req->tensor_id ? -1 : x->req->tensor_id > y->req->tensor_id;
}

/* Every job's tensors and, where each is whole here, its dense fingerprint, into j and (not
 * json) stdout. */
static ts_status show_tensors(struct replay *rp, struct ts_json *j, bool json,
                              struct ts_err *err)
{
    struct rtensor **mine = calloc(rp->ntensors + 1, sizeof(*mine));
    struct ts_fp_tensor *fp = calloc(rp->ntensors + 1, sizeof(*fp));
    bool *done = calloc(rp->ntensors + 1, sizeof(*done));
    ts_status st = TS_OK;
    char hex[65];

    if (!mine || !fp || !done) {
        st = ts_err_set(err, TS_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; !st && i < rp->ntensors; i++)
        if (rp->tensors[i].req)
            st = tensor_values(&rp->tensors[i], err);
    ts_json_arr(j, "jobs");
    for (size_t i = 0; !st && i < rp->ntensors; i++) {
        const char *job;
        size_t n = 0;
        bool whole = true;

        if (done[i] || !rp->tensors[i].req)
            continue;
        job = rp->tensors[i].req->job->id;
        for (size_t k = i; k < rp->ntensors; k++)
            if (!done[k] && rp->tensors[k].req && !strcmp(rp->tensors[k].req->job->id, job)) {
                done[k] = true;
                mine[n++] = &rp->tensors[k];
                whole = whole && rp->tensors[k].values;
            }
        qsort(mine, n, sizeof(*mine), by_id);
        ts_json_obj(j, NULL);
        ts_json_str(j, "job", job);
        ts_json_arr(j, "tensors");
        for (size_t k = 0; k < n; k++) {
            const struct rtensor *e = mine[k];
            uint32_t held = 0;
            for (uint32_t p = 0; p < e->nparts; p++)
                held += e->image[p] != NULL;
            ts_json_obj(j, NULL);
            ts_json_str(j, "name", e->req->tensor->name);
            ts_json_uint(j, "id", e->req->tensor_id);
            ts_json_uint(j, "partitions", e->nparts);
            ts_json_uint(j, "partitions_here", held);
            if (e->values)
                ts_json_uint(j, "version", e->version);
            ts_json_end(j);
            fp[k] = (struct ts_fp_tensor){ e->req->tensor->name, e->values,
                                           e->values ? numel_of(e->req->tensor) : 0 };
        }
        ts_json_end(j);
        if (whole && (st = ts_params_sha256(fp, n, hex, err)))
            break;
        if (whole)
            ts_json_str(j, "dense_sha256", hex);
        ts_json_end(j);
        if (!json)
            printf("job %s: %zu tensors%s%s\n", job, n, whole ? ", dense_sha256 " : " (not "
                   "every partition here: no dense fingerprint)", whole ? hex : "");
    }
    ts_json_end(j);
out:
    free(mine);
    free(fp);
    free(done);
    return st;
}

static void replay_free(struct replay *rp)
{
    for (size_t i = 0; i < rp->ntables; i++) {
        ts_table_free(rp->tables[i].t);
        free(rp->tables[i].reg);
    }
    free(rp->tables);
    for (size_t i = 0; i < rp->ntensors; i++)
        tensor_clear(&rp->tensors[i]);
    free(rp->tensors);
}

/* Every table the log holds into j and (not json) stdout. */
static ts_status show_tables(struct replay *rp, struct ts_json *j, bool json,
                             struct ts_err *err)
{
    char hex[65];

    ts_json_arr(j, "tables");
    if (!json)
        printf("%-24s %-24s %10s %12s  %s\n", "JOB", "TABLE", "STEP", "ROWS", "SHA256");
    for (size_t i = 0; i < rp->ntables; i++) {
        struct rtable *e = &rp->tables[i];
        struct ts_table *one = e->t;
        const char *name;

        if (!e->t)   /* dropped: its job was released */
            continue;
        if (ts_table_sha256(&one, 1, hex, err))
            return err->code;
        name = ts_table_name(e->t);
        ts_json_obj(j, NULL);
        ts_json_str(j, "job", e->job.id);
        ts_json_str(j, "table", name);
        ts_json_uint(j, "step", ts_table_step(e->t));
        ts_json_uint(j, "rows", ts_table_count(e->t));
        ts_json_uint(j, "records", e->records);
        ts_json_str(j, "sha256", hex);
        ts_json_end(j);
        if (!json)
            printf("%-24s %-24s %10" PRIu64 " %12" PRIu64 "  %s\n", e->job.id, name,
                   ts_table_step(e->t), ts_table_count(e->t), hex);
    }
    ts_json_end(j);
    return TS_OK;
}

int shard_durable_show(const char *dir, bool json)
{
    struct replay rp = { 0 };
    struct ts_redo *redo = NULL;
    struct ts_redo_replayed got;
    struct ts_err err = { 0 };
    struct ts_json j;
    int rc = 1;

    ts_table_budget_init(&rp.budget, UINT64_MAX);
    ts_json_init(&j);
    if (ts_redo_open(dir, &redo, &err) ||
        ts_redo_replay(redo, collect, &rp, NULL, &err) ||
        ts_redo_replay(redo, apply, &rp, &got, &err))
        goto out;
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "dir", dir);
    ts_json_uint(&j, "files", got.files);
    ts_json_uint(&j, "records", got.records);
    ts_json_uint(&j, "bytes", got.bytes);
    ts_json_uint(&j, "torn_bytes", got.torn);
    if (show_tables(&rp, &j, json, &err) || show_tensors(&rp, &j, json, &err))
        goto out;
    ts_json_end(&j);
    if (json)
        printf("%s\n", j.buf);
    else
        printf("%s: %" PRIu64 " file(s), %" PRIu64 " records, %" PRIu64 " bytes replayed; %"
               PRIu64 " torn bytes cut off its end\n", dir, got.files, got.records, got.bytes,
               got.torn);
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "tessera-shard: --replay %s: %s\n", dir, err.msg);
    ts_json_fini(&j);
    replay_free(&rp);
    ts_redo_close(redo);
    return rc;
}
