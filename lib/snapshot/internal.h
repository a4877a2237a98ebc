/* internal.h - what lib/snapshot's files share and snapshot.h does not export: the sparse
 * tables' part of validation, merge, gc and checks (tables.c). */
#ifndef TS_SNAPSHOT_INTERNAL_H
#define TS_SNAPSHOT_INTERNAL_H

#include "snapshot/snapshot.h"

/* ts_manifest_validate's checks of m's tables. */
ts_status snap_check_tables(const ts_manifest *m, struct ts_err *err) TS_MUST_CHECK;
/* The tables the pieces hold (distinct ids) and their runs in all; TS_EINTERNAL for a bad id or
 * pieces that disagree on a table's spec; TS_ESTATE for a table some of whose rows are in no
 * piece (a shard it was placed on that no piece covers). */
ts_status snap_count_tables(const struct ts_snap_piece *pieces, size_t n, size_t *ntables,
                            size_t *nruns, struct ts_err *err) TS_MUST_CHECK;
/* The pieces' tables into m, in id order, each with every piece's runs and rows summed:
 * tables[] and copies[] hold the counted tables, runs[] the counted runs (the caller's). */
void snap_merge_tables(const struct ts_snap_piece *pieces, size_t n, ts_manifest *m,
                       ts_table_manifest **tables, ts_table_manifest *copies,
                       ts_row_run **runs);
/* add(ctx, id) for every chunk of m's tables' runs (gc's walk). */
ts_status snap_add_table_chunks(const ts_manifest *m,
                                ts_status (*add)(void *ctx, const uint8_t *id,
                                                 struct ts_err *err),
                                void *ctx, struct ts_err *err) TS_MUST_CHECK;
/* ts_snap_check's reading of every table run. */
ts_status snap_check_table_runs(struct ts_store *s, const ts_manifest *m,
                                void (*progress)(void *ctx, const char *tensor,
                                                 uint64_t bytes),
                                void *ctx, struct ts_err *err) TS_MUST_CHECK;

#endif
