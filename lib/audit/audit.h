/* audit.h - compares two model states at three levels: bits, cosine, distributions.
 *
 * What `tessera verify compare` (and the verify service, later) runs. A model state is a list
 * of named float32 tensors, loaded from a snapshot in a store (by any ref name), a NumPy .npy
 * file or a raw little-endian float32 file. The comparison uses lib/verify's numbers:
 * - bits: per tensor, lib/verify's block comparison (count of differing elements, max ULP,
 *   abs and rel difference, first differing index with both values, blocks differing);
 * - cosine: per tensor; and when both states are the built-in MLP, per layer output on a probe
 *   batch (the first `probe` test images of Fashion-MNIST);
 * - dist: for the MLP, the distribution of its logits on the probe batch (KS, PSI, Jensen-
 *   Shannon of the predicted classes, mean/std, histogram, accuracy of each); for anything
 *   else, the distribution of all values.
 * A snapshot's sparse tables are tensors named "table:NAME" of their rows' values in ascending
 * id (every row's latest record). Bits compares them where both hold the same ids; cosine
 * compares the rows both hold, or a sample of them chosen by a hash of the id
 * (ts_audit_rows_sample), whatever rows either side has besides.
 * Each level passes or fails by documented rules (docs/verify.md); the report says which.
 * Ownership: ts_audit_load fills a state the caller frees with ts_audit_state_free; a report is
 * freed with ts_audit_report_free. Threads: no shared state. Errors name the input. */
#ifndef TS_AUDIT_AUDIT_H
#define TS_AUDIT_AUDIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"
#include "util/err.h"
#include "verify/verify.h"

struct ts_audit_tensor_data {
    char name[129];
    uint64_t numel;
    float *v;
    /* A sparse table's rows (docs/embeddings.md): "table:NAME", numel = rows x dim values in
     * ascending id (distinct), ids[rows] (NULL when no rows); dim 0 for a tensor. Two tables
     * of one dim compare element by element when they hold the same ids; the cosine is over
     * the rows both hold (ts_audit_rows_sample). */
    uint64_t *ids;
    uint64_t rows;
    uint64_t dim;
};

struct ts_audit_state {
    char label[160];                 /* "snapshot 3f2a9c... (step 24)", "a.npy" */
    size_t n;
    struct ts_audit_tensor_data *t;
};

/* Called after each tensor a load reads: its name, and bytes read so far of total. */
struct ts_audit_progress {
    void (*fn)(void *ctx, const char *tensor, uint64_t done, uint64_t total);
    void *ctx;
};

/* Loads spec: an existing file (.npy, else raw float32: one tensor named after the file), or
 * else a snapshot ref resolved in store (which may then not be NULL). TS_ENOTFOUND names spec. */
TS_MUST_CHECK ts_status ts_audit_load(const char *spec, struct ts_store *store,
                                      const struct ts_audit_progress *progress,
                                      struct ts_audit_state *out, struct ts_err *err);
/* Only a snapshot ref, never a file (what a network service may be asked to read). */
TS_MUST_CHECK ts_status ts_audit_load_snapshot(const char *ref, struct ts_store *store,
                                               const struct ts_audit_progress *progress,
                                               struct ts_audit_state *out, struct ts_err *err);
void ts_audit_state_free(struct ts_audit_state *s);

enum { TS_AUDIT_BITS = 1, TS_AUDIT_COSINE = 2, TS_AUDIT_DIST = 4, TS_AUDIT_ALL = 7 };
/* The mask for a level's name: "bits", "cosine", "dist", "all" (NULL or "": all); -1 if
 * unknown. */
int ts_audit_level(const char *name);

struct ts_audit_opts {
    int levels;            /* TS_AUDIT_* mask; 0: all */
    double cosine_min;     /* 0: TS_VERIFY_COSINE_MIN_F32 */
    double alpha;          /* dist fails when the KS p-value is below it; 0: 0.01 */
    double psi_max;        /* dist fails when PSI is above it; 0: 0.1 */
    int probe;             /* MLP probe images; 0: 1000 */
    const char *data_dir;  /* Fashion-MNIST; NULL: TS_FMNIST_DIR */
    uint64_t rows_sample;  /* a table's cosine: at most this many of the rows both sides
                            * hold; 0: TS_AUDIT_ROWS_SAMPLE; TS_AUDIT_ALL_ROWS: all of them */
};

#define TS_AUDIT_ROWS_SAMPLE 65536
#define TS_AUDIT_ALL_ROWS UINT64_MAX

struct ts_audit_tensor {
    const char *name;            /* borrowed from a state */
    uint64_t numel;
    bool only_a, only_b, shape_differs;
    struct ts_verify_bits bits;  /* valid unless only_a/only_b/shape_differs/rows_differ */
    double cosine;
    /* Two tables of one name and dim (table): rows both hold (common), only one side holds,
     * and sampled of the common ones; cosine is then over the sampled rows' values
     * concatenated, row_cosine_min the least of each sampled row's own cosine (both as
     * ts_audit_rows_cosine). rows_differ: other ids (bits fails, bits not compared). */
    bool table, rows_differ;
    uint64_t rows_common, rows_only_a, rows_only_b, rows_sampled;
    double row_cosine_min;
};

#define TS_AUDIT_HIST_BINS 20

struct ts_audit_report {
    struct ts_audit_tensor *tensors;
    size_t n;
    bool model;                  /* both states are the MLP: layers and dist are on outputs */
    double layer_cosine[3];      /* h1, h2, logits on the probe batch */
    int probe;
    double accuracy_a, accuracy_b;
    const char *dist_of;         /* "logits" or "values" */
    struct ts_verify_ks ks;
    double psi, js_distance, mean_a, std_a, mean_b, std_b;
    double edges[TS_AUDIT_HIST_BINS + 1];
    uint64_t hist_a[TS_AUDIT_HIST_BINS], hist_b[TS_AUDIT_HIST_BINS];
    bool pass_bits, pass_cosine, pass_dist, pass;
    int levels;
};

/* Compares a and b at o->levels. TS_OK means the comparison ran (pass or not: see report).
 * Errors: TS_ENOMEM, TS_ENOTFOUND (the probe data), TS_EINVAL (values the statistics cannot
 * take, e.g. NaN in dist). */
TS_MUST_CHECK ts_status ts_audit_compare(const struct ts_audit_state *a,
                                         const struct ts_audit_state *b,
                                         const struct ts_audit_opts *o,
                                         struct ts_audit_report *r, struct ts_err *err);
void ts_audit_report_free(struct ts_audit_report *r);

/* The rows of two tables that a cosine compares: of ids a[na] and b[nb] (each ascending and
 * distinct), the ones both hold, or when more than k of them (k 0: no limit) the k whose
 * ts_mix64(id) (lib/data/splitmix.h, a bijection) are smallest: a choice by the ids alone, so
 * every run, and a and b swapped, pick the same rows, and a sample of k is part of one of k+1.
 * ia[n] and ib[n] are the sampled rows' indexes into a and b, in ascending id; the counts
 * are of all rows. Free with ts_audit_rows_free. Errors: TS_ENOMEM. */
struct ts_audit_rows {
    size_t *ia, *ib;
    size_t n;
    uint64_t common, only_a, only_b;
};
TS_MUST_CHECK ts_status ts_audit_rows_sample(const uint64_t *a, size_t na, const uint64_t *b,
                                             size_t nb, uint64_t k, struct ts_audit_rows *out,
                                             struct ts_err *err);
void ts_audit_rows_free(struct ts_audit_rows *r);

/* The cosine of tables va and vb (rows of dim values) over rows: *cosine of the sampled rows'
 * values concatenated, *row_min the least of each row's own cosine. Both as
 * ts_verify_cosine_f32: a row zero on both sides is 1 (the same), zero on one side only 0, a
 * NaN or Inf makes it NaN (and *row_min NaN), which fails any threshold. No rows sampled:
 * 1 for both when neither side holds any row, else 0 (nothing in common). */
TS_MUST_CHECK ts_status ts_audit_rows_cosine(const float *va, const float *vb, uint64_t dim,
                                             const struct ts_audit_rows *rows, double *cosine,
                                             double *row_min, struct ts_err *err);

#endif
