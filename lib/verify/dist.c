/* dist.c - distribution statistics: sums, mean/std, histograms, PSI, Jensen-Shannon.
 *
 * Each follows the numpy/scipy function an auditor would reach for, expression for
 * expression, so a report can be checked in a Python prompt: sums are numpy's pairwise
 * summation (its exact blocking, so the bits agree), mean/std are numpy.mean/numpy.std,
 * the histogram is numpy.histogram's equal-bin fast path (index from the scaled offset, then
 * corrected against the linspace edges), quantiles numpy.quantile's 'linear' method, and the
 * Jensen-Shannon distance scipy.spatial.distance.jensenshannon. PSI has no scipy counterpart;
 * its choices are in verify.h and docs/verify-stats.md. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "verify/verify.h"

#define PW_BLOCKSIZE 128 /* numpy's pairwise-summation block */
#define NPY_BUFSIZE 8192 /* numpy's default iterator buffer: reductions go in such pieces */

/* numpy's pairwise summation (DOUBLE_pairwise_sum): 8 partial sums up to 128 terms. */
static double pairwise(const double *x, size_t n)
{
    if (n < 8) {
        double res = 0.;
        for (size_t i = 0; i < n; i++)
            res += x[i];
        return res;
    }
    if (n <= PW_BLOCKSIZE) {
        double r[8], res;
        size_t i;
        for (int j = 0; j < 8; j++)
            r[j] = x[j];
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++)
                r[j] += x[i + j];
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++)
            res += x[i];
        return res;
    }
    size_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise(x, n2) + pairwise(x + n2, n - n2);
}

/* np.add.reduce: from the identity 0, one pairwise sum per iterator buffer of 8192. */
double ts_verify_sum(const double *x, size_t n)
{
    double res = 0.0;
    for (size_t i = 0; i < n; i += NPY_BUFSIZE)
        res += pairwise(x + i, n - i < NPY_BUFSIZE ? n - i : NPY_BUFSIZE);
    return res;
}

static ts_status check_finite(const double *x, size_t n, const char *fn, const char *which,
                              struct ts_err *err)
{
    if (n == 0)
        return ts_err_set(err, TS_EINVAL, "%s: sample %s is empty", fn, which);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return ts_err_set(err, TS_EINVAL, "%s: %s[%zu] is %s, want a finite value", fn,
                              which, i, isnan(x[i]) ? "NaN" : "infinite");
    return TS_OK;
}

ts_status ts_verify_mean_std(const double *x, size_t n, unsigned ddof, double *mean,
                             double *std, struct ts_err *err)
{
    double m, *dev;
    ts_status st = check_finite(x, n, "mean_std", "x", err);

    if (st != TS_OK)
        return st;
    if (n <= ddof)
        return ts_err_set(err, TS_EINVAL, "mean_std: %zu values, need more than ddof=%u", n,
                          ddof);
    m = ts_verify_sum(x, n) / (double)n;
    if (std) {
        dev = malloc(sizeof(double) * n);
        if (!dev)
            return ts_err_set(err, TS_ENOMEM, "mean_std: no memory for %zu values", n);
        for (size_t i = 0; i < n; i++) {
            double d = x[i] - m;
            dev[i] = d * d;
        }
        *std = sqrt(ts_verify_sum(dev, n) / (double)(n - ddof));
        free(dev);
    }
    *mean = m;
    return TS_OK;
}

/* ---- histograms ---- */

static void minmax(const double *x, size_t n, double *lo, double *hi)
{
    for (size_t i = 0; i < n; i++) {
        *lo = x[i] < *lo ? x[i] : *lo;
        *hi = x[i] > *hi ? x[i] : *hi;
    }
}

/* numpy.linspace(lo, hi, nbins + 1). */
static void linspace(double lo, double hi, size_t nbins, double *edges)
{
    double delta = hi - lo, step = delta / (double)nbins;
    for (size_t i = 0; i <= nbins; i++)
        edges[i] = (step == 0 ? (double)i / (double)nbins * delta : (double)i * step) + lo;
    edges[nbins] = hi;
}

static void bin_counts(const double *x, size_t n, const double *edges, size_t nbins,
                       uint64_t *counts)
{
    double first = edges[0], last = edges[nbins], norm = (double)nbins / (last - first);

    memset(counts, 0, sizeof(uint64_t) * nbins);
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        int64_t k;
        if (!(v >= first && v <= last))
            continue;
        k = (int64_t)((v - first) * norm);
        if (k == (int64_t)nbins)
            k--;
        /* The scaled index can be one off within an ULP of an edge. */
        if (v < edges[k])
            k--;
        else if (v >= edges[k + 1] && k != (int64_t)nbins - 1)
            k++;
        counts[k]++;
    }
}

ts_status ts_verify_histogram(const double *a, size_t na, const double *b, size_t nb,
                              size_t nbins, double *edges, uint64_t *ca, uint64_t *cb,
                              struct ts_err *err)
{
    double lo = INFINITY, hi = -INFINITY, *e = edges;
    ts_status st = check_finite(a, na, "histogram", "a", err);

    if (st == TS_OK)
        st = check_finite(b, nb, "histogram", "b", err);
    if (st != TS_OK)
        return st;
    if (nbins == 0)
        return ts_err_set(err, TS_EINVAL, "histogram: nbins is 0, want at least 1");
    if (!e && !(e = malloc(sizeof(double) * (nbins + 1))))
        return ts_err_set(err, TS_ENOMEM, "histogram: no memory for %zu edges", nbins + 1);
    minmax(a, na, &lo, &hi);
    minmax(b, nb, &lo, &hi);
    if (lo == hi) {
        lo -= 0.5;
        hi += 0.5;
    }
    linspace(lo, hi, nbins, e);
    bin_counts(a, na, e, nbins, ca);
    bin_counts(b, nb, e, nbins, cb);
    if (e != edges)
        free(e);
    return TS_OK;
}

/* ---- population stability index ---- */

static int cmp_double(const void *pa, const void *pb)
{
    double a = *(const double *)pa, b = *(const double *)pb;
    return (a > b) - (a < b);
}

/* numpy.quantile(sorted s, q, method='linear'). */
static double quantile(const double *s, size_t n, double q)
{
    double vi = (double)(n - 1) * q, prev = floor(vi), gamma, a, b, diff;
    size_t i = (size_t)prev, j = i + 1 < n ? i + 1 : n - 1;

    gamma = vi - prev;
    a = s[i], b = s[j];
    diff = b - a;
    return gamma >= 0.5 ? b - diff * (1 - gamma) : a + diff * gamma;
}

/* Bin of x: the number of cut points strictly below it (bins are right-closed). */
static size_t psi_bin(const double *cut, size_t ncut, double x)
{
    size_t lo = 0, hi = ncut;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cut[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

ts_status ts_verify_psi(const double *ref, size_t nref, const double *actual, size_t nactual,
                        size_t nbins, double *psi, struct ts_err *err)
{
    double *s, *cut, sum = 0;
    uint64_t *cr, *ca;
    ts_status st = check_finite(ref, nref, "psi", "ref", err);

    if (st == TS_OK)
        st = check_finite(actual, nactual, "psi", "actual", err);
    if (st != TS_OK)
        return st;
    nbins = nbins ? nbins : TS_VERIFY_PSI_BINS;
    s = malloc(sizeof(double) * (nref + nbins) + sizeof(uint64_t) * 2 * nbins);
    if (!s)
        return ts_err_set(err, TS_ENOMEM, "psi: no memory for %zu values", nref);
    cut = s + nref;
    cr = (uint64_t *)(cut + nbins);
    ca = cr + nbins;
    memcpy(s, ref, sizeof(double) * nref);
    qsort(s, nref, sizeof(double), cmp_double);
    for (size_t k = 1; k < nbins; k++)
        cut[k - 1] = quantile(s, nref, (double)k / (double)nbins);
    memset(cr, 0, sizeof(uint64_t) * 2 * nbins);
    for (size_t i = 0; i < nref; i++)
        cr[psi_bin(cut, nbins - 1, ref[i])]++;
    for (size_t i = 0; i < nactual; i++)
        ca[psi_bin(cut, nbins - 1, actual[i])]++;
    for (size_t k = 0; k < nbins; k++) {
        double p = (double)cr[k] / (double)nref, q = (double)ca[k] / (double)nactual;
        p = p > 0 ? p : TS_VERIFY_PSI_EPS;
        q = q > 0 ? q : TS_VERIFY_PSI_EPS;
        sum += (q - p) * log(q / p);
    }
    free(s);
    *psi = sum;
    return TS_OK;
}

/* ---- Jensen-Shannon ---- */

static ts_status check_prob(const double *p, size_t n, const char *which, double *sum,
                            struct ts_err *err)
{
    *sum = 0;
    for (size_t i = 0; i < n; i++)
        if (!(p[i] >= 0) || !isfinite(p[i]))
            return ts_err_set(err, TS_EINVAL, "js_distance: %s[%zu] = %g, want finite >= 0",
                              which, i, p[i]);
    *sum = ts_verify_sum(p, n);
    if (!(*sum > 0) || !isfinite(*sum))
        return ts_err_set(err, TS_EINVAL, "js_distance: %s sums to %g, want > 0", which,
                          *sum);
    return TS_OK;
}

/* scipy.special.rel_entr(x, y) for x, y >= 0. */
static double rel_entr(double x, double y)
{
    if (x > 0 && y > 0)
        return x * log(x / y);
    return x == 0 && y >= 0 ? 0 : INFINITY;
}

ts_status ts_verify_js_distance(const double *p, const double *q, size_t n, double base,
                                double *out, struct ts_err *err)
{
    double sp, sq, *left, *right, js;
    ts_status st;

    if (n == 0)
        return ts_err_set(err, TS_EINVAL, "js_distance: empty vectors");
    if (!(base == 0 || (base > 0 && base != 1 && isfinite(base))))
        return ts_err_set(err, TS_EINVAL, "js_distance: base %g, want 0 (e) or > 0, != 1",
                          base);
    st = check_prob(p, n, "p", &sp, err);
    if (st == TS_OK)
        st = check_prob(q, n, "q", &sq, err);
    if (st != TS_OK)
        return st;
    left = malloc(sizeof(double) * 2 * n);
    if (!left)
        return ts_err_set(err, TS_ENOMEM, "js_distance: no memory for %zu entries", n);
    right = left + n;
    for (size_t i = 0; i < n; i++) {
        double pi = p[i] / sp, qi = q[i] / sq, m = (pi + qi) / 2.0;
        left[i] = rel_entr(pi, m);
        right[i] = rel_entr(qi, m);
    }
    js = ts_verify_sum(left, n) + ts_verify_sum(right, n);
    free(left);
    if (base != 0)
        js /= log(base);
    *out = sqrt(js / 2.0);
    return TS_OK;
}
