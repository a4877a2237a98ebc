/* tables.h - the sparse embedding tables a shard holds, per job (docs/embeddings.md, "Tables
 * on the shards").
 *
 * RegisterTable creates, on every shard, the store of a job's table that holds the rows the
 * ring gives this shard (lib/table: empty; a row is made when a push first touches it). A
 * registration of the same table again is answered with the store as it is; another spec
 * under the same id or name is TS_EEXIST. A job's first registration, of a tensor or a table,
 * fixes its settings (params.c).
 * Not yet (issue 46 lists them): chains (a map with replicas > 1 is refused, TS_ESTATE, rather
 * than keeping rows on one shard where the job expects copies), snapshots (shard_params_arm
 * refuses a job with tables) and rollbacks.
 * Memory: every table's rows are charged to the shard's row budget (--table-mem,
 * shard_params.tables_budget), checked by each push before it creates a row.
 * Ownership: the job owns its tables (freed with it). Threads: the registry lock (sp->mu)
 * guards the job's table array; each table locks itself. */
#ifndef TS_SHARD_TABLES_H
#define TS_SHARD_TABLES_H

#include <stdatomic.h>

#include "params.h"
#include "table/table.h"

struct shard_table {
    uint32_t id;
    struct ts_table *t;
    char name[TS_JOB_ID_MAX + 1];
    char init[64], optimizer[128];
    uint32_t dim;
    uint64_t max_id, seed;
    /* Rows pulled and pushed by workers (ids, repeats included; dp_rows.c), for /metrics. */
    atomic_uint_least64_t pulled, pushed;
};

/* Registers req's table (map_epoch checked against cl). *version: the table's step; *rows:
 * the rows it holds here. Errors name the field (table.dim, table_id, ...). */
ts_status shard_params_register_table(struct shard_params *sp, struct ts_cluster *cl,
                                      const Tessera__V1__RegisterTableRequest *req,
                                      uint64_t *version, uint64_t *rows,
                                      struct ts_err *err) TS_MUST_CHECK;

/* The table of job sj with id `table`, or NULL: tables live as long as their job (an attached
 * connection keeps it). */
struct shard_table *shard_params_table(struct shard_params *sp, struct shard_job *sj,
                                       uint32_t table);

/* fn(arg, job id, table) for every table of every job, with no job released meanwhile (for
 * /metrics). */
void shard_tables_each(struct shard_params *sp,
                       void (*fn)(void *arg, const char *job, struct shard_table *t), void *arg);

/* Frees a job's tables (params.c's job_free, mu held). */
void shard_tables_free(struct shard_job *sj);

#endif
