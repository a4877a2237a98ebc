/* smirnov.c - the one-sided one-sample Kolmogorov-Smirnov survival function, P(D+_n >= d),
 * with scipy.special.smirnov's bits.
 *
 * ks_2samp's asymptotic p-value is kstwo.sf, and kstwo.sf falls back on 2 * smirnov(n, d) in
 * the tail, where the p-values that decide an audit live. scipy (cephes/kolmogorov.c, by
 * P. van Mulbregt, arXiv:1802.06966) sums the Smirnov/Birnbaum-Tingey series
 *     sf = d * sum_{v=0}^{floor(n(1-d))} C(n,v) (d + v/n)^(v-1) (1 - d - v/n)^(n-v)
 * in double-double arithmetic, the binomial kept as a mantissa and a separate exponent so it
 * cannot overflow, and sums from the other end (the cdf) when that has at most 3 terms. This
 * file follows that algorithm step for step (only the sf; scipy also carries the pdf), so that
 * the rounding matches too. The double-double kernels are the QD library's (Hida, Li, Bailey)
 * as scipy uses them. */
#include <float.h>
#include <math.h>

#include "verify/verify.h"

#define SMIRNOV_MAX_COMPUTE_N 1000000 /* above: an approximation, as scipy */
#define SM_UPPER_MAX_TERMS 3
#define SM_UPPERSUM_MIN_N 10
#define MAX_EXPONENT 960              /* keeps both halves of a dd normalised */
#define CEPHES_MINLOG (-7.08396418532264106224E2)
#define LOGE2 0.693147180559945309417232121458176568

struct dd {
    double hi, lo;
};

static const struct dd DD_ONE = { 1.0, 0.0 };
static const struct dd DD_ZERO = { 0.0, 0.0 };

/* ---- error-free transformations (volatile as in QD: no reassociation) ---- */

static double quick_two_sum(double a, double b, double *err)
{
    volatile double s = a + b;
    volatile double c = s - a;
    *err = b - c;
    return s;
}

static double two_sum(double a, double b, double *err)
{
    volatile double s = a + b;
    volatile double c = s - a;
    volatile double d = b - c;
    volatile double e = s - c;
    *err = (a - e) + d;
    return s;
}

/* Dekker's split: hi holds the top 26 bits of a, lo the rest (exact below 2^996). */
static void split(double a, double *hi, double *lo)
{
    volatile double t, tma;
    if (a > 6.69692879491417e+299 || a < -6.69692879491417e+299) {
        a *= 3.7252902984619140625e-09; /* 2^-28 */
        t = 134217729.0 * a;
        tma = t - a;
        *hi = t - tma;
        *lo = a - *hi;
        *hi *= 268435456.0;
        *lo *= 268435456.0;
    } else {
        t = 134217729.0 * a;
        tma = t - a;
        *hi = t - tma;
        *lo = a - *hi;
    }
}

/* a*b and its rounding error, by splitting rather than fma(): the two agree for normal
 * numbers, and scipy's build splits, so in the denormal range the bits agree too. */
static double two_prod(double a, double b, double *err)
{
    double ah, al, bh, bl, p = a * b;
    volatile double c, d;
    split(a, &ah, &al);
    split(b, &bh, &bl);
    c = ah * bh - p;
    d = c + ah * bl + al * bh;
    *err = d + al * bl;
    return p;
}

/* ---- double-double arithmetic ---- */

static struct dd mk(double hi, double lo)
{
    struct dd r = { hi, lo };
    return r;
}

static bool dd_zero(struct dd a) { return a.hi == 0.0; }

static struct dd add_d_d(double a, double b)
{
    double e, s = two_sum(a, b, &e);
    return mk(s, e);
}

static struct dd add_dd(struct dd a, struct dd b) /* IEEE-style bound (Briggs, Kahan) */
{
    double s2, t2, s1 = two_sum(a.hi, b.hi, &s2), t1 = two_sum(a.lo, b.lo, &t2);
    s2 += t1;
    s1 = quick_two_sum(s1, s2, &s2);
    s2 += t2;
    s1 = quick_two_sum(s1, s2, &s2);
    return mk(s1, s2);
}

static struct dd neg(struct dd a) { return mk(-a.hi, -a.lo); }
static struct dd sub_dd(struct dd a, struct dd b) { return add_dd(a, neg(b)); }

static struct dd add_dd_d(struct dd a, double b)
{
    double s2, s1 = two_sum(a.hi, b, &s2);
    s2 += a.lo;
    s1 = quick_two_sum(s1, s2, &s2);
    return mk(s1, s2);
}

static struct dd sub_dd_d(struct dd a, double b)
{
    double s2, s1 = two_sum(a.hi, -b, &s2);
    s2 += a.lo;
    s1 = quick_two_sum(s1, s2, &s2);
    return mk(s1, s2);
}

static struct dd mul_d_d(double a, double b)
{
    double e, p = two_prod(a, b, &e);
    return mk(p, e);
}

static struct dd mul_dd(struct dd a, struct dd b)
{
    double p2, p1 = two_prod(a.hi, b.hi, &p2);
    p2 += (a.hi * b.lo + a.lo * b.hi);
    p1 = quick_two_sum(p1, p2, &p2);
    return mk(p1, p2);
}

static struct dd mul_dd_d(struct dd a, double b)
{
    double e1, e2, p1 = two_prod(a.hi, b, &e1), p2 = two_prod(a.lo, b, &e2);
    p1 = quick_two_sum(p1, e2 + p2 + e1, &e1);
    return mk(p1, e1);
}

static struct dd div_dd(struct dd a, struct dd b) /* QD's accurate division */
{
    double q1 = a.hi / b.hi, q2, q3;
    struct dd r = sub_dd(a, mul_dd_d(b, q1));

    q2 = r.hi / b.hi;
    r = sub_dd(r, mul_dd_d(b, q2));
    q3 = r.hi / b.hi;
    q1 = quick_two_sum(q1, q2, &q2);
    return add_dd_d(mk(q1, q2), q3);
}

static struct dd div_d_d(double a, double b) { return div_dd(mk(a, 0), mk(b, 0)); }

static struct dd dd_floor(struct dd a)
{
    double hi = floor(a.hi), lo = 0.0;
    if (hi == a.hi) {
        lo = floor(a.lo);
        hi = quick_two_sum(hi, lo, &lo);
    }
    return mk(hi, lo);
}

static struct dd dd_ldexp(struct dd a, int e) { return mk(ldexp(a.hi, e), ldexp(a.lo, e)); }

/* b and e with 0.5 <= |b.hi| < 1 (or |b.hi| == 1 with b.lo of the other sign), a = b 2^e. */
static struct dd dd_frexp(struct dd a, int *e)
{
    int ex;
    double man = frexp(a.hi, &ex), b1 = ldexp(a.lo, -ex);
    if (fabs(man) == 0.5 && man * b1 < 0) {
        man *= 2;
        b1 *= 2;
        ex -= 1;
    }
    *e = ex;
    return mk(man, b1);
}

/* ---- powers ---- */

/* a^m: pow() of the high part, corrected for the low part by (1 + lo/hi)^m. */
static struct dd pow_dd(struct dd a, int m)
{
    double ans, r, adj;

    if (m <= 0)
        return m == 0 ? DD_ONE : div_dd(DD_ONE, pow_dd(a, -m));
    if (dd_zero(a))
        return DD_ZERO;
    ans = pow(a.hi, m);
    r = a.lo / a.hi;
    adj = m * r;
    if (fabs(adj) > 1e-8) {
        if (fabs(adj) < 1e-4)
            adj += (m * r) * ((m - 1) / 2.0 * r); /* two terms of (1 + r)^m */
        else
            adj = expm1(m * log1p(r));
    }
    return add_d_d(ans, ans * adj);
}

static double next_pow2(double x)
{
    double q = ldexp(x, 1 - DBL_MANT_DIG), l = fabs(q + x);
    if (l == 0) {
        l = fabs(x);
    } else {
        int li = (int)l;
        if (li == l)
            l = li;
    }
    return l;
}

/* a^m as a mantissa and an exponent (*e), splitting the power so nothing underflows. */
static struct dd pow_scaled(struct dd a, int m, int *e)
{
    int ye, ae1, ae2, q, r, y2re, y2me, y2mqe, ansE, maxe = MAX_EXPONENT;
    struct dd y, ans, y2r, y2m, y2mq;

    if (m <= 0) {
        if (m == 0) {
            *e = 0;
            return DD_ONE;
        }
        ans = pow_scaled(a, -m, &ae1);
        ans = dd_frexp(div_dd(DD_ONE, ans), &ae2);
        *e = -ae1 + ae2;
        return ans;
    }
    y = dd_frexp(a, &ye);
    if (m == 1) {
        *e = ye;
        return y;
    }
    /* Only when y^m might fall below 2^-960 is the exact bound worth a log(). */
    if (m * (y.hi - 1) / y.hi < -MAX_EXPONENT * LOGE2) {
        double lg2y = log(y.hi) / LOGE2, lgans = m * lg2y;
        if (lgans <= -MAX_EXPONENT)
            maxe = (int)(next_pow2(-MAX_EXPONENT / lg2y + 1) / 2);
    }
    if (m <= maxe) {
        ans = dd_frexp(pow_dd(y, m), &ansE);
        *e = ansE + m * ye;
        return ans;
    }
    q = m / maxe;
    r = m % maxe;
    y2r = pow_scaled(y, r, &y2re);
    y2m = pow_scaled(y, maxe, &y2me);
    y2mq = pow_scaled(y2m, q, &y2mqe);
    ans = dd_frexp(mul_dd(y2r, y2mq), &ansE);
    y2mqe += y2me * q;
    *e = ansE + y2mqe + y2re + m * ye;
    return ans;
}

/* (a + b)^m, the sum exact. */
static double pow2(double a, double b, int m) { return pow_dd(add_d_d(a, b), m).hi; }

/* ((a + b) / (c + d))^m, each sum exact. */
static struct dd pow4(double a, double b, double c, double d, int m)
{
    struct dd A, C;

    if (m <= 0)
        return m == 0 ? DD_ONE : pow4(c, d, a, b, -m);
    A = add_d_d(a, b);
    C = add_d_d(c, d);
    if (dd_zero(A))
        return dd_zero(C) ? mk(NAN, NAN) : DD_ZERO;
    if (dd_zero(C))
        return A.hi < 0 ? mk(-INFINITY, -INFINITY) : mk(INFINITY, INFINITY);
    return pow_dd(div_dd(A, C), m);
}

/* ---- the series ---- */

/* floor(n x) and the remainder, exactly; a remainder of 1 (rounding) carries. */
static double mod_nx(int n, double x, int *nxfloor, double *nx)
{
    struct dd nxd = mul_d_d(n, x), fl = dd_floor(nxd);
    double alpha = sub_dd(nxd, fl).hi;
    int f = (int)fl.hi;

    if (alpha == 1) {
        f += 1;
        alpha = 0;
    }
    *nx = nxd.hi;
    *nxfloor = f;
    return alpha;
}

/* C(n, j+1) from C(n, j), mantissa and exponent. */
static void next_binomial(struct dd *cman, int *cexp, int n, int j)
{
    int e;
    struct dd rat = div_d_d(n - j, j + 1.0);
    *cman = dd_frexp(mul_dd(*cman, rat), &e);
    *cexp += e;
}

/* A_v = C(n,v) (1 - x - v/n)^(n-v) (x + v/n)^(v-1). */
static struct dd term(int n, double x, int v, struct dd cman, int cexp)
{
    int t1e, t2e;
    struct dd t2 = pow_scaled(sub_dd_d(div_d_d(n - v, n), x), n - v, &t2e);
    struct dd t1 = pow_scaled(add_dd_d(div_d_d(v, n), x), v - 1, &t1e);
    return dd_ldexp(mul_dd(mul_dd(t1, t2), cman), cexp + t1e + t2e);
}

static double clip01(double p) { return p < 0 ? 0 : p > 1 ? 1 : p; }

/* The sum itself: from v = 0 up (the sf) or from v = n down (the cdf, few terms). */
static double series(int n, double x, int n1mxfl, int n1mxceil, bool upper)
{
    int start = 0, step = 1, nterms = n1mxfl + 1, vmid = n / 2, cexp = 0;
    struct dd cman = DD_ONE, sum = DD_ZERO, aj;
    double prob;

    if (upper) {
        start = n;
        step = -1;
        nterms = n - n1mxceil + 1;
        aj = pow4(1, x, 1, 0, n - 1);
    } else {
        aj = div_dd(pow4(1, -x, 1, 0, n), mk(x, 0));
    }
    sum = add_dd(sum, aj);
    next_binomial(&cman, &cexp, n, 0);
    for (int j = 1; j < nterms; j++) {
        int v = start + j * step;
        aj = term(n, x, v, cman, cexp);
        if (isfinite(aj.hi) && !dd_zero(aj))
            sum = add_dd(sum, aj);
        if (!dd_zero(aj)) {
            /* The rest cannot reach the last bit of the sum. */
            if (4 * (nterms - j) * fabs(aj.hi) < DBL_EPSILON * sum.hi && j != nterms - 1)
                break;
        } else if (j > vmid) {
            break;
        }
        next_binomial(&cman, &cexp, n, j);
    }
    prob = mul_dd_d(sum, x).hi;
    return upper ? 1 - prob : prob;
}

double ts_verify_smirnov_sf(int n, double x)
{
    int nxfl, n1mxfl, n1mxceil, nupper;
    double nx, alpha;
    bool upper;

    if (!(n > 0 && x >= 0.0 && x <= 1.0))
        return NAN;
    if (n == 1)
        return 1 - x;
    if (x == 0.0)
        return 1.0;
    if (x == 1.0)
        return 0.0;
    alpha = mod_nx(n, x, &nxfl, &nx);
    n1mxfl = n - nxfl - (alpha == 0 ? 0 : 1);
    n1mxceil = n - nxfl;
    if (alpha == 0) { /* the boundary term belongs to neither sum */
        n1mxfl -= 1;
        n1mxceil += 1;
    }
    if (nxfl == 0 || (nxfl == 1 && alpha == 0)) /* x <= 1/n: closed form */
        return 1 - x * pow2(1, x, n - 1);
    if (-2 * n * x * x < CEPHES_MINLOG)
        return 0.0;
    if (nxfl >= n - 1) /* x >= 1 - 1/n */
        return pow2(1, -x, n);
    if (n > SMIRNOV_MAX_COMPUTE_N)
        return exp(-pow(6 * n * x + 1.0, 2) / 18.0 / n);
    /* Sum the cdf instead when it has few terms: the sf series would cancel. */
    nupper = n - n1mxceil + 1;
    upper = (nupper <= 1 && x < 0.5) ||
            (n >= SM_UPPERSUM_MIN_N && nupper <= SM_UPPER_MAX_TERMS && x <= 0.5 / sqrt(n));
    return clip01(series(n, x, n1mxfl, n1mxceil, upper));
}
