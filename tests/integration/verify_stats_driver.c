/* verify_stats_driver.c - lib/verify's statistics behind a line protocol, for
 * test_verify_scipy.py to hold against scipy and numpy.
 *
 * Reads one command per line on stdin and answers each with one line on stdout: the numbers
 * in %.17g (they round-trip), or "ERR <status> <message>". Samples travel as .npy files, which
 * also exercises the reader on numpy's own files.
 *   ks A B auto|exact|asymp   -> statistic pvalue location sign method fell_back
 *   kstwo N D                 -> kstwo.sf(D, N)
 *   smirnov N D               -> scipy.special.smirnov(N, D)
 *   js P Q BASE               -> jensenshannon(P, Q, BASE or None when 0)
 *   moments X DDOF            -> mean std
 *   hist A B NBINS            -> NBINS+1 edges, NBINS counts of A, NBINS counts of B
 *   psi REF ACT NBINS         -> psi
 *   cosine A B                -> cosine similarity (both f4 or both f8)
 *   copy IN OUT               -> "ok" after reading IN and writing it to OUT */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verify/verify.h"

/* Loads path as doubles (malloc'd). */
static ts_status load(const char *path, double **x, size_t *n, struct ts_err *err)
{
    struct ts_verify_array a;
    ts_status st = ts_verify_npy_read(path, &a, err);

    if (st != TS_OK)
        return st;
    *x = malloc(sizeof(double) * (a.n ? a.n : 1));
    if (!*x) {
        ts_verify_array_fini(&a);
        return ts_err_set(err, TS_ENOMEM, "%s: no memory", path);
    }
    for (uint64_t i = 0; i < a.n; i++)
        (*x)[i] = a.dtype == TS_VERIFY_F32 ? ((float *)a.data)[i] : ((double *)a.data)[i];
    *n = a.n;
    ts_verify_array_fini(&a);
    return TS_OK;
}

static ts_status cmd_ks(char **av, struct ts_err *err)
{
    double *a = NULL, *b = NULL;
    size_t na, nb;
    struct ts_verify_ks r;
    enum ts_verify_ks_method m = strcmp(av[3], "exact") == 0   ? TS_VERIFY_KS_EXACT
                                 : strcmp(av[3], "asymp") == 0 ? TS_VERIFY_KS_ASYMP
                                                               : TS_VERIFY_KS_AUTO;
    ts_status st = load(av[1], &a, &na, err);

    if (st == TS_OK)
        st = load(av[2], &b, &nb, err);
    if (st == TS_OK)
        st = ts_verify_ks_2samp(a, na, b, nb, m, &r, err);
    if (st == TS_OK)
        printf("%.17g %.17g %.17g %d %s %d\n", r.statistic, r.pvalue, r.location, r.sign,
               r.method == TS_VERIFY_KS_EXACT ? "exact" : "asymp", (int)r.fell_back);
    free(a);
    free(b);
    return st;
}

static ts_status cmd_js(char **av, struct ts_err *err)
{
    double *p = NULL, *q = NULL, d;
    size_t np, nq;
    ts_status st = load(av[1], &p, &np, err);

    if (st == TS_OK)
        st = load(av[2], &q, &nq, err);
    if (st == TS_OK && np != nq)
        st = ts_err_set(err, TS_EINVAL, "js: %zu vs %zu entries", np, nq);
    if (st == TS_OK)
        st = ts_verify_js_distance(p, q, np, strtod(av[3], NULL), &d, err);
    if (st == TS_OK)
        printf("%.17g\n", d);
    free(p);
    free(q);
    return st;
}

static ts_status cmd_moments(char **av, struct ts_err *err)
{
    double *x = NULL, mean, sd;
    size_t n;
    ts_status st = load(av[1], &x, &n, err);

    if (st == TS_OK)
        st = ts_verify_mean_std(x, n, (unsigned)atoi(av[2]), &mean, &sd, err);
    if (st == TS_OK)
        printf("%.17g %.17g\n", mean, sd);
    free(x);
    return st;
}

static ts_status cmd_hist(char **av, struct ts_err *err)
{
    double *a = NULL, *b = NULL, *edges = NULL;
    uint64_t *ca = NULL, *cb = NULL;
    size_t na, nb, k = (size_t)atol(av[3]);
    ts_status st = load(av[1], &a, &na, err);

    if (st == TS_OK)
        st = load(av[2], &b, &nb, err);
    edges = malloc(sizeof(double) * (k + 1));
    ca = calloc(k + 1, sizeof(uint64_t));
    cb = calloc(k + 1, sizeof(uint64_t));
    if (st == TS_OK && (!edges || !ca || !cb))
        st = ts_err_set(err, TS_ENOMEM, "hist: no memory");
    if (st == TS_OK)
        st = ts_verify_histogram(a, na, b, nb, k, edges, ca, cb, err);
    if (st == TS_OK) {
        for (size_t i = 0; i <= k; i++)
            printf("%.17g ", edges[i]);
        for (size_t i = 0; i < k; i++)
            printf("%" PRIu64 " ", ca[i]);
        for (size_t i = 0; i < k; i++)
            printf("%" PRIu64 "%s", cb[i], i + 1 < k ? " " : "\n");
    }
    free(a), free(b), free(edges), free(ca), free(cb);
    return st;
}

static ts_status cmd_psi(char **av, struct ts_err *err)
{
    double *a = NULL, *b = NULL, psi;
    size_t na, nb;
    ts_status st = load(av[1], &a, &na, err);

    if (st == TS_OK)
        st = load(av[2], &b, &nb, err);
    if (st == TS_OK)
        st = ts_verify_psi(a, na, b, nb, (size_t)atol(av[3]), &psi, err);
    if (st == TS_OK)
        printf("%.17g\n", psi);
    free(a);
    free(b);
    return st;
}

static ts_status cmd_cosine(char **av, struct ts_err *err)
{
    struct ts_verify_array a = { 0 }, b = { 0 };
    ts_status st = ts_verify_npy_read(av[1], &a, err);

    if (st == TS_OK)
        st = ts_verify_npy_read(av[2], &b, err);
    if (st == TS_OK && (a.n != b.n || a.dtype != b.dtype))
        st = ts_err_set(err, TS_EINVAL, "cosine: shapes or dtypes differ");
    if (st == TS_OK)
        printf("%.17g\n", a.dtype == TS_VERIFY_F32
                              ? ts_verify_cosine_f32(a.data, b.data, a.n)
                              : ts_verify_cosine_f64(a.data, b.data, a.n));
    ts_verify_array_fini(&a);
    ts_verify_array_fini(&b);
    return st;
}

static ts_status cmd_copy(char **av, struct ts_err *err)
{
    struct ts_verify_array a;
    ts_status st = ts_verify_npy_read(av[1], &a, err);

    if (st != TS_OK)
        return st;
    st = ts_verify_npy_write(av[2], &a, err);
    ts_verify_array_fini(&a);
    if (st == TS_OK)
        printf("ok\n");
    return st;
}

static ts_status run(char **av, int ac, struct ts_err *err)
{
    static const struct {
        const char *name;
        int argc;
        ts_status (*fn)(char **av, struct ts_err *err);
    } cmds[] = { { "ks", 4, cmd_ks },         { "js", 4, cmd_js },
                 { "moments", 3, cmd_moments }, { "hist", 4, cmd_hist },
                 { "psi", 4, cmd_psi },       { "cosine", 3, cmd_cosine },
                 { "copy", 3, cmd_copy } };

    if (ac == 3 && strcmp(av[0], "kstwo") == 0) {
        printf("%.17g\n", ts_verify_kstwo_sf(strtoull(av[1], NULL, 10), strtod(av[2], NULL)));
        return TS_OK;
    }
    if (ac == 3 && strcmp(av[0], "smirnov") == 0) {
        printf("%.17g\n", ts_verify_smirnov_sf(atoi(av[1]), strtod(av[2], NULL)));
        return TS_OK;
    }
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        if (strcmp(av[0], cmds[i].name) == 0 && ac == cmds[i].argc)
            return cmds[i].fn(av, err);
    return ts_err_set(err, TS_EINVAL, "unknown command or wrong argument count: %s", av[0]);
}

int main(void)
{
    char line[8192];

    while (fgets(line, sizeof(line), stdin)) {
        char *av[8], *save = NULL, *tok;
        int ac = 0;
        struct ts_err err = { 0 };

        for (tok = strtok_r(line, " \t\n", &save); tok && ac < 8;
             tok = strtok_r(NULL, " \t\n", &save))
            av[ac++] = tok;
        if (ac == 0)
            continue;
        if (run(av, ac, &err) != TS_OK)
            printf("ERR %s %s\n", ts_status_name(err.code), err.msg);
        fflush(stdout);
    }
    return 0;
}
