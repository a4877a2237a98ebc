/* tessera.h - the Tessera client SDK, for trainers written in C.
 *
 * A trainer connects to a cluster (or runs everything in-process with master "local"),
 * registers its tensors, and then, step after step, pushes the gradient it computed and pulls
 * the parameters the shards produced. In exact mode gradients travel as fixed-point int64 sums
 * (tessera_to_fixed, tessera_fixed_add), which the shards add as integers: the parameters then
 * come out bit for bit the same for any number of workers and shards.
 *
 *     struct tessera_options o = TESSERA_OPTIONS_INIT;
 *     o.master = "127.0.0.1:7070", o.job = "mnist", o.rank = 0, o.workers = 2, o.exact = 1;
 *     o.optimizer = "momentum:lr=0.02", o.batch = 64;
 *     tessera *t;  struct tessera_error e;
 *     tessera_connect(&o, &t, &e);
 *     tessera_register(t, "fc1.weight", shape, 2, "he", seed, 784, 256, 0, &id, &e);
 *     tessera_pull(t, id, 0, w, &e);                      // version 0: the initial values
 *     for (step = 0; step < K; step++) {
 *         ... compute this rank's gradient sum into g ...
 *         tessera_step(t, step, grads, params, &e);     // push step, pull version step + 1
 *     }
 *     tessera_close(t);
 *
 * Every call returns 0 or an error code (TESSERA_E*, the values of lib/util/err.h's ts_status)
 * and fills *err with the code and a message naming what was wrong and what to do.
 * Threads: a tessera handle is used by one thread at a time; different handles are
 * independent. Memory: buffers passed in are the caller's and are not kept. */
#ifndef TESSERA_H
#define TESSERA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum tessera_code {
    TESSERA_OK = 0, TESSERA_EINVAL, TESSERA_ENOTFOUND, TESSERA_EEXIST, TESSERA_ESTATE,
    TESSERA_ESTALE, TESSERA_ETIMEDOUT, TESSERA_EUNAVAIL, TESSERA_ENOMEM, TESSERA_ECORRUPT,
    TESSERA_EIO, TESSERA_EAUTH, TESSERA_ENOTSUP, TESSERA_ENODEV, TESSERA_ECANCELLED,
    TESSERA_EINTERNAL,
    /* tessera_step: the job lost state (every copy of a partition) and the cluster rolled it
     * back to its last snapshot. The parameters given to tessera_step now hold that step's
     * values; train on from tessera_resume_step(). Not a failure. */
    TESSERA_EROLLBACK,
    /* tessera_step of an elastic job (docs/elastic.md): the slots of the job changed hands (a
     * worker died and its slot may be this worker's now, a worker came back for its own, or
     * this worker was declared dead and joined again). The parameters given to tessera_step
     * now hold the values of step tessera_resume_step(): compute the slots tessera_slots()
     * names at that step and go on from there. Not a failure. */
    TESSERA_ESLOTS,
    /* The caller is known but not allowed: its certificate or token lacks the right
     * (docs/security.md). */
    TESSERA_EPERM,
};

struct tessera_error {
    int code;
    char message[256];
};

/* The gRPC status code the services report a TESSERA_E* code as (gRPC's numbers: 3 is
 * INVALID_ARGUMENT, 14 UNAVAILABLE, ...; docs/architecture.md), and a gRPC code's name
 * ("INVALID_ARGUMENT"; static storage), for bindings and logs that speak gRPC's terms. */
int tessera_grpc_code(int code);
const char *tessera_grpc_code_name(int grpc_code);

/* A job's options. Start from TESSERA_OPTIONS_INIT, so that `size` says which version of this
 * struct the program was built with: a later SDK reads only the fields that version had and
 * takes the defaults for the rest (NCCL's config struct). size 0 means this header's struct.
 * Every field has a row in the options' schema (tessera_options_schema), which is also where
 * tessera-worker's flags and the Python Client's keywords come from. */
struct tessera_options {
    size_t size;             /* sizeof(struct tessera_options) of the caller's header */
    const char *master;      /* "host:port"; "local" (or NULL): everything in this process */
    const char *job;         /* job id, 1-64 of [A-Za-z0-9._-]; NULL: "default" */
    unsigned rank, workers;  /* this trainer's rank among `workers` (>= 1) */
    int exact;               /* 1: fixed-point, order-independent sums */
    const char *optimizer;   /* "sgd", "momentum", "adam", with ":lr=...,..."; NULL: momentum */
    double batch;            /* the global batch: the summed gradient is divided by it */
    const char *transport;   /* NULL: the best the shard and this host share; "tcp", "shm" */
    int timeout_ms;          /* one push or pull (a pull waits for the slowest worker);
                              * 0: $TESSERA_TIMEOUT_MS, else 120000 */
    uint64_t data_seed;      /* the data schedule's seed and micro-batch size: recorded in */
    unsigned micro_batch;    /* snapshots, checked on restore (0: not recorded) */
    /* Modes, compression and sync periods (docs/modes.md). NULL or 0 keeps the default. */
    const char *mode;        /* "bsp" (default), "ssp", "asp" or "reduce" */
    unsigned staleness;      /* ssp: a worker computes step c only once the slowest worker has
                              * pushed step c - staleness - 1 (0: BSP's bound) */
    const char *compress;    /* gradients on the wire: "none" (default), "fp16", "bf16", "int8",
                              * "topk:RATIO"; or a list "TENSOR=CODEC,...[,CODEC]" where an
                              * unnamed CODEC is the default for the other tensors */
    const char *sync_every;  /* "TENSOR=K,...": TENSOR is pushed and pulled every K steps, its
                              * gradient summed locally in between (NULL: all every step) */
    int loss_scale;          /* enum tessera_loss_scale: dynamic loss scaling for fp16 pushes */
    int keep;                /* 1: once every worker has finished, the shards keep the job
                              * (idle) for a later run of it or a snapshot, until the master's
                              * --idle-job-ms; 0: the job is freed when its workers finish */
    unsigned restarts;       /* times a supervisor restarted the worker this one replaces
                              * (tessera status shows it; 0: a first start) */
    int elastic;             /* 1: this trainer computes whatever slots it is given
                              * (tessera_slots, tessera_step_slots), so the job outlives a dead
                              * worker (docs/elastic.md); bsp, no sync periods, no top-k. Every
                              * worker of a job says the same. */
    int balance;             /* elastic, more slots (`workers`) than start_workers: the master
                              * moves slots between live workers by their measured compute
                              * time per slot (docs/scheduler.md) */
    unsigned start_workers;  /* elastic: the workers the job starts with, below `workers` (0:
                              * all): the slots of ranks start_workers and above go to them
                              * until a worker joins for that rank (docs/elastic.md,
                              * "Joining"). The worker that starts the job decides. */
    int exact_push;          /* exact mode: enum tessera_exact_push, what tessera_push,
                              * tessera_step and tessera_buffers' grad take */
    const char *pull_compress; /* parameters on the wire, as deltas against this worker's
                              * copy (docs/compression.md, "Pulls"): "none" (default), "fp16",
                              * "bf16", "int8", "topk:RATIO", or a list as for compress. Not
                              * in exact mode, reduce mode or elastic jobs; over tcp only
                              * (shared-memory pulls go in full) */
    int call_timeout_ms;     /* a control call to the master or a shard (registering, status);
                              * a tensor's registration gets this plus 8 s per GiB of the
                              * tensor. 0: $TESSERA_CALL_TIMEOUT_MS, else 5000 */
    int dynamic;             /* the data comes from the master's queue (tessera_claim_work;
                              * docs/scheduler.md, "Dynamic assignment"): asp or ssp. In ssp
                              * the queue bounds staleness over its units and the shards run
                              * the job as asp, so ssp jobs need it to claim work */
};
#define TESSERA_OPTIONS_INIT { .size = sizeof(struct tessera_options) }

/* The options' schema: one row per field of struct tessera_options, in the struct's order.
 * tessera-worker's and `tessera train`'s flags, their --help, the flags `tessera train` hands
 * each worker and the Python Client's keywords are all made from these rows; a new option is
 * one row (lib/client/options.c) plus, if it combines with others, one rule in
 * tessera_options_check. Static storage. */
enum tessera_option_type {
    TESSERA_OPTION_STRING,  /* const char * */
    TESSERA_OPTION_LIST,    /* const char *: "NAME=VALUE,...[,DEFAULT]" (docs/modes.md) */
    TESSERA_OPTION_UINT,    /* unsigned, uint64_t or int (timeouts), 0..max */
    TESSERA_OPTION_BOOL,    /* int: 0 or 1 */
    TESSERA_OPTION_DOUBLE,  /* double, 0..max */
    TESSERA_OPTION_CHOICE,  /* int: the index of one of `choices` */
};
struct tessera_option {
    const char *name;        /* the field, as the SDK's messages name it: "pull_compress" */
    const char *keyword;     /* the Python Client's keyword ("compress_pull"); NULL: none */
    const char *flag;        /* the trainers' flag without "--" ("compress-pull"); NULL: none */
    int type;                /* enum tessera_option_type */
    unsigned long long max;  /* UINT, DOUBLE: the largest value */
    const char *choices;     /* CHOICE: the names, "|"-separated, in value order */
    const char *metavar;     /* the value in --help: "CODEC" */
    const char *help;        /* one line, with the default */
    size_t offset, bytes;    /* where the field is in struct tessera_options, and its size */
};
const struct tessera_option *tessera_options_schema(size_t *count);
/* Sets field `name` (a row's name, keyword or flag, with or without "--") from its text:
 * digits for UINT ("0x" too), a number for DOUBLE, 1/0/true/false for BOOL, a choice's name
 * or index for CHOICE. STRING and LIST values are borrowed: `value` must outlive o. Errors
 * (TESSERA_EINVAL) name `name` as given; o is unchanged then. */
int tessera_options_set(struct tessera_options *o, const char *name, const char *value,
                        struct tessera_error *err);
/* Field `row` of o as text into buf (cap bytes): 1 when it is set (not 0, NULL or ""), 0 when
 * it keeps its default (buf then ""). */
int tessera_options_get(const struct tessera_options *o, const struct tessera_option *row,
                        char *buf, size_t cap);
/* Every rule of the options that needs no cluster: each field's range and syntax, and how
 * they combine (elastic needs bsp, balance needs elastic, dynamic needs asp or ssp, no
 * compression in exact mode, ...). tessera_connect runs it first; tessera train and
 * tessera-worker run it before they start anything. TESSERA_OPTIONS_NAME_FLAGS: messages
 * name options by their flags ("--dynamic needs --mode asp or ssp"), else by field. */
#define TESSERA_OPTIONS_NAME_FLAGS 1
int tessera_options_check(const struct tessera_options *o, int how, struct tessera_error *err);
/* Whether a job with these options can be elastic (docs/elastic.md): bsp, no sync periods,
 * no top-k compression, no compressed pulls. Trainers that are elastic where they can be
 * (tessera-worker, tessera.torch) set elastic = this. */
int tessera_options_can_be_elastic(const struct tessera_options *o);

/* Where a launcher put this process (docs/launch.md). `tessera run`, torchrun, srun and a
 * Kubernetes indexed Job each start copies of one command line and tell each copy its place
 * in the environment; tessera_launch_env reads it, so the same program runs under any of them
 * and by hand. Each field takes the first variable of its list that is set and not empty:
 *   master      $TESSERA_MASTER
 *   job         $TESSERA_JOB, $TORCHELASTIC_RUN_ID (not "none"), "slurm-" $SLURM_JOB_ID
 *               ["." $SLURM_STEP_ID]
 *   rank        $TESSERA_RANK, $RANK, $SLURM_PROCID, $JOB_COMPLETION_INDEX
 *   workers     $TESSERA_WORKERS, $WORLD_SIZE, $SLURM_NTASKS
 *   local_rank  $LOCAL_RANK, $SLURM_LOCALID
 *   restarts    $TESSERA_RESTARTS, $TORCHELASTIC_RESTART_COUNT
 * A field none of them sets is NULL, -1 (rank, local_rank) or 0 (workers, restarts). The
 * strings point into the environment or into the struct: valid while both are. */
struct tessera_launch {
    const char *master, *job;
    int rank, workers, local_rank;
    unsigned restarts;
    const char *rank_from, *workers_from;   /* the variables that gave them (messages) */
    char job_buf[72];
};
/* Fills l from the environment. TESSERA_EINVAL, naming the variable, for a value that is not
 * a number in range (rank 0..1023, workers 1..1024), a rank not below the workers, or a job
 * id tessera_open would refuse; l is then not to be used. */
int tessera_launch_env(struct tessera_launch *l, struct tessera_error *err);

/* Exact mode's pushes (docs/exact-mode.md, "Float pushes"). FIXED: int64 fixed-point sums,
 * which the trainer makes with tessera_to_fixed / tessera_fixed_add_f32, e.g. over several
 * micro-batches. FLOAT: the trainer's one float gradient per step, which the shards round to
 * fixed point themselves: the same bits (rounding is a function of the float alone), half the
 * bytes on the wire and in memory, and no conversion in the trainer; a value the conversion
 * refuses (NaN, Inf, magnitude 2^31 or more) fails the push with TESSERA_EINVAL naming it.
 * Not with sync_every (a sum of several steps is kept in fixed point). */
enum tessera_exact_push {
    TESSERA_EXACT_PUSH_FIXED = 0,
    TESSERA_EXACT_PUSH_FLOAT = 1,
};

/* Dynamic loss scaling (GradScaler's defaults: 2^16 at first, halved when a step overflowed,
 * doubled after 2000 steps without overflow). A shard that finds NaN or Inf in a step's
 * aggregated fp16 gradient skips that step for the partition and says so in its reply; the
 * SDK then halves the scale. */
enum tessera_loss_scale {
    TESSERA_LOSS_SCALE_NONE = 0,   /* gradients are pushed as given */
    TESSERA_LOSS_SCALE_SDK = 1,    /* the SDK multiplies by tessera_loss_scale() before fp16 */
    TESSERA_LOSS_SCALE_CALLER = 2, /* the caller's gradients are already multiplied by
                                    * tessera_loss_scale() (it scaled its loss) */
};

typedef struct tessera tessera;

int tessera_connect(const struct tessera_options *o, tessera **out, struct tessera_error *err);
/* How this worker's part of the job ended, told to the master by tessera_close: failed 0 with
 * the final params_sha256 (64 hex digits; NULL or "" if not computed), or failed 1 with a
 * reason. A job fails when one worker fails; without this call a worker leaves finished. */
void tessera_set_result(tessera *t, int failed, const char *fingerprint_or_reason);
/* While a call waits for a shard's reply (a step waiting for the slowest rank), check(arg) is
 * called every 200 ms in the waiting thread; a nonzero answer ends the call with
 * TESSERA_ECANCELLED (the Python binding checks for Ctrl-C this way). Replies are then still
 * in flight, so every later push, pull or step fails with TESSERA_ECANCELLED too: close the
 * handle. A wait of more than 5 s logs, every 15 s, which ranks the step waits for (as the
 * master's status knows them). check NULL: none. Not for the two-thread exchange of links
 * that leave the host (its waits run in threads of the SDK's own). */
int tessera_set_interrupt(tessera *t, int (*check)(void *arg), void *arg);
void tessera_close(tessera *t);

/* Registers a float32 tensor (idempotent: every rank registers the same tensors in the same
 * order). init: "zeros", "normal:STD", "uniform:A", "xavier", "he", ... (lib/tensor).
 * partition_bytes 0: the SDK proposes a size: 4 MiB while every shard is on this host, else
 * about numel * 4 / (64 x shards) (docs/placement.md, "Partition size"); a tensor that
 * exists, or that the shards restore from a snapshot, keeps its own, and this worker takes
 * it. A size given here must be the tensor's. *id is the tensor's handle. */
int tessera_register(tessera *t, const char *name, const uint64_t *shape, int ndim,
                     const char *init, uint64_t seed, uint64_t fan_in, uint64_t fan_out,
                     uint64_t partition_bytes, int *id, struct tessera_error *err);
uint64_t tessera_numel(const tessera *t, int id);
/* The size tensor id is cut in: the partition_bytes it was registered with, or, where the
 * SDK proposed one, the tensor's own (docs/placement.md, "Partition size"). 0 for no such
 * id. */
uint64_t tessera_partition_bytes(const tessera *t, int id);
/* The version tensor id was at when registered: 0 for a fresh job, the snapshot's step when
 * the shards restored one (tessera up --restore). Training continues from that step. */
uint64_t tessera_version(const tessera *t, int id);
/* After tessera_step returned TESSERA_EROLLBACK or TESSERA_ESLOTS: the step to train next
 * (its parameters are in tessera_step's params). After any other call that returned
 * TESSERA_EROLLBACK (tessera_push, tessera_pull, a table call): the step the job went back
 * to, whose tensors the caller pulls (a pull that itself returns TESSERA_EROLLBACK: another
 * rollback came, pull at the new resume step). */
uint64_t tessera_resume_step(const tessera *t);

/* This rank's gradient sum of tensor id for `step` (the step whose parameters it used):
 * int64 fixed point in exact mode (float with exact_push float), float otherwise, numel
 * elements. */
int tessera_push(tessera *t, int id, uint64_t step, const void *grad,
                 struct tessera_error *err);
/* Makes the next push of tensor id (tessera_push, tessera_step, tessera_push_some,
 * tessera_step_some) an assignment instead of a gradient: version step + 1 of the tensor is
 * `values` (numel floats), not an optimizer update; its optimizer state stays. Every rank of
 * the job assigns the tensor at the same step, one of them with the values (rank 0 by
 * convention), the others with values NULL; NULL everywhere leaves the values exactly as they
 * were (a frozen parameter). The step's gradient for the tensor (grads[id]) is not read and
 * may be NULL. values is read when that push goes out (keep it alive and unchanged until it
 * returns); the tensor stays armed until a push of it succeeds. Mode bsp only (else
 * TESSERA_ENOTSUP), not in an elastic job (ENOTSUP), not for a tensor with a sync period
 * (EINVAL). A tensor registered with init "assigned" starts at zeros and takes its first
 * values from the assignment of step 0 (how tessera.torch starts from the model's weights);
 * its Adam step count starts there, as torch.optim's does. docs/training.md, "Assignments". */
int tessera_assign(tessera *t, int id, const float *values, struct tessera_error *err);
/* tessera_assign with the optimizer's state too (a checkpoint's resume), from the rank that
 * gives the values (the others call tessera_assign with NULL): state holds the optimizer's
 * floats per element, each component's numel in turn (momentum: 1, Adam: m then v; sgd:
 * none, state is then not read). Both are copied at once. The tensor's update count stays
 * its own (below). */
int tessera_assign_state(tessera *t, int id, const float *values, const float *state,
                         struct tessera_error *err);
/* tessera_assign_state that sets the tensor's update count too: the number of optimizer
 * updates the state was accumulated over, as tessera_pull_state_updates read it with the
 * checkpoint. The tensor's next update is then update `updates` + 1, its t in Adam's and
 * AdamW's bias correction, whatever steps this job took before: a resume continues the saved
 * run's count. (Without it, the count is the tensor's own in this job: assignments never
 * count, gradient steps do, a step skipped for a non-finite sum included.) For sgd, state is
 * not read and the count is set all the same. docs/training.md, "Assignments". */
int tessera_assign_state_updates(tessera *t, int id, const float *values, const float *state,
                                 uint64_t updates, struct tessera_error *err);
/* The optimizer's state of tensor id at `version` (the version this rank holds: after a step's
 * pull, before the next push) into out, laid out as tessera_assign_state takes it; nothing
 * for sgd. Mode bsp. */
int tessera_pull_state(tessera *t, int id, uint64_t version, float *out,
                       struct tessera_error *err);
/* tessera_pull_state, and the tensor's update count at `version` into *updates (required):
 * the optimizer updates applied to that state, what tessera_assign_state_updates takes back.
 * For sgd out is not written (may be NULL), and the count is read all the same. */
int tessera_pull_state_updates(tessera *t, int id, uint64_t version, float *out,
                               uint64_t *updates, struct tessera_error *err);
/* From the next push on, tensor id's updates use learning rate lr (0: the job optimizer's)
 * and, if weight_decay is 0, no weight decay (a parameter group's settings, a schedule's
 * learning rate); id -1: every registered tensor. The values travel with each push, so the
 * change is part of the step: every rank sets the same values before the same step (the
 * shards refuse a step whose pushes disagree, TESSERA_EINVAL naming lr), and exact mode stays
 * exact. lr must be finite and >= 0 (TESSERA_EINVAL). */
int tessera_set_lr(tessera *t, int id, float lr, int weight_decay, struct tessera_error *err);
/* The parameters of tensor id at `version` (waits for it, up to timeout_ms). */
int tessera_pull(tessera *t, int id, uint64_t version, float *out, struct tessera_error *err);
/* Pushes every registered tensor's gradient for `step`, then pulls every tensor at version
 * step + 1 into params[id], overlapping the shards. */
int tessera_step(tessera *t, uint64_t step, const void *const *grads, float *const *params,
                 struct tessera_error *err);
/* tessera_step with the averaged gradient clipped by its global norm, as torch's
 * clip_grad_norm_(max_norm) clips DDP's: every tensor's update uses gradient * coef, coef =
 * min(1, max_norm / (norm + 1e-6)), norm the 2-norm of the whole averaged gradient (every
 * tensor), which *total_norm receives (may be NULL). The norm is computed from the shards'
 * sums of squares, added in tensor and partition order, so every rank and any worker and shard
 * count (and --local) get the same coefficient; exact mode stays exact. A non-finite norm
 * does not clip. It costs one more round trip than tessera_step. Every rank clips the same
 * steps with the same max_norm (the shards refuse a step whose ranks disagree). Modes bsp and
 * reduce (whose workers clip the averaged gradient they pull, with the same bits), not
 * elastic or dynamic, no sync periods (TESSERA_EINVAL or TESSERA_ENOTSUP naming why); tensors
 * assigned in the step are not in the norm; max_norm finite and > 0. docs/training.md,
 * "Clipping by global norm". */
int tessera_step_clip(tessera *t, uint64_t step, const void *const *grads, float *const *params,
                      float max_norm, double *total_norm, struct tessera_error *err);

/* Elastic jobs (docs/elastic.md). A job of `workers` workers has that many slots: slot k is
 * the share of every step that rank k computes in a run where nothing fails (in the built-in
 * trainer, the micro-batches the schedule gives rank k). A worker owns its own rank's slot and,
 * after deaths, those the master handed it; whoever computes a slot, its gradient is the same
 * bits, so the parameters are too.
 * tessera_slots: the slots this worker owns now (ascending, at most max into slots); returns
 * how many. Without elastic, or before the master said otherwise: this worker's rank. */
size_t tessera_slots(tessera *t, uint32_t *slots, size_t max);
/* tessera_step for n slots: grads[k] holds slot slots[k]'s gradients (by tensor id). params:
 * as for tessera_step; in an elastic job they must hold the values of `step` when called
 * (the SDK keeps a copy, to recompute from after a death). */
int tessera_step_slots(tessera *t, uint64_t step, size_t n, const uint32_t *slots,
                       const void *const *const *grads, float *const *params,
                       struct tessera_error *err);
/* Elastic jobs: after a call other than tessera_step (a table's pull or push of `step`)
 * answered TESSERA_ESLOTS, with params (by tensor id) holding the values of `step` as pulled:
 * asks the master for this worker's slots and finds the step to go on from, as tessera_step
 * does before it returns TESSERA_ESLOTS (the same step, params kept; or, if the job went on
 * without this worker, a later one, pulled into params). Then compute tessera_resume_step()
 * with the slots tessera_slots() names. TESSERA_EINVAL outside elastic jobs. */
int tessera_elastic_recover(tessera *t, uint64_t step, float *const *params,
                            struct tessera_error *err);
/* Elastic jobs, before the first step: pulls every tensor at one version, the newest the job
 * reached (waiting for a step under way), into params (by tensor id); *step receives it, the
 * step to train from. A worker that joins a running job must start this way: a plain pull
 * may mix versions while the others train. */
int tessera_join(tessera *t, float *const *params, uint64_t *step, struct tessera_error *err);

/* Zero-copy buffers for tensor id (docs/transport.md, "Shared regions"), made at the first
 * call and kept until tessera_close; the same pointers each time.
 * - *params: numel floats, read-only. Pass it as the destination of tessera_pull /
 *   tessera_step. Where a shard on this host holds a partition (bsp, partitions a multiple of
 *   4 KiB) those pages are the shard's own values, mapped: nothing is copied at all, and they
 *   always show the shard's latest version, which changes in place while a step (this rank's
 *   push) runs: read them between a step's or pull's return and the next push. Elsewhere the
 *   pages are private and hold what was last pulled into them.
 * - *grad: numel elements of the push type (float; int64 in exact mode unless exact_push is
 *   float) for the caller to write its gradient into. Passing it to tessera_push /
 *   tessera_step lets shards on this host read it in place (no copy); do not write it while
 *   that call runs. Remote shards, compression and sync periods copy it as any other buffer.
 * Either pointer may be NULL when not wanted. */
int tessera_buffers(tessera *t, int id, const float **params, void **grad,
                    struct tessera_error *err);

/* Audits a worker's own copy of the parameters against the shards (docs/verify.md): pulls
 * every registered tensor at `version` and compares it bit for bit with params[id] (numel
 * floats each). For trainers that keep or update their own copy (reduce-style loops, user
 * code). The result sums over tensors; first_tensor -1 when nothing differs. */
struct tessera_local_audit {
    uint64_t elements, differing;
    uint64_t max_ulp;                 /* over differing pairs that are numbers */
    int first_tensor;                 /* the first tensor id with a difference, or -1 */
    uint64_t first_index;             /* its first differing element */
    float first_local, first_shard;   /* the two values there */
};
int tessera_verify_local(tessera *t, float *const *params, uint64_t version,
                         struct tessera_local_audit *out, struct tessera_error *err);

/* Data checksums (docs/verify.md): before training, a worker sends the SHA-256 of every data
 * partition it loaded; the master compares them with the job's map (the restored snapshot's,
 * else the first worker's) and refuses a mismatch with TESSERA_ESTATE, the message naming the
 * partition and its file. reference (may be NULL) receives whose map matched ("rank 0",
 * "snapshot 3f2a..."). A local run has nothing to compare with: TESSERA_OK, "local". */
struct tessera_data_checksum {
    const char *name;        /* "train-images[0:1000)" */
    const char *file;        /* "train-images-idx3-ubyte.gz" */
    unsigned char sha256[32];
};
int tessera_check_data(tessera *t, const struct tessera_data_checksum *cs, size_t n,
                       char *reference, size_t reference_len, struct tessera_error *err);

/* Exact mode helpers: out = fixed(g); acc += x; acc += fixed(g) in one pass (the fastest way
 * to add one micro-batch's gradient). Each refuses a value or sum out of range and then
 * changes nothing. */
int tessera_to_fixed(const float *g, size_t n, int64_t *out, struct tessera_error *err);
int tessera_fixed_add(int64_t *acc, const int64_t *x, size_t n, struct tessera_error *err);
int tessera_fixed_add_f32(int64_t *acc, const float *g, size_t n, struct tessera_error *err);

/* The current loss scale (1 without loss scaling). */
float tessera_loss_scale(const tessera *t);

/* What this trainer saw so far. */
struct tessera_stats {
    uint64_t steps;              /* tessera_step calls that succeeded */
    uint64_t steps_skipped;      /* steps a shard skipped for overflow (some partition) */
    uint64_t staleness_last;     /* ssp/asp: steps the slowest worker was behind at the last pull */
    uint64_t staleness_max;      /* ... and the most over all pulls */
    uint64_t bytes_pushed;       /* gradient payload bytes sent, after compression */
    uint64_t bytes_raw;          /* ... and what they were before compression */
    float loss_scale;
    uint64_t failovers;          /* times a step was sent again to a new shard map after a
                                  * shard died (docs/replication.md) */
    uint64_t bytes_pulled;       /* parameter payload bytes received, after compression */
    uint64_t bytes_pulled_raw;   /* ... and what they were as float32 */
};
void tessera_stats(const tessera *t, struct tessera_stats *out);

/* Training progress for the master's status page (docs/observability.md), carried by this
 * worker's next heartbeats: the mean loss over the steps since the last call, the last
 * evaluated accuracy (NaN if none), samples per second over those steps. The master plots
 * rank 0's. A no-op with master "local". */
struct tessera_progress {
    double loss, accuracy, samples_per_s;
};
void tessera_report_progress(tessera *t, const struct tessera_progress *p);

/* Serves this client's figures for Prometheus at http://HOST:PORT/metrics (docs/
 * observability.md, "A trainer's /metrics"): tessera-worker's series, labelled job_id and rank:
 * steps, skipped steps, bytes pushed and pulled, failovers, staleness, the loss scale, and the
 * loss, accuracy and samples/s of the last tessera_report_progress (each only once reported).
 * host NULL: 127.0.0.1 (plain HTTP, no authentication: bind where only your Prometheus
 * reaches); port 0: a free one, written to *bound (may be NULL). One client per process
 * (TESSERA_EEXIST for a second); tessera_close stops it and drops the client's series. */
int tessera_serve_metrics(tessera *t, const char *host, int port, int *bound,
                          struct tessera_error *err);

/* The data-plane transport in use ("tcp", "shm", or "local"). */
const char *tessera_transport(const tessera *t);
/* The worker id the master gave this worker's current registration (what `tessera status`
 * lists, and what its data-plane connections name: a shard takes from them only the pushes of
 * the slots this worker owns); 0 for a --local one. It changes if the worker registers again
 * (declared dead while it was away). */
uint32_t tessera_worker_id(const tessera *t);

/* Dynamic assignment (docs/scheduler.md, "Dynamic assignment"), ASP and SSP jobs: instead of a
 * fixed share of the data, each worker takes the next units of the job's data from a queue
 * the master owns as it becomes free, so a fast worker computes more of the epoch. Unit u is
 * the micro-batches the static schedule gives rank u % W at step u / W (W: the job's
 * workers). tessera_claim_work asks for up to want units (0: only the counts; at most 256) at
 * this worker's clock `step` (the step its next push will be: every step below it was
 * pushed), of a job of `units` units (steps x workers; every worker the same). The grant:
 * units first .. first + count - 1, to push as this worker's steps step .. step + count - 1,
 * in order; count 0: none left to hand out (once outstanding is 0 too, every unit's push was
 * applied, but lost ones: those of a worker that died and did not come back). A claim at a
 * step inside the units it was granted gets the rest of the same units (a restarted worker
 * redoes what it held). The master makes a grant durable before answering; a master that is
 * down or restarting is waited for, up to a minute. TESSERA_ENOTSUP for a job not in asp, or
 * in ssp without tessera_options.dynamic; master "local": every unit is this worker's, in
 * order. */
struct tessera_work {
    uint64_t first, step;
    uint32_t count;
    uint64_t units, done, outstanding, lost;
    int retry;               /* ssp: nothing granted, as units more than `staleness` steps
                              * older are not done yet: pull the parameters again
                              * (tessera_pull), then claim again at the same step */
    int pull;                /* ssp: granted once those units were done: pull the parameters
                              * again before computing the units */
};
int tessera_claim_work(tessera *t, uint64_t step, uint32_t want, uint64_t units,
                       struct tessera_work *out, struct tessera_error *err);

/* Priority tasks (docs/scheduler.md, "Priority tasks"): work queued for this job ahead of
 * training (`tessera eval`, the master's SubmitTask), which the first of the job's workers to
 * call in runs between two of its steps. tessera_next_task returns 1 and fills *task with a
 * task the master handed this worker (each once), 0 if none (always 0 with master "local"):
 * run it at a step boundary and report it with tessera_task_done; the result goes to the
 * master with the next heartbeats. tessera_task_done refuses (TESSERA_EINVAL, naming the
 * field) an accuracy outside 0..1, a negative or non-finite loss, a fingerprint that is not 64
 * lowercase hex digits. */
enum tessera_task_kind { TESSERA_TASK_EVALUATE = 1 };   /* test-set accuracy and loss */
struct tessera_task {
    uint32_t id;
    int kind;                    /* enum tessera_task_kind */
};
int tessera_next_task(tessera *t, struct tessera_task *task);
struct tessera_task_result {
    uint32_t id;
    int failed;                  /* 0: done, with the figures below; else `error` says why */
    uint64_t step;               /* the step boundary: the parameters of version `step` */
    double accuracy, loss;       /* EVALUATE: on the test set */
    const char *fingerprint;     /* params_sha256 of those parameters, or NULL */
    const char *error;           /* failed: why (copied; at most 256 bytes kept) */
};
int tessera_task_done(tessera *t, const struct tessera_task_result *r,
                      struct tessera_error *err);

/* A step in pieces, to hide communication behind compute (python/tessera/torch.py's overlap):
 * tessera_push_some pushes the gradients of tensors ids[0..n) (ascending) for `step` as soon
 * as they exist, tessera_pull_some pulls tensors ids[0..n) at `version` (step + 1) in the order
 * the next forward pass needs them. grads and params are indexed by tensor id (every tensor:
 * only the ids named are read or written, but a rollback, TESSERA_EROLLBACK as tessera_step
 * returns it, pulls every tensor into params; push_some's params may be NULL, then the call
 * returns TESSERA_EROLLBACK once the job went back: pull every tensor at
 * tessera_resume_step). Each call is one exchange with the shards concerned. Only what
 * tessera_step does beyond the exchange is refused (TESSERA_ENOTSUP): mode reduce, elastic
 * jobs, loss scaling, sync periods. tessera_stats' steps counts tessera_step calls only.
 * tessera_step_some is both for tensors ids in one exchange, tessera_step for a subset: each
 * partition's pull follows its push on the same connections, so pushes and pulls flow at once
 * (the bucket's pull lands while the caller computes the next bucket's gradients). */
int tessera_push_some(tessera *t, uint64_t step, size_t n, const int *ids,
                      const void *const *grads, float *const *params,
                      struct tessera_error *err);
int tessera_pull_some(tessera *t, uint64_t version, size_t n, const int *ids,
                      float *const *params, struct tessera_error *err);
int tessera_step_some(tessera *t, uint64_t step, size_t n, const int *ids,
                      const void *const *grads, float *const *params,
                      struct tessera_error *err);

/* ---- Sparse embedding tables (docs/embeddings.md) ----
 * A table has rows of `dim` floats with ids 0..max_id (max_id up to 2^63 - 1); a row is made
 * on the shards when a push first touches it, with the bits the initializer gives that id
 * (the same in any process), and its optimizer state lives with it. The rows spread over
 * every shard (each row is a key on the ring). Every rank registers the same tables in the
 * same order, and pushes every table at every step, with n = 0 where its batch touched none.
 * Snapshots hold tables (each shard writes only the rows changed since its last one), and a
 * cluster restored from one (tessera up --restore) starts them at its step, on any shard
 * count (docs/embeddings.md, "Snapshots of tables"). With replicas, each row has a copy on the
 * next shard of its chain, which takes over when its shard dies; a shard that dies without
 * one, or that joins, sends the job back to its last snapshot, and a table call then returns
 * TESSERA_EROLLBACK (pull the tensors at tessera_resume_step and go on from there).
 * Elastic jobs (docs/embeddings.md, "Elastic jobs with tables"): a worker pushes each slot it
 * owns (tessera_push_rows_slot) and pulls the rows of each slot's samples; a table call
 * answered TESSERA_ESLOTS (the slots changed hands while it waited) is followed by
 * tessera_elastic_recover, then the step tessera_resume_step() names is computed again with
 * the slots tessera_slots() names. Not yet: tables in reduce jobs (TESSERA_ENOTSUP). */
struct tessera_table_spec {
    size_t size;             /* sizeof(struct tessera_table_spec) of the caller's header */
    const char *name;        /* 1..64 of [A-Za-z0-9._-] */
    uint32_t dim;            /* floats a row, 1..4096 */
    uint64_t max_id;         /* ids 0..max_id */
    const char *init;        /* zeros, ones, const:V, uniform:A, normal:STD; NULL: normal:0.01 */
    uint64_t seed;
    const char *optimizer;   /* sgd, adagrad or adam with options ("adagrad:lr=0.05"); NULL:
                              * the job's (which must be one of them) */
    uint64_t ttl_steps;      /* row lifetime: a row no step updated in the last ttl_steps steps
                              * is dropped at the next step that is a multiple of ttl_steps,
                              * and made again from init when touched (docs/embeddings.md,
                              * "Row lifetime"); 0: rows live for ever; bsp jobs only */
    uint64_t ttl_seconds;    /* row lifetime by the clock: a row not updated in ttl_seconds
                              * is dropped within about twice that, its head's clock deciding
                              * for its copies; bsp jobs that are not exact only (an exact
                              * job's rows must not depend on timing: ttl_steps), and not
                              * with ttl_steps; 0: none */
};
#define TESSERA_TABLE_SPEC_INIT { .size = sizeof(struct tessera_table_spec) }
/* Registers a table (idempotent, as tessera_register); *table is its handle. A name or handle
 * registered with another spec: TESSERA_EEXIST. */
int tessera_table_register(tessera *t, const struct tessera_table_spec *spec, int *table,
                           struct tessera_error *err);
/* The rows of ids[0..n) (any order, repeats allowed, each <= max_id) at `version` (steps
 * applied; waits for it as tessera_pull does) into out, n x dim floats, row i for ids[i].
 * Rows no push touched yet come as their initial values; a pull creates no row. */
int tessera_pull_rows(tessera *t, int table, uint64_t version, size_t n, const uint64_t *ids,
                      float *out, struct tessera_error *err);
/* A hint that this rank will pull or push ids[0..n) (any order, repeats allowed, each <=
 * max_id) soon, e.g. its data loader's next batch: each shard with a disk tier
 * (tessera-shard --table-dir) reads those of its rows that are only on disk into memory
 * while the worker computes, so that the pull finds them there (docs/embeddings.md,
 * "Prefetch"). Nothing is answered or waited for, and no row changes; an id past max_id or
 * an unknown table is TESSERA_EINVAL, a shard that cannot be reached is left to the next
 * pull. */
int tessera_prefetch_rows(tessera *t, int table, size_t n, const uint64_t *ids,
                          struct tessera_error *err);
/* This rank's gradients of `step` for the rows it used: grads is n x dim floats, row i the
 * gradient for ids[i] at input position i (any order, repeats allowed: the SDK sums the
 * repeats, in int64 fixed point in exact mode, so give one row per position, not sums made
 * in float). Each shard gets its rows, ascending (every shard a push, empty where none of
 * its rows was used); the shards divide the step's sum by the job's batch and update each
 * row once (BSP: when every rank has pushed). NaN or Inf in grads: TESSERA_EINVAL naming the
 * position, nothing sent. */
int tessera_push_rows(tessera *t, int table, uint64_t step, size_t n, const uint64_t *ids,
                      const float *grads, struct tessera_error *err);
/* tessera_push_rows for one slot of an elastic job (one this worker owns: tessera_slots), the
 * gradients of that slot's samples alone; every slot the worker owns is pushed each step.
 * Outside elastic jobs, slot must be the worker's rank. */
int tessera_push_rows_slot(tessera *t, int table, uint64_t step, uint32_t slot, size_t n,
                           const uint64_t *ids, const float *grads, struct tessera_error *err);
/* The table's fingerprint at `version` (docs/embeddings.md, "Fingerprint"): SHA-256 over its
 * name, dim, row count and every row that exists in ascending id, whichever shard holds it,
 * as 64 hex digits. In exact mode it is the same for any worker and shard count. */
int tessera_table_sha256(tessera *t, int table, uint64_t version, char hex[65],
                         struct tessera_error *err);
/* The step table was at when registered: 0 for a fresh job, the snapshot's step when the
 * shards restored one (tessera up --restore); training continues from it. 0 for no such
 * table. */
uint64_t tessera_table_version(const tessera *t, int table);
/* The rows the table has (over every shard) at `version`. */
int tessera_table_rows(tessera *t, int table, uint64_t version, uint64_t *rows,
                       struct tessera_error *err);

/* ---- Snapshots read and written whole (docs/snapshots.md, "Torch files") ----
 * A snapshot store is a directory (`tessera up --store DIR`). These read one snapshot of it,
 * tensor by tensor, or write one from tensors, with no cluster running; the Python package's
 * tessera.snapshot turns them into torch files and back. A handle is used by one thread at a
 * time. */
typedef struct tessera_snapshot tessera_snapshot;

struct tessera_snapshot_info {
    char id[65];                 /* the snapshot's id, hex */
    uint64_t step;               /* every tensor is at this version; the job goes on from it */
    int64_t created_unix_ms;
    const char *message, *job, *optimizer;   /* the handle's: valid until it is closed */
    uint32_t workers, micro_batch;
    int exact;
    double batch;
    int ntensors;
    int state_len;               /* optimizer state floats per element: 0 (sgd), 1, 2 (adam) */
};

/* Opens snapshot `ref` (a branch, tag, id or unique prefix of 4+ hex digits, HEAD; "~N" goes
 * N parents back) of the store in directory `store`, which must exist (TESSERA_ENOTFOUND),
 * and reads its manifest (checked: TESSERA_EINVAL names what is wrong). */
int tessera_snapshot_open(const char *store, const char *ref, tessera_snapshot **out,
                          struct tessera_error *err);
void tessera_snapshot_info(const tessera_snapshot *s, struct tessera_snapshot_info *out);
/* Tensor i (0 .. ntensors - 1), in the snapshot's order: its name and shape (the handle's),
 * ndim and elements. TESSERA_EINVAL for an i out of range. */
int tessera_snapshot_tensor(const tessera_snapshot *s, int i, const char **name,
                            const uint64_t **shape, int *ndim, uint64_t *numel,
                            struct tessera_error *err);
/* Reads tensor i whole: values (numel floats) and, if state is not NULL, its optimizer state
 * (state_len * numel floats, [component][element], as tessera_pull_state gives it). Every
 * chunk is checked: TESSERA_ECORRUPT names a damaged one and the tensor. updates (may be
 * NULL) receives the optimizer's update count of that state (Adam's t so far), or -1 where
 * the snapshot does not record one. */
int tessera_snapshot_read(tessera_snapshot *s, int i, float *values, float *state,
                          int64_t *updates, struct tessera_error *err);
/* The snapshot's sparse tables (docs/embeddings.md, "Snapshots of tables"): how many. */
int tessera_snapshot_ntables(const tessera_snapshot *s);
/* Table i (0 .. ntables - 1), in the snapshot's order: its name (the handle's), row dimension
 * and the rows it has at the snapshot's step. TESSERA_EINVAL for an i out of range. */
int tessera_snapshot_table(const tessera_snapshot *s, int i, const char **name, uint32_t *dim,
                           uint64_t *rows, struct tessera_error *err);
/* Reads table i whole: ids (its rows of them, ascending) and values (rows x dim floats, row
 * by row, in the ids' order; the optimizer state is not read). Every chunk is checked
 * (TESSERA_ECORRUPT names a damaged one); rows that disagree with the manifest's count are
 * TESSERA_ECORRUPT too. The table is read into memory first: twice its values' bytes. */
int tessera_snapshot_read_table(tessera_snapshot *s, int i, uint64_t *ids, float *values,
                                struct tessera_error *err);
/* Table i's spec as the snapshot holds it (the strings are the handle's; spec->size is left
 * as the caller set it) and *state_len, its optimizer's state floats per value (0 sgd,
 * 1 adagrad, 2 adam). TESSERA_EINVAL for an i out of range. */
int tessera_snapshot_table_spec(const tessera_snapshot *s, int i, struct tessera_table_spec *spec,
                                int *state_len, struct tessera_error *err);
/* As tessera_snapshot_read_table, with what else each row's record holds, each where not
 * NULL: state (rows x state_len x dim floats, each row's [component][dim]), updates (each
 * row's optimizer update count: Adam's t) and steps (the step each row was last updated at,
 * from which a row lifetime counts). What tessera_snapshot_import takes back. */
int tessera_snapshot_read_rows(tessera_snapshot *s, int i, uint64_t *ids, float *values,
                               float *state, uint64_t *updates, uint64_t *steps,
                               struct tessera_error *err);
void tessera_snapshot_close(tessera_snapshot *s);   /* NULL is a no-op */

/* Optimizer state floats per parameter element under `optimizer` (a spec as
 * tessera_options.optimizer takes it): 0 (sgd), 1 (momentum, nesterov, adagrad), 2 (adam,
 * adamw: m, v).
 * The length of tessera_assign_state's, tessera_pull_state's and the snapshot functions' state
 * arrays, per element. TESSERA_EINVAL names a bad spec. */
int tessera_optimizer_state_len(const char *optimizer, int *len, struct tessera_error *err);

struct tessera_import_tensor {
    const char *name;            /* 1..128 bytes, unique */
    const uint64_t *shape;       /* ndim (1..8) extents, each >= 1 */
    int ndim;
    const float *values;         /* numel floats */
    const float *state;          /* the optimizer's state_len * numel floats, [component]
                                  * [element]; NULL: zeros (a fresh optimizer) */
    int has_updates;             /* the state's update count is known: updates (Adam's t so
                                  * far); 0: a restore takes the count the step implies */
    uint64_t updates;
};
/* A sparse table to import (docs/embeddings.md, "Snapshots of tables"): the spec the job will
 * register it with (a job's shards load its rows when it does; its table handle is its index
 * in tessera_import_options.tables, so the job must register them in that order) and its
 * rows. Everything is borrowed. */
struct tessera_import_table {
    struct tessera_table_spec spec;  /* init NULL: normal:0.01; optimizer required: sgd,
                                      * adagrad or adam with options, as the job registers it */
    uint64_t rows;
    const uint64_t *ids;         /* rows of them, strictly ascending, each <= spec.max_id */
    const float *values;         /* rows x dim floats, finite */
    const float *state;          /* rows x state_len x dim (tessera_snapshot_read_rows's
                                  * layout); NULL: zeros (a fresh optimizer) */
    const uint64_t *updates;     /* each row's update count (Adam's t); NULL: zeros */
    const uint64_t *steps;       /* each row's last updated step, at most the import's step;
                                  * NULL: the import's step */
};
struct tessera_import_options {
    const char *job;             /* the job a restore starts */
    uint32_t workers;            /* 0 means 1 */
    int exact;
    const char *optimizer;       /* required: "adamw:lr=0.001", ... */
    double batch;                /* the global batch, required */
    uint64_t step;               /* >= 1 (0 means 1): the version of every tensor */
    uint32_t micro_batch;        /* the schedule's (0: not known) */
    const char *branch;          /* NULL: "main"; the snapshot follows its tip */
    const char *tag;             /* NULL: none */
    const char *message;         /* NULL: none */
    const struct tessera_import_table *tables;   /* NULL or ntables of them */
    int ntables;
};
/* Writes tensors t[0..n) (n >= 0) and o->tables as a snapshot of a bsp job in the store in
 * directory `store` (created if missing): tensors with initializer "assigned"
 * (tessera.torch's), 4 MiB partitions; at least one tensor or table. Everything
 * is checked before a chunk is written (TESSERA_EINVAL names the field or tensor,
 * TESSERA_EEXIST a taken tag); TESSERA_ESTATE if another writer moved the branch meanwhile.
 * id receives the new snapshot's id (hex). `tessera up --store DIR --restore ID` restores it. */
int tessera_snapshot_import(const char *store, const struct tessera_import_options *o,
                            const struct tessera_import_tensor *t, int n, char id[65],
                            struct tessera_error *err);

#ifdef __cplusplus
}
#endif
#endif
