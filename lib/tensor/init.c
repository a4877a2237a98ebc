/* init.c - deterministic, counter-based parameter initialisation.
 *
 * Element i of a tensor is a pure function of (seed, tensor name, i, initializer), so a shard
 * that owns partitions 3 and 7, a trainer that initialises the whole tensor, and `tessera train
 * --local` all produce the same bits, whatever the split. There is no generator state to carry
 * from one element to the next:
 *   key   = XXH3-64(tensor name, seed)
 *   draw  = splitmix64's output function of key + (c + 1) * golden gamma, for counter c
 *   u     = the top 53 bits of a draw as a double in [0, 1)
 * A uniform element i uses draw 2i; a normal one uses draws 2i and 2i + 1 in Box-Muller
 * (sqrt(-2 ln u1) * cos(2 pi u2), one output per pair, the sine is dropped). All arithmetic is
 * in double, rounded once to float at the end; ln and cos are our own polynomials on + - * /
 * (see internal.h), so the values do not depend on the host's libm either. */
#include "tensor/tensor.h"
#include "tensor/internal.h"

#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#define GAMMA 0x9E3779B97F4A7C15ull        /* splitmix64's increment (2^64 / golden ratio) */
#define SQRT2 1.41421356237309504880
#define LN2_HI 6.93147180369123816490e-01  /* ln 2 split so that e * LN2_HI is exact */
#define LN2_LO 1.90821492927058770002e-10
#define TWO_PI 6.28318530717958647692

enum kind { ZEROS, ONES, CONST, UNIFORM, NORMAL, XAVIER, HE, ASSIGNED };

struct spec {
    enum kind kind;
    double v;         /* CONST: the value; UNIFORM: the bound; NORMAL: the std */
};

static const struct {
    const char *name;
    enum kind kind;
    bool arg;
} kinds[] = {
    { "zeros", ZEROS, false }, { "ones", ONES, false },      { "const", CONST, true },
    { "uniform", UNIFORM, true }, { "normal", NORMAL, true }, { "xavier", XAVIER, false },
    { "he", HE, false },      { "assigned", ASSIGNED, false },
};

#define WANT "want zeros, ones, const:V, uniform:A, normal:STD, xavier, he or assigned"

/* ---- the deterministic ln and cos ---- */

static double bits_to_d(uint64_t u)
{
    double d;

    memcpy(&d, &u, sizeof(d));
    return d;
}

/* ln u = e ln 2 + ln m with u = m 2^e, m in [sqrt(1/2), sqrt(2)); ln m = 2 atanh(s) with
 * s = (m - 1) / (m + 1), |s| < 0.172, whose odd series needs 12 terms for 1e-17. The
 * coefficients are 1 / (2k + 1), each rounded once (by the compiler, as IEEE division would). */
double ts__init_log(double u)
{
    static const double inv_odd[12] = {
        1.0, 1.0 / 3, 1.0 / 5, 1.0 / 7, 1.0 / 9, 1.0 / 11, 1.0 / 13, 1.0 / 15, 1.0 / 17,
        1.0 / 19, 1.0 / 21, 1.0 / 23,
    };
    uint64_t b;
    double m, s, z, p;
    int e = 0;

    if (u < 0x1p-1022) {                 /* subnormal: make it normal first */
        u *= 0x1p54;
        e = -54;
    }
    memcpy(&b, &u, sizeof(b));
    e += (int)((b >> 52) & 0x7ff) - 1023;
    m = bits_to_d((b & 0x000fffffffffffffull) | 0x3ff0000000000000ull);
    if (m > SQRT2) {
        m *= 0.5;
        e++;
    }
    s = (m - 1.0) / (m + 1.0);           /* m - 1 is exact (Sterbenz) */
    z = s * s;
    p = inv_odd[11];
    for (int k = 10; k >= 0; k--)
        p = p * z + inv_odd[k];
    return e * LN2_HI + (e * LN2_LO + 2.0 * s * p);
}

/* cos(2 pi t) = cos(x + q pi / 2) with q the nearest quarter turn and x = 2 pi (t - q / 4),
 * |x| <= pi / 4 (t - q / 4 is exact), then the Taylor series of cos and sin of x up to x^18
 * and x^19, whose next terms are below 1e-17. Coefficients +-1 / n!, each rounded once. */
double ts__init_cos2pi(double t)
{
    static const double cos_c[10] = {
        1.0, -1.0 / 2, 1.0 / 24, -1.0 / 720, 1.0 / 40320, -1.0 / 3628800, 1.0 / 479001600,
        -1.0 / 87178291200.0, 1.0 / 20922789888000.0, -1.0 / 6402373705728000.0,
    };
    static const double sin_c[10] = {
        1.0, -1.0 / 6, 1.0 / 120, -1.0 / 5040, 1.0 / 362880, -1.0 / 39916800,
        1.0 / 6227020800.0, -1.0 / 1307674368000.0, 1.0 / 355687428096000.0,
        -1.0 / 121645100408832000.0,
    };
    int q = (int)(t * 4.0 + 0.5);
    double x = (t - q * 0.25) * TWO_PI, z = x * x, c = cos_c[9], s = sin_c[9];

    for (int k = 8; k >= 0; k--) {
        c = c * z + cos_c[k];
        s = s * z + sin_c[k];
    }
    s *= x;
    switch (q & 3) {
    case 0:
        return c;
    case 1:
        return -s;
    case 2:
        return -c;
    default:
        return s;
    }
}

/* ---- parsing ---- */

/* A finite number filling all of s, without leading blanks. */
static bool parse_num(const char *s, double *v)
{
    char *end;

    if (!*s || isspace((unsigned char)*s))
        return false;
    *v = strtod(s, &end);
    return !*end && isfinite(*v);
}

static ts_status parse(const char *init, struct spec *sp, struct ts_err *err)
{
    const char *colon = init ? strchr(init, ':') : NULL;
    size_t len = init ? (colon ? (size_t)(colon - init) : strlen(init)) : 0;
    double v = 0;
    size_t k;

    if (!init)
        return ts_err_set(err, TS_EINVAL, "initializer: missing; " WANT);
    for (k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
        if (strlen(kinds[k].name) == len && !strncmp(init, kinds[k].name, len))
            break;
    if (k == sizeof(kinds) / sizeof(kinds[0]))
        return ts_err_set(err, TS_EINVAL, "initializer '%.64s': unknown; " WANT, init);
    if (kinds[k].arg != (colon != NULL))
        return ts_err_set(err, TS_EINVAL, "initializer '%.64s': %s %s; " WANT, init,
                          kinds[k].name, kinds[k].arg ? "needs a value" : "takes no value");
    if (colon && !parse_num(colon + 1, &v))
        return ts_err_set(err, TS_EINVAL, "initializer '%.64s': '%.32s' is not a finite "
                          "number", init, colon + 1);
    if (kinds[k].kind == CONST && fabs(v) > FLT_MAX)
        return ts_err_set(err, TS_EINVAL, "initializer '%.64s': const value out of float "
                          "range", init);
    /* |z| < 8.6 for u1 >= 2^-53, so a bound or std up to FLT_MAX / 16 stays finite. */
    if ((kinds[k].kind == UNIFORM || kinds[k].kind == NORMAL) && !(v >= 0 && v <= FLT_MAX / 16))
        return ts_err_set(err, TS_EINVAL, "initializer '%.64s': %s needs a value in "
                          "[0, 2e37], as in %s:0.05", init, kinds[k].name, kinds[k].name);
    sp->kind = kinds[k].kind;
    sp->v = v;
    return TS_OK;
}

ts_status ts_init_check(const char *initializer, struct ts_err *err)
{
    struct spec sp;

    return parse(initializer, &sp, err);
}

bool ts_init_assigned(const char *initializer)
{
    return initializer && strcmp(initializer, "assigned") == 0;
}

/* ---- generation ---- */

static inline uint64_t draw(uint64_t key, uint64_t c)
{
    uint64_t z = key + (c + 1) * GAMMA;

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* U(-a, a): 2u - 1 is exact for a 53-bit u, so one rounding to double, one to float. */
static void fill_uniform(uint64_t key, double a, uint64_t offset, uint64_t n, float *out)
{
    for (uint64_t j = 0; j < n; j++) {
        double u = (double)(draw(key, 2 * (offset + j)) >> 11) * 0x1p-53;

        out[j] = (float)(a * (2.0 * u - 1.0));
    }
}

static void fill_normal(uint64_t key, double std, uint64_t offset, uint64_t n, float *out)
{
    for (uint64_t j = 0; j < n; j++) {
        uint64_t c = 2 * (offset + j);
        double u1 = (double)((draw(key, c) >> 11) + 1) * 0x1p-53;    /* (0, 1] */
        double u2 = (double)(draw(key, c + 1) >> 11) * 0x1p-53;      /* [0, 1) */

        out[j] = (float)(std * (sqrt(-2.0 * ts__init_log(u1)) * ts__init_cos2pi(u2)));
    }
}

static void fill_const(float v, uint64_t n, float *out)
{
    for (uint64_t j = 0; j < n; j++)
        out[j] = v;
}

ts_status ts_tensor_init(const char *initializer, uint64_t seed, const char *tensor,
                         uint64_t fan_in, uint64_t fan_out, uint64_t offset, uint64_t n,
                         float *out, struct ts_err *err)
{
    struct spec sp;
    uint64_t key;
    ts_status st;

    if ((st = parse(initializer, &sp, err)))
        return st;
    if (!tensor)
        return ts_err_set(err, TS_EINVAL, "init: tensor name missing");
    if (sp.kind == XAVIER && fan_in == 0 && fan_out == 0)
        return ts_err_set(err, TS_EINVAL, "init '%.64s': xavier needs fan_in + fan_out > 0",
                          tensor);
    if (sp.kind == HE && fan_in == 0)
        return ts_err_set(err, TS_EINVAL, "init '%.64s': he needs fan_in > 0", tensor);
    key = XXH3_64bits_withSeed(tensor, strlen(tensor), seed);
    switch (sp.kind) {
    case ZEROS:
    case ASSIGNED:   /* zeros until the assignment of step 0 replaces them */
        fill_const(0.0f, n, out);
        break;
    case ONES:
        fill_const(1.0f, n, out);
        break;
    case CONST:
        fill_const((float)sp.v, n, out);
        break;
    case UNIFORM:
        fill_uniform(key, sp.v, offset, n, out);
        break;
    case XAVIER:
        fill_uniform(key, sqrt(6.0 / ((double)fan_in + (double)fan_out)), offset, n, out);
        break;
    case NORMAL:
        fill_normal(key, sp.v, offset, n, out);
        break;
    case HE:
        fill_normal(key, sqrt(2.0 / (double)fan_in), offset, n, out);
        break;
    }
    return TS_OK;
}
