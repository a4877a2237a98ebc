/* durable_replay.h - a shard's redo log read back (durable.h): the two passes over
 * ts_redo_replay that `tessera-shard --replay` (durable_show.c) and a shard starting from its
 * log (durable_restore.c) share.
 *
 * The first pass finds each table's last registration ("r/JOB/TABLE": a checkpoint writes the
 * tables' images before it carries the blobs over, so a table's records can come before its
 * registration in a generation) and counts the drops of its rows' key ("t/JOB/TABLE": its job
 * was released). The second applies the records of each table's last life, those after its
 * last drop, in order (an image resets, a step applies) into the table the caller's `make`
 * gives for that registration, and keeps each tensor's last registration ("R/JOB/ID") and
 * each partition's last image ("p/JOB/ID/INDEX"), a drop forgetting them. A table whose last
 * record is a drop is never made: its job ended.
 *
 * Ownership: the replay owns the registrations and images it keeps; durable_replay_free frees
 * them and, through `unmake`, the tables. Threads: one. */
#ifndef TS_SHARD_DURABLE_REPLAY_H
#define TS_SHARD_DURABLE_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include "ps/part.h"
#include "table/redo.h"
#include "table/table.h"
#include "tessera/v1/shard.pb-c.h"
#include "util/err.h"

/* A table: its last registration, its rows' drops, and the table made for it. */
struct durable_rtable {
    char key[TS_REDO_KEY_MAX + 1];   /* "t/JOB/TABLE" */
    uint8_t *reg;                    /* the packed RegisterTableRequest; NULL: none logged */
    size_t reg_len;
    uint32_t drops, dropped;         /* drops of the key in the log, and passed so far */
    struct ts_table *t;              /* `make`'s, once a record of its last life came */
    void *owner;                     /* `make`'s, for `unmake` */
    struct ts_job job;               /* `make`'s, where it makes the table under its own */
    uint64_t records;
};

/* A tensor: its last registration and each partition's last image (NULL: none). */
struct durable_rtensor {
    char key[TS_REDO_KEY_MAX + 1];   /* "JOB/ID" */
    Tessera__V1__RegisterTensorRequest *req;
    uint32_t nparts;
    uint8_t **image;                 /* by index: the blob (8-byte header, then the image) */
    size_t *image_len;
    float *values;                   /* durable_show.c's: the values, where all are here */
    uint64_t version;                /* durable_show.c's: the lowest of its partitions' */
};

struct durable_replay {
    struct durable_rtable *tables;
    size_t ntables, tables_cap;
    struct durable_rtensor *tensors;
    size_t ntensors, tensors_cap;
    /* Makes e's table (e->t, and e->owner) from req, its last registration; unmake frees
     * what make made (NULL: nothing to free). */
    ts_status (*make)(void *ctx, struct durable_rtable *e,
                      const Tessera__V1__RegisterTableRequest *req, struct ts_err *err);
    void (*unmake)(void *ctx, struct durable_rtable *e);
    void *ctx;
    unsigned what;   /* durable_replay_read's */
};

/* What a read takes from the log: the tables (then make must be set), the tensors, both. */
#define DURABLE_TABLES 1u
#define DURABLE_TENSORS 2u

/* Both passes over redo's log into rp, taking what `what` says; *got the log's figures (may
 * be NULL). Read the tensors, then the tables, or both at once; not one twice. */
ts_status durable_replay_read(struct ts_redo *redo, struct durable_replay *rp, unsigned what,
                              struct ts_redo_replayed *got, struct ts_err *err) TS_MUST_CHECK;
void durable_replay_free(struct durable_replay *rp);

/* A job as js describes it. */
ts_status durable_job_of(const Tessera__V1__JobSpec *js, struct ts_job *j,
                         struct ts_err *err) TS_MUST_CHECK;
uint64_t durable_numel(const Tessera__V1__TensorSpec *s);
/* The generation (the job's rollbacks) an image's 8-byte header names. */
uint32_t durable_image_generation(const uint8_t *blob);

#endif
