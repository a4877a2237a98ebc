/* part.h - one parameter partition: its values, optimizer state, version, and the gradient
 * sum of the step in progress.
 *
 * Why a module: a shard holds many of these, and `tessera train --local` holds all of them in
 * one process. Both must apply steps with the very same code for exact mode to give the same
 * bits, so the aggregation and update logic lives here once.
 *
 * BSP: version v means v updates applied. A push carries (rank, step); it is accepted only for
 * step == version, once per rank (a combined push counts as each of the slots, or ranks, it
 * names: ts_push.slots). When all `workers` ranks have pushed, the sum divided by the
 * job's global batch goes through the optimizer once and the version becomes v + 1; pullers
 * waiting for it wake up. In exact mode pushes are fixed-point int64 sums (lib/tensor), summed as
 * integers, so arrival order never matters. A bad push (wrong length or encoding, stale step,
 * a rank pushing twice, overflow) is refused with nothing changed.
 * Other modes (docs/modes.md): REDUCE aggregates as BSP but keeps no parameters: the version's
 * "values" are the reduced gradient (sum / batch) that the workers feed their own optimizer.
 * SSP and ASP apply each push on arrival (version counts pushes applied); each rank pushes its
 * steps in order (clock[rank] is its next step), and a pull by a rank at clock c waits until
 * the slowest rank's clock is at least c - staleness (SSP) or not at all (ASP).
 * Float pushes may be compressed (lib/codec); a step whose sum is not finite (an fp16 overflow,
 * with loss scaling) is skipped: the values stay, the version moves on, and every rank's next
 * pull says so (ts_pull_info.overflow).
 * Assignments (BSP only; ts_push.assign): a step may set the values instead of updating them.
 * Every rank pushes the step as an assignment, one of them (rank 0 by convention) with the new
 * values, the others with no payload; when all have, version v + 1 holds those values (none
 * given: v's), the optimizer state stays and no optimizer runs. That is how a trainer starts
 * from its own model's weights (initializer "assigned": zeros until the assignment of step 0)
 * and loads new values mid-run, as one versioned change every rank pulls; an assigned step
 * with no values leaves a frozen parameter exactly as it was.
 * Update count: the partition counts the steps that went through its optimizer (`updates`,
 * ts_part_updates), and update k + 1 gets t = k + 1 (Adam's bias correction). A step skipped
 * for a non-finite sum counts (its t is spent, as it always was); an assignment does not,
 * unless it sets the count (ts_push.has_updates: a checkpoint's resume). Without assignments
 * past step 0 the count is the version (minus the assignment of step 0 of a tensor initialised
 * "assigned"), the t every update had before the count existed. The count travels with the
 * state: images, snapshots (a manifest without it restores as version - that assignment),
 * rollbacks and ts_part_read_state.
 * Clipping by global norm (BSP only; clip.c, docs/training.md "Clipping"): a step whose
 * pushes say `hold` is summed but not applied. Once every rank has pushed it, the partition
 * holds the sum of squares of its averaged gradient (double, in element order), which
 * ts_part_norm gives; each rank then adds every partition's (tensor by tensor, partition by
 * partition: the same order and the same bits for any worker and shard count), computes
 * coef = min(1, max_norm / (sqrt(sum) + 1e-6)) and pushes an `apply` carrying it. When every
 * rank has, the update runs on the averaged gradient times coef: torch's clip_grad_norm_ of
 * DDP's averaged gradient. The ranks' coefficients must agree bit for bit.
 * Ownership: ts_part_create returns a partition freed with ts_part_free.
 * Threads: all functions lock the partition; ts_part_pull blocks. */
#ifndef TS_PS_PART_H
#define TS_PS_PART_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "tensor/tensor.h"
#include "util/err.h"
#include "util/names.h"

/* Encodings of a push payload (values of tessera.v1.Encoding). */
#define TS_ENC_RAW 0            /* float32 sums */
#define TS_ENC_FIXED 5          /* int64 fixed-point sums (exact mode) */
#define TS_ENC_FIXED_F32 6      /* exact mode: one float32 gradient, which the shard rounds to
                                 * fixed point (ts_fixed_from_f32's bits): half the bytes */
#define TS_JOB_MAX_WORKERS 1024
#define TS_SYNC_MAX 1000000     /* the longest sync period of a tensor, in steps */

/* Training modes (values of tessera.v1.TrainMode). */
enum ts_mode { TS_MODE_BSP = 1, TS_MODE_SSP = 2, TS_MODE_ASP = 3, TS_MODE_REDUCE = 4 };
/* "bsp", "ssp", "asp", "reduce" (NULL or "": bsp); TS_EINVAL names the choices. */
ts_status ts_mode_parse(const char *s, enum ts_mode *out, struct ts_err *err) TS_MUST_CHECK;
const char *ts_mode_name(enum ts_mode m);   /* static storage; "unknown" */

struct ts_job {
    char id[TS_JOB_ID_MAX + 1];
    uint32_t workers;
    bool exact;
    struct ts_optim_cfg optim;
    char optimizer[128];        /* the spec it was parsed from, for comparisons */
    double batch;
    enum ts_mode mode;          /* ts_job_init: BSP */
    uint32_t staleness;         /* SSP's bound */
};

/* Validates and fills a job; errors name the field (job.id, job.workers, job.batch,
 * job.optimizer). */
ts_status ts_job_init(struct ts_job *j, const char *id, uint32_t workers, bool exact,
                      const char *optimizer, double batch, struct ts_err *err) TS_MUST_CHECK;
/* Sets the mode. TS_EINVAL (job.mode) for an unknown mode, or SSP/ASP with exact mode: their
 * updates apply in arrival order, which exact mode exists to rule out. */
ts_status ts_job_set_mode(struct ts_job *j, enum ts_mode mode, uint32_t staleness,
                          struct ts_err *err) TS_MUST_CHECK;
/* Same id, workers, exactness, optimizer, batch, mode and staleness. */
bool ts_job_equal(const struct ts_job *a, const struct ts_job *b);

/* A partition: opaque outside lib/ps (its fields are in part_internal.h). */
struct ts_part;

/* Bytes of memory ts_part_create allocates for a partition of len elements of job (values
 * included, even where the caller provides them: they are memory all the same). A shard
 * checks its budget with it before creating anything. */
uint64_t ts_part_mem(const struct ts_job *job, uint64_t len);
/* Creates partition `index` ([offset, offset+len) of tensor `name`) and initialises its values
 * with lib/tensor's deterministic initializer. storage: NULL to allocate the values here, or
 * len floats of the caller's (a shard's shared region, which co-located workers map) that
 * must outlive the partition; ts_part_free leaves them alone. */
ts_status ts_part_create(const struct ts_job *job, uint32_t tensor_id, const char *name,
                         uint32_t index, uint64_t offset, uint64_t len, const char *init,
                         uint64_t seed, uint64_t fan_in, uint64_t fan_out, float *storage,
                         struct ts_part **out, struct ts_err *err) TS_MUST_CHECK;
void ts_part_free(struct ts_part *p);

/* The tensor's sync period (>= 1; 0 counts as 1): the applied gradient is the sum divided by
 * batch * sync_every. Set before the first push. */
void ts_part_set_sync(struct ts_part *p, uint32_t sync_every);

/* One push: rank's gradient sum for `step`. payload is len int64 (TS_ENC_FIXED), len float
 * (TS_ENC_RAW, TS_ENC_FIXED_F32) or a lib/codec encoding of len floats (float jobs),
 * little-endian; the values
 * were multiplied by 2^scale_exp (loss scaling; every rank's push of a BSP step must agree). */
struct ts_push {
    uint32_t rank;
    uint64_t step;
    unsigned encoding;
    int scale_exp;              /* -126..127 */
    const void *payload;
    size_t bytes;
    /* Sent again after a failover (docs/replication.md): a step already applied, or already
     * pushed by this rank (BSP, REDUCE), or below the rank's clock (SSP, ASP), is a
     * duplicate, acknowledged and not added. */
    bool retry;
    /* The job's rollbacks the sender knows of: a push made before the partition went back to
     * a snapshot (ts_part_rollback) is refused with TS_EROLLBACK, nothing changed. */
    uint32_t gen;
    /* Who sent it: the worker's member id as its connection proved it (or claimed it,
     * where the data plane is not authenticated); 0: not known. And the transport's checksum
     * of the whole payload where it verified one (0: none). For "Duplicates" below. */
    uint32_t member;
    uint64_t payload_sum;
    /* A combined push (BSP, docs/scheduler.md): the sum of several slots' gradients, bit k
     * set for slot k (so at most 64 slots), rank the lowest of them; 0: rank's alone. The
     * partition counts each slot of it. Exact mode takes it as int64 only (TS_ENC_FIXED): a
     * float sum of slots would not round as each slot's floats do. A retry whose slots were
     * all counted is a duplicate; one of which only some were (their owner changed during
     * the step, and another worker pushed them) is refused TS_ESLOTS, nothing added: the
     * sender asks for its slots and pushes them one by one. */
    uint64_t slots;
    /* An assignment (above): payload is len float32 values (TS_ENC_RAW, in exact mode too),
     * or none (bytes 0) from a rank that takes part without values. A step is all
     * assignments or all gradients; at most one push of it carries values. No slots, no loss
     * scale, no sync period; BSP only (TS_ENOTSUP names the mode). */
    bool assign;
    /* An assignment with the optimizer's state too: the payload is the len values, then the
     * state, ts_optim_state_len floats per element laid out as the partition keeps it (each
     * component's len floats in turn); values required. A checkpoint's resume. */
    bool state;
    /* An assignment with values may set the update count too (above): the partition's count
     * becomes `updates` with the step, so that the next update is t = updates + 1 (the count
     * the assigned state was accumulated over; a checkpoint's, from ts_part_read_state). Not
     * set: the count stays the partition's own. */
    bool has_updates;
    uint64_t updates;
    /* The update's learning rate (0: the job optimizer's) and whether weight decay is off for
     * it: a trainer's schedule and parameter groups. Positive and finite; every push of a BSP
     * step must agree (the step's update is one); SSP and ASP take each push's. */
    float lr;
    bool no_decay;
    /* Clipping (above): hold: a gradient push of a clipped step, summed and not applied (every
     * push of the step says it or none; no slots, no assignment). apply: the rank's word that
     * the held step may be applied with its gradient times coef (0 <= coef <= 1, the same
     * from every rank), once this rank pushed the step; no payload. A retry of an apply
     * already counted with the same coef is a duplicate; with another coef, TS_EPERM. */
    bool hold;
    bool apply;
    float coef;
};
/* The slots a push counts as: its mask, or its rank alone. */
static inline uint32_t ts_push_nslots(const struct ts_push *in)
{
    return in->slots ? (uint32_t)__builtin_popcountll(in->slots) : 1;
}
/* Adds a push. *applied is set when this push completed (BSP, REDUCE) or made (SSP, ASP) an
 * update; a duplicate retry (above) returns TS_OK with nothing changed.
 * Duplicates: the partition remembers each slot's last counted push (a keyed digest, lib/ps/
 * mark.c says what it covers). A push of a slot and step already counted, retry or not, of
 * good form (rank, encoding, length) that differs from the one counted is refused with
 * TS_EPERM, nothing added: a real retry carries
 * the same bytes, so a difference is a forged push or a broken worker, and neither may pass
 * silently, whichever came first. Not compared (acknowledged as duplicates, as before): a
 * step no longer remembered (an older one, or one whose pushes an image or a rollback
 * dropped), a slot pushed alone after a combined push of it (or the reverse), and in float
 * mode a push from another member than the one counted (an elastic slot that changed hands,
 * whose new owner may compute other float bits: the shard checks that the sender owns or
 * recently owned the slot; in exact mode every owner computes the same bits, so they are
 * compared). */
ts_status ts_part_push(struct ts_part *p, const struct ts_push *in, bool *applied,
                       struct ts_err *err) TS_MUST_CHECK;

/* The step the partition is at: its version (BSP, REDUCE), the slowest rank's clock (SSP,
 * ASP, where the version counts pushes). What a registering worker starts from. */
uint64_t ts_part_step(struct ts_part *p);
/* The steps the partition spans: *lo = *hi = its version times its sync period (BSP, REDUCE:
 * the version counts syncs), or the slowest and the fastest rank's clocks (SSP, ASP). */
void ts_part_steps(struct ts_part *p, uint64_t *lo, uint64_t *hi);

/* Where the partition lies in its tensor (elements) and its index there: fixed when it is
 * created, so read without the lock. */
uint32_t ts_part_index(const struct ts_part *p);
uint64_t ts_part_offset(const struct ts_part *p);
uint64_t ts_part_len(const struct ts_part *p);
/* The version now: updates applied (BSP, REDUCE) or pushes applied (SSP, ASP). */
uint64_t ts_part_version(struct ts_part *p);
/* The update count now (above, "Update count"): the steps its optimizer applied to the state
 * it holds; its next update has t = this + 1. */
uint64_t ts_part_updates(struct ts_part *p);
/* What a restore or rollback reads: the len values and the optimizer state (ts_optim_state_len
 * * len floats) into value and state, and the update count into *updates where the source
 * knows it (a snapshot's manifest); *updates arrives holding the count a source without one
 * implies, the version less the assignment of step 0 of an "assigned" tensor (what t was
 * before the count existed). */
typedef ts_status (*ts_part_load_fn)(void *ctx, float *value, float *state, uint64_t *updates,
                                     struct ts_err *err);
/* Restores a partition nobody uses yet: load writes its len values, its optimizer state and
 * its update count, then the partition is at step
 * `version`: its version becomes version / its sync period (BSP, REDUCE), or every rank's
 * clock becomes that (SSP, ASP, where the version becomes that times workers, the pushes
 * that took it there). load's failure is returned,
 * with the partition to be freed by the caller. */
ts_status ts_part_restore(struct ts_part *p, uint64_t version, ts_part_load_fn load, void *ctx,
                          struct ts_err *err) TS_MUST_CHECK;
/* The same for a partition in use, when its job goes back to a snapshot (docs/replication.md,
 * "Rollback"), the generation-th time: the step in progress is dropped (pushes summed so far,
 * which ranks pushed, overflow flags), the partition is at step `version` as above and what
 * pulls may see with it, and waiting pulls wake. Pushes and images of an older generation
 * are refused from then on (ts_push.gen), even one that was on its way while this ran. On
 * load's failure the values may be part-written: the caller must not
 * serve the partition until a rollback succeeds. */
ts_status ts_part_rollback(struct ts_part *p, uint64_t version, uint32_t generation,
                           ts_part_load_fn load, void *ctx, struct ts_err *err) TS_MUST_CHECK;
/* The len values in place. Read them only while they cannot change: in BSP and REDUCE, after
 * this rank's ts_part_pull without a copy returned and before this rank pushes again (the
 * next update needs that push). Anything else copies with ts_part_pull. */
const float *ts_part_values(const struct ts_part *p);
/* Copies the optimizer's state at `version` (ts_optim_state_len * len floats, each component's
 * len in turn) into out, and its update count into *updates (if not NULL): TS_ESTATE unless
 * the partition is at that version (BSP; a checkpoint reads it between a step's pull and the
 * next push), TS_ENOTSUP in another mode. */
ts_status ts_part_read_state(struct ts_part *p, uint64_t version, float *out, uint64_t *updates,
                             struct ts_err *err) TS_MUST_CHECK;

/* Per-rank figures of SSP and ASP, folded over a job's partitions by ts_part_fold_ranks: the
 * lowest clock (next step) of each rank, the highest staleness it saw at its pulls (last and
 * most), and the most steps skipped for a non-finite sum. Start clock at UINT64_MAX and the
 * others at 0; n is the ranks the arrays hold (0 where the mode keeps no clocks). */
struct ts_part_ranks {
    uint32_t n;
    uint64_t *clock, *stale_last, *stale_max;
    uint64_t skipped;
};
void ts_part_fold_ranks(struct ts_part *p, struct ts_part_ranks *r);

/* What a pull saw. */
struct ts_pull_info {
    uint64_t version;           /* the version of the values returned */
    uint64_t staleness;         /* SSP/ASP: steps the slowest rank was behind the puller */
    bool overflow;              /* a step was skipped since this rank's last pull */
};
/* A pull by rank: BSP and REDUCE wait for version >= want; SSP and ASP take want as the rank's
 * clock and wait as the mode says (see above). Then, with out: a copy of the values into out
 * (len floats) under the lock; without (BSP and REDUCE only): ts_part_values may be read in
 * place until the rank pushes again, since the next update needs that push (the shard sends
 * pulls straight from them). gen: the job's rollbacks the puller works after (ts_push.gen; 0
 * where the job never went back): TS_EROLLBACK at once, or as soon as ts_part_rollback runs
 * under the wait, where it is not the partition's. TS_ETIMEDOUT after ms, TS_ECANCELLED as
 * soon as *cancel (if not NULL) is not 0 (the caller's reasons, as bits); TS_EINVAL for a
 * rank out of range or SSP/ASP without out. */
ts_status ts_part_pull(struct ts_part *p, uint32_t rank, uint64_t want, uint32_t gen, int ms,
                       const atomic_uint *cancel, float *out, struct ts_pull_info *info,
                       struct ts_err *err) TS_MUST_CHECK;

/* Clipping (above): the sum of squares of the averaged gradient of the held step `step`,
 * into *sumsq, once every rank has pushed it (waiting as ts_part_pull does: gen, ms, cancel).
 * TS_ESTATE if the partition is past that step, or the step is not held (its pushes did not
 * say hold); TS_EINVAL for a rank out of range or a job not in bsp. */
ts_status ts_part_norm(struct ts_part *p, uint32_t rank, uint64_t step, uint32_t gen, int ms,
                       const atomic_uint *cancel, double *sumsq, struct ts_err *err) TS_MUST_CHECK;

/* Replication (docs/replication.md): a chain of shards holds each partition; the head takes
 * the pushes and sends its state down the chain after each update. In BSP and REDUCE a pull
 * may see an update only once the chain's tail holds it; in SSP and ASP, whose pulls read
 * whatever is applied, the push is acknowledged only then.
 *
 * An image is the partition's whole state at one version: the version, the values, the
 * optimizer state and its update count, the count of skipped steps, each rank's overflow not
 * yet reported, each rank's clock (SSP, ASP), and the job's rollbacks the state comes after
 * (its generation: a follower that went back to a snapshot since refuses an image taken
 * before, TS_EROLLBACK).
 * It is meant for a peer running the same build (host byte order, no conversion). Its header
 * is TS_PART_IMAGE_HDR bytes; the len float values follow it. */
#define TS_PART_IMAGE_HDR 80
size_t ts_part_image_bytes(const struct ts_part *p);
/* Copies the image at the current version into buf (cap >= ts_part_image_bytes), under the
 * lock; *version receives its version. */
ts_status ts_part_image(struct ts_part *p, void *buf, size_t cap, uint64_t *version,
                        struct ts_err *err) TS_MUST_CHECK;
/* The image at the current version without copying the values and state: pieces[0..4) are
 * the header, the values and the state in place, and the overflow flags, the header and
 * flags written to small (TS_PART_IMAGE_SMALL bytes, the caller's), ts_part_image's bytes
 * once joined. BSP and REDUCE only (TS_EINVAL otherwise: SSP and ASP change the values
 * under it, so their image is copied with ts_part_image), and only between the update that
 * made the version and its ts_part_publish, while the partition holds it: no rank can pull
 * that version yet, so none can push the next step, and the values stay as they are. */
#define TS_PART_IMAGE_SMALL (TS_PART_IMAGE_HDR + TS_JOB_MAX_WORKERS)
ts_status ts_part_image_pieces(struct ts_part *p, void *small, struct iovec pieces[4],
                               uint64_t *version, struct ts_err *err) TS_MUST_CHECK;
/* Makes p hold the image buf[0..n) (TS_EROLLBACK, nothing changed, for an image of another
 * generation than p's: taken before p's job went back to a snapshot). TS_EINVAL (naming the
 * field) for an image of a different partition, mode, worker count or optimizer, or of the
 * wrong size; TS_ESTATE if the image is older than p (a chain never goes back), except in SSP
 * and ASP, where the images of pushes applied one after another may overtake each other and
 * an older one is accepted as it is already held (TS_OK, nothing loaded); in all these cases
 * nothing changes. The same version again is accepted (a resend). Pushes p had taken
 * for its current step are dropped: a follower takes none, and a head that fails over starts
 * the step afresh, every rank pushing it again. The image's version is visible at once;
 * pullers wake up. */
ts_status ts_part_load_image(struct ts_part *p, const void *buf, size_t n,
                             struct ts_err *err) TS_MUST_CHECK;
/* The same with the values apart (a chain link that maps the sender's values, docs/
 * replication.md): buf[0..n) is the image without them (the header, then what follows the
 * values), and values its len floats. */
ts_status ts_part_load_image_split(struct ts_part *p, const void *buf, size_t n,
                                   const float *values, struct ts_err *err) TS_MUST_CHECK;
/* With hold on, an update applied by a push is not visible to pulls (they wait) until
 * ts_part_publish(p, v) with v at least its version: the chain holds it. Turning hold off
 * makes every applied version visible. In SSP and ASP pulls never wait for it (their bound
 * is on clocks, not versions); the hold then only records what the chain holds, which a
 * demoted head goes back to (ts_part_set_head). */
void ts_part_hold(struct ts_part *p, bool on);
void ts_part_publish(struct ts_part *p, uint64_t version);
/* Whether hold is on. */
bool ts_part_holding(struct ts_part *p);
/* Joining and failover (docs/replication.md): head false says this copy no longer heads its
 * chain. Pulls waiting in it and pushes to it then end with TS_ESTALE (refresh the map and
 * send the step to the new head), and an image loads if it is not older than the version
 * pulls could see (a demoted head drops the update its chain never acknowledged). Partitions
 * start as heads. */
void ts_part_set_head(struct ts_part *p, bool head);
/* A partition in use outside its owner's lock: its owner frees it only once unpinned. */
void ts_part_pin(struct ts_part *p);
void ts_part_unpin(struct ts_part *p);
bool ts_part_pinned(struct ts_part *p);
/* The partition's generation: set when it is created in a job rolled back before. */
void ts_part_set_generation(struct ts_part *p, uint32_t generation);
/* The newest version pulls may see. */
uint64_t ts_part_visible(struct ts_part *p);

/* Seeding (seed.c; docs/replication.md, "Reduce jobs that lose every copy"). A reduce
 * partition whose every copy was lost is created afresh and begun with ts_part_seed_begin:
 * until each of the job's ranks said which version of it it holds (the version of its last
 * pull), the partition has no version; pushes and pulls wait for it (a push says it for its
 * rank: a rank pushing step v pulled version v), and its image is TS_EUNAVAIL. Then it is at
 * the newest version said, with the values a rank sent for it (ranks behind pull them), or
 * zeros where no rank will pull that version, and an update count of that version (a reduce
 * job never assigns: its workers' optimizers counted every version). ts_part_seed is one
 * rank's word: its version and, if it pulled one, its values (len floats; NULL: none) and
 * whether that version was a skipped step. TS_OK and nothing done on a partition not seeding; TS_EINVAL (version) for
 * a version more than one apart from another rank's, TS_ECORRUPT (values) for values that
 * differ from another rank's of the same version, nothing changed. Should no rank have sent
 * the values a rank behind needs, pushes and pulls fail with TS_ESTATE, whose advice depends on
 * replicas (the map's copies of each partition, ShardMap.replicas). An image loaded ends
 * the seeding (a follower takes its state from its head). TS_EINVAL from seed_begin for a
 * partition of another mode. */
ts_status ts_part_seed_begin(struct ts_part *p, uint32_t replicas,
                             struct ts_err *err) TS_MUST_CHECK;
ts_status ts_part_seed(struct ts_part *p, uint32_t rank, uint64_t version, const float *values,
                       bool overflow, struct ts_err *err) TS_MUST_CHECK;
bool ts_part_seeding(struct ts_part *p);

/* Snapshots. ts_part_arm asks for a copy of the values and optimizer state as they are at
 * step `step`: taken at once if the partition is there, else by the push that applies that
 * step. In BSP with a sync period K the partition is at step s at version s / K; in SSP and
 * ASP when every rank has pushed its syncs below s (its clock is s / K): a push of a sync at
 * step s or later waits (at most 30 s) until the copy is taken. TS_EINVAL for REDUCE;
 * TS_ESTATE (nothing armed) for a step that is not a multiple of the sync period, or that the
 * partition is already past (in SSP and ASP, any rank's clock); arming again
 * replaces an earlier arm. ts_part_captured waits up to ms for the copy; once it returns
 * true, ts_part_capture gives it (len values, ts_optim_state_len * len floats of state, and
 * the update count that goes with them), the arrays to be read without the lock until
 * ts_part_disarm, which frees them (call it before ts_part_free, or let ts_part_free do it). */
ts_status ts_part_arm(struct ts_part *p, uint64_t step, struct ts_err *err) TS_MUST_CHECK;
/* Whether a copy of step is armed (taken or not). */
bool ts_part_armed(struct ts_part *p, uint64_t step);
bool ts_part_captured(struct ts_part *p, int ms);
void ts_part_capture(const struct ts_part *p, const float **value, const float **state,
                     uint64_t *updates);
void ts_part_disarm(struct ts_part *p);
#endif
