/* worker.h - tessera-worker's options and its trainer (train.c). */
#ifndef TS_WORKER_WORKER_H
#define TS_WORKER_WORKER_H

#include <stdbool.h>
#include <stdint.h>

#include "data/data.h"
#include "tessera.h"

struct train_opts {
    const char *master, *job, *optimizer, *transport, *data_dir;
    uint32_t rank, workers, batch, micro;
    uint32_t epochs;
    uint64_t steps, seed, partition_bytes;
    bool exact, json;
};

/* Trains; returns the process exit code (messages already printed). */
int train_run(const struct train_opts *o);

#endif
