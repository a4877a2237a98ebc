/* part_internal.h - the fields of a partition, for lib/ps's own files only.
 *
 * Outside lib/ps a partition is opaque (part.h): the shard and the SDK read what they need
 * through accessors that take the lock where a field can change, so that replication can
 * change what a partition holds without touching its callers. */
#ifndef TS_PS_PART_INTERNAL_H
#define TS_PS_PART_INTERNAL_H

#include <stdatomic.h>

#include "ps/part.h"

struct ts_part {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const struct ts_job *job;   /* borrowed: outlives the partition */
    uint32_t tensor_id, index;
    uint64_t offset, len;       /* elements of the tensor */
    uint64_t version;
    float *value;               /* len; the caller's storage when !value_owned */
    bool value_owned;
    float *state;               /* ts_optim_state_len * len */
    /* The step's sum so far: set by its first push, added to by the others; the last push of
     * a raw float step is added on the way into apply() instead. Between steps it holds
     * leftovers, never read (no clearing pass). */
    int64_t *acc_fixed;         /* exact mode */
    /* Exact mode: the form acc_fixed's memory holds the step's sum in (enum ts_acc_form):
     * int64; the first push as it came, len floats (TS_ENC_FIXED_F32); or a sum of float
     * pushes as exact doubles. held_below: the held push is below ts_fixed_f32_bound(workers),
     * so that later float pushes can be summed with it without int64 (part.c). */
    uint8_t acc_form;
    bool held_below;
    float *acc_f32;             /* otherwise */
    float *grad;                /* scratch: one block of the applied gradient */
    uint8_t *pushed;            /* per rank: pushed this step */
    struct part_mark *marks;    /* per slot: its last counted push (mark.c) */
    uint32_t npushed;
    uint32_t sync_every;        /* the tensor syncs every this many steps: divisor batch * it */
    int scale_exp;              /* the step's loss scale is 2^scale_exp (pushes must agree) */
    bool check_finite;          /* a push this step could carry Inf/NaN (compressed, scaled) */
    /* The step in progress is an assignment (ts_push.assign), and the rank + 1 whose values it
     * holds (0: none yet), in the accumulator's memory as len floats. */
    bool assigning;
    uint32_t assign_from;
    float *assign_state;        /* the state an assignment gave (ts_push.state), or NULL */
    bool assign_counted;        /* ... and the update count it gave (ts_push.has_updates) */
    uint64_t assign_updates;
    /* The step's learning rate (0: the job's) and weight decay switch (ts_push.lr, no_decay),
     * set by its first push. */
    float lr;
    bool no_decay;
    /* The optimizer updates applied to the state held (part.h, "Update count"): the next one
     * is t = updates + 1. Counted by apply() (a skipped step too), set by an assignment that
     * gives one, an image, a restore, a rollback or a seed; never by other assignments. */
    uint64_t updates;
    /* The count a version implies where nothing says it (a snapshot written before the count
     * existed): the version plus this, -1 for a tensor initialised "assigned", whose step 0
     * is an assignment (ts_init_assigned), 0 otherwise. Fixed at creation. */
    int t_shift;
    /* Clipping (clip.c): the step in progress is held (its pushes said hold); held: every
     * rank pushed it, and sumsq is the sum of squares of its averaged gradient; the ranks
     * whose apply was counted (applied_by), how many, and the coefficient they gave. */
    bool holding, held;
    double sumsq;
    uint8_t *applied_by;
    uint32_t napplied;
    float coef;
    uint8_t *overflow;          /* per rank: a skipped step not yet reported to it */
    uint64_t skipped;           /* steps skipped for a non-finite sum */
    uint32_t gen;               /* the job's rollbacks its state comes after (ts_part_rollback) */
    uint64_t *clock;            /* SSP/ASP, per rank: its next step */
    uint64_t *stale_last, *stale_max; /* SSP/ASP, per rank: steps ahead of the slowest, at pulls */
    /* Snapshot capture (ts_part_arm): a copy of value and state taken when version reaches
     * snap_step, so that training goes on while the copy is written out. */
    /* Replication (replica.c): with hold set, pulls see an applied version only once
     * ts_part_publish says its chain holds it; `visible` is the newest such version. */
    bool hold;
    uint64_t visible;
    /* Joining (docs/replication.md): moved is set once this copy no longer heads its chain
     * (demoted, or dropped): waiting pulls and new pushes end with TS_ESTALE. pins: users of
     * the partition outside its owner's lock (ts_part_pin). */
    bool moved;
    atomic_uint pins;
    /* Seeding (seed.c): a reduce partition created afresh after every copy was lost learns
     * its version and values from its ranks; NULL otherwise. Pushes and pulls wait for it. */
    struct ts_seed *seed;
    bool snap_armed, snap_ready;
    uint64_t snap_step;
    float *snap_value, *snap_state;
    uint64_t snap_updates;      /* the update count that goes with the copy */
};

enum ts_acc_form { TS_ACC_I64, TS_ACC_HELD, TS_ACC_F64 };

/* mark.c: a slot's last counted push, to tell a push sent again from a different one. step1:
 * its step + 1 (0: none); sample: the keyed digest of its fields and payload; whole: the
 * transport's checksum of the whole payload (0: none); member: its sender (ts_push.member);
 * group: 0 for a push of the slot alone, else the lowest slot of the combined push + 1. */
struct part_mark {
    uint64_t step1, sample, whole;
    uint32_t member, group;
};

#define APPLY_BLOCK 4096      /* elements per block of apply(): 48 KiB of gradients and sums */

/* SSP and ASP: each push is an update, and each rank has its own clock. */
static inline bool async_mode(const struct ts_job *j)
{
    return j->mode == TS_MODE_SSP || j->mode == TS_MODE_ASP;
}

/* part.c, called with mu held: the step in progress is over (applied, or dropped by an image,
 * a rollback or a seed): no rank has pushed the next one, and it is not an assignment. */
void part_step_reset(struct ts_part *p);
/* part.c, called with mu held. part_apply: the step is complete, its update runs (scaled by
 * coef where the step is held: clip.c). part_divisors: what the step's sum is divided by, as
 * exact fixed point (fdiv) and as a float factor (inv), for part_block_grad. part_wait: waits
 * until a pull of version want may be answered, or (norm) until step want is held or the
 * partition is past it; TS_OK then, or why not (rollback, moved, cancelled, timed out). */
void part_apply(struct ts_part *p, uint32_t rank, const void *last, bool alone);
void part_divisors(const struct ts_part *p, double *fdiv, float *inv);
ts_status part_wait(struct ts_part *p, uint64_t want, bool norm, uint32_t gen, int ms,
                    const atomic_uint *cancel, struct ts_err *err) TS_MUST_CHECK;

/* clip.c, called with mu held. part_clip_check: a gradient push's hold agrees with its
 * step's (and the mode allows it). part_clip_hold: the last push of a held step came: the
 * sum of squares, and norm waiters woken. part_clip_apply: a rank's apply (checked, counted;
 * the update when it is the last one, *applied set). */
ts_status part_clip_check(const struct ts_part *p, const struct ts_push *in,
                          struct ts_err *err) TS_MUST_CHECK;
void part_clip_hold(struct ts_part *p);
ts_status part_clip_apply(struct ts_part *p, const struct ts_push *in, bool *applied,
                          struct ts_err *err) TS_MUST_CHECK;

/* access.c, called with mu held (or before anyone uses p): the update count that version
 * implies where nothing says it, version + t_shift (0 at least). */
uint64_t part_updates_implied(const struct ts_part *p, uint64_t version);

/* sum.c, called with mu held: the step's sum (its comments say more).
 * part_sums_finite: every element of the float sum is finite. part_fusable: whether the last
 * push of a step (`first` if it is the only one) can skip the accumulator and go straight
 * into apply (a float push that would pair is checked here, and refused on a bad value).
 * part_accumulate: adds a checked push to the sum, setting it on the step's first push; a
 * refusal changes nothing. part_to_i64: an exact sum kept as held floats or exact doubles
 * becomes int64, in place. part_block_grad: the gradient of elements [off, off + n) into
 * p->grad, the sum (with `last`: plus the fused last push, or it alone) divided by fdiv
 * (exact) or times inv (float). */
bool part_sums_finite(const struct ts_part *p);
ts_status part_fusable(const struct ts_part *p, const struct ts_push *in, bool first,
                       bool *fuse, struct ts_err *err) TS_MUST_CHECK;
ts_status part_accumulate(struct ts_part *p, const struct ts_push *in, bool first,
                          struct ts_err *err) TS_MUST_CHECK;
void part_to_i64(struct ts_part *p);
void part_block_grad(struct ts_part *p, const void *last, bool alone, uint64_t off, size_t n,
                     double fdiv, float inv);

/* mark.c, called with mu held. part_mark_set: a push was counted, for its slots.
 * part_mark_check: a duplicate of a counted push (same slots and step) is refused with
 * TS_EPERM when it can be compared with what was counted and differs. part_marks_clear: the
 * step's pushes were dropped (an image, a rollback, a seed). */
void part_mark_set(struct ts_part *p, const struct ts_push *in);
ts_status part_mark_check(const struct ts_part *p, const struct ts_push *in,
                          struct ts_err *err) TS_MUST_CHECK;
void part_marks_clear(struct ts_part *p);

/* seed.c, called with mu held and p->seed set: a push of rank's step says the rank holds
 * version step; it waits (at most 30 s) until every rank said, then TS_OK, or the
 * reason it cannot go on. part_seed_failed: every rank said, and the values of the newest
 * version were not among it. part_seed_error: why a wait for the seed ends. part_seed_drop:
 * an image replaces what the seed would have given. */
ts_status part_seed_push(struct ts_part *p, uint32_t rank, uint64_t step, struct ts_err *err);
bool part_seed_failed(const struct ts_part *p);
ts_status part_seed_error(const struct ts_part *p, struct ts_err *err);
void part_seed_drop(struct ts_part *p);

#endif
