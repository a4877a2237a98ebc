/* data.h - the training data and its schedule.
 *
 * Fashion-MNIST from Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist, gzip
 * IDX files read through zlib), pixels scaled to [0, 1].
 *
 * The schedule is what makes the global batch of every step the same set of samples whatever
 * the worker count: epoch e is a permutation of the training set drawn from (seed, e); step k
 * of an epoch takes samples perm[k*B .. (k+1)*B) (a last partial batch is dropped); the global
 * batch is cut into micro-batches of size m in order, and micro-batch j belongs to worker
 * j % W. Gradients are summed per micro-batch in exact mode, so the grouping never matters.
 * Ownership: a dataset owns its arrays: ts_data_free(). Threads: read-only after load. */
#ifndef TS_DATA_DATA_H
#define TS_DATA_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define TS_FMNIST_DIR "/usr/share/datasets/fashion-mnist"

struct ts_dataset {
    uint32_t n;
    uint32_t dim;             /* 784 */
    float *x;                 /* n x dim */
    uint8_t *y;               /* n labels, 0..9 */
};

/* Loads "train" or "t10k" from dir (NULL: TS_FMNIST_DIR): <set>-images-idx3-ubyte.gz and
 * <set>-labels-idx1-ubyte.gz. *out is written only on TS_OK; free it with ts_data_free().
 * Errors name the file and say what to do: TS_ENOTFOUND for a missing file (install Debian's
 * dataset-fashion-mnist), TS_ECORRUPT for a bad magic, count, image size, label, a gzip error,
 * a truncated file or trailing bytes; TS_EIO, TS_ENOMEM, TS_EINVAL (dir over 100 chars). */
ts_status ts_fmnist_load(const char *dir, bool train, struct ts_dataset *out,
                         struct ts_err *err) TS_MUST_CHECK;
void ts_data_free(struct ts_dataset *d);   /* frees the arrays and zeroes *d; NULL is a no-op */

/* A fingerprint of a dataset for logs, to see that two hosts train on the same data (not a
 * security hash): XXH3-64 of the labels then the pixels as float bytes. */
uint64_t ts_data_digest(const struct ts_dataset *d);

struct ts_schedule {
    uint64_t seed;
    uint32_t n;               /* training samples */
    uint32_t batch;           /* global batch B */
    uint32_t micro;           /* micro-batch m; B % m == 0 */
};

/* TS_EINVAL unless B >= 1, m >= 1, B % m == 0 and B <= n; the calls below assume it holds. */
ts_status ts_schedule_check(const struct ts_schedule *s, struct ts_err *err) TS_MUST_CHECK;
uint32_t ts_schedule_steps_per_epoch(const struct ts_schedule *s);   /* n / B */
/* perm[0..n) for epoch e: Fisher-Yates driven by splitmix64 started from (seed, e), indices
 * drawn without bias; identical on every host and every call. Global step g is step
 * k = g % steps_per_epoch of epoch g / steps_per_epoch. */
void ts_schedule_perm(const struct ts_schedule *s, uint32_t epoch, uint32_t *perm);
/* The micro-batches that worker `rank` of `workers` owns in every step (j % workers == rank),
 * as offsets into the step's batch: writes up to ceil((B/m) / workers) first-sample offsets
 * j*m, ascending, into first[] and returns how many (0 for rank >= workers). Sample i of that
 * micro-batch is perm[k*B + first + i]. */
uint32_t ts_schedule_micro(const struct ts_schedule *s, uint32_t rank, uint32_t workers,
                           uint32_t *first);

/* ---- data checksums (docs/verify.md) ---- */

#define TS_DATA_PARTITION 1000    /* samples per data partition */

struct ts_data_checksum {
    char name[64];            /* "train-images[12000:13000)", "train-labels[...)" */
    char file[64];            /* the file it comes from: "train-images-idx3-ubyte.gz" */
    uint8_t sha256[32];       /* of the decoded samples: pixels as float32 LE, labels as bytes */
};

/* The number of checksums ts_data_checksums gives for d: two per TS_DATA_PARTITION samples
 * (images and labels), the last partition shorter. */
size_t ts_data_checksum_count(const struct ts_dataset *d);
/* SHA-256 of every data partition of d, loaded from set "train" or "t10k", into out
 * (ts_data_checksum_count(d) entries, caller's), in order. */
void ts_data_checksums(const struct ts_dataset *d, const char *set, struct ts_data_checksum *out);

#endif
