/* datamap.h - the data-checksum map of each job, kept by the master.
 *
 * Every worker hashes the data partitions it loaded (lib/data) and sends the list before it
 * trains (CheckData). The reference for a job is the map of the snapshot the cluster restored,
 * if any, else the first worker's; a worker whose list differs from it in any partition is
 * refused (FAILED_PRECONDITION naming the partition, its file, both hashes and whose they
 * are). Snapshots record the job's map in their manifests (data_checksums).
 * Ownership: the map owns copies of everything. Threads: safe (one lock). */
#ifndef TS_MASTER_DATAMAP_H
#define TS_MASTER_DATAMAP_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "tessera/v1/master.pb-c.h"
#include "util/names.h"
#include "tessera/v1/snapshot.pb-c.h"
#include "util/err.h"

#include "jobs.h"
#include "rpc/rpc.h"

/* A map is kept only for a job that holds resources (jobs.h), so --max-jobs bounds them. */
#define DATAMAP_MAX_JOBS JOBS_MAX

struct datamap_entry {
    char name[129];
    char file[257];
    uint8_t sha[32];
};

struct datamap_job {
    char job[TS_JOB_ID_MAX + 1];
    char source[96];            /* "rank 0" */
    uint32_t rank;              /* whose map it is */
    struct datamap_entry *e;
    size_t n;
};

struct datamap {
    pthread_mutex_t mu;
    struct datamap_job jobs[DATAMAP_MAX_JOBS];
    size_t njobs;
    struct datamap_job restored;  /* from the --restore snapshot (n 0: none) */
};

void datamap_init(struct datamap *d);
void datamap_fini(struct datamap *d);
/* Takes the restored snapshot's map (source: "snapshot <id>"). */
ts_status datamap_restore(struct datamap *d, const Tessera__V1__Manifest *m, const char *source,
                          struct ts_err *err) TS_MUST_CHECK;
/* Checks req against the job's reference (setting it from req when there is none and
 * may_add: the job is one the master tracks; else TS_ESTATE). On TS_OK *source names the
 * reference. Errors name the field. */
ts_status datamap_check(struct datamap *d, const Tessera__V1__CheckDataRequest *req,
                        bool may_add, char *source, size_t source_len,
                        struct ts_err *err) TS_MUST_CHECK;
/* Forgets job's map (the job was released). */
void datamap_drop(struct datamap *d, const char *job);
/* The job's map as manifest entries: *entries malloc'd (entries and their strings in one
 * block, caller frees *entries with free()), *n entries; none: *n 0. */
ts_status datamap_manifest(struct datamap *d, const char *job,
                           Tessera__V1__Manifest__DataChecksumsEntry ***entries, size_t *n,
                           struct ts_err *err) TS_MUST_CHECK;
/* Every job's reference map as the CheckDataRequest that made it, in call's arena (the
 * master's state file, which restores them with datamap_check); *n of them. */
Tessera__V1__CheckDataRequest **datamap_requests(struct datamap *d, struct ts_rpc_call *call,
                                                 size_t *n);

#endif
