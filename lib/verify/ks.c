/* ks.c - the two-sample Kolmogorov-Smirnov test, two-sided, as scipy.stats.ks_2samp.
 *
 * D is the largest distance between the two empirical CDFs. scipy evaluates both ECDFs at
 * every sample value (searchsorted 'right', so a run of ties counts as one step) and takes
 * the argmax/argmin over the samples in their sorted, concatenated order; a merge of the two
 * sorted samples visits the same points with the same double expressions (i/na - j/nb), so D
 * and the location where it is attained come out with scipy's bits.
 *
 * The p-value: 'exact' counts lattice paths (Hodges 1958): for na == nb a closed alternating
 * sum evaluated Horner-style, otherwise the "inside" recursion kept as 1 - p (Viehmann,
 * arXiv:2102.08037), both as scipy 1.10 computes them; a result outside [0, 1] means the
 * recursion lost its precision, and scipy then warns and goes on with 'asymp', as we do
 * (fell_back). 'asymp' is kstwo.sf(D, round(na nb / (na + nb))), kstwo.c. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "verify/verify.h"

#define MAX_AUTO_N 10000 /* scipy: 'auto' is exact up to this sample size */

static int cmp_double(const void *pa, const void *pb)
{
    double a = *(const double *)pa, b = *(const double *)pb;
    return (a > b) - (a < b);
}

static uint64_t gcd64(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* ---- the statistic ---- */

/* Count of s[0..n) <= x, continuing from *i (x never decreases between calls). */
static size_t count_le(const double *s, size_t n, size_t *i, double x)
{
    while (*i < n && s[*i] <= x)
        (*i)++;
    return *i;
}

struct extreme {
    double max, min; /* of cdf_a - cdf_b */
    double at_max, at_min;
};

/* Folds the ECDF difference at every value of `pts` (sorted, n of them) into e, first
 * occurrence winning as with numpy.argmax. */
static void scan(const double *pts, size_t n, const double *a, size_t na, const double *b,
                 size_t nb, struct extreme *e, bool first)
{
    size_t ia = 0, ib = 0;
    for (size_t k = 0; k < n; k++) {
        double x = pts[k];
        double diff = (double)count_le(a, na, &ia, x) / (double)na -
                      (double)count_le(b, nb, &ib, x) / (double)nb;
        if ((first && k == 0) || diff > e->max)
            e->max = diff, e->at_max = x;
        if ((first && k == 0) || diff < e->min)
            e->min = diff, e->at_min = x;
    }
}

/* ---- exact p-values ---- */

/* P(D_{n,n} >= h/n) = 2 (A0 (1 - A1 (1 - A2 (...)))), each A a product of h ratios. */
static double prob_outside_square(uint64_t n, uint64_t h)
{
    double P = 0.0;
    for (int64_t k = (int64_t)floor((double)n / (double)h); k >= 0; k--) {
        double p1 = 1.0;
        for (uint64_t j = 0; j < h; j++)
            p1 = (double)((int64_t)n - k * (int64_t)h - (int64_t)j) * p1 /
                 (double)((int64_t)n + k * (int64_t)h + (int64_t)j + 1);
        P = p1 * (1.0 - P);
    }
    return 2 * P;
}

/* 1 - (paths from (0,0) to (m,n) staying strictly inside |x/m - y/n| < h/lcm) / C(m+n, n),
 * one column at a time over a sliding window of rows (scipy's _stats_pythran). NaN if out
 * of memory. */
static double outer_prob_inside(uint64_t m, uint64_t n, uint64_t g, uint64_t h)
{
    int64_t mg, ng, minj, maxj, curlen, lena;
    double *A, res;

    if (m < n) {
        uint64_t t = m;
        m = n;
        n = t;
    }
    mg = (int64_t)(m / g), ng = (int64_t)(n / g);
    minj = 0;
    maxj = (int64_t)ceil((double)h / (double)mg);
    maxj = maxj < (int64_t)n + 1 ? maxj : (int64_t)n + 1;
    curlen = maxj - minj;
    lena = 2 * maxj + 2 < (int64_t)n + 1 ? 2 * maxj + 2 : (int64_t)n + 1;
    A = malloc(sizeof(double) * (size_t)lena);
    if (!A)
        return NAN;
    for (int64_t i = 0; i < lena; i++)
        A[i] = i < maxj ? 0.0 : 1.0;
    for (int64_t i = 1; i <= (int64_t)m; i++) {
        int64_t lastminj = minj, lastlen = curlen;
        double val;
        minj = (int64_t)floor((double)(ng * i - (int64_t)h) / (double)mg) + 1;
        minj = minj > 0 ? minj : 0;
        minj = minj < (int64_t)n ? minj : (int64_t)n;
        maxj = (int64_t)ceil((double)(ng * i + (int64_t)h) / (double)mg);
        maxj = maxj < (int64_t)n + 1 ? maxj : (int64_t)n + 1;
        if (maxj <= minj) {
            free(A);
            return 1.0;
        }
        val = minj == 0 ? 0.0 : 1.0;
        for (int64_t jj = 0; jj < maxj - minj; jj++) {
            int64_t j = jj + minj;
            val = (A[jj + minj - lastminj] * (double)i + val * (double)j) / (double)(i + j);
            A[jj] = val;
        }
        curlen = maxj - minj;
        for (int64_t t = curlen; t < lastlen; t++) /* carried-over entries back to 1 */
            A[t] = 1;
    }
    res = A[maxj - minj - 1];
    free(A);
    return res;
}

/* scipy's _attempt_exact_2kssamp, two-sided: 1 done, 0 no usable result (go asymptotic),
 * -1 out of memory. */
static int exact(uint64_t n1, uint64_t n2, uint64_t g, double *d, double *prob)
{
    uint64_t lcm = (n1 / g) * n2;
    double h = nearbyint(*d * (double)lcm); /* numpy.round: half to even */

    *d = h * 1.0 / (double)lcm;
    if (h == 0) {
        *prob = 1.0;
        return 1;
    }
    if (n1 == n2)
        *prob = prob_outside_square(n1, (uint64_t)h);
    else if (isnan(*prob = outer_prob_inside(n1, n2, g, (uint64_t)h)))
        return -1;
    return *prob >= 0 && *prob <= 1;
}

/* ---- the test ---- */

static ts_status sorted_copy(const double *x, size_t n, const char *which, double **out,
                             struct ts_err *err)
{
    double *s;

    if (n == 0)
        return ts_err_set(err, TS_EINVAL, "ks_2samp: sample %s is empty", which);
    for (size_t i = 0; i < n; i++)
        if (isnan(x[i]))
            return ts_err_set(err, TS_EINVAL, "ks_2samp: sample %s[%zu] is NaN", which, i);
    s = malloc(sizeof(double) * n);
    if (!s)
        return ts_err_set(err, TS_ENOMEM, "ks_2samp: no memory for %zu values of %s", n,
                          which);
    memcpy(s, x, sizeof(double) * n);
    qsort(s, n, sizeof(double), cmp_double);
    *out = s;
    return TS_OK;
}

/* D, where it is attained and its sign, from the sorted samples (numpy: data_all =
 * concatenate(sorted a, sorted b); argmax/argmin take the first). */
static void statistic(const double *sa, size_t na, const double *sb, size_t nb,
                      struct ts_verify_ks *r)
{
    struct extreme e = { 0 };
    double mins;

    scan(sa, na, sa, na, sb, nb, &e, true);
    scan(sb, nb, sa, na, sb, nb, &e, false);
    mins = -e.min < 0 ? 0 : (-e.min > 1 ? 1 : -e.min);
    if (mins > e.max)
        r->statistic = mins, r->location = e.at_min, r->sign = -1;
    else
        r->statistic = e.max, r->location = e.at_max, r->sign = 1;
}

/* The p-value by method, as ks_2samp chooses and falls back; the exact path snaps D. */
static ts_status pvalue(uint64_t na, uint64_t nb, enum ts_verify_ks_method method,
                        struct ts_verify_ks *r, struct ts_err *err)
{
    uint64_t g = gcd64(na, nb);
    double prob = -INFINITY;

    if (method == TS_VERIFY_KS_AUTO) {
        method = (na > nb ? na : nb) <= MAX_AUTO_N ? TS_VERIFY_KS_EXACT : TS_VERIFY_KS_ASYMP;
    } else if (method == TS_VERIFY_KS_EXACT &&
               (double)(na / g) >= (double)INT32_MAX / (double)(nb / g)) {
        method = TS_VERIFY_KS_ASYMP; /* lcm too large for the lattice */
        r->fell_back = true;
    }
    if (method == TS_VERIFY_KS_EXACT) {
        int ok = exact(na, nb, g, &r->statistic, &prob);
        if (ok < 0)
            return ts_err_set(err, TS_ENOMEM, "ks_2samp: no memory for the exact p-value");
        if (ok == 0) {
            method = TS_VERIFY_KS_ASYMP;
            r->fell_back = true;
        }
    }
    if (method == TS_VERIFY_KS_ASYMP) {
        double m = (double)(na > nb ? na : nb), n = (double)(na > nb ? nb : na);
        double en = nearbyint(m * n / (m + n));
        prob = en >= 1 ? ts_verify_kstwo_sf((uint64_t)en, r->statistic) : NAN; /* n >= 1 */
    }
    r->pvalue = isnan(prob) ? prob : (prob < 0 ? 0 : (prob > 1 ? 1 : prob));
    r->method = method;
    return TS_OK;
}

ts_status ts_verify_ks_2samp(const double *a, size_t na, const double *b, size_t nb,
                             enum ts_verify_ks_method method, struct ts_verify_ks *out,
                             struct ts_err *err)
{
    double *sa = NULL, *sb = NULL;
    struct ts_verify_ks r = { 0 };
    ts_status st;

    if (method != TS_VERIFY_KS_AUTO && method != TS_VERIFY_KS_EXACT &&
        method != TS_VERIFY_KS_ASYMP)
        return ts_err_set(err, TS_EINVAL, "ks_2samp: method %d, want auto, exact or asymp",
                          (int)method);
    st = sorted_copy(a, na, "a", &sa, err);
    if (st == TS_OK)
        st = sorted_copy(b, nb, "b", &sb, err);
    if (st == TS_OK) {
        statistic(sa, na, sb, nb, &r);
        st = pvalue(na, nb, method, &r, err);
    }
    if (st == TS_OK)
        *out = r;
    free(sa);
    free(sb);
    return st;
}
