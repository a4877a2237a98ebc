/* params.h - the tensors and partitions a shard holds, per job.
 *
 * RegisterTensor decides, with the shard map the caller names (map_epoch), which partitions of
 * a tensor the ring gives this shard, and creates them (lib/ps). The data plane finds a
 * partition by (job, tensor id, partition index); a connection names its job in its HELLO.
 * A job's settings (workers, mode, optimizer, batch) are fixed by its first registration.
 * With replicas (docs/replication.md) the shard also holds the partitions whose chain it
 * follows: each is charged and registered like its own, but only heads answer workers, are
 * reported to RegisterTensor, snapshotted and counted in a job's status.
 * Memory: every partition is charged to the shard's budget (--mem-budget) before it is
 * created; a request over it is TS_ENOMEM naming the budget and the jobs using it, and so is
 * a registration that takes its job past its share of the budget (--job-mem-share).
 * Ownership: the registry owns its jobs, tensors and partitions until the job is released
 * (shard_params_release) or shard_params_fini().
 * Threads: safe; the registry lock is held only to find, add or remove, partitions lock
 * themselves.
 * Implemented in params.c (the registry: jobs, lookups, releases, copies) and tensors.c (a
 * tensor's registration: checks, placement, charge, partitions made or restored). */
#ifndef TS_SHARD_PARAMS_H
#define TS_SHARD_PARAMS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cluster/cluster.h"
#include "ps/part.h"
#include "snapshot/snapshot.h"
#include "table/table.h"
#include "tessera/v1/shard.pb-c.h"
#include "transport/region.h"

#define SHARD_MAX_TENSORS 4096
#define SHARD_MAX_DIMS 8
#define SHARD_MAX_PARTITIONS (1 << 20)  /* per tensor */
/* Tensors from this size get a shared region for their values (smaller ones cost little to
 * copy, and each region holds a descriptor open). */
#define SHARD_REGION_MIN_BYTES (64u << 10)

struct shard_tensor {
    uint32_t id;
    char name[129];
    char init[64];
    uint64_t seed, fan_in, fan_out, numel, partition_bytes;
    uint32_t sync_every;               /* steps per sync (RegisterTensorRequest.sync_every) */
    /* Mixed into its partitions' keys (TensorSpec.placement_salt): fixed by the registration
     * that created it (a restore: the snapshot's), never changed, used in every chain. */
    uint32_t salt;
    uint64_t shape[SHARD_MAX_DIMS];
    size_t ndim;
    uint32_t nparts;
    struct ts_part **parts;            /* by index; NULL where another shard holds it */
    /* Replication (docs/replication.md), by index, fixed at registration from the map the
     * request named: whether this shard follows (is not the head of) the partition's chain,
     * and the shard after it in the chain (0: none, this shard is its tail). */
    bool *follows;
    uint32_t *next;
    /* A member whose next shard changed: its image goes there now (repair.c), not only with
     * the next step. Under the registry lock. */
    bool *resync;
    /* A chain this shard heads now with every copy gone (its members died): pushes and pulls
     * of it wait for the job's rollback (docs/replication.md, "Rollback"). Under mu. */
    bool *lost;
    /* Under mu, as of the map the chains were last taken up under (registration, rechain):
     * whether this shard is in the partition's chain (a joining shard that is, and has no copy
     * yet, waits for the head's image; docs/replication.md, "Joining"). */
    bool *held;
    uint32_t *prev;                    /* the shard before this one in the chain (0: none) */
    /* The values of this shard's partitions, each at its offset in the tensor (numel floats,
     * only this shard's pages touched), which co-located workers and the next shard of a
     * chain map read-only (dataplane.c, MAP; chain.c). TS_REGION_OWNED: only this mapping
     * writes, so restores and rollbacks write through it, never through a new one.
     * TS_REGION_NONE where memfds cannot be made: the partitions then hold their own. */
    struct ts_region values;
    uint64_t mem;                      /* bytes charged to the shard's budget for it */
    /* --redo-dir (durable.h): the log its partitions' images go to, "JOB/ID" of its keys
     * there, and by index the number of the record of each partition's last image
     * (ts_redo_wait), which a pull waits for; NULL and "" without one. */
    struct shard_durable *durable;
    char redo_key[TS_JOB_ID_MAX + 16];
    _Atomic uint64_t *redo_seq;
};

/* The most jobs a shard holds at once (the master's --max-jobs, default 64, refuses new jobs
 * before this). */
#define SHARD_MAX_JOBS 256
/* Joining shards a job is introduced to at once (more wait for the next pass). */
#define SHARD_MAX_JOINING 16
/* --arm-timeout-ms's default: 5 minutes. The master polls every shard of a snapshot it waits
 * for every half second per shard (128 s between two calls to one shard at 256 shards), so
 * only an abandoned arm goes this long unasked for. */
#define SHARD_ARM_TIMEOUT_MS (5 * 60 * 1000)
/* --orphan-job-ms's default: 10 minutes. The master knows a job from its first worker's
 * RegisterWorker, before any tensor; a master restarted without its state forgets it until
 * the workers register again, within their lease (at most 10 minutes). */
#define SHARD_ORPHAN_MS (10 * 60 * 1000)

#define SHARD_MAX_TABLES 256            /* sparse tables per job (table ids 0..255) */
struct shard_table;

struct shard_job {
    struct ts_job job;
    uint64_t data_seed;                /* JobSpec.data_seed, micro_batch: for manifests */
    uint32_t micro;
    /* A snapshot armed at armed_step (when armed); written under snap_mu, read by status.
     * armed_ms: when it was last asked for (ArmSnapshot, or a WriteSnapshot of its step;
     * monotonic, under mu), for shard_params_expire_arms. */
    _Atomic uint64_t armed_step;
    atomic_bool armed;
    int64_t armed_ms;
    atomic_uint conns;                 /* data-plane connections naming it (attach, detach) */
    uint64_t mem;                      /* bytes charged to the budget for it (under mu) */
    struct shard_tensor *tensors[SHARD_MAX_TENSORS];
    /* Sparse tables (tables.h), by table id; added under mu, never removed before the job. */
    struct shard_table *tables[SHARD_MAX_TABLES];
    uint32_t ntables;
    /* A join's move (tables.h): until when a frame naming a table this shard lacks waits for
     * the move to make it (a shard that joined has none before), in monotonic ms; 0: none.
     * held_epoch: the map this shard had taken up (rechained) when the hold began. */
    _Atomic int64_t tables_held_until;
    _Atomic uint64_t held_epoch;
    /* The last move done here: its snapshot and held step + 1 (0: none), under the shard's
     * snap_mu: a master restarted in the middle of a move asks every shard again. */
    char moved_from[TS_STORE_HEX_LEN + 1];
    uint64_t moved_step;
    /* Rollback (docs/replication.md, "Rollback"): while fence is set (the step + 1) the job
     * goes back to a snapshot and the data plane refuses it; rollbacks counts those done
     * (a connection that named the job under an older count must start over), the last to
     * rollback_step. lost_report: a partition of it lost every copy; the master is to hear,
     * with lost_gen, the rollbacks done when the loss was found. state_lost: the same loss (or
     * table rows that lost every copy), kept until the job is open again after its rollback:
     * no snapshot may be armed meanwhile, since the shards left could not write the job's
     * state whole (shard_params_arm). */
    atomic_uint_least64_t fence, rollback_step;
    atomic_uint rollbacks, lost_gen;
    atomic_bool lost_report, state_lost;
    /* The master's word on the job, from its heartbeat replies (reclaim.c; under mu): since
     * when it says it holds nothing of the job (0: it holds it, or it was registered to
     * since), and when it last said so. */
    int64_t orphan_since_ms, orphan_seen_ms;
    /* Under mu: the tensors registered, and the joining shards this shard registered them
     * with (repair.c), with how many there were then. */
    uint32_t ntensors;
    /* Under mu: the tensor ids whose partitions a registration is making outside mu (a big
     * tensor's take seconds, and mu must not stop heartbeats and other jobs meanwhile); a
     * registration of the same id waits on shard_params.made. */
    uint64_t making[SHARD_MAX_TENSORS / 64];
    struct {
        uint32_t id, tensors;
    } introduced[SHARD_MAX_JOINING];
    size_t nintroduced;
};

/* A partition whose chain left this shard: out of its tensor, freed once unpinned
 * (shard_params_reap). */
struct shard_dropped {
    struct shard_job *sj;
    struct ts_part *p;
};

struct shard_params {
    pthread_mutex_t mu;
    pthread_cond_t made;               /* a tensor a registration was making is in (or not) */
    struct shard_job *jobs[SHARD_MAX_JOBS];
    size_t njobs;
    uint64_t partitions, bytes;
    struct ts_store *store;            /* --store: where snapshots go (NULL: none); borrowed */
    ts_manifest *restore;              /* --restore: tensors start from it (NULL: initialise);
                                        * owned, freed by shard_params_fini */
    char restore_hex[TS_STORE_HEX_LEN + 1];
    pthread_mutex_t snap_mu;           /* one snapshot arm or write at a time */
    /* Walks that use a job outside mu (status) hold it for reading; a release for writing. */
    pthread_rwlock_t life;
    /* Reclaim: --arm-timeout-ms and --orphan-job-ms (0: never); since start (under mu), the
     * armed snapshots dropped because nobody asked for them so long (shard_params_expire_arms)
     * and the jobs released because the master held nothing of them so long (reclaim.c). */
    int64_t arm_timeout_ms, orphan_ms;
    uint64_t arms_expired, orphans_released;
    uint64_t mem_budget;               /* --mem-budget: bytes its partitions may use */
    /* --job-mem-share: the percent of mem_budget one job's registered tensors may hold
     * (100: all the others leave). Copies made for a chain or a rollback are not held to it:
     * failover must not fail on it. */
    uint32_t job_mem_share;
    uint64_t mem_used;                 /* what they use now (under mu) */
    /* --table-mem: what every job's table rows may use together (tables.h; atomic). */
    struct ts_table_budget tables_budget;
    /* --redo-dir: the tables' redo log (durable.h; NULL: none); main.c's. */
    struct shard_durable *durable;
    uint32_t max_tensors;              /* --max-tensors: tensor ids per job are below it */
    /* Called under mu after a job's memory is freed, before anything can be created again
     * (the data plane forgets what it cached by partition address, /metrics the job's
     * series): job is the job released, NULL where only dropped partitions were freed
     * (shard_params_reap). Under mu, a registration or a HELLO of a job of the same id
     * comes after it, never between. May be NULL. */
    void (*on_release)(void *ctx, const char *job);
    void *release_ctx;
    uint64_t resyncs;                  /* partitions flagged for resync (under mu) */
    /* Since start (under mu): partitions promoted to head, headed with every copy lost, and
     * of those the reduce ones made afresh for their workers to seed (rechain.c); images the
     * repair thread sent to new chain members (atomic). */
    uint64_t promotions, lost, reseeded;
    atomic_uint_least64_t copies_sent;
    atomic_uint_least64_t images_from_region;   /* loaded from the previous shard's region */
    /* Joining (rechain.c): the map epoch the chains were last taken up under; partitions
     * dropped since start, and those not yet freed; images the repair thread collected and
     * has not sent yet (all under mu). */
    _Atomic uint64_t rechained;        /* written under mu */
    uint64_t dropped;
    bool joining;                      /* joining the ring under the map of rechained */
    struct shard_dropped *drops;
    size_t ndrops, drops_cap;
    uint64_t inflight;
};

void shard_params_init(struct shard_params *sp);
void shard_params_fini(struct shard_params *sp);

/* Registers req's tensor. On TS_OK *owned is a malloc'd array (caller frees) of the *nowned
 * partition indices this shard holds, out of *nparts, and *version the lowest version among
 * them (0 for a fresh tensor, the snapshot's step for a restored one); *salt the tensor's
 * placement salt, which *owned follows: the request's if it created the tensor, else the
 * tensor's own (a request with another is answered, not refused, and changes nothing: the
 * worker adopts it; docs/placement.md); *partition_bytes the tensor's partition size, which
 * a request with partition_auto adopts the same way (one without must match it). cl is the
 * shard's own map handle (refreshed here when req->map_epoch is newer); my_id this shard's
 * id. Errors name the field; TS_ESTALE for an old map_epoch. */
ts_status shard_params_register(struct shard_params *sp, struct ts_cluster *cl, uint32_t my_id,
                                const Tessera__V1__RegisterTensorRequest *req, uint32_t **owned,
                                size_t *nowned, uint32_t *nparts, uint64_t *version,
                                uint32_t *salt, uint64_t *partition_bytes,
                                struct ts_err *err) TS_MUST_CHECK;

/* The job named id for a data-plane connection, or NULL: the job cannot be released until
 * shard_params_detach. */
struct shard_job *shard_params_attach(struct shard_params *sp, const char *id);
void shard_params_detach(struct shard_params *sp, struct shard_job *sj); /* NULL: no-op */
/* Frees job id (docs/operations.md, "How jobs end"): its tensors, partitions and shared
 * regions; *held false for a job this shard does not hold (TS_OK). TS_ESTATE, nothing freed,
 * while a connection is attached to it or a snapshot of it is armed. *bytes: the parameter
 * bytes freed. */
ts_status shard_params_release(struct shard_params *sp, const char *id, bool *held,
                               uint64_t *bytes, struct ts_err *err) TS_MUST_CHECK;
/* The tensor, or NULL if it is not registered in the job. Tensors live as long as their job
 * (an attached connection keeps it). */
struct shard_tensor *shard_params_tensor(struct shard_params *sp, struct shard_job *job,
                                         uint32_t tensor);
/* The partition, pinned (release it with shard_params_put), or NULL if this shard does not
 * hold it. *follows (if not NULL): whether this shard follows the partition's chain rather
 * than heads it; *next (if not NULL): the shard after this one in the chain, 0 if none. */
struct ts_part *shard_params_find(struct shard_params *sp, struct shard_job *job,
                                  uint32_t tensor, uint32_t part, bool *follows,
                                  uint32_t *next);
/* The shard before this one in the chain of partition part of tensor, as of the map the
 * chains were last taken up under (registration, rechain); 0 if it heads the chain, is not in
 * it, or does not know the tensor. */
uint32_t shard_params_prev(struct shard_params *sp, struct shard_job *job, uint32_t tensor,
                           uint32_t part);
/* Memory a job's connections hold beyond its partitions (the mirrors of compressed pulls,
 * services/shard/dp_pullc.c): bytes > 0 is charged to the shard's --mem-budget under job, or
 * TS_ENOMEM naming the budget; bytes < 0 gives that much back (always TS_OK). The job must be
 * attached by the caller. */
ts_status shard_params_charge(struct shard_params *sp, struct shard_job *job, int64_t bytes,
                              struct ts_err *err);
/* Unpins what shard_params_find returned (NULL: no-op). A partition dropped meanwhile is
 * freed by the next shard_params_reap. */
void shard_params_put(struct ts_part *p);

/* Whether the partition lost every copy and waits for the job's rollback (rechain). */
bool shard_params_lost(struct shard_params *sp, struct shard_job *job, uint32_t tensor,
                       uint32_t part);

/* The map changed (rechain.c): every partition's role and next shard follow the new chains;
 * followers that now head a chain are promoted (docs/replication.md, "Failover"), heads that
 * no longer do are demoted, and partitions whose chain left this shard are dropped (freed by
 * shard_params_reap); a head whose chain changed sends it its image (the repair thread).
 * cl must hold the new map. */
void shard_params_rechain(struct shard_params *sp, struct ts_cluster *cl, uint32_t my_id);
/* Frees the dropped partitions no one uses any more. The caller holds life for writing (walks
 * read partitions without mu). */
void shard_params_reap(struct shard_params *sp);
/* The moves left for joining shards (HeartbeatRequest.moves_pending): copies this shard's
 * chains still lack, images to send, jobs to introduce, and partitions of SSP and ASP jobs
 * that would move (they have no chain to copy them: a join waits for them to end); *epoch:
 * the map epoch the chains were taken up under. Never waits for the registry lock: 1 (a
 * move left) while it is held. */
uint64_t shard_params_moves(struct shard_params *sp, struct ts_cluster *cl, uint32_t my_id,
                            uint64_t *epoch);
/* Partition part of tensor in job, created if this shard joined its chain since and does not
 * hold it yet (a new copy, filled by the image that follows); NULL with err set otherwise
 * (TS_ESTALE if this shard is not in its chain under the map it holds). Not pinned: the
 * caller finds it with shard_params_find. */
struct ts_part *shard_params_adopt(struct shard_params *sp, struct shard_job *job,
                                   uint32_t tensor, uint32_t part, struct ts_err *err);

/* Rollback (docs/replication.md, "Rollback"; rollback.c), in this order, so that a request
 * that cannot succeed changes nothing. Check: snapshot `hex` (of the job, at `step`, in the
 * shard's --store) can be loaded into every partition of the job whose chain this shard is in
 * under cl's map: it resolves, it is the job's at that step, every tensor of the job is in it
 * with its shape and partitioning, and every chunk to read is in the store. *out: the
 * manifest (the caller frees it with ts_manifest_free). Nothing changes. TS_ENOTFOUND: the
 * job is not here; TS_EINVAL naming snapshot_id (no such snapshot, or another job's or
 * step's), TS_ESTATE (no --store, a tensor of another shape), TS_ECORRUPT (a chunk missing). */
ts_status shard_params_rollback_check(struct shard_params *sp, struct ts_cluster *cl,
                                      uint32_t my_id, const char *job, const char *hex,
                                      uint64_t step, ts_manifest **out,
                                      struct ts_err *err) TS_MUST_CHECK;
/* Fence: the data plane refuses the job from now on, with `step` to continue from (the caller
 * then ends its waiting pulls). TS_ENOTFOUND: the job is not here. */
ts_status shard_params_fence(struct shard_params *sp, const char *job, uint64_t step,
                             struct ts_err *err) TS_MUST_CHECK;
/* Then loads the checked manifest m (named hex, for the log) into every partition of the
 * fenced job whose chain this shard is in under cl's map, creating the copies it lacks, as the
 * job's generation-th rollback (older pushes and images are refused from then on,
 * ts_part_rollback). *restored: how many. TS_ESTATE without the fence. The job stays fenced
 * until shard_params_reopen; a chunk that fails its check midway leaves it fenced, partly
 * loaded, for the master to retry or give up on. */
ts_status shard_params_rollback(struct shard_params *sp, struct ts_cluster *cl, uint32_t my_id,
                                const char *job, const ts_manifest *m, const char *hex,
                                uint64_t step, uint32_t generation, uint64_t *restored,
                                struct ts_err *err) TS_MUST_CHECK;
/* A join's move (tables.h, shard_tables_move): the job's tables, held at step, placed on cl's
 * map (epoch) and loaded from snapshot hex of that step; the rest of the job untouched;
 * *held_ms: how long the tables were held.
 * TS_ENOTFOUND: the job is not here; TS_ESTATE: not held at step (a failed move leaves the
 * job lost: it goes back to a snapshot). */
ts_status shard_params_move_tables(struct shard_params *sp, struct ts_cluster *cl,
                                   uint32_t my_id, const char *job, const char *hex,
                                   uint64_t step, uint64_t epoch, uint32_t *tables,
                                   uint64_t *rows, uint32_t *held_ms,
                                   struct ts_err *err) TS_MUST_CHECK;
/* Lifts the fence: the job runs again from its rollback, the generation-th (> 0). */
ts_status shard_params_reopen(struct shard_params *sp, const char *job, uint32_t generation,
                              struct ts_err *err) TS_MUST_CHECK;
/* Jobs with a partition lost since the last call (lost_report cleared): their ids into ids
 * and the rollbacks each had seen then into gens, at most max; returns how many. */
size_t shard_params_lost_jobs(struct shard_params *sp, char (*ids)[TS_JOB_ID_MAX + 1],
                              uint32_t *gens, size_t max);
/* Job id is to be reported again (the master could not be told). */
void shard_params_mark_lost(struct shard_params *sp, const char *id);

/* Snapshots (docs/snapshots.md). Arm: every partition of the job copies itself when it reaches
 * `step`; *armed false (nothing armed) when one is already past it. disarm drops the job's
 * copies (and a join's hold). hold: the job's tables are held at step too (tables.h,
 * shard_tables_arm), for a join's move. *minv, *maxv: the versions the job's partitions
 * span. TS_ENOTFOUND: no such job.
 * An armed snapshot holds its job (shard_params_release refuses) until it is written or
 * disarmed, or shard_params_expire_arms drops it. */
ts_status shard_params_arm(struct shard_params *sp, const char *job, uint64_t step, bool disarm,
                           bool hold, bool *armed, uint64_t *minv, uint64_t *maxv,
                           struct ts_err *err) TS_MUST_CHECK;
/* Waits up to wait_ms for every armed copy, writes them to the store and adds them, and the
 * job, to piece (built with ts_snap_piece_init; its shard id set); then disarms. *ready false
 * (nothing written, still armed; *min_version the slowest partition's version) if a copy is
 * missing when the wait ends. */
ts_status shard_params_write(struct shard_params *sp, const char *job, uint64_t step,
                             int wait_ms, struct ts_snap_piece *piece, bool *ready,
                             uint64_t *min_version, struct ts_err *err) TS_MUST_CHECK;

/* Drops every armed snapshot that nobody asked for (ArmSnapshot, WriteSnapshot) for
 * sp->arm_timeout_ms: the master that armed it polls WriteSnapshot every half second while it
 * waits, so only an abandoned one lapses (its master died, or an ArmSnapshot at a step that
 * never comes), and its job can then be released. Logs and counts each; returns how many. */
size_t shard_params_expire_arms(struct shard_params *sp, int64_t now_ms);

/* Reclaim (reclaim.c; docs/operations.md, "What nobody comes back for"). The jobs this shard
 * holds, for its heartbeat (at most max into ids); returns how many. */
size_t shard_params_held_jobs(struct shard_params *sp, char (*ids)[TS_JOB_ID_MAX + 1],
                              size_t max);
/* The master's answer to a heartbeat that listed the jobs: of those, it holds nothing of
 * unknown[0..n) (no running, idle or unreleased job of that id). A job it names is an orphan
 * since now_ms (or since it first named it, without a break); any other is not one. */
void shard_params_orphans(struct shard_params *sp, char *const *unknown, size_t n,
                          int64_t now_ms);
/* Releases every job the master has named an orphan without a break for sp->orphan_ms (a
 * client registered its tensors and never its workers, or the master released the job while
 * this shard was cut off), as ReleaseJob would: end_job(ctx, job) first (may be NULL; the
 * data plane's waits). One that refuses (a connection open, a snapshot armed) is tried at
 * the next call. Logs and counts each; returns how many. */
size_t shard_params_reclaim_orphans(struct shard_params *sp,
                                    void (*end_job)(void *ctx, const char *job), void *ctx);

/* A job as ShardStatus reports it. */
struct shard_job_status {
    char id[TS_JOB_ID_MAX + 1];
    uint32_t workers, staleness;
    bool exact;
    enum ts_mode mode;
    uint64_t armed_step;               /* 0: no snapshot armed */
    uint64_t tensors, partitions, min_version, max_version;
    uint64_t follows, lag;             /* copies followed; versions held back from pulls */
    uint32_t tables;                   /* sparse tables, their rows here and the rows' bytes */
    uint64_t table_rows, table_bytes;
    struct shard_table_status {        /* each table (tables of them), malloc'd */
        uint32_t id;
        char name[TS_JOB_ID_MAX + 1];
        uint64_t rows, bytes, pulled, pushed, ttl_steps, ttl_seconds;
        double pulled_per_s, pushed_per_s;
        struct ts_table_tiers tiers;   /* summed over its stores (rowcopy_tiers) */
    } *table;
    struct ts_part_ranks ranks;        /* SSP and ASP: one record per rank (n 0 otherwise) */
};
/* Every job's status: *out is malloc'd, *n entries, freed with shard_params_jobs_free. */
ts_status shard_params_jobs(struct shard_params *sp, struct shard_job_status **out, size_t *n,
                            struct ts_err *err) TS_MUST_CHECK;
void shard_params_jobs_free(struct shard_job_status *js, size_t n);
/* A partition this shard holds, as `tessera verify replicas` compares it: the SHA-256 of its
 * image (ts_part_image: values, optimizer state, version) and its place in its chain. */
struct shard_part_digest {
    uint32_t tensor_id, partition;
    char tensor[129];
    uint64_t version;
    bool follows;                      /* a follower, not the head */
    uint32_t next;                     /* the next shard of its chain (0: none) */
    uint8_t sha256[32];
};
/* Every partition of job on this shard, heads and followers: *out malloc'd (the caller frees
 * it), *n entries. TS_ENOTFOUND for a job the shard does not hold. */
ts_status shard_params_digests(struct shard_params *sp, const char *job,
                               struct shard_part_digest **out, size_t *n,
                               struct ts_err *err) TS_MUST_CHECK;

#endif
