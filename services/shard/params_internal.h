/* params_internal.h - what params.c (the registry) and walks.c (the walks over a job's
 * partitions) share. */
#ifndef TS_SHARD_PARAMS_INTERNAL_H
#define TS_SHARD_PARAMS_INTERNAL_H

#include "params.h"

/* The job named id, or NULL. The caller keeps it from being released: it holds snap_mu, or
 * life for reading, or mu. */
struct shard_job *params_find_job(struct shard_params *sp, const char *id);

#endif
