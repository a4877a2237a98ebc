/* snapshot.h - snapshots on top of the store: manifests, refs by name, history, data, and the
 * taking of one across shards (pieces, their merge, the commit).
 *
 * lib/store knows chunks, objects and refs; this module knows what a snapshot is. A snapshot
 * is a manifest (tessera.v1.Manifest, proto/tessera/v1/snapshot.proto) stored as an object:
 * every tensor of a job, every partition with the chunk ids of its values and optimizer
 * state, all at one step, plus what a restore needs to continue (job, schedule, shape).
 * ts_manifest_parse is the one way in from bytes: it decodes and then validates everything
 * a reader relies on (each partition present once and in place, chunk counts matching the
 * lengths, ids 32 bytes), so code above never sees a manifest that lies about its shape.
 * It is the libFuzzer target (tests/fuzz/fuzz_manifest.c). docs/snapshots.md.
 *
 * Ownership: a parsed manifest (ts_manifest_parse, ts_manifest_load) is the caller's, freed
 * with ts_manifest_free. Everything else borrows. Threads: no shared state; the store's rules
 * apply (store.h). Errors: TS_EINVAL (a bad argument or an invalid manifest: the message names
 * the field, e.g. "manifest: tensors[2].partitions[0].value_chunks: 3 ids, want 4"),
 * TS_ENOTFOUND (unknown ref or id), TS_ECORRUPT (a chunk failed its check: the message names
 * the chunk and the tensor), TS_EIO, TS_ENOMEM. */
#ifndef TS_SNAPSHOT_SNAPSHOT_H
#define TS_SNAPSHOT_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ps/part.h"
#include "store/store.h"
#include "tessera/v1/snapshot.pb-c.h"
#include "util/err.h"

#define TS_MANIFEST_FORMAT 1
#define TS_MANIFEST_MAX_BYTES (64u << 20)  /* a manifest larger than this is refused */
#define TS_MANIFEST_MAX_MESSAGE 4096
#define TS_MANIFEST_MAX_TENSORS 4096
#define TS_SNAP_CHUNK_MIN 4096u
/* The chunk size shards cut partitions into: small enough that a change to 1% of a model of
 * 64 MiB or more rewrites at most 2% of its bytes (docs/snapshots.md), large enough that a
 * GiB is 4096 files. */
#define TS_SNAP_CHUNK_DEFAULT (256u << 10)

typedef Tessera__V1__Manifest ts_manifest;
typedef Tessera__V1__TensorManifest ts_tensor_manifest;
typedef Tessera__V1__PartitionManifest ts_partition_manifest;
typedef Tessera__V1__TableManifest ts_table_manifest;
typedef Tessera__V1__RowRun ts_row_run;
#define TS_MANIFEST_MAX_TABLES 256

/* Decodes and validates len bytes. *out on TS_OK only. */
TS_MUST_CHECK ts_status ts_manifest_parse(const void *buf, size_t len, ts_manifest **out,
                                          struct ts_err *err);
/* The checks of ts_manifest_parse, on a manifest built in memory (the master's, before it
 * writes one). */
TS_MUST_CHECK ts_status ts_manifest_validate(const ts_manifest *m, struct ts_err *err);
void ts_manifest_free(ts_manifest *m);   /* NULL is a no-op; only for parse/load results */

/* Validates m, encodes it and stores it as an object; id receives its name. */
TS_MUST_CHECK ts_status ts_manifest_write(struct ts_store *s, const ts_manifest *m,
                                          uint8_t id[TS_STORE_ID_LEN], struct ts_err *err);
/* Reads object id and parses it. Errors name the id. */
TS_MUST_CHECK ts_status ts_manifest_load(struct ts_store *s, const uint8_t id[TS_STORE_ID_LEN],
                                         ts_manifest **out, struct ts_err *err);

/* Optimizer state floats per parameter for the manifest's job (0 for sgd). */
size_t ts_manifest_state_len(const ts_manifest *m);

/* Resolves a user's name for a snapshot: "HEAD", a branch ("main", "heads/main"), a tag
 * ("v1", "tags/v1"), a full id or a unique prefix of 4+ hex digits, each optionally followed
 * by "~N" (N parents back). A bare name that is both a branch and a tag pointing at
 * different snapshots is ambiguous (TS_EINVAL). branch (may be NULL, TS_STORE_REF_MAX + 1
 * bytes) receives "heads/..." when ref named a branch's tip without "~", else "". */
TS_MUST_CHECK ts_status ts_snap_resolve(struct ts_store *s, const char *ref,
                                        uint8_t id[TS_STORE_ID_LEN], char *branch,
                                        struct ts_err *err);

/* Called by ts_snap_history for each snapshot, newest first. *m is the manifest: fn may keep
 * it (set *m to NULL; the caller then frees it with ts_manifest_free), else the walk frees it.
 * Set *stop to end the walk there. A status other than TS_OK (with err set) ends the walk and
 * is returned. */
typedef ts_status (*ts_snap_visit)(void *ctx, const uint8_t id[TS_STORE_ID_LEN],
                                   ts_manifest **m, bool *stop, struct ts_err *err);
/* Walks the history of snapshot id through its parents to the root, calling fn for each.
 * A manifest that cannot be read ends the walk with its error (the message names its id). */
TS_MUST_CHECK ts_status ts_snap_history(struct ts_store *s, const uint8_t id[TS_STORE_ID_LEN],
                                        ts_snap_visit fn, void *ctx, struct ts_err *err);

/* The chunk ids (values and state) of every manifest reachable from any ref through parents,
 * for ts_store_gc. *ids is malloc'd (caller frees); may repeat. *nmanifests counts those read
 * (may be NULL). */
TS_MUST_CHECK ts_status ts_snap_live_chunks(struct ts_store *s,
                                            uint8_t (**ids)[TS_STORE_ID_LEN], size_t *n,
                                            size_t *nmanifests, struct ts_err *err);

/* The chunk ids of one of a partition's lists as a contiguous array (malloc'd, caller frees),
 * the layout ts_store_get_blob takes. */
TS_MUST_CHECK ts_status ts_snap_ids(const ProtobufCBinaryData *list, size_t n,
                                    uint8_t (**ids)[TS_STORE_ID_LEN], struct ts_err *err);

/* Bytes of memory ts_snap_put_partition needs for a partition of len values and slen state
 * floats cut into chunk_bytes chunks. */
size_t ts_snap_partition_mem(size_t len, size_t slen, uint32_t chunk_bytes);
/* Writes a partition's values (len floats) and optimizer state (slen floats, may be 0) as
 * blobs and fills p's chunk lists (and bytes_written), which point into mem: the caller's,
 * ts_snap_partition_mem bytes, aligned for pointers, kept as long as p is used. *written:
 * chunk-file bytes added. */
TS_MUST_CHECK ts_status ts_snap_put_partition(struct ts_store *s, const float *value, size_t len,
                                              const float *state, size_t slen,
                                              uint32_t chunk_bytes, ts_partition_manifest *p,
                                              void *mem, uint64_t *written, struct ts_err *err);
/* Reads partition p of tensor t back: values into value (p->length floats) and, if state is
 * not NULL, the optimizer state (slen * p->length floats). Every chunk is checked; a bad one
 * is TS_ECORRUPT naming the chunk, the tensor and the partition. */
TS_MUST_CHECK ts_status ts_snap_read_partition(struct ts_store *s, const ts_manifest *m,
                                               const ts_tensor_manifest *t,
                                               const ts_partition_manifest *p, float *value,
                                               float *state, struct ts_err *err);
/* Reads every chunk of m and checks it (what a restore will read), calling progress (may be
 * NULL) after each tensor. */
TS_MUST_CHECK ts_status ts_snap_check(struct ts_store *s, const ts_manifest *m,
                                      void (*progress)(void *ctx, const char *tensor,
                                                       uint64_t bytes),
                                      void *ctx, struct ts_err *err);

/* How one tensor differs between two snapshots. */
struct ts_snap_tensor_diff {
    const char *name;            /* borrowed from a or b */
    enum ts_snap_diff_kind { TS_DIFF_SAME, TS_DIFF_CHANGED, TS_DIFF_ADDED, TS_DIFF_REMOVED,
                             TS_DIFF_RESHAPED } kind;
    double l2;                   /* ||b - a||_2 of the values (CHANGED) */
    double max_abs;              /* max |b - a| */
    uint64_t changed;            /* elements whose bits differ */
    uint64_t chunks, chunks_shared; /* b's value and state chunks; those also in a */
};
/* Compares the tensors of a and b (by name). Only partitions whose chunk ids differ are read.
 * *out is malloc'd (caller frees), *n entries, in b's tensor order, then a's removed ones. */
TS_MUST_CHECK ts_status ts_snap_diff(struct ts_store *s, const ts_manifest *a,
                                     const ts_manifest *b, struct ts_snap_tensor_diff **out,
                                     size_t *n, struct ts_err *err);

/* ---- a snapshot taken across shards (build.c) ----
 * Each shard writes the partitions it holds and describes them as a piece; the master gathers
 * every shard's piece (WriteSnapshot), merges them into one manifest, adds what only it knows
 * (message, parent, cluster, schedule, data checksums) and commits it: the manifest first,
 * then the branch by compare-and-swap, then the tag. Chunks are durable before the manifest
 * and the manifest before the ref, so a crash anywhere leaves the previous snapshot as the
 * branch's tip and at worst unreferenced chunks for gc. */

/* A tensor as a manifest describes it (borrowed by the piece: keep it while the piece is
 * used). */
struct ts_snap_tensor {
    uint32_t id, nparts;
    const char *name, *init;
    const uint64_t *shape;
    size_t ndim;
    uint64_t seed, fan_in, fan_out, numel, partition_bytes;
    uint32_t salt;               /* its placement salt, for a restore to place it as it was */
};

/* One partition's copy, as captured at the snapshot's step. */
struct ts_snap_part {
    uint32_t index;
    uint64_t offset, len, version;
    const float *value, *state;     /* len floats; slen floats (state may be NULL if 0) */
    size_t slen;
    /* The optimizer's update count of that state (lib/ps/part.h, "Update count"), if the
     * writer knows it (has_updates); else the manifest records none, and a restore takes the
     * count the version implies. */
    bool has_updates;
    uint64_t updates;
};

/* One shard's share of a snapshot: what WriteSnapshot carries. The master fills one per shard
 * from the replies (every pointer borrowed from them); a shard builds its own with
 * ts_snap_piece_add, whose memory comes from alloc (the shard passes its RPC call's arena, so
 * that the reply points into memory freed with the call). */
struct ts_snap_piece {
    uint32_t shard;                     /* the writer's shard id: in errors and partitions */
    ts_tensor_manifest **tensors;
    size_t n_tensors;
    ts_table_manifest **tables;         /* the writer's runs of each sparse table */
    size_t n_tables;
    const Tessera__V1__JobSpec *job;
    uint32_t chunk_bytes;
    uint64_t bytes_written;             /* chunk-file bytes added to the store */
    void *(*alloc)(void *ctx, size_t n); /* zeroed memory, freed by its owner, never by us */
    void *alloc_ctx;
};

/* An empty piece that allocates with alloc(ctx, n) (NULL on failure) and cuts partitions into
 * TS_SNAP_CHUNK_DEFAULT chunks. */
void ts_snap_piece_init(struct ts_snap_piece *pc, void *(*alloc)(void *ctx, size_t n),
                        void *ctx);
/* Writes partition p of tensor t to the store and adds it to the piece; a tensor's partitions
 * are added one after another. Errors name the tensor and the partition. */
TS_MUST_CHECK ts_status ts_snap_piece_add(struct ts_snap_piece *pc, struct ts_store *s,
                                          const struct ts_snap_tensor *t,
                                          const struct ts_snap_part *p, struct ts_err *err);
/* Adds tensor t to the piece without partitions if it has none there yet: a piece names
 * every tensor of the job, so that a tensor whose partitions no piece holds makes the merged
 * manifest incomplete (refused at its commit) instead of leaving the tensor out. */
TS_MUST_CHECK ts_status ts_snap_piece_declare(struct ts_snap_piece *pc,
                                              const struct ts_snap_tensor *t,
                                              struct ts_err *err);
/* Records the job the piece belongs to (j is borrowed). */
TS_MUST_CHECK ts_status ts_snap_piece_set_job(struct ts_snap_piece *pc, const struct ts_job *j,
                                              uint64_t data_seed, uint32_t micro_batch,
                                              struct ts_err *err);
/* The union of n pieces as manifest m at step: tensors in id order, each with every piece's
 * partitions in index order, tables in id order, each with every piece's runs and the rows
 * summed (pieces that disagree on a table's spec: TS_EINTERNAL; a shard some piece's table
 * was placed on that no piece covers, its rows in no run: TS_ESTATE naming both; the merged
 * tables keep neither list), the job and chunk size (pieces that disagree on them, or on a
 * tensor's placement salt: TS_EINTERNAL naming a shard). Entries are borrowed from the
 * pieces; the arrays are in *mem (caller frees, also on error). The caller adds the rest and
 * validates by committing. */
TS_MUST_CHECK ts_status ts_snap_merge(const struct ts_snap_piece *pieces, size_t n,
                                      uint64_t step, ts_manifest *m, void **mem,
                                      struct ts_err *err);
/* TS_OK if tag (a user's name, without "tags/") is valid and not taken: TS_EINVAL, TS_EEXIST. */
TS_MUST_CHECK ts_status ts_snap_tag_check(struct ts_store *s, const char *tag,
                                          struct ts_err *err);
/* Writes m (validated) and moves branch ("heads/...") to it from parent (NULL: only if the
 * branch does not exist); a lost compare-and-swap is TS_ESTATE. id receives m's id. */
TS_MUST_CHECK ts_status ts_snap_commit(struct ts_store *s, const ts_manifest *m,
                                       const char *branch, const uint8_t *parent,
                                       uint8_t id[TS_STORE_ID_LEN], struct ts_err *err);
/* Points a new tag at snapshot id; the message says the snapshot itself was written. */
TS_MUST_CHECK ts_status ts_snap_tag(struct ts_store *s, const char *tag,
                                    const uint8_t id[TS_STORE_ID_LEN], struct ts_err *err);

/* ---- sparse tables (tables.c; docs/embeddings.md, "Snapshots of tables") ----
 * A table's rows are runs of records (lib/table/table.h's record: id, update count, step,
 * values, state), each a blob cut in the manifest's chunk size; a row's record in the latest
 * run (by step) that holds one wins. */

/* Bytes a record of a table of spec s (24 + 4 x dim x (1 + the optimizer's state length));
 * 0 for a dim outside 1..4096 or an optimizer lib/tensor does not know. */
size_t ts_snap_record_bytes(const Tessera__V1__TableSpec *s);
/* Optimizer state floats a record of spec s holds per value (0 sgd, 1 adagrad, 2 adam); s
 * must be one ts_snap_record_bytes accepts. */
size_t ts_snap_row_state_len(const Tessera__V1__TableSpec *s);
/* Two specs of one table. */
bool ts_snap_same_table(const Tessera__V1__TableSpec *a, const Tessera__V1__TableSpec *b);
/* Bytes of memory ts_snap_put_run needs for n records of record_bytes. */
size_t ts_snap_run_mem(size_t n, size_t record_bytes, uint32_t chunk_bytes);
/* Writes n records as a blob and fills run's chunks, records and bytes_written (pointing
 * into mem: the caller's, ts_snap_run_mem bytes, aligned for pointers). *written: chunk-file
 * bytes added. */
TS_MUST_CHECK ts_status ts_snap_put_run(struct ts_store *s, const uint8_t *records, size_t n,
                                        size_t record_bytes, uint32_t chunk_bytes,
                                        ts_row_run *run, void *mem, uint64_t *written,
                                        struct ts_err *err);
/* Reads run r of table t of m into records (r->records x ts_snap_record_bytes bytes), every
 * chunk checked (TS_ECORRUPT names it, the table and the run). */
TS_MUST_CHECK ts_status ts_snap_read_run(struct ts_store *s, const ts_manifest *m,
                                         const ts_table_manifest *t, const ts_row_run *r,
                                         uint8_t *records, struct ts_err *err);

/* Table t of m whole: every row's latest record merged from its runs, ascending id: *ids
 * (rows of them) and *values (rows x dim floats; the state is left out), both malloc'd (the
 * caller frees; NULL when *rows is 0). Errors as ts_snap_read_run, and TS_ECORRUPT when the
 * runs hold another number of rows than the manifest's t->rows. */
TS_MUST_CHECK ts_status ts_snap_read_table(struct ts_store *s, const ts_manifest *m,
                                           const ts_table_manifest *t, uint64_t **ids,
                                           float **values, size_t *rows, struct ts_err *err);
/* Table t of m whole with what else its records hold: ts_snap_read_table's rows, and with
 * all, each row's optimizer state (rows x state_len x dim floats, each row's [component]
 * [dim]; NULL for sgd), update count and step (rows each), all malloc'd; freed with
 * ts_snap_rows_free (on error too: nothing is left in *out). */
struct ts_snap_rows {
    size_t rows, state_len;
    uint64_t *ids;
    float *values, *state;
    uint64_t *updates, *steps;
};
TS_MUST_CHECK ts_status ts_snap_read_rows(struct ts_store *s, const ts_manifest *m,
                                          const ts_table_manifest *t, bool all,
                                          struct ts_snap_rows *out, struct ts_err *err);
void ts_snap_rows_free(struct ts_snap_rows *r);

/* How one table differs between two snapshots (ts_snap_diff_tables). kind: SAME, CHANGED,
 * ADDED, REMOVED, or RESHAPED for another spec (dim, max_id, initializer, seed, optimizer,
 * ttl). Rows by id: in b only (added), in a only (removed: a row lifetime dropped it), in
 * both with other values (changed); l2 and max_abs of b - a over the rows both hold (a row
 * added has no stored value in a to compare with). runs: b's runs; runs_shared: those a has
 * too (the same chunks). */
struct ts_snap_table_diff {
    const char *name;            /* borrowed from a or b */
    enum ts_snap_diff_kind kind;
    uint64_t rows_a, rows_b, added, removed, changed, runs, runs_shared;
    double l2, max_abs;
};
/* Compares the tables of a and b (by name). A table whose runs are all the same in both is
 * SAME without reading a row; any other is read whole from both snapshots (memory for both),
 * every chunk checked. *out is malloc'd (caller frees), *n entries, in b's table order, then
 * a's removed ones. */
TS_MUST_CHECK ts_status ts_snap_diff_tables(struct ts_store *s, const ts_manifest *a,
                                            const ts_manifest *b,
                                            struct ts_snap_table_diff **out, size_t *n,
                                            struct ts_err *err);

/* ---- whole tensors (whole.c): export and import ----
 * A user's checkpoint file goes in and out of the store through these: the Python package
 * (python/tessera/snapshot.py) converts between them and torch state dicts. */

/* Reads tensor t of m whole: values (t->numel floats) and, if state is not NULL, its optimizer
 * state, ts_manifest_state_len(m) * t->numel floats laid out [component][element] over the
 * whole tensor (as a state pull gives it). Every chunk is checked (TS_ECORRUPT names it). */
TS_MUST_CHECK ts_status ts_snap_read_tensor(struct ts_store *s, const ts_manifest *m,
                                            const ts_tensor_manifest *t, float *value,
                                            float *state, struct ts_err *err);
/* The optimizer's update count of t's state (Adam's t so far), if its partitions record one
 * and agree: true and *updates; false otherwise (a snapshot from before counts were kept). */
bool ts_snap_tensor_updates(const ts_tensor_manifest *t, uint64_t *updates);

/* One tensor to import; everything borrowed. */
struct ts_snap_import_tensor {
    const char *name;            /* 1..128 bytes, unique in the import */
    const uint64_t *shape;       /* ndim (1..8) extents, each >= 1 */
    size_t ndim;
    const float *value;          /* numel floats */
    const float *state;          /* the job's state_len * numel floats, [component][element];
                                  * NULL: zeros (a fresh optimizer) */
    bool has_updates;            /* the state's update count is known: updates */
    uint64_t updates;            /* else a restore takes the count the step implies */
};

/* One sparse table to import (docs/embeddings.md, "Snapshots of tables"); everything
 * borrowed. Its rows become records (table.h's: id, update count, step, values, state). */
struct ts_snap_import_table {
    const Tessera__V1__TableSpec *spec;  /* as a shard registers it (ts_table_check) */
    uint64_t rows;
    const uint64_t *ids;         /* rows of them, strictly ascending, each <= spec->max_id */
    const float *value;          /* rows x dim floats, row by row, finite */
    const float *state;          /* rows x state_len x dim floats, each row's [component]
                                  * [dim], as its record holds it; NULL: zeros (a fresh
                                  * optimizer) */
    const uint64_t *updates;     /* each row's update count (Adam's t); NULL: zeros */
    const uint64_t *steps;       /* each row's last updated step (its lifetime counts from
                                  * it), at most the import's step; NULL: the import's step */
};

/* A snapshot made from values rather than taken from a cluster. */
struct ts_snap_import {
    const struct ts_job *job;    /* bsp (ts_job_init's default): the restored job's */
    uint64_t step;               /* >= 1: every partition's version, and where the job goes on */
    uint32_t micro_batch;        /* the schedule's micro-batch (0: not known) */
    const struct ts_snap_import_tensor *tensors;
    size_t n;                    /* 0..TS_MANIFEST_MAX_TENSORS - 1; ids are 1..n in this order */
    const struct ts_snap_import_table *tables;
    size_t ntables;              /* 0..TS_MANIFEST_MAX_TABLES; ids 0..ntables - 1 in this
                                  * order, which must be the order the job registers them;
                                  * at least one tensor or table */
    const char *branch;          /* a branch name without "heads/" (NULL: "main") */
    const char *tag;             /* NULL or "": none */
    const char *message;         /* NULL: "" */
    size_t run_bytes;            /* an imported table's runs hold at most this of records
                                  * (0: 64 MiB) */
};

/* Writes in as a snapshot: tensors with initializer "assigned" (tessera.torch's, so that its
 * attach to the restored job finds them as its own) cut into TS_PARTITION_BYTES_DEFAULT
 * partitions, tables as full runs of at most in->run_bytes of records at in->step (a
 * shard that registers one with the same spec loads its rows, as from a snapshot a cluster
 * took), on branch in->branch after its tip (a new branch if it has none), then the tag.
 * Everything is checked before a chunk is written (TS_EINVAL names the field; a taken tag is
 * TS_EEXIST); a lost race for the branch is TS_ESTATE. id receives the snapshot's id. A
 * `tessera up --restore` of it starts the job at in->step with these values and state. */
TS_MUST_CHECK ts_status ts_snap_import(struct ts_store *s, const struct ts_snap_import *in,
                                       uint8_t id[TS_STORE_ID_LEN], struct ts_err *err);

#endif
