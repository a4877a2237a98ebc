/* dataplane_facts.h - the shard fuzz_dataplane sets up: its jobs, tensors, maps and workers.
 * In one place, so that fuzz_seeds writes seeds that name what is there (corpus-dataplane). */
#ifndef TS_FUZZ_DATAPLANE_FACTS_H
#define TS_FUZZ_DATAPLANE_FACTS_H

#include <stdbool.h>
#include <stdint.h>

#define DP_FACTS_ME 1                 /* this shard's id */
#define DP_FACTS_OTHER 2              /* the shard that heads the followed tensor */
#define DP_FACTS_EPOCH_A 5            /* map A: this shard alone, chains of 1 */
#define DP_FACTS_EPOCH_B 6            /* map B: both shards, chains of 2 */
#define DP_FACTS_WORKERS 3            /* slots of every job */
#define DP_FACTS_WORKER0 101          /* owns slots 0 and 2 (a combined push); 102 slot 1; 103
                                       * owned slot 0 before */
#define DP_FACTS_JOB_KEY { 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, \
                           0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, \
                           0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, \
                           0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a, 0x5a }

struct dp_facts_job {
    const char *id;
    bool exact;
    int mode;                         /* enum ts_mode */
    uint32_t staleness;
    bool elastic;
    const char *optimizer;
};

/* "shared" alone holds the tensor large enough for a shared region, so that a run that does
 * not name it does not pay for making one. */
#define DP_FACTS_JOBS 5
#define DP_FACTS_SHARED 4
static const struct dp_facts_job dp_facts_jobs[DP_FACTS_JOBS] = {
    { "bsp", false, 1, 0, false, "sgd:lr=0.1" },
    { "exact", true, 1, 0, false, "momentum:lr=0.1,momentum=0.9" },
    { "ssp", false, 2, 1, true, "sgd:lr=0.1" },
    { "reduce", true, 4, 0, false, "sgd:lr=0.1" },
    { "shared", false, 1, 0, false, "sgd:lr=0.1" },
};

struct dp_facts_tensor {
    uint32_t id;
    const char *name, *init;
    uint64_t numel, partition_bytes;
    bool follow;                      /* registered under map B: this shard follows it */
    bool shared_only;                 /* only in job "shared" */
};

#define DP_FACTS_TENSORS 3
#define DP_FACTS_FOLLOW 1             /* the followed one's index */
static const struct dp_facts_tensor dp_facts_tensors[DP_FACTS_TENSORS] = {
    { 0, "w", "normal:0.1", 96, 128, false, false },     /* 3 partitions of 32 */
    { 1, "f", "uniform:0.1", 64, 128, true, false },     /* 2 of 32, followed */
    { 2, "big", "zeros", 16384, 16384, false, true },    /* 4 of 4096, in a shared region */
};

/* A HELLO's job by a byte: the five, then one no shard holds. */
static inline const char *dp_facts_job_name(uint8_t b)
{
    return b % (DP_FACTS_JOBS + 1) < DP_FACTS_JOBS ? dp_facts_jobs[b % (DP_FACTS_JOBS + 1)].id
                                                    : "nojob";
}

#endif
