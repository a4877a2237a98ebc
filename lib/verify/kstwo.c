/* kstwo.c - the two-sided one-sample Kolmogorov-Smirnov survival function P(D_n >= d), with
 * scipy.stats.kstwo.sf's bits: the asymptotic p-value of ks_2samp.
 *
 * No one formula is accurate everywhere, so scipy (stats/_ksstats.py) follows Simard and
 * L'Ecuyer (J. Stat. Softw. 39(11), 2011) in choosing by n and n d^2: the Ruben-Gambino closed
 * forms at the ends (d <= 1/n, d >= 1 - 1/n); 2 * smirnov(n, d) for d >= 0.5 and in the upper
 * tail, where it is exact or nearly so; for the body the Durbin matrix algorithm as Marsaglia,
 * Tsang and Wang compute it (a power of a (2k-1)-square matrix), Pomeranz's recursion, or
 * the Pelz-Good asymptotic series. This file is that dispatcher and those three algorithms,
 * operation for operation, including where scipy's numpy code silently widens to long double
 * (a scaled intermediate that meets np.longdouble) so the last bits agree as well. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "verify/verify.h"

#define E128 128
#define EP128 0x1p128L
#define EM128 0x1p-128L
#define MIN_LOG (-708)

static const double PI = 3.141592653589793;

static long double clipl01(long double p) { return p < 0 ? 0 : p > 1 ? 1 : p; }

/* 1 - cdf in the type scipy holds cdf in: double, or long double once it widened. */
static double sf_from(long double cdf, bool wide)
{
    long double sf = wide ? 1.0L - cdf : (long double)(1.0 - (double)cdf);
    return (double)clipl01(sf);
}

/* log(n! / n^n) by Stirling's series, n*log(n) removed up front (no cancellation). */
static double log_nfact_div_npown(double n)
{
    static const double c[] = { -2.955065359477124183e-2, 6.4102564102564102564e-3,
                                -1.9175269175269175269e-3, 8.4175084175084175084e-4,
                                -5.952380952380952381e-4, 7.9365079365079365079e-4,
                                -2.7777777777777777778e-3, 8.3333333333333333333e-2 };
    double rn = 1.0 / n, x = rn / n, y = 0;
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++)
        y = y * x + c[i]; /* numpy.polyval */
    return log(n) / 2 - n + log(2 * PI) / 2 + rn * y;
}

/* ---- Durbin / Marsaglia-Tsang-Wang: the k-th diagonal entry of (n!/n^n) H^n ---- */

static void matmul(const double *a, const double *b, double *out, int m)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) {
            double s = 0;
            for (int l = 0; l < m; l++)
                s += a[i * m + l] * b[l * m + j];
            out[i * m + j] = s;
        }
}

/* Durbin's matrix H for d = (k - h)/n: first column v, last row v reversed, 1/j! diagonals. */
static void dmtw_fill(double *H, double *v, double *w, int m, double h)
{
    double fac = 1.0, tt;

    for (int j = 1; j <= m; j++) { /* v[j-1] = (1 - h^j) / j!, w[j-1] = 1 / (j-1)! */
        v[j - 1] = 1.0 - pow(h, j);
        w[j - 1] = fac;
        fac /= j;
        v[j - 1] *= fac;
    }
    tt = pow(fmax(2 * h - 1.0, 0), m) - 2 * pow(h, m);
    v[m - 1] = (1.0 + tt) * fac;
    for (int i = 1; i < m; i++)
        for (int r = i - 1; r < m; r++)
            H[r * m + i] = w[r - i + 1];
    for (int r = 0; r < m; r++)
        H[r * m] = v[r];
    for (int c = 0; c < m; c++)
        H[(m - 1) * m + c] = v[m - 1 - c];
}

/* P = H^n by squaring, H rescaled by 2^-128 whenever its (k,k) entry passes 2^128; returns
 * the power of 2 that P is short of. T is scratch. */
static int dmtw_power(double *H, double *P, double *T, int m, int n, int k)
{
    int expnt = 0, hexp = 0;
    size_t sz = sizeof(double) * (size_t)m * (size_t)m;

    for (int i = 0; i < m; i++)
        P[i * m + i] = 1.0;
    for (int nn = n; nn > 0; nn /= 2) {
        if (nn % 2) {
            matmul(P, H, T, m);
            memcpy(P, T, sz);
            expnt += hexp;
        }
        matmul(H, H, T, m);
        memcpy(H, T, sz);
        hexp *= 2;
        if (fabs(H[(k - 1) * m + k - 1]) > EP128) {
            for (int i = 0; i < m * m; i++)
                H[i] /= (double)EP128;
            hexp += E128;
        }
    }
    return expnt;
}

/* Returns the cdf (NaN if out of memory); *wide: computed in long double at the end. */
static long double dmtw_cdf(int n, double d, bool *wide)
{
    double nd = n * d, *H;
    int k, m, expnt;
    long double p;

    *wide = false; /* set when p meets np.longdouble: scipy goes on in long double */
    if (d >= 1.0)
        return 1.0;
    if (nd <= 0.5)
        return 0.0;
    k = (int)ceil(nd);
    m = 2 * k - 1;
    H = calloc((size_t)m * m * 3 + 2 * (size_t)m, sizeof(double));
    if (!H)
        return NAN;
    dmtw_fill(H, H + 3 * m * m, H + 3 * m * m + m, m, k - nd);
    expnt = dmtw_power(H, H + m * m, H + 2 * m * m, m, n, k);
    p = H[m * m + (k - 1) * m + k - 1];
    free(H);
    for (int i = 1; i <= n; i++) { /* times n!/n^n, rescued from underflow */
        p = *wide ? i * p / n : (long double)(i * (double)p / n);
        if (fabsl(p) < EM128) {
            p *= EP128;
            *wide = true;
            expnt -= E128;
        }
    }
    if (expnt != 0)
        p = *wide ? ldexpl(p, expnt) : ldexp((double)p, expnt);
    return clipl01(p);
}

/* ---- Pomeranz's recursion ---- */

static void pomeranz_j1j2(int i, int n, int ll, int ceilf, int roundf, int *j1, int *j2)
{
    int a, b, d = (i + 1) / 2;

    if (i == 0) {
        a = -ll - ceilf - 1;
        b = ll + ceilf - 1;
    } else if ((i + 1) % 2 == 0) { /* i odd */
        if (d == n + 1) {
            a = n - ll - ceilf - 1;
            b = n + ll + ceilf - 1;
        } else {
            a = d - 1 - ll - roundf - 1;
            b = d + ll - 1 + ceilf - 1;
        }
    } else {
        a = d - 1 - ll - 1;
        b = d + ll + roundf - 1;
    }
    *j1 = a + 2 > 0 ? a + 2 : 0;
    *j2 = b < n ? b : n;
}

/* The state of Pomeranz's recursion: two rows of a 2(floor(nx)+1) window, swapped each step. */
struct pom {
    int n, ll, ceilf, roundf, np, j1, j2, v0s, v1s, expnt;
    double *gp, *tgp, *omp, *v0, *v1;
};

/* Row i from row i-1: entries j1-k1 .. j2-k1 of numpy.convolve(V0[a0:a0+ln2], pw[:ln2]),
 * the slices cut short at the array's end as numpy cuts them, rescaled by 2^128 when the
 * whole row falls below 2^-128. false: an impossible window (scipy would fail too). */
static bool pom_step(struct pom *p, int i)
{
    int k1 = p->j1, tmp = p->v0s, ln2, a0, la, lv;
    double *sw = p->v0, *pw, mx = 0;

    p->v0 = p->v1, p->v1 = sw, p->v0s = p->v1s, p->v1s = tmp;
    memset(p->v1, 0, sizeof(double) * (size_t)p->np);
    pomeranz_j1j2(i, p->n, p->ll, p->ceilf, p->roundf, &p->j1, &p->j2);
    pw = (i == 1 || i == 2 * p->n + 1) ? p->gp : (i % 2 ? p->tgp : p->omp);
    ln2 = p->j2 - k1 + 1;
    if (ln2 <= 0)
        return true;
    a0 = k1 - p->v0s;
    la = a0 + ln2 > p->np ? p->np - a0 : ln2;
    lv = ln2 < p->np ? ln2 : p->np;
    if (a0 < 0 || la <= 0)
        return false;
    for (int c = p->j1 - k1; c <= p->j2 - k1; c++) {
        double acc = 0;
        for (int a = c - lv + 1 > 0 ? c - lv + 1 : 0; a <= c && a < la; a++)
            acc += p->v0[a0 + a] * pw[c - a];
        p->v1[c - (p->j1 - k1)] = acc;
    }
    for (int c = 0; c < p->np; c++)
        mx = fmax(mx, p->v1[c]);
    if (0 < mx && mx < EM128) {
        for (int c = 0; c < p->np; c++)
            p->v1[c] *= (double)EP128;
        p->expnt -= E128;
    }
    p->v1s = p->v0s + p->j1 - k1;
    return true;
}

/* Returns the cdf (NaN if out of memory); *wide as for dmtw_cdf. */
static long double pomeranz_cdf(int n, double x, bool *wide)
{
    double t = n * x, f, g, *buf;
    struct pom p = { .n = n, .ll = (int)floor(t) };
    long double ans;
    bool ok = true;

    *wide = false;
    f = 1.0 * (t - p.ll);
    g = fmin(f, 1.0 - f);
    p.ceilf = f > 0;
    p.roundf = f > 0.5;
    p.np = 2 * (p.ll + 1);
    buf = calloc(6 * (size_t)p.np, sizeof(double));
    if (!buf)
        return NAN;
    p.gp = buf, p.tgp = buf + p.np, p.omp = buf + 2 * p.np;
    p.v0 = buf + 3 * p.np, p.v1 = buf + 4 * p.np;
    p.gp[0] = p.tgp[0] = p.omp[0] = 1.0; /* (g/n)^m/m!, (2g/n)^m/m!, ((1-2g)/n)^m/m! */
    for (int m = 1; m < p.np; m++) {
        p.gp[m] = p.gp[m - 1] * (g / n) / m;
        p.tgp[m] = p.tgp[m - 1] * (2 * g / n) / m;
        p.omp[m] = p.omp[m - 1] * ((1 - 2 * g) / n) / m;
    }
    p.v1[0] = 1;
    pomeranz_j1j2(0, n, p.ll, p.ceilf, p.roundf, &p.j1, &p.j2);
    for (int i = 1; i < 2 * n + 2 && ok; i++)
        ok = pom_step(&p, i);
    ans = ok ? p.v1[n - p.v1s] : NAN;
    free(buf);
    for (int m = 1; m <= n; m++) { /* times n!, rescued from overflow */
        if (fabsl(ans) > EP128) {
            ans *= EM128;
            *wide = true;
            p.expnt += E128;
        }
        ans = *wide ? ans * m : (long double)((double)ans * m);
    }
    if (p.expnt != 0)
        ans = *wide ? ldexpl(ans, p.expnt) : ldexp((double)ans, p.expnt);
    return clipl01(ans);
}

/* ---- Pelz-Good ---- */

static double pelz_good_cdf(int n, double x)
{
    double z, z2, z3, z4, z6, qlog, q, k1a, k1b, k2a, k2b, k2c, k3a, k3b, k3c, k3d;
    double K[4] = { 0 }, div[4], t2[64], t3[64], sqrt3z, k2x, k3x;
    double pi2 = pow(PI, 2), pi4 = pow(PI, 4), pi6 = pow(PI, 6), sqrt2pi = sqrt(2 * PI);
    int maxk;
    size_t ks;

    if (x <= 0.0)
        return 0.0;
    if (x >= 1.0)
        return 1.0;
    z = sqrt((double)n) * x;
    z2 = pow(z, 2), z3 = pow(z, 3), z4 = pow(z, 4), z6 = pow(z, 6);
    qlog = -pi2 / 8 / z2;
    if (qlog < MIN_LOG)
        return 0.0;
    q = exp(qlog);
    k1a = -z2;
    k1b = pi2 / 4;
    k2a = 6 * z6 + 2 * z4;
    k2b = (2 * z4 - 5 * z2) * pi2 / 4;
    k2c = pi4 * (1 - 2 * z2) / 16;
    k3d = pi6 * (5 - 30 * z2) / 64;
    k3c = pi4 * (-60 * z2 + 212 * z4) / 16;
    k3b = pi2 * (135 * z4 - 96 * z6) / 4;
    k3a = -30 * z6 - 90 * pow(z, 8);
    maxk = (int)ceil(16 * z / PI);
    for (int k = maxk; k > 0; k--) { /* Horner in q^8 over odd m = 2k - 1 */
        double m = 2 * k - 1, m2 = m * m, m4 = m2 * m2, m6 = m4 * m2, qp = pow(q, 8 * k);
        double c[4] = { 1.0, k1a + k1b * m2, k2a + k2b * m2 + k2c * m4,
                        k3a + k3b * m2 + k3c * m4 + k3d * m6 };
        for (int i = 0; i < 4; i++)
            K[i] = K[i] * qp + c[i];
    }
    div[0] = z, div[1] = 6 * z4, div[2] = 72 * pow(z, 7), div[3] = 6480 * pow(z, 10);
    for (int i = 0; i < 4; i++)
        K[i] = K[i] * q * sqrt2pi / div[i];
    q = exp(-pi2 / 2 / z2);
    sqrt3z = sqrt(3.0) * z;
    for (int k = maxk, i = 0; k > 0 && i < 64; k--, i++) {
        double kk = (double)k * k, qk = pow(q, kk), kspi = PI * k;
        t2[i] = kk * qk;
        t3[i] = (sqrt3z + kspi) * (sqrt3z - kspi) * kk * qk;
    }
    ks = maxk < 64 ? (size_t)maxk : 64;
    k2x = ts_verify_sum(t2, ks) * (pi2 * sqrt2pi / (-36 * z3));
    K[2] += k2x;
    k3x = ts_verify_sum(t3, ks) * (pi2 * sqrt2pi / (216 * z6));
    K[3] += k3x;
    for (int i = 0; i < 4; i++)
        K[i] /= pow(n * 1.0, i / 2.0);
    return 0.0 + K[0] + K[1] + K[2] + K[3];
}

/* ---- the dispatcher (scipy.stats._ksstats._kolmogn, cdf=False) ---- */

static double kolmogn_sf(int n, double x)
{
    double t = n * x, prob, nx2;
    long double p;
    bool wide;

    if (x >= 1.0)
        return 0.0;
    if (x <= 0.0)
        return 1.0;
    if (t <= 1.0) { /* Ruben-Gambino: 1/2n <= x <= 1/n */
        if (t <= 0.5)
            return 1.0;
        if (n <= 140) {
            prob = 1.0;
            for (int i = 1; i <= n; i++)
                prob *= i * (1.0 / n) * (2 * t - 1);
        } else {
            prob = exp(log_nfact_div_npown(n) + n * log(2 * t - 1));
        }
        return sf_from(prob, false);
    }
    if (t >= n - 1) /* Ruben-Gambino */
        return (double)clipl01(2 * pow(1.0 - x, n));
    if (x >= 0.5)
        return (double)clipl01(2 * ts_verify_smirnov_sf(n, x));
    nx2 = t * x;
    if (n <= 140) {
        if (nx2 <= 0.754693)
            return (p = dmtw_cdf(n, x, &wide), sf_from(p, wide));
        if (nx2 <= 4)
            return (p = pomeranz_cdf(n, x, &wide), sf_from(p, wide));
        return (double)clipl01(2 * ts_verify_smirnov_sf(n, x));
    }
    if (nx2 >= 370.0)
        return 0.0;
    if (nx2 >= 2.2)
        return (double)clipl01(2 * ts_verify_smirnov_sf(n, x));
    if (nx2 >= 18.0)
        return 0.0;
    if (n <= 100000 && n * pow(x, 1.5) <= 1.4)
        return (p = dmtw_cdf(n, x, &wide), sf_from(p, wide));
    return sf_from(pelz_good_cdf(n, x), false);
}

double ts_verify_kstwo_sf(uint64_t n, double d)
{
    if (n == 0 || n > INT32_MAX || isnan(d))
        return NAN;
    /* rv_continuous.sf: 1 at or below the support's start 0.5/n, 0 from its end 1 on. */
    if (d <= 0.5 / (double)n)
        return 1.0;
    if (d >= 1.0)
        return 0.0;
    return kolmogn_sf((int)n, d);
}
