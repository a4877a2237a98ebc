/* params_internal.h - what params.c (the registry), tensors.c (a tensor's registration) and
 * walks.c (the walks over a job's partitions) share. */
#ifndef TS_SHARD_PARAMS_INTERNAL_H
#define TS_SHARD_PARAMS_INTERNAL_H

#include "params.h"

/* The job named id, or NULL. The caller keeps it from being released: it holds snap_mu, or
 * life for reading, or mu. */
struct shard_job *params_find_job(struct shard_params *sp, const char *id);

/* The job js names, created by the first registration (a tensor's or a table's) with its
 * settings; later ones must repeat them (TS_ESTATE). *made: this call created it. mu held. */
ts_status params_get_job(struct shard_params *sp, const Tessera__V1__JobSpec *js,
                         struct shard_job **out, bool *made, struct ts_err *err) TS_MUST_CHECK;
/* Frees tensor t (not installed in a job, or taken out of it): its partitions, per-partition
 * arrays and shared region. NULL: nothing. */
void params_tensor_free(struct shard_tensor *t);
/* A job a refused registration made, which nothing else took up meanwhile (no tensor, no
 * table, none being made), is dropped: state as it was. mu held. */
void params_drop_unused(struct shard_params *sp, struct shard_job *sj);

/* Where this shard stands in partition p's chain under cl's map (placed with t's name and
 * salt): whether it holds the partition, whether as the head, and the shard after it (0:
 * none). */
struct params_place {
    bool held, head;
    uint32_t prev, next;               /* the shards before and after it (0: none) */
    size_t len;                        /* the chain's */
    uint32_t replicas;                 /* the map's chain length (what a shorter chain lacks) */
    /* Joining (docs/replication.md): whether this shard is a joining member of the chain
     * (it gets its copy from the head's image), and how many of the chain's members are. */
    bool joining;
    size_t joiners;
};
ts_status params_place_of(struct ts_cluster *cl, uint32_t my_id, const struct shard_tensor *t,
                          uint32_t p, struct params_place *at, struct ts_err *err) TS_MUST_CHECK;
/* Whether joining shard id was given every tensor sj has now (repair.c); mu held. */
bool params_introduced(const struct shard_job *sj, uint32_t id);

/* Creates partition p of t, where this shard stands at `at` in its chain: in t's shared region
 * if it has (or can now have) one, held if it heads a chain of more than one shard. The caller
 * charged it to the budget and counts it. */
ts_status params_new_part(struct shard_job *sj, struct shard_tensor *t, uint32_t p,
                          const struct params_place *at, struct ts_err *err) TS_MUST_CHECK;
/* params_new_part of a copy this shard did not hold: charged to the budget (TS_ENOMEM, nothing
 * created, if over it) and counted. mu held. */
ts_status params_add_copy(struct shard_params *sp, struct shard_job *sj, struct shard_tensor *t,
                          uint32_t part, const struct params_place *at,
                          struct ts_err *err) TS_MUST_CHECK;

/* Snapshot m's entry for tensor t, which must have t's shape and partitioning; NULL with *st
 * set otherwise. */
const ts_tensor_manifest *params_manifest_tensor(const ts_manifest *m,
                                                 const struct shard_tensor *t, ts_status *st,
                                                 struct ts_err *err);
/* One partition of a snapshot, read from the shard's store into a partition: the ctx of
 * ts_part_restore and ts_part_rollback's load (ts_part_load_fn), which takes the manifest's
 * update count where it has one. */
struct params_restore {
    struct shard_params *sp;
    const ts_manifest *m;
    const ts_tensor_manifest *tm;
    const ts_partition_manifest *pm;
};
ts_status params_restore_load(void *ctx, float *value, float *state, uint64_t *updates,
                              struct ts_err *err);

/* sj's settings as a registration carries them, and a RegisterTensor request for tensor t
 * of sj as its workers sent it (repair.c introduces a job to a joining shard with it;
 * durable.c logs it). The caller's storage holds what they point to; strings sj's and t's. */
void params_job_spec(const struct shard_job *sj, Tessera__V1__JobSpec *js);
void params_tensor_request(const struct shard_job *sj, const struct shard_tensor *t,
                           Tessera__V1__JobSpec *js, Tessera__V1__TensorSpec *ts,
                           Tessera__V1__RegisterTensorRequest *req);

#endif
