/* durable_show.c - `tessera-shard --replay DIR`: a stopped shard's redo log read into tables
 * and partitions in memory (durable_replay.h), and what they hold printed (durable.h,
 * shard_durable_show).
 *
 * Each table is made under a job of its own as its registration says; each partition from its
 * tensor's registration, loaded with its image; and each job whose tensors are whole here
 * gets the dense fingerprint its trainer reports (ts_params_sha256 of its tensors by id). */
#include "durable.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "durable_replay.h"
#include "tensor/fingerprint.h"
#include "tensor/tensor.h"
#include "util/json.h"

/* A table afresh from its registration, under a job of its own (e->job), in budget (ctx). */
static ts_status make_table(void *ctx, struct durable_rtable *e,
                            const Tessera__V1__RegisterTableRequest *req, struct ts_err *err)
{
    const Tessera__V1__TableSpec *s = req->table;
    struct ts_table_cfg cfg = { .name = s->name, .dim = s->dim, .max_id = s->max_id,
                                .init = s->initializer, .seed = s->seed,
                                .optimizer = s->optimizer, .ttl_steps = s->ttl_steps,
                                .ttl_seconds = s->ttl_seconds };
    ts_status st;

    if ((st = durable_job_of(req->job, &e->job, err)))
        return st;
    return ts_table_create(&e->job, &cfg, ctx, &e->t, err);
}

static void unmake_table(void *ctx, struct durable_rtable *e)
{
    (void)ctx;
    ts_table_free(e->t);
    e->t = NULL;
}

/* e's values from its partitions' images, where every one is here (e->values stays NULL
 * otherwise). */
static ts_status tensor_values(struct durable_rtensor *e, struct ts_err *err)
{
    const Tessera__V1__RegisterTensorRequest *req = e->req;
    const Tessera__V1__TensorSpec *s = req->tensor;
    uint64_t numel = durable_numel(s);
    struct ts_job job;
    ts_status st;

    for (uint32_t p = 0; p < e->nparts; p++)
        if (!e->image[p])
            return TS_OK;
    if ((st = durable_job_of(req->job, &job, err)))
        return st;
    if (!(e->values = malloc((numel ? numel : 1) * sizeof(float))))
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    e->version = UINT64_MAX;
    for (uint32_t p = 0; p < e->nparts; p++) {
        uint64_t off, len;
        uint32_t gen;
        struct ts_part *part = NULL;

        ts_partition_range(numel, sizeof(float), s->partition_bytes, p, &off, &len);
        gen = durable_image_generation(e->image[p]);
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
    const struct durable_rtensor *x = *(struct durable_rtensor *const *)a;
    const struct durable_rtensor *y = *(struct durable_rtensor *const *)b;

    return x->req->tensor_id < y->req->tensor_id ? -1 : x->req->tensor_id > y->req->tensor_id;
}

/* Every job's tensors and, where each is whole here, its dense fingerprint, into j and (not
 * json) stdout. */
static ts_status show_tensors(struct durable_replay *rp, struct ts_json *j, bool json,
                              struct ts_err *err)
{
    struct durable_rtensor **mine = calloc(rp->ntensors + 1, sizeof(*mine));
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
            const struct durable_rtensor *e = mine[k];
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
                                           e->values ? durable_numel(e->req->tensor) : 0 };
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

/* Every table the log holds into j and (not json) stdout. */
static ts_status show_tables(struct durable_replay *rp, struct ts_json *j, bool json,
                             struct ts_err *err)
{
    char hex[65];

    ts_json_arr(j, "tables");
    if (!json)
        printf("%-24s %-24s %10s %12s  %s\n", "JOB", "TABLE", "STEP", "ROWS", "SHA256");
    for (size_t i = 0; i < rp->ntables; i++) {
        struct durable_rtable *e = &rp->tables[i];
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
    struct ts_table_budget budget;
    struct durable_replay rp = { .make = make_table, .unmake = unmake_table, .ctx = &budget };
    struct ts_redo *redo = NULL;
    struct ts_redo_replayed got;
    struct ts_err err = { 0 };
    struct ts_json j;
    int rc = 1;

    ts_table_budget_init(&budget, UINT64_MAX);
    ts_json_init(&j);
    if (ts_redo_open(dir, &redo, &err) ||
        durable_replay_read(redo, &rp, DURABLE_TABLES | DURABLE_TENSORS, &got, &err))
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
    durable_replay_free(&rp);
    ts_redo_close(redo);
    return rc;
}
