/* verify.c - bench_verify: how fast does lib/verify compare two tensors?
 *
 * Why: issue 5 sets a goal of at least 1.5 GB/s for the bit-level comparison on this 2-core
 * machine class, so that auditing a model costs about what reading it costs. Two --bytes fp32
 * tensors, normal(0, 0.05) like trained weights, are compared with ts_verify_bits_compare
 * (1 MiB blocks, one thread) in the cases an audit meets:
 *   identical     b is a copy of a: every block passes memcmp (the audit that passes);
 *   sparse        one float in 1,024 is 1 ULP off: every block is walked, few differences;
 *   all differ    every float is 1 ULP off: every element is folded (the worst case);
 * each without and with the per-block SHA-256, then ts_verify_cosine_f32 over a and b.
 * Baselines from the same run and data, one core: memcpy of a into a third buffer and
 * OpenSSL EVP SHA-256 of a in 1 MiB pieces, the costs of touching the data at all.
 * GB/s = bytes of ONE tensor (not both) per second, 1e9; memcpy counts the bytes copied.
 * Each figure is the median of --reps runs. Output: a table and bench/results/verify.json;
 * headline = the slowest bit-compare without SHA-256 (all differ) against the 1.5 GB/s goal. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "benchlib.h"
#include "util/flags.h"
#include "util/json.h"
#include "verify/verify.h"

#define GOAL_GBPS 1.5
#define MAX_REPS 31

enum { C_SAME, C_SPARSE, C_ALL, NCASE };
static const char *const case_key[NCASE] = { "identical", "sparse", "all_differ" };
static const char *const case_desc[NCASE] = { "identical", "1 in 1024 differ",
                                              "all differ (1 ULP)" };

struct opts {
    int64_t bytes, reps;
    const char *out;
    bool quick;
};

struct figs {
    double memcpy_gbps, sha_gbps, cosine_gbps;
    double bits_gbps[NCASE], bits_sha_gbps[NCASE];
    uint64_t ndiff[NCASE];
    double cosine[NCASE];
};

struct run {
    struct opts o;
    char machine[192];
    size_t n;                 /* floats per tensor */
    float *a, *b[NCASE], *c;
    struct ts_verify_block *blocks;
    struct figs f;
};

static double r3(double x) { return (double)bench_round_i(x * 1e3) / 1e3; }

/* ---- data ---- */

static double unit(uint64_t *s) { return (double)(bench_rng_next(s) >> 11) * 0x1p-53; }

/* normal(0, 0.05) by Box-Muller, as bench_snapshot's weights. */
static void fill(float *x, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i += 2) {
        double u = unit(&seed), v = unit(&seed);
        double r = sqrt(-2.0 * log(u > 0 ? u : 0x1p-53)) * 0.05;
        x[i] = (float)(r * cos(2 * M_PI * v));
        if (i + 1 < n)
            x[i + 1] = (float)(r * sin(2 * M_PI * v));
    }
}

/* b = a with every `every`-th float moved 1 ULP (its bits + 1: never a NaN from a finite). */
static void perturb(float *b, const float *a, size_t n, size_t every)
{
    memcpy(b, a, n * sizeof(float));
    for (size_t i = every / 2; i < n; i += every) {
        uint32_t u;
        memcpy(&u, &b[i], 4);
        u++;
        memcpy(&b[i], &u, 4);
    }
}

/* ---- timing ---- */

static volatile uint64_t sink; /* keeps results alive */

static double time_sha(struct run *r)
{
    double g[MAX_REPS];
    uint8_t id[32];
    unsigned idn;
    size_t len = r->n * 4, ch = TS_VERIFY_DEFAULT_BLOCK;

    for (int k = 0; k < r->o.reps; k++) {
        int64_t t0 = ts_now_ns();
        for (size_t off = 0; off < len; off += ch)
            EVP_Digest((const char *)r->a + off, len - off < ch ? len - off : ch, id, &idn,
                       EVP_sha256(), NULL);
        g[k] = bench_gbps(len, ts_now_ns() - t0);
        sink += id[0];
    }
    return bench_median(g, (size_t)r->o.reps);
}

static ts_status time_bits(struct run *r, int c, bool sha, double *out, struct ts_err *err)
{
    struct ts_verify_bits_opts o = { .sha256 = sha };
    struct ts_verify_bits res;
    double g[MAX_REPS];

    for (int k = 0; k < r->o.reps; k++) {
        int64_t t0 = ts_now_ns();
        ts_status st = ts_verify_bits_compare(r->a, r->b[c], r->n, &o, &res, r->blocks, err);
        if (st != TS_OK)
            return st;
        g[k] = bench_gbps(r->n * 4, ts_now_ns() - t0);
        r->f.ndiff[c] = res.ndiff;
    }
    *out = bench_median(g, (size_t)r->o.reps);
    return TS_OK;
}

static double time_cosine(struct run *r)
{
    double g[MAX_REPS];
    for (int k = 0; k < r->o.reps; k++) {
        int64_t t0 = ts_now_ns();
        double c = ts_verify_cosine_f32(r->a, r->b[C_ALL], r->n);
        g[k] = bench_gbps(r->n * 4, ts_now_ns() - t0);
        sink += (uint64_t)(c * 1e6);
    }
    return bench_median(g, (size_t)r->o.reps);
}

static ts_status measure(void *arg, struct ts_err *err)
{
    struct run *r = arg;
    struct figs *f = &r->f;
    ts_status st = TS_OK;

    f->memcpy_gbps = bench_memcpy_gbps(r->c, r->a, r->n * 4, (int)r->o.reps);
    f->sha_gbps = time_sha(r);
    for (int c = 0; c < NCASE && st == TS_OK; c++) {
        st = time_bits(r, c, false, &f->bits_gbps[c], err);
        if (st == TS_OK)
            st = time_bits(r, c, true, &f->bits_sha_gbps[c], err);
        f->cosine[c] = ts_verify_cosine_f32(r->a, r->b[c], r->n);
    }
    f->cosine_gbps = time_cosine(r);
    /* The comparison must have seen what was planted. */
    if (st == TS_OK && (f->ndiff[C_SAME] != 0 || f->ndiff[C_ALL] != r->n ||
                        f->ndiff[C_SPARSE] != (r->n + 511) / 1024))
        st = ts_err_set(err, TS_EINTERNAL, "bits: ndiff %" PRIu64 "/%" PRIu64 "/%" PRIu64
                        " does not match the perturbation", f->ndiff[0], f->ndiff[1],
                        f->ndiff[2]);
    return st;
}

/* ---- output ---- */

static void print_table(const void *arg)
{
    const struct run *r = arg;
    const struct figs *f = &r->f;

    printf("bench_verify: 2 x %.0f MiB fp32 (normal(0, 0.05)), 1 MiB blocks, one thread, "
           "median of %" PRId64 " (%s)\n\n", (double)r->n * 4 / 1048576, r->o.reps,
           r->machine);
    printf("%-22s | %14s | %14s | %18s\n", "bit-compare", "GB/s", "GB/s +SHA-256",
           "cosine(a, b)");
    for (int c = 0; c < NCASE; c++)
        printf("%-22s | %14.2f | %14.2f | %18.15f\n", case_desc[c], f->bits_gbps[c],
               f->bits_sha_gbps[c], f->cosine[c]);
    printf("\n%-22s | %14.2f\n", "cosine (f32, double)", f->cosine_gbps);
    printf("%-22s | %14.2f\n", "memcpy (baseline)", f->memcpy_gbps);
    printf("%-22s | %14.2f\n", "SHA-256 (baseline)", f->sha_gbps);
    printf("\ngoal: bit-compare >= %.1f GB/s in every case without SHA-256: %s\n", GOAL_GBPS,
           f->bits_gbps[C_ALL] >= GOAL_GBPS && f->bits_gbps[C_SPARSE] >= GOAL_GBPS &&
           f->bits_gbps[C_SAME] >= GOAL_GBPS ? "met" : "NOT met");
}

static ts_status write_json(const void *arg, struct ts_err *err)
{
    const struct run *r = arg;
    const struct figs *f = &r->f;
    double worst = f->bits_gbps[C_SAME];
    struct ts_json j;

    for (int c = 0; c < NCASE; c++)
        worst = f->bits_gbps[c] < worst ? f->bits_gbps[c] : worst;
    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "name", "verify");
    ts_json_str(&j, "machine", r->machine);
    ts_json_bool(&j, "quick", r->o.quick);
    ts_json_int(&j, "bytes", (int64_t)r->n * 4);
    ts_json_int(&j, "block", TS_VERIFY_DEFAULT_BLOCK);
    ts_json_int(&j, "reps", r->o.reps);
    ts_json_str(&j, "gbps_counts", "bytes of one tensor per second, 1e9; median of reps");
    ts_json_obj(&j, "bits");
    for (int c = 0; c < NCASE; c++) {
        ts_json_obj(&j, case_key[c]);
        ts_json_str(&j, "what", case_desc[c]);
        ts_json_uint(&j, "ndiff", f->ndiff[c]);
        ts_json_num(&j, "gbps", r3(f->bits_gbps[c]));
        ts_json_num(&j, "gbps_sha256", r3(f->bits_sha_gbps[c]));
        ts_json_num(&j, "cosine", f->cosine[c]);
        ts_json_end(&j);
    }
    ts_json_end(&j);
    ts_json_num(&j, "cosine_gbps", r3(f->cosine_gbps));
    ts_json_num(&j, "memcpy_gbps", r3(f->memcpy_gbps));
    ts_json_num(&j, "sha256_gbps", r3(f->sha_gbps));
    ts_json_obj(&j, "goals");
    ts_json_num(&j, "bits_gbps", GOAL_GBPS);
    ts_json_bool(&j, "bits_met", worst >= GOAL_GBPS);
    ts_json_end(&j);
    ts_json_obj(&j, "headline");
    ts_json_num(&j, "ours", r3(worst));
    ts_json_num(&j, "baseline", GOAL_GBPS);
    ts_json_str(&j, "unit", "GB/s bit-compare of fp32, slowest case (all differ), no SHA-256, "
                "one thread, vs the 1.5 GB/s goal");
    ts_json_num(&j, "ratio", r3(worst / GOAL_GBPS));
    ts_json_end(&j);
    return bench_write_json(&j, r->o.out, err);
}

/* ---- main ---- */

static ts_status prepare(void *arg, struct ts_err *err)
{
    struct run *r = arg;
    struct ts_verify_bits_opts o = { 0 };

    r->n = (size_t)r->o.bytes / 4;
    r->a = malloc(r->n * 4);
    r->c = malloc(r->n * 4);
    for (int c = 0; c < NCASE; c++)
        r->b[c] = malloc(r->n * 4);
    r->blocks = calloc(ts_verify_nblocks(r->n, &o), sizeof(*r->blocks));
    if (!r->a || !r->c || !r->b[0] || !r->b[1] || !r->b[2] || !r->blocks)
        return ts_err_set(err, TS_ENOMEM, "out of memory for 5 x %zu bytes", r->n * 4);
    fill(r->a, r->n, 42);
    memset(r->c, 0, r->n * 4); /* fault the pages in before timing */
    memcpy(r->b[C_SAME], r->a, r->n * 4);
    perturb(r->b[C_SPARSE], r->a, r->n, 1024);
    perturb(r->b[C_ALL], r->a, r->n, 1);
    return TS_OK;
}

/* Frees the run (bench_phases.release). */
static void release(void *arg)
{
    struct run *r = arg;

    free(r->a);
    free(r->c);
    for (int c = 0; c < NCASE; c++)
        free(r->b[c]);
    free(r->blocks);
    free(r);
}

int main(int argc, char **argv)
{
    static const char about[] =
        "Measures lib/verify's bit-level comparison (identical, sparse and\n"
        "all-different fp32 tensors, with and without per-block SHA-256) and\n"
        "cosine similarity, beside memcpy and SHA-256 on the same data. Prints a\n"
        "table and writes JSON whose headline is the slowest bit-compare GB/s\n"
        "against the 1.5 GB/s goal.";
    struct opts o = { 0 };
    const struct ts_flag flags[] = {
        { "bytes", TS_FLAG_INT, &o.bytes, "N", "fp32 bytes per tensor (default 1073741824 = "
          "1 GiB; 5 such buffers are allocated)", 1 << 16, 1ll << 34 },
        { "reps", TS_FLAG_INT, &o.reps, "N", "runs per figure, the median reported (default 5)",
          1, MAX_REPS },
        { "out", TS_FLAG_STR, &o.out, "FILE", "results (default bench/results/verify.json)", 0,
          0 },
        { "quick", TS_FLAG_BOOL, &o.quick, NULL, "smoke run: 64 MiB, 3 reps (explicit flags "
          "still win)", 0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    static const struct bench_phases phases = {
        "bench_verify", prepare, measure, print_table, write_json, release };
    struct run *r;
    int done;

    if ((done = ts_flags_program("bench_verify", NULL, about, flags, argc, argv)) >= 0)
        return done;
    if (!(r = calloc(1, sizeof(*r)))) {
        fprintf(stderr, "bench_verify: out of memory\n");
        return 2;
    }
    o.bytes = o.bytes ? o.bytes : o.quick ? 64ll << 20 : 1ll << 30;
    o.reps = o.reps ? o.reps : o.quick ? 3 : 5;
    o.out = o.out ? o.out : "bench/results/verify.json";
    r->o = o;
    bench_machine_desc(r->machine, sizeof(r->machine));
    return bench_run(&phases, r, o.out);
}
