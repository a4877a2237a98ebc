/* bits.c - bit-level and cosine comparison of two tensors.
 *
 * The question an auditor asks first is "are these bits the same?", and usually they are, so
 * the common case must cost no more than reading the data: each block is memcmp'd, and only a
 * block that differs is walked element by element (walk.c: one pass for the count, ULP, abs
 * and rel; the first index and the index of the largest ULP from short re-scans). SHA-256
 * per block is optional because it, not the comparison, then sets the speed.
 *
 * Cosine sums in double in a fixed order: element i goes to partial sum i mod 8 and the eight
 * partials are combined as a tree. The order does not depend on the CPU or compiler (no
 * -ffast-math, no FMA contraction under -std=c11), so two machines agree on the bits. */
#include <math.h>
#include <string.h>

#include <openssl/evp.h>

#include "verify/internal.h"
#include "verify/verify.h"

size_t ts_verify_dtype_size(enum ts_verify_dtype dt)
{
    return dt == TS_VERIFY_F32 ? 4 : dt == TS_VERIFY_F64 ? 8 : 0;
}

const char *ts_verify_dtype_name(enum ts_verify_dtype dt)
{
    return dt == TS_VERIFY_F32 ? "f32" : dt == TS_VERIFY_F64 ? "f64" : "?";
}

/* ---- ULP ---- */

uint64_t ts_verify_ulp_f32(float a, float b)
{
    uint32_t ua, ub;
    memcpy(&ua, &a, 4);
    memcpy(&ub, &b, 4);
    return ts__verify_ulp32(ua, ub);
}

uint64_t ts_verify_ulp_f64(double a, double b)
{
    uint64_t ua, ub;
    memcpy(&ua, &a, 8);
    memcpy(&ub, &b, 8);
    return ts__verify_ulp64(ua, ub);
}

/* ---- bit comparison ---- */

/* The ULP of element i of a differing block, read as dtype. */
static uint64_t ulp_at(const char *pa, const char *pb, size_t i, size_t es)
{
    uint32_t a32, b32;
    uint64_t a64, b64;
    if (es == 4) {
        memcpy(&a32, pa + i * 4, 4);
        memcpy(&b32, pb + i * 4, 4);
        return ts__verify_ulp32(a32, b32);
    }
    memcpy(&a64, pa + i * 8, 8);
    memcpy(&b64, pb + i * 8, 8);
    return ts__verify_ulp64(a64, b64);
}

static double value_at(const char *p, size_t i, size_t es)
{
    float f;
    double d;
    if (es == 4) {
        memcpy(&f, p + i * 4, 4);
        return f;
    }
    memcpy(&d, p + i * 8, 8);
    return d;
}

/* Walks a block that failed memcmp and folds it into bk and r. The walk returns only counts
 * and maxima; the two indexes come from short re-scans, needed at most once per block (the
 * first difference) or when the block raised the maximum ULP. */
static void walk_block(struct ts_verify_bits *r, struct ts_verify_block *bk, const char *pa,
                       const char *pb, size_t m, size_t es)
{
    struct ts__verify_walk w = { 0 };
    size_t i = 0;

    if (es == 4)
        ts__verify_walk32((const uint32_t *)pa, (const uint32_t *)pb, m, &w);
    else
        ts__verify_walk64((const uint64_t *)pa, (const uint64_t *)pb, m, &w);
    bk->ndiff = w.ndiff;
    bk->max_ulp = w.max_ulp;
    bk->max_abs = w.max_abs;
    r->nnan += w.nnan;
    r->max_abs = w.max_abs > r->max_abs ? w.max_abs : r->max_abs;
    r->max_rel = w.max_rel > r->max_rel ? w.max_rel : r->max_rel;
    if (!r->has_diff && w.ndiff > 0) {
        while (memcmp(pa + i * es, pb + i * es, es) == 0)
            i++;
        r->has_diff = true;
        r->first_index = bk->first + i;
        r->first_a = value_at(pa, i, es);
        r->first_b = value_at(pb, i, es);
    }
    if (w.max_ulp > r->max_ulp) {
        for (i = 0; ulp_at(pa, pb, i, es) != w.max_ulp; i++)
            ;
        r->max_ulp = w.max_ulp;
        r->max_ulp_index = bk->first + i;
    }
}

static ts_status sha(EVP_MD_CTX *ctx, const void *p, size_t len, uint8_t out[32],
                     struct ts_err *err)
{
    unsigned olen = 0;
    if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1 || EVP_DigestUpdate(ctx, p, len) != 1 ||
        EVP_DigestFinal_ex(ctx, out, &olen) != 1 || olen != TS_VERIFY_SHA_LEN)
        return ts_err_set(err, TS_EINTERNAL, "bits: OpenSSL SHA-256 failed");
    return TS_OK;
}

void ts_verify_bits_init(struct ts_verify_bits *r)
{
    memset(r, 0, sizeof(*r));
}

static ts_status check_opts(const struct ts_verify_bits_opts *o, enum ts_verify_dtype *dt,
                            size_t *block, struct ts_err *err)
{
    size_t es;
    *dt = o && o->dtype ? o->dtype : TS_VERIFY_F32;
    *block = o && o->block_bytes ? o->block_bytes : TS_VERIFY_DEFAULT_BLOCK;
    es = ts_verify_dtype_size(*dt);
    if (es == 0)
        return ts_err_set(err, TS_EINVAL, "bits: dtype %d, want f32 or f64", (int)*dt);
    if (*block % es != 0)
        return ts_err_set(err, TS_EINVAL, "bits: block_bytes %zu is not a multiple of %zu",
                          *block, es);
    return TS_OK;
}

size_t ts_verify_nblocks(size_t n, const struct ts_verify_bits_opts *o)
{
    enum ts_verify_dtype dt;
    size_t block, per;
    if (check_opts(o, &dt, &block, NULL) != TS_OK)
        return 0;
    per = block / ts_verify_dtype_size(dt);
    return n / per + (n % per != 0);
}

ts_status ts_verify_bits_update(struct ts_verify_bits *r, const void *a, const void *b,
                                size_t n, const struct ts_verify_bits_opts *o,
                                struct ts_verify_block *blocks, struct ts_err *err)
{
    enum ts_verify_dtype dt;
    size_t block, es, per;
    EVP_MD_CTX *ctx = NULL;
    ts_status st = check_opts(o, &dt, &block, err);

    if (st != TS_OK)
        return st;
    es = ts_verify_dtype_size(dt);
    per = block / es;
    if (o && o->sha256 && !(ctx = EVP_MD_CTX_new()))
        return ts_err_set(err, TS_ENOMEM, "bits: EVP_MD_CTX_new failed");
    for (size_t first = 0, k = 0; first < n && st == TS_OK; first += per, k++) {
        size_t m = n - first < per ? n - first : per;
        const char *pa = (const char *)a + first * es, *pb = (const char *)b + first * es;
        struct ts_verify_block bk = { .first = r->n + first, .n = m };
        bool same = memcmp(pa, pb, m * es) == 0;

        if (!same)
            walk_block(r, &bk, pa, pb, m, es);
        if (ctx) {
            st = sha(ctx, pa, m * es, bk.sha_a, err);
            if (st == TS_OK && same)
                memcpy(bk.sha_b, bk.sha_a, TS_VERIFY_SHA_LEN);
            else if (st == TS_OK)
                st = sha(ctx, pb, m * es, bk.sha_b, err);
        }
        r->ndiff += bk.ndiff;
        r->nblocks++;
        r->nblocks_diff += !same;
        if (blocks)
            blocks[k] = bk;
    }
    EVP_MD_CTX_free(ctx);
    r->n += n;
    return st;
}

ts_status ts_verify_bits_compare(const void *a, const void *b, size_t n,
                                 const struct ts_verify_bits_opts *o, struct ts_verify_bits *r,
                                 struct ts_verify_block *blocks, struct ts_err *err)
{
    ts_verify_bits_init(r);
    return ts_verify_bits_update(r, a, b, n, o, blocks, err);
}

/* ---- cosine ---- */

/* Eight interleaved partial sums of x*y, x*x and y*y, combined as a fixed tree. */
#define COS_LANES 8

static double tree8(const double *s)
{
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

static double cosine_of(double dot, double na, double nb)
{
    if (isnan(dot) || isnan(na) || isnan(nb) || isinf(na) || isinf(nb))
        return NAN;
    if (na == 0 && nb == 0)
        return 1.0;
    if (na == 0 || nb == 0)
        return 0.0;
    /* sqrt(na nb) makes cos(a, a) exactly 1 where the product neither overflows nor
     * underflows; rounding may still step past +-1 elsewhere, so clamp. */
    double p = na * nb, c = dot / (isfinite(p) && p > 1e-300 ? sqrt(p) : sqrt(na) * sqrt(nb));
    return c > 1 ? 1 : c < -1 ? -1 : c;
}

double ts_verify_cosine_f32(const float *a, const float *b, size_t n)
{
    double d[COS_LANES] = { 0 }, sa[COS_LANES] = { 0 }, sb[COS_LANES] = { 0 };
    size_t i = 0;

    /* Products of two floats are exact in double; only the sums round. */
    for (; i + COS_LANES <= n; i += COS_LANES)
        for (int l = 0; l < COS_LANES; l++) {
            double x = a[i + l], y = b[i + l];
            d[l] += x * y;
            sa[l] += x * x;
            sb[l] += y * y;
        }
    for (int l = 0; i < n; i++, l++) {
        double x = a[i], y = b[i];
        d[l] += x * y;
        sa[l] += x * x;
        sb[l] += y * y;
    }
    return cosine_of(tree8(d), tree8(sa), tree8(sb));
}

double ts_verify_cosine_f64(const double *a, const double *b, size_t n)
{
    double d[COS_LANES] = { 0 }, sa[COS_LANES] = { 0 }, sb[COS_LANES] = { 0 };
    size_t i = 0;

    for (; i + COS_LANES <= n; i += COS_LANES)
        for (int l = 0; l < COS_LANES; l++) {
            d[l] += a[i + l] * b[i + l];
            sa[l] += a[i + l] * a[i + l];
            sb[l] += b[i + l] * b[i + l];
        }
    for (int l = 0; i < n; i++, l++) {
        d[l] += a[i] * b[i];
        sa[l] += a[i] * a[i];
        sb[l] += b[i] * b[i];
    }
    return cosine_of(tree8(d), tree8(sa), tree8(sb));
}
