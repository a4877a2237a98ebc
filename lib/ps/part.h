/* part.h - one parameter partition: its values, optimizer state, version, and the gradient
 * sum of the step in progress.
 *
 * Why a module: a shard holds many of these, and `tessera train --local` holds all of them in
 * one process. Both must apply steps with the very same code for exact mode to give the same
 * bits, so the aggregation and update logic lives here once.
 *
 * BSP: version v means v updates applied. A push carries (rank, step); it is accepted only for
 * step == version, once per rank. When all `workers` ranks have pushed, the sum divided by the
 * job's global batch goes through the optimizer once and the version becomes v + 1; pullers
 * waiting for it wake up. In exact mode pushes are fixed-point int64 sums (lib/tensor), summed as
 * integers, so arrival order never matters. A bad push (wrong length or encoding, stale step,
 * a rank pushing twice, overflow) is refused with nothing changed.
 * Ownership: ts_part_create returns a partition freed with ts_part_free.
 * Threads: all functions lock the partition; ts_part_wait blocks. */
#ifndef TS_PS_PART_H
#define TS_PS_PART_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h"
#include "util/err.h"

/* Encodings of a push payload (values of tessera.v1.Encoding). */
#define TS_ENC_RAW 0            /* float32 sums */
#define TS_ENC_FIXED 5          /* int64 fixed-point sums (exact mode) */
#define TS_JOB_MAX_WORKERS 1024

struct ts_job {
    char id[65];
    uint32_t workers;
    bool exact;
    struct ts_optim_cfg optim;
    char optimizer[128];        /* the spec it was parsed from, for comparisons */
    double batch;
};

/* Validates and fills a job; errors name the field (job.id, job.workers, job.batch,
 * job.optimizer). */
ts_status ts_job_init(struct ts_job *j, const char *id, uint32_t workers, bool exact,
                      const char *optimizer, double batch, struct ts_err *err) TS_MUST_CHECK;
/* Same id, workers, mode, optimizer and batch. */
bool ts_job_equal(const struct ts_job *a, const struct ts_job *b);

struct ts_part {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const struct ts_job *job;   /* borrowed: outlives the partition */
    uint32_t tensor_id, index;
    uint64_t offset, len;       /* elements of the tensor */
    uint64_t version;
    float *value;               /* len */
    float *state;               /* ts_optim_state_len * len */
    int64_t *acc_fixed;         /* exact mode */
    float *acc_f32;             /* otherwise */
    float *grad;                /* scratch: one block of the applied gradient */
    uint8_t *pushed;            /* per rank: pushed this step */
    uint32_t npushed;
    /* Snapshot capture (ts_part_arm): a copy of value and state taken when version reaches
     * snap_step, so that training goes on while the copy is written out. */
    bool snap_armed, snap_ready;
    uint64_t snap_step;
    float *snap_value, *snap_state;
};

/* Creates partition `index` ([offset, offset+len) of tensor `name`) and initialises its values
 * with lib/tensor's deterministic initializer. */
ts_status ts_part_create(const struct ts_job *job, uint32_t tensor_id, const char *name,
                         uint32_t index, uint64_t offset, uint64_t len, const char *init,
                         uint64_t seed, uint64_t fan_in, uint64_t fan_out, struct ts_part **out,
                         struct ts_err *err) TS_MUST_CHECK;
void ts_part_free(struct ts_part *p);

/* Adds rank's gradient sum for `step`; payload is len int64 (TS_ENC_FIXED) or len float
 * (TS_ENC_RAW) in little-endian. *applied is set when this push completed the step. */
ts_status ts_part_push(struct ts_part *p, uint32_t rank, uint64_t step, unsigned encoding,
                       const void *payload, size_t bytes, bool *applied,
                       struct ts_err *err) TS_MUST_CHECK;

/* Waits up to ms for version >= want and sets *version. TS_ETIMEDOUT when it did not come
 * (a worker is missing); TS_ECANCELLED as soon as *cancel (if not NULL) turns true.
 * After it, p->value may be read without the lock until the calling rank pushes again: under
 * BSP the next update needs that push (the shard sends pulls straight from p->value). */
ts_status ts_part_wait(struct ts_part *p, uint64_t want, int ms, const atomic_bool *cancel,
                       uint64_t *version, struct ts_err *err) TS_MUST_CHECK;
/* ts_part_wait, then a copy of the values into out (len floats) under the lock. */
ts_status ts_part_read(struct ts_part *p, uint64_t want, int ms, float *out, uint64_t *version,
                       struct ts_err *err) TS_MUST_CHECK;

/* Snapshots. ts_part_arm asks for a copy of the values and optimizer state as they are at
 * version `step`: taken at once if the partition is there, else by the push that applies
 * that step. TS_ESTATE (nothing armed) if the partition is already past step; arming again
 * replaces an earlier arm. ts_part_captured waits up to ms for the copy; once it returns
 * true, snap_value and snap_state may be read without the lock until ts_part_disarm, which
 * frees them (call it before ts_part_free, or let ts_part_free do it). */
ts_status ts_part_arm(struct ts_part *p, uint64_t step, struct ts_err *err) TS_MUST_CHECK;
bool ts_part_captured(struct ts_part *p, int ms);
void ts_part_disarm(struct ts_part *p);
#endif
