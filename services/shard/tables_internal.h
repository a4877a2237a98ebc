/* tables_internal.h - what tables.c (registration, snapshots) and tables_place.c (tables
 * placed anew: map changes, a join's hold and move, a rollback's load) share. */
#ifndef TS_SHARD_TABLES_INTERNAL_H
#define TS_SHARD_TABLES_INTERNAL_H

#include "params_internal.h"
#include "tables.h"

/* A RegisterTable request's spec: its strings fit (lib/table checks the rest when it makes
 * the store); the table registered under its id, or TS_EEXIST where the id or the name is
 * another's; a table made and placed from it (sp->mu held). */
ts_status tables_check_spec(const Tessera__V1__RegisterTableRequest *req,
                            struct ts_err *err) TS_MUST_CHECK;
ts_status tables_find(const struct shard_job *sj, const Tessera__V1__RegisterTableRequest *req,
                      struct shard_table **out, struct ts_err *err) TS_MUST_CHECK;
ts_status tables_create(struct shard_params *sp, struct ts_cluster *cl, uint32_t me,
                        struct shard_job *sj, const Tessera__V1__RegisterTableRequest *req,
                        struct shard_table **out, struct ts_err *err) TS_MUST_CHECK;
/* Table t (placed: rowcopy_place) starts from the snapshot's table of its name, if m has
 * one: its runs loaded oldest first, each store keeping its rows of the placed ring. */
ts_status tables_load(struct shard_params *sp, struct shard_table *t,
                      const Tessera__V1__TableSpec *spec, const ts_manifest *m, const char *hex,
                      struct ts_err *err) TS_MUST_CHECK;
/* Frees t, made by tables_create and not published in its job (or being freed with it). */
void tables_free_one(struct shard_table *t);
/* t's spec into *spec (its strings t's). */
void tables_spec(const struct shard_table *t, Tessera__V1__TableSpec *spec);
/* The runs t wrote to snapshots, forgotten (the next is full). */
void tables_runs_free(struct shard_table *t);
/* Whether some store of t took a push of a step past `step` (*newest: the newest such
 * step). t->lock held. */
bool tables_pushed_past(struct shard_table *t, uint64_t step, uint64_t *newest);

#endif
