/* verify.h - the numbers behind an audit: are two model states the same, and if not, how do
 * they differ?
 *
 * Three levels (docs/verify.md). Bits: two tensors compared bit for bit, block by block, with a
 * SHA-256 per block, the count of differing elements, the largest ULP, absolute and relative
 * difference and the first differing index with both values. Module: the cosine similarity
 * of two tensors. System: the distributions of two samples (model outputs, or the values of
 * two parameter files): the two-sample Kolmogorov-Smirnov statistic and p-value, population
 * stability index, Jensen-Shannon distance, histograms, mean and standard deviation. And the
 * files they come in: NumPy .npy (format 1.0-3.0, '<f4'/'<f8', C order) and raw
 * little-endian float32.
 *
 * The statistics reproduce SciPy/NumPy as Debian ships them (scipy 1.10.1, numpy 1.24):
 * ts_verify_ks_2samp is scipy.stats.ks_2samp (two-sided, methods auto/exact/asymp, ties as
 * scipy treats them), ts_verify_js_distance is scipy.spatial.distance.jensenshannon,
 * histograms are numpy.histogram over the joint range, mean/std are numpy.mean/numpy.std
 * (pairwise summation as numpy does it). tests/integration/test_verify_scipy.py checks them
 * against scipy. docs/verify-stats.md gives the definitions and every choice made here
 * (bins, epsilon, ddof, NaN policy, recommended cosine thresholds).
 *
 * Ownership: every function borrows its inputs and keeps none. ts_verify_npy_read/_parse and
 * ts_verify_raw_read_f32 fill a struct ts_verify_array whose data the caller frees with
 * ts_verify_array_fini(); everything else writes only into caller-provided memory.
 * Threads: no shared state; every function may run on several threads at once.
 * Errors: TS_EINVAL (an argument or a value is unusable; the message names it and the index),
 * TS_ENOMEM, TS_EINTERNAL (OpenSSL failed), and for files TS_ENOTFOUND, TS_EIO (names the
 * path and errno), TS_ECORRUPT (a malformed or truncated file; names the path and what is
 * wrong). */
#ifndef TS_VERIFY_VERIFY_H
#define TS_VERIFY_VERIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* ---- element types ---- */

enum ts_verify_dtype {
    TS_VERIFY_F32 = 1, /* IEEE binary32, little-endian; numpy '<f4' */
    TS_VERIFY_F64 = 2, /* IEEE binary64, little-endian; numpy '<f8' */
};

/* Bytes per element of dt; 0 for an unknown dtype. */
size_t ts_verify_dtype_size(enum ts_verify_dtype dt);
/* "f32", "f64"; "?" for an unknown dtype. Static storage. */
const char *ts_verify_dtype_name(enum ts_verify_dtype dt);

/* ---- ULP distance ---- */

/* What ts_verify_ulp_f32/_f64 return when the distance is undefined: the bits differ and at
 * least one value is NaN. Never a real distance (the largest, -Inf to +Inf, is < 2^64 - 1). */
#define TS_VERIFY_ULP_NAN UINT64_MAX

/* The number of representable values one must step through to get from a to b: 0 when the
 * bits are equal (NaNs included) and for +0 vs -0; 1 for adjacent values (FLT_MAX and +Inf,
 * the smallest denormal and +0, the largest denormal and FLT_MIN); across the sign boundary
 * the steps through zero count once (-min_denormal to +min_denormal is 2). +-Inf are the
 * ends of the line. TS_VERIFY_ULP_NAN when the bits differ and either is NaN. */
uint64_t ts_verify_ulp_f32(float a, float b);
uint64_t ts_verify_ulp_f64(double a, double b);

/* ---- bit comparison ---- */

#define TS_VERIFY_DEFAULT_BLOCK (1u << 20) /* bytes per block: 1 MiB, like the store's chunks */
#define TS_VERIFY_SHA_LEN 32

struct ts_verify_bits_opts {
    enum ts_verify_dtype dtype; /* 0: TS_VERIFY_F32 */
    size_t block_bytes;  /* 0: TS_VERIFY_DEFAULT_BLOCK; a multiple of the element size */
    /* true: fill each block's sha_a/sha_b (OpenSSL EVP SHA-256 of the block's bytes; an
     * equal block is hashed once). Then SHA-256, not the comparison, sets the speed: one
     * pass (1.7 GB/s with SHA-NI here) per equal block, two per differing one. */
    bool sha256;
};

/* One block's figures. Indexes are of elements, from the start of the whole comparison. */
struct ts_verify_block {
    uint64_t first;          /* index of the block's first element */
    uint64_t n;              /* elements in the block (the last may be short) */
    uint64_t ndiff;          /* elements whose bits differ */
    uint64_t max_ulp;        /* over differing pairs where both are numbers; 0 if none */
    double max_abs;          /* likewise |a - b| */
    uint8_t sha_a[TS_VERIFY_SHA_LEN], sha_b[TS_VERIFY_SHA_LEN]; /* zeros unless opts.sha256 */
};

/* The result over everything compared. A pair "differs" when its bits differ: +0 vs -0
 * differs (0 ULP, 0 abs), two NaNs with the same bits do not. Pairs where the bits differ and
 * either value is NaN are counted in ndiff and nnan and left out of max_ulp/abs/rel (there is
 * no distance); a pair with an infinity and a different value has max_abs = max_rel = +Inf.
 * rel = |a - b| / max(|a|, |b|), in [0, 2] for finite values. */
struct ts_verify_bits {
    uint64_t n;              /* elements compared */
    uint64_t ndiff;          /* elements whose bits differ */
    uint64_t nnan;           /* of those, pairs with a NaN (ULP undefined) */
    uint64_t nblocks, nblocks_diff;
    uint64_t max_ulp;        /* 0 when no numeric pair differs */
    uint64_t max_ulp_index;  /* first index where max_ulp occurs (valid when max_ulp > 0) */
    double max_abs, max_rel; /* computed in double */
    bool has_diff;           /* ndiff > 0; then: */
    uint64_t first_index;    /* the first differing element */
    double first_a, first_b; /* its two values (f32 converted exactly) */
};

/* Starts an empty result (no elements compared). */
void ts_verify_bits_init(struct ts_verify_bits *r);
/* Number of blocks ts_verify_bits_update cuts n elements into: ceil(n * size / block). */
size_t ts_verify_nblocks(size_t n, const struct ts_verify_bits_opts *o);
/* Compares a[0..n) with b[0..n) (elements of o->dtype; o may be NULL for the defaults) block
 * by block and folds the result into *r: indexes continue from r->n, so a long tensor may be
 * fed in pieces (each a whole number of blocks, except the last). blocks: NULL, or
 * ts_verify_nblocks(n, o) entries that receive each block's figures. A block whose bytes are
 * equal (memcmp) is not examined element by element; one that differs is walked once (8
 * elements at a time with AVX2 where the CPU has it; the figures do not depend on it).
 * TS_EINVAL for a bad dtype or block size; TS_ENOMEM, TS_EINTERNAL if OpenSSL fails. On
 * failure *r is unspecified. */
TS_MUST_CHECK ts_status ts_verify_bits_update(struct ts_verify_bits *r, const void *a,
                                              const void *b, size_t n,
                                              const struct ts_verify_bits_opts *o,
                                              struct ts_verify_block *blocks,
                                              struct ts_err *err);
/* ts_verify_bits_init then ts_verify_bits_update. */
TS_MUST_CHECK ts_status ts_verify_bits_compare(const void *a, const void *b, size_t n,
                                               const struct ts_verify_bits_opts *o,
                                               struct ts_verify_bits *r,
                                               struct ts_verify_block *blocks,
                                               struct ts_err *err);

/* ---- cosine similarity ---- */

/* Recommended minimum cosine similarity for "the same tensor up to rounding", per dtype of
 * the values compared. 1 - cos ~= rms(relative difference)^2 / 2, so these allow an rms
 * relative drift of about 1.4e-3 (f32), 1.4e-2 (f16), 4.5e-2 (bf16), 1.4e-6 (f64): several
 * times what summation-order differences produce. Reasoning in docs/verify-stats.md. */
#define TS_VERIFY_COSINE_MIN_F64 (1.0 - 1e-12)
#define TS_VERIFY_COSINE_MIN_F32 (1.0 - 1e-6)
#define TS_VERIFY_COSINE_MIN_F16 (1.0 - 1e-4)
#define TS_VERIFY_COSINE_MIN_BF16 (1.0 - 1e-3)

/* dot(a, b) / (|a| |b|), accumulated in double in a fixed order (8 interleaved partial sums
 * combined as a tree), so every build and CPU gives the same bits. Two all-zero vectors (and
 * n == 0) give 1.0 (identical); one all-zero vector and one not give 0.0; a NaN or Inf
 * anywhere gives NaN (use the bit level to say where). Cannot fail. */
double ts_verify_cosine_f32(const float *a, const float *b, size_t n);
double ts_verify_cosine_f64(const double *a, const double *b, size_t n);

/* ---- two-sample Kolmogorov-Smirnov ---- */

enum ts_verify_ks_method {
    TS_VERIFY_KS_AUTO = 0, /* exact if max(na, nb) <= 10000, else asymptotic (scipy's rule) */
    TS_VERIFY_KS_EXACT,    /* the exact path-counting distribution (Hodges 1958) */
    TS_VERIFY_KS_ASYMP,    /* kstwo.sf(D, round(na*nb/(na+nb))) */
};

struct ts_verify_ks {
    double statistic;      /* D = max |ECDF_a - ECDF_b|; on the exact path snapped to h/lcm */
    double pvalue;         /* two-sided; NaN where scipy gives NaN (na = nb = 1, asymp) and
                            * if kstwo could not allocate */
    double location;       /* the sample value where D is attained (scipy's
                            * statistic_location) */
    int sign;              /* +1: ECDF_a - ECDF_b = +D there; -1: = -D */
    enum ts_verify_ks_method method; /* EXACT or ASYMP: what computed pvalue */
    bool fell_back;        /* the exact path was chosen but failed (scipy warns and goes on
                            * with asymp), or EXACT was asked with lcm(na, nb) too large */
};

/* scipy.stats.ks_2samp(a, b, alternative='two-sided', method=...): the samples need not be
 * sorted, may hold ties and +-Inf. TS_EINVAL if na or nb is 0 or a value is NaN (the message
 * names the sample and index), TS_ENOMEM. Copies and sorts both samples: O((na + nb) log)
 * time, (na + nb) doubles of memory; the exact p-value costs up to O(na * nb). */
TS_MUST_CHECK ts_status ts_verify_ks_2samp(const double *a, size_t na, const double *b,
                                           size_t nb, enum ts_verify_ks_method method,
                                           struct ts_verify_ks *out, struct ts_err *err);

/* scipy.stats.kstwo.sf(d, n): P(D_n >= d) for the two-sided one-sample statistic, by Simard
 * and L'Ecuyer's choice among Ruben-Gambino, Durbin/Marsaglia-Tsang-Wang, Pomeranz,
 * Pelz-Good and 2 * smirnov. NaN for n == 0, n > INT32_MAX, d NaN, or when the few hundred
 * KiB the matrix algorithms need cannot be allocated. */
double ts_verify_kstwo_sf(uint64_t n, double d);
/* scipy.special.smirnov(n, d): P(D+_n >= d), the one-sided one-sample survival function,
 * summed in double-double arithmetic (van Mulbregt 2018). NaN outside n > 0, 0 <= d <= 1. */
double ts_verify_smirnov_sf(int n, double d);

/* ---- distributions ---- */

/* numpy.sum of x[0..n) with numpy's bits: pieces of 8192 (its iterator buffer) added in
 * turn, each summed pairwise in numpy's blocking (8 partial sums, blocks of 128). */
double ts_verify_sum(const double *x, size_t n);

/* Mean and standard deviation as numpy.mean(x) and numpy.std(x, ddof=ddof): ddof 0 is the
 * population std (numpy's default), 1 the sample std. std may be NULL. TS_EINVAL if n is 0,
 * n <= ddof, or a value is NaN or infinite (names the index). */
TS_MUST_CHECK ts_status ts_verify_mean_std(const double *x, size_t n, unsigned ddof,
                                           double *mean, double *std, struct ts_err *err);

/* Histograms of a and b over their joint range: numpy.histogram(s, bins=nbins,
 * range=(lo, hi)) with lo/hi the min/max of both samples (lo - 0.5, hi + 0.5 when equal):
 * nbins equal-width bins, the last one closed. edges: nbins + 1 entries (may be NULL); ca,
 * cb: nbins counts each. TS_EINVAL for an empty sample, nbins 0, or a NaN or infinite value
 * (named). */
TS_MUST_CHECK ts_status ts_verify_histogram(const double *a, size_t na, const double *b,
                                            size_t nb, size_t nbins, double *edges,
                                            uint64_t *ca, uint64_t *cb, struct ts_err *err);

#define TS_VERIFY_PSI_BINS 10    /* deciles of the reference sample */
#define TS_VERIFY_PSI_EPS 1e-4   /* an empty bin's proportion; see docs/verify-stats.md */

/* Population stability index of `actual` against `ref`: bins are the nbins quantile bins of
 * ref (0: TS_VERIFY_PSI_BINS; cut points numpy.quantile(ref, k/nbins), method 'linear';
 * bin i holds cut[i-1] < x <= cut[i], the outer bins open), proportions p (ref) and q
 * (actual) with any 0 replaced by TS_VERIFY_PSI_EPS, PSI = sum (q - p) ln(q / p).
 * Rule of thumb: < 0.1 stable, 0.1-0.25 drifting, > 0.25 shifted. TS_EINVAL as for
 * ts_verify_histogram. */
TS_MUST_CHECK ts_status ts_verify_psi(const double *ref, size_t nref, const double *actual,
                                      size_t nactual, size_t nbins, double *psi,
                                      struct ts_err *err);

/* scipy.spatial.distance.jensenshannon(p, q, base): each vector is normalised to sum 1, then
 * sqrt((KL(p||m) + KL(q||m)) / 2) with m = (p + q) / 2, natural log when base is 0, else log
 * base `base`. In [0, 1] for base 2. TS_EINVAL for n 0, a negative or non-finite entry, a
 * vector summing to 0, or base < 0, base == 1. */
TS_MUST_CHECK ts_status ts_verify_js_distance(const double *p, const double *q, size_t n,
                                              double base, double *out, struct ts_err *err);

/* ---- files: NumPy .npy and raw float32 ---- */

#define TS_VERIFY_NPY_MAXDIM 32           /* numpy 1.x's NPY_MAXDIMS */
#define TS_VERIFY_NPY_MAX_HEADER (1u << 20) /* a longer header is refused as corrupt */

/* An n-dimensional array in host (little-endian) order, C order. */
struct ts_verify_array {
    enum ts_verify_dtype dtype;
    int ndim;                                /* 0 for a scalar */
    uint64_t shape[TS_VERIFY_NPY_MAXDIM];
    uint64_t n;                              /* elements: the product of shape (1 if ndim 0) */
    void *data;                              /* n * ts_verify_dtype_size(dtype) bytes */
};

/* Frees a->data and zeroes *a; NULL is a no-op. */
void ts_verify_array_fini(struct ts_verify_array *a);

/* Parses a .npy image buf[0..len) (name: the file's name, for messages). Format versions 1.0,
 * 2.0 and 3.0 (3.0 differs only in allowing UTF-8 in the header); descr '<f4' or '<f8'
 * ('|'/'=' byte order accepted as little-endian here); fortran_order False; shape a tuple of
 * integers. The data must be exactly n * size bytes. On TS_OK *out holds a malloc'd copy of
 * the data (free with ts_verify_array_fini). TS_ECORRUPT: bad magic, header, truncation or
 * trailing bytes; TS_EINVAL: a valid header asking for what is not supported (fortran_order
 * True, big-endian, another dtype, more than TS_VERIFY_NPY_MAXDIM dimensions). Messages
 * start with name. */
TS_MUST_CHECK ts_status ts_verify_npy_parse(const void *buf, size_t len, const char *name,
                                            struct ts_verify_array *out, struct ts_err *err);
/* Reads and parses the .npy file at path. TS_ENOTFOUND if it does not exist, TS_EIO. */
TS_MUST_CHECK ts_status ts_verify_npy_read(const char *path, struct ts_verify_array *out,
                                           struct ts_err *err);
/* Writes a as a .npy file byte for byte as numpy.save would (format 1.0, which any header of
 * at most TS_VERIFY_NPY_MAXDIM dimensions fits; '<f4' or '<f8'; the same padding) to path,
 * replaced atomically and durably (util/file.h), so path is either old/absent or complete.
 * TS_EINVAL if a->n is not the product of a->shape. */
TS_MUST_CHECK ts_status ts_verify_npy_write(const char *path, const struct ts_verify_array *a,
                                            struct ts_err *err);
/* Reads a raw little-endian float32 file: ndim 1, n = size / 4. TS_ECORRUPT if the size is
 * not a multiple of 4. */
TS_MUST_CHECK ts_status ts_verify_raw_read_f32(const char *path, struct ts_verify_array *out,
                                               struct ts_err *err);
/* Writes x[0..n) as raw little-endian float32, as ts_verify_npy_write writes. */
TS_MUST_CHECK ts_status ts_verify_raw_write_f32(const char *path, const float *x, size_t n,
                                                struct ts_err *err);

#endif
