/* codec.c - bench_codec: how fast does lib/codec compress and decompress gradients?
 *
 * Why: a trainer encodes every gradient partition before each push and a shard decodes (adds)
 * every one it receives, so a codec must cost far less than the network it saves: the goal is
 * well above 1 GB/s per core for the dense codecs. --bytes of fp32 gradients, normal(0, 0.01)
 * with one element in 64 ten times larger (a gradient's few large entries, which TOPK is for),
 * go through each codec, one thread:
 *   encode        ts_codec_encode, no residual, scale 1
 *   encode+res    the same with error feedback (the residual is read and rewritten)
 *   decode        ts_codec_decode into a float buffer
 *   add           ts_codec_add(mul 0.25) into an accumulator (the shard's path)
 * Baseline from the same run and data: memcpy of the fp32 gradient into another buffer, the
 * cost of touching the bytes at all. GB/s = fp32 bytes of the gradient (4 per element, not the
 * encoded bytes) per second, 1e9. Each figure is the median of --reps runs.
 * Output: a table and bench/results/codec.json; headline = fp16 encode against memcpy. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchlib.h"
#include "codec/codec.h"
#include "util/flags.h"
#include "util/json.h"

#define MAX_REPS 31
#define NCODEC 5

enum { OP_ENC, OP_ENC_RES, OP_DEC, OP_ADD, NOP };
static const char *const op_key[NOP] = { "encode", "encode_residual", "decode", "add" };
static const char *const specs[NCODEC] = { "none", "fp16", "bf16", "int8", "topk:0.01" };

struct opts {
    int64_t bytes, reps;
    const char *out;
    bool quick;
};

struct run {
    struct opts o;
    char machine[192];
    size_t n;
    float *g, *res, *acc, *copy;
    unsigned char *payload;
    double memcpy_gbps;
    double gbps[NCODEC][NOP];
    size_t enc_bytes[NCODEC];
};

static double r3(double x) { return (double)bench_round_i(x * 1e3) / 1e3; }

static double unit(uint64_t *s) { return (double)(bench_rng_next(s) >> 11) * 0x1p-53; }

static void fill(float *x, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i += 2) {
        double u = unit(&seed), v = unit(&seed);
        double r = sqrt(-2.0 * log(u > 0 ? u : 0x1p-53)) * 0.01;

        x[i] = (float)(r * cos(2 * M_PI * v));
        if (i + 1 < n)
            x[i + 1] = (float)(r * sin(2 * M_PI * v));
    }
    for (size_t i = 0; i < n; i += 64)
        x[i] *= 10;
}

static volatile uint64_t sink; /* keeps results alive */

/* One op of codec c, timed --reps times. The payload holds c's encoding of g throughout. */
static double time_op(struct run *r, const struct ts_codec *c, int op)
{
    double g[MAX_REPS];
    size_t bytes = 0;

    for (int k = 0; k < r->o.reps; k++) {
        int64_t t0;

        memset(r->res, 0, r->n * 4);    /* the residual's pages, and a fresh start */
        t0 = ts_now_ns();
        if (op == OP_ENC || op == OP_ENC_RES)
            ts_codec_encode(c, r->g, r->n, 1.0f, op == OP_ENC_RES ? r->res : NULL, r->payload,
                            &bytes);
        else if (op == OP_DEC)
            ts_codec_decode(c->kind, r->payload, ts_codec_max_bytes(c, r->n), r->n, r->acc);
        else
            ts_codec_add(c->kind, r->payload, ts_codec_max_bytes(c, r->n), r->n, 0.25f, r->acc);
        g[k] = bench_gbps(r->n * 4, ts_now_ns() - t0);
        sink += r->payload[k] + (uint64_t)r->acc[k];
    }
    return bench_median(g, (size_t)r->o.reps);
}

static ts_status measure(void *arg, struct ts_err *err)
{
    struct run *r = arg;
    r->memcpy_gbps = bench_memcpy_gbps(r->copy, r->g, r->n * 4, (int)r->o.reps);
    for (int i = 0; i < NCODEC; i++) {
        struct ts_codec c;
        size_t bytes;
        ts_status st = ts_codec_parse(specs[i], &c, err);

        if (st != TS_OK)
            return st;
        ts_codec_encode(&c, r->g, r->n, 1.0f, NULL, r->payload, &bytes);
        r->enc_bytes[i] = bytes;
        st = ts_codec_check(c.kind, r->payload, bytes, r->n, err);
        if (st != TS_OK)
            return st;
        /* Decode and add first: they need the plain encoding, which encode refreshes. */
        r->gbps[i][OP_DEC] = time_op(r, &c, OP_DEC);
        r->gbps[i][OP_ADD] = time_op(r, &c, OP_ADD);
        r->gbps[i][OP_ENC_RES] = time_op(r, &c, OP_ENC_RES);
        r->gbps[i][OP_ENC] = time_op(r, &c, OP_ENC);
    }
    return TS_OK;
}

static void print_table(const void *arg)
{
    const struct run *r = arg;
    printf("bench_codec: %.0f MiB fp32 gradients (normal(0, 0.01), 1 in 64 x10), one thread, "
           "median of %" PRId64 " (%s)\n", (double)r->n * 4 / 1048576, r->o.reps, r->machine);
    printf("GB/s = fp32 bytes of the gradient per second (1e9)\n\n");
    printf("%-10s | %9s | %8s | %11s | %8s | %8s\n", "codec", "wire size", "encode",
           "encode+res", "decode", "add");
    for (int i = 0; i < NCODEC; i++)
        printf("%-10s | %8.2f%% | %8.2f | %11.2f | %8.2f | %8.2f\n", specs[i],
               100.0 * (double)r->enc_bytes[i] / ((double)r->n * 4), r->gbps[i][OP_ENC],
               r->gbps[i][OP_ENC_RES], r->gbps[i][OP_DEC], r->gbps[i][OP_ADD]);
    printf("%-10s | %8.2f%% | %8.2f |\n", "memcpy", 100.0, r->memcpy_gbps);
}

static ts_status write_json(const void *arg, struct ts_err *err)
{
    const struct run *r = arg;
    struct ts_json j;

    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "name", "codec");
    ts_json_str(&j, "machine", r->machine);
    ts_json_bool(&j, "quick", r->o.quick);
    ts_json_int(&j, "bytes", (int64_t)r->n * 4);
    ts_json_int(&j, "reps", r->o.reps);
    ts_json_str(&j, "gbps_counts", "fp32 bytes of the gradient per second, 1e9; median of reps");
    ts_json_obj(&j, "codecs");
    for (int i = 0; i < NCODEC; i++) {
        ts_json_obj(&j, specs[i]);
        ts_json_uint(&j, "wire_bytes", r->enc_bytes[i]);
        for (int op = 0; op < NOP; op++)
            ts_json_num(&j, op_key[op], r3(r->gbps[i][op]));
        ts_json_end(&j);
    }
    ts_json_end(&j);
    ts_json_num(&j, "memcpy_gbps", r3(r->memcpy_gbps));
    ts_json_obj(&j, "headline");
    ts_json_num(&j, "ours", r3(r->gbps[1][OP_ENC]));
    ts_json_num(&j, "baseline", r3(r->memcpy_gbps));
    ts_json_str(&j, "unit", "GB/s");
    ts_json_str(&j, "what", "fp16 encode of fp32 gradients, one thread, vs memcpy of the same "
                "fp32 bytes");
    ts_json_num(&j, "ratio", r3(r->gbps[1][OP_ENC] / r->memcpy_gbps));
    ts_json_end(&j);
    return bench_write_json(&j, r->o.out, err);
}

static ts_status prepare(void *arg, struct ts_err *err)
{
    struct run *r = arg;
    r->n = (size_t)r->o.bytes / 4;
    r->g = malloc(r->n * 4);
    r->res = malloc(r->n * 4);
    r->acc = malloc(r->n * 4);
    r->copy = malloc(r->n * 4);
    r->payload = malloc(r->n * 4 + 8);
    if (!r->g || !r->res || !r->acc || !r->copy || !r->payload)
        return ts_err_set(err, TS_ENOMEM, "out of memory for 5 x %zu bytes", r->n * 4);
    fill(r->g, r->n, 42);
    /* Fault the pages in before timing. */
    memset(r->acc, 0, r->n * 4);
    memset(r->copy, 0, r->n * 4);
    memset(r->payload, 0, r->n * 4 + 8);
    return TS_OK;
}

/* Frees the run (bench_phases.release). */
static void release(void *arg)
{
    struct run *r = arg;

    free(r->g);
    free(r->res);
    free(r->acc);
    free(r->copy);
    free(r->payload);
    free(r);
}

int main(int argc, char **argv)
{
    static const char about[] =
        "Measures lib/codec's encode (with and without error feedback), decode\n"
        "and add of fp32 gradients for none, fp16, bf16, int8 and topk:0.01,\n"
        "beside memcpy of the same bytes. Prints a table and writes JSON whose\n"
        "headline is fp16 encode GB/s against memcpy.";
    struct opts o = { 0 };
    const struct ts_flag flags[] = {
        { "bytes", TS_FLAG_INT, &o.bytes, "N", "fp32 gradient bytes (default 67108864 = 64 MiB)",
          1 << 16, 1ll << 32 },
        { "reps", TS_FLAG_INT, &o.reps, "N", "runs per figure, the median reported (default 7)",
          1, MAX_REPS },
        { "out", TS_FLAG_STR, &o.out, "FILE", "results (default bench/results/codec.json)", 0,
          0 },
        { "quick", TS_FLAG_BOOL, &o.quick, NULL, "smoke run: 8 MiB, 3 reps (explicit flags "
          "still win)", 0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    static const struct bench_phases phases = {
        "bench_codec", prepare, measure, print_table, write_json, release };
    struct run *r;
    int done;

    if ((done = ts_flags_program("bench_codec", NULL, about, flags, argc, argv)) >= 0)
        return done;
    if (!(r = calloc(1, sizeof(*r)))) {
        fprintf(stderr, "bench_codec: out of memory\n");
        return 2;
    }
    o.bytes = o.bytes ? o.bytes : o.quick ? 8ll << 20 : 64ll << 20;
    o.reps = o.reps ? o.reps : o.quick ? 3 : 7;
    o.out = o.out ? o.out : "bench/results/codec.json";
    r->o = o;
    bench_machine_desc(r->machine, sizeof(r->machine));
    return bench_run(&phases, r, o.out);
}
