/* snapshot_show.c - `tessera snapshot show REF`: what one snapshot holds, from its manifest
 * alone (no chunk is read): the job and its schedule, each tensor, and each sparse table with
 * its spec, its rows at the snapshot's step and the runs of records the shards wrote for it
 * (docs/snapshots.md; docs/embeddings.md, "Snapshots of tables"). */
#include <inttypes.h>
#include <stdio.h>

#include "cli.h"
#include "snapshot/snapshot.h"
#include "util/json.h"

/* The records of a table in the runs the snapshot lists. */
static uint64_t table_records(const ts_table_manifest *tm)
{
    uint64_t n = 0;

    for (size_t r = 0; r < tm->n_runs; r++)
        n += tm->runs[r]->records;
    return n;
}

static void json_tables(struct ts_json *j, const ts_manifest *m)
{
    ts_json_arr(j, "tables");
    for (size_t i = 0; i < m->n_tables; i++) {
        const ts_table_manifest *tm = m->tables[i];
        ts_json_obj(j, NULL);
        ts_json_str(j, "name", tm->spec->name);
        ts_json_uint(j, "id", tm->id);
        ts_json_uint(j, "dim", tm->spec->dim);
        ts_json_uint(j, "max_id", tm->spec->max_id);
        ts_json_str(j, "initializer", tm->spec->initializer);
        ts_json_uint(j, "seed", tm->spec->seed);
        ts_json_str(j, "optimizer", tm->spec->optimizer);
        ts_json_uint(j, "ttl_steps", tm->spec->ttl_steps);
        ts_json_uint(j, "ttl_seconds", tm->spec->ttl_seconds);
        ts_json_uint(j, "rows", tm->rows);
        ts_json_uint(j, "records", table_records(tm));
        ts_json_uint(j, "record_bytes", ts_snap_record_bytes(tm->spec));
        ts_json_arr(j, "runs");
        for (size_t r = 0; r < tm->n_runs; r++) {
            const ts_row_run *run = tm->runs[r];
            ts_json_obj(j, NULL);
            ts_json_uint(j, "shard", run->shard_id);
            ts_json_uint(j, "step", run->step);
            ts_json_uint(j, "records", run->records);
            ts_json_bool(j, "full", run->full);
            ts_json_uint(j, "chunks", run->n_chunks);
            ts_json_end(j);
        }
        ts_json_end(j);
        ts_json_end(j);
    }
    ts_json_end(j);
}

static void show_json(const uint8_t *id, const ts_manifest *m)
{
    char hex[TS_STORE_HEX_LEN + 1];
    struct ts_json j;

    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "id", ts_store_hex(id, hex));
    ts_json_str(&j, "parent", m->parent.len ? ts_store_hex(m->parent.data, hex) : "");
    ts_json_uint(&j, "step", m->step);
    ts_json_int(&j, "created_unix_ms", m->created_unix_ms);
    ts_json_str(&j, "message", m->message);
    ts_json_str(&j, "job", m->job->id);
    ts_json_bool(&j, "exact", m->job->exact);
    ts_json_uint(&j, "workers", m->job->workers);
    ts_json_str(&j, "optimizer", m->job->optimizer);
    ts_json_num(&j, "batch", m->job->batch);
    ts_json_uint(&j, "data_seed", m->schedule->seed);
    ts_json_uint(&j, "micro_batch", m->schedule->micro_batch);
    ts_json_uint(&j, "shards", m->cluster->shards);
    ts_json_uint(&j, "chunk_bytes", m->chunk_bytes);
    ts_json_arr(&j, "tensors");
    for (size_t i = 0; i < m->n_tensors; i++) {
        const ts_tensor_manifest *tm = m->tensors[i];
        ts_json_obj(&j, NULL);
        ts_json_str(&j, "name", tm->spec->name);
        ts_json_arr(&j, "shape");
        for (size_t d = 0; d < tm->spec->n_shape; d++)
            ts_json_uint(&j, NULL, tm->spec->shape[d]);
        ts_json_end(&j);
        ts_json_uint(&j, "numel", tm->numel);
        ts_json_uint(&j, "partitions", tm->n_partitions);
        ts_json_uint(&j, "placement_salt", tm->spec->placement_salt);
        ts_json_end(&j);
    }
    ts_json_end(&j);
    json_tables(&j, m);
    ts_json_end(&j);
    printf("%s\n", j.buf);
    ts_json_fini(&j);
}

static void text_tables(const ts_manifest *m)
{
    uint64_t rows = 0, bytes = 0;
    size_t runs = 0;

    if (!m->n_tables)
        return;
    printf("\n%-20s %5s %12s %5s %12s %10s  %s\n", "TABLE", "DIM", "ROWS", "RUNS", "RECORDS",
           "MB", "OPTIMIZER");
    for (size_t i = 0; i < m->n_tables; i++) {
        const ts_table_manifest *tm = m->tables[i];
        uint64_t records = table_records(tm), b = records * ts_snap_record_bytes(tm->spec);
        printf("%-20s %5u %12" PRIu64 " %5zu %12" PRIu64 " %10.2f  %s\n", tm->spec->name,
               tm->spec->dim, tm->rows, tm->n_runs, records, b / 1e6, tm->spec->optimizer);
        rows += tm->rows;
        bytes += b;
        runs += tm->n_runs;
    }
    printf("\n%zu tables, %" PRIu64 " rows; %.2f MB of records (values and optimizer state) "
           "in %zu runs\n", m->n_tables, rows, bytes / 1e6, runs);
}

static void show_text(const uint8_t *id, const ts_manifest *m)
{
    char hex[TS_STORE_HEX_LEN + 1], t[64], shape[128];
    size_t slen = ts_manifest_state_len(m);
    uint64_t total = 0;

    cli_utc_time(m->created_unix_ms, t, sizeof(t));
    printf("snapshot %s\n", ts_store_hex(id, hex));
    printf("parent   %s\n", m->parent.len ? ts_store_hex(m->parent.data, hex) : "(none)");
    printf("step     %" PRIu64 "\ndate     %s\n", m->step, t);
    if (m->message[0])
        printf("message  %s\n", m->message);
    printf("job      %s: %s mode, %u workers, optimizer %s, batch %g\n", m->job->id,
           m->job->exact ? "exact" : "float", m->job->workers, m->job->optimizer, m->job->batch);
    printf("schedule seed %" PRIu64 ", micro-batch %u, next step %" PRIu64 "\n",
           m->schedule->seed, m->schedule->micro_batch, m->schedule->next_step);
    printf("cluster  %u shards (map epoch %" PRIu64 ")\n\n", m->cluster->shards,
           m->cluster->map_epoch);
    printf("%-20s %-14s %6s %8s %10s %5s\n", "TENSOR", "SHAPE", "PARTS", "CHUNKS", "MB",
           "SALT");
    for (size_t i = 0; i < m->n_tensors; i++) {
        const ts_tensor_manifest *tm = m->tensors[i];
        size_t chunks = 0, len = 0;
        uint64_t bytes = (1 + slen) * tm->numel * sizeof(float);

        for (size_t p = 0; p < tm->n_partitions; p++)
            chunks += tm->partitions[p]->n_value_chunks + tm->partitions[p]->n_state_chunks;
        shape[0] = '\0';
        for (size_t d = 0; d < tm->spec->n_shape; d++)
            len += (size_t)snprintf(shape + len, sizeof(shape) - len, "%s%" PRIu64, d ? "x" : "",
                                    tm->spec->shape[d]);
        printf("%-20s %-14s %6zu %8zu %10.2f %5u\n", tm->spec->name, shape, tm->n_partitions,
               chunks, bytes / 1e6, tm->spec->placement_salt);
        total += bytes;
    }
    printf("\n%zu tensors, %.2f MB of values and optimizer state\n", m->n_tensors, total / 1e6);
    text_tables(m);
}

int cli_snapshot_show(struct ts_store *s, const char *ref, bool json)
{
    uint8_t id[TS_STORE_ID_LEN];
    struct ts_err err = { 0 };
    ts_manifest *m;

    if (ts_snap_resolve(s, ref, id, NULL, &err) || ts_manifest_load(s, id, &m, &err)) {
        fprintf(stderr, "tessera snapshot show: %s\n", err.msg);
        return 1;
    }
    if (json)
        show_json(id, m);
    else
        show_text(id, m);
    ts_manifest_free(m);
    return 0;
}
