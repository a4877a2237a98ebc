/* pushpull_report.c - bench_pushpull's tables and JSON, from the results pushpull.c gathered
 * (what is measured is explained there). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "benchlib.h"
#include "pushpull.h"
#include "util/json.h"

static const struct run *find_run(const struct results *res, const char *tp, bool buffers,
                                  int mode, int64_t mib)
{
    for (int i = 0; i < res->nruns; i++) {
        const struct run *r = &res->runs[i];
        if (r->done && r->buffers == buffers && r->mode == mode && r->size_mib == mib &&
            strcmp(r->transport, tp) == 0)
            return r;
    }
    return NULL;
}

static double gloo_gbs(const struct results *res, int64_t mib)
{
    for (int i = 0; i < res->ngloo; i++)
        if (res->gloo[i].size_mib == mib)
            return res->gloo[i].gbs;
    return 0;
}

/* The machine's limit at mib for transport tp (0: not measured). */
static double limit_gbs(const struct opts *o, const struct results *res, const char *tp,
                        int64_t mib)
{
    for (int i = 0; i < o->nsizes; i++)
        if (o->sizes[i] == mib)
            return strcmp(tp, "shm") == 0 ? res->limit_memcpy[i]
                   : strcmp(tp, "tcp") == 0 ? res->limit_tcp[i] : 0;
    return 0;
}

/* The best float-mode run at mib with own buffers (only_own) or of either kind, or NULL. */
static const struct run *best_run(const struct opts *o, const struct results *res, int64_t mib,
                                  bool only_own)
{
    const struct run *best = NULL, *r;

    for (int i = 0; i < o->ntp * 2; i++)
        if ((i % 2 == 0 || !only_own) &&
            (r = find_run(res, o->tp[i / 2], i % 2 == 1, PP_FLOAT, mib)) &&
            (!best || r->gbs > best->gbs))
            best = r;
    return best;
}

/* The limit row of mib: each column's limit, and its float run's share of it. */
static void print_limit_row(const struct opts *o, const struct results *res, int64_t mib)
{
    printf("\n%4" PRId64 " MiB | %9s | %9s", mib, "limit", "");
    for (int k = 0; k < o->ntp * o->nbuf; k++) {
        const char *tp = o->tp[k / o->nbuf];
        const struct run *r = find_run(res, tp, o->buf[k % o->nbuf], PP_FLOAT, mib);
        double l = limit_gbs(o, res, tp, mib);
        char c[32] = "-";
        if (l > 0 && r)
            snprintf(c, sizeof(c), "%.2f (%.2fx)", l, r->gbs / l);
        else if (l > 0)
            snprintf(c, sizeof(c), "%.2f", l);
        printf(" | %14s", c);
    }
}

/* The most GB/s a parameter server can reach over loopback tcp at size index i if the
 * kernel's work for its bytes were all it did: each of W workers pushes S and pulls S, so the
 * shards receive and send 2 W S and the kernel carries 2 W S per step, at the raw stream's
 * CPU per byte, spread over every core. 0 where not measured. */
static double tcp_ceiling_gbs(const struct opts *o, const struct results *res, int i)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    double c = res->limit_tcp_cpu[i];

    return c > 0 && ncpu > 0 ? (double)ncpu / (2.0 * (double)o->workers * c) : 0;
}

static void print_tcp_ceiling(const struct opts *o, const struct results *res)
{
    bool head = false;

    for (int i = 0; i < o->nsizes; i++) {
        double c = tcp_ceiling_gbs(o, res, i), g = gloo_gbs(res, o->sizes[i]);
        const struct run *r = find_run(res, "tcp", false, PP_FLOAT, o->sizes[i]);
        if (c <= 0)
            continue;
        if (!head)
            printf("\ntcp's ceiling here: a step carries 2 x %" PRId64 " x S bytes through "
                   "loopback (gloo's ring 2 x %" PRId64 " x S);\nat the raw stream's CPU per "
                   "byte over %ld cores, with no other work, a PS reaches at most:\n",
                   o->workers, o->workers - 1, sysconf(_SC_NPROCESSORS_ONLN));
        head = true;
        printf("%4" PRId64 " MiB: %.2f ns/B -> %.2f GB/s = %.2fx gloo", o->sizes[i],
               res->limit_tcp_cpu[i], c, g > 0 ? c / g : 0);
        if (r)
            printf("; tcp float reached %.2f of it", r->gbs / c);
        printf("\n");
    }
}

/* One row per size and mode, one column per transport and buffers kind, and a limit row per
 * size. */
static void print_algbw(const struct opts *o, const struct results *res)
{
    int nmodes = o->exact ? PP_MODES : 1;
    char name[24];

    printf("\nbench_pushpull: %s; loopback; %" PRId64 " workers x %" PRId64 " shards; GB/s = "
           "algbw = S / step time (1e9 B/s);\nmedian of %" PRId64 " steps after %d warm-up; (x) "
           "= against gloo all_reduce of S bytes, %" PRId64 " ranks;\n+buffers = "
           "tessera_buffers' zero-copy buffers, else the worker's own;\nlimit = the machine's, "
           "same run: a memcpy of S bytes (shm), a raw loopback TCP stream of S\nbytes one way "
           "(tcp); (x) on its row = the float run above / the limit\n\n%8s | %9s | %9s",
           res->machine, o->workers, o->shards, o->iters, WARMUP, o->workers, "size", "mode",
           "gloo GB/s");
    for (int k = 0; k < o->ntp * o->nbuf; k++) {
        snprintf(name, sizeof(name), "%s%s", o->tp[k / o->nbuf],
                 o->buf[k % o->nbuf] ? "+buffers" : "");
        printf(" | %14s", name);
    }
    for (int i = 0; i < o->nsizes * nmodes; i++) {
        int64_t mib = o->sizes[i / nmodes];
        int mode = i % nmodes;
        double g = gloo_gbs(res, mib);
        printf("\n%4" PRId64 " MiB | %9s | %9.2f", mib, pp_mode_name(mode), g);
        for (int k = 0; k < o->ntp * o->nbuf; k++) {
            const struct run *r = find_run(res, o->tp[k / o->nbuf], o->buf[k % o->nbuf], mode,
                                           mib);
            char c[32] = "-";
            if (r)
                snprintf(c, sizeof(c), "%.2f (%.2fx)", r->gbs, g > 0 ? r->gbs / g : 0);
            printf(" | %14s", c);
        }
        if (mode == nmodes - 1)
            print_limit_row(o, res, mib);
    }
    printf("\n");
}

static void print_detail(const struct opts *o, const struct results *res)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

    printf("\nwhere the time goes, per step (CPU ms summed over processes, %ld cores = %ld CPU "
           "ms per ms;\nother = the rest of the machine, not ours: a large figure means a "
           "disturbed run)\n%-21s | %8s | %7s | %7s | %7s | %5s | %10s | %9s | %9s\n", ncpu,
           ncpu, "run", "size", "step ms", "min ms", "max ms", "GB/s", "worker CPU",
           "shard CPU", "other CPU");
    for (int i = 0; i < res->nruns; i++) {
        const struct run *r = &res->runs[i];
        char name[40];
        snprintf(name, sizeof(name), "%s %s", r->name, pp_mode_name(r->mode));
        if (!r->done)
            printf("%-21s | %4" PRId64 " MiB | failed\n", name, r->size_mib);
        else
            printf("%-21s | %4" PRId64 " MiB | %7.1f | %7.1f | %7.1f | %5.2f | %10.1f | %9.1f | "
                   "%9.1f\n", name, r->size_mib, r->med_ms, r->min_ms, r->max_ms, r->gbs,
                   r->worker_cpu_ms, r->shard_cpu_ms, r->other_cpu_ms);
    }
}

/* The best run of either kind, the best own-buffers one when that is another run, and tcp
 * with each kind of buffers. */
static void print_goals(const struct opts *o, const struct results *res)
{
    static const char *const what[] = { "best", "best, own buffers", "tcp", "tcp+buffers" };
    const struct run *r[4] = { best_run(o, res, HEADLINE_MIB, false),
                               best_run(o, res, HEADLINE_MIB, true),
                               find_run(res, "tcp", false, PP_FLOAT, HEADLINE_MIB),
                               find_run(res, "tcp", true, PP_FLOAT, HEADLINE_MIB) };
    double g = gloo_gbs(res, HEADLINE_MIB), goal[4] = { GOAL_BEST, GOAL_BEST, GOAL_TCP,
                                                        GOAL_TCP };

    printf("\ngoals at %d MiB, against gloo's %.2f GB/s:\n", HEADLINE_MIB, g);
    for (int i = 0; i < 4 && g > 0; i++)
        if (r[i] && (i != 1 || r[1] != r[0]))
            printf("  %-21s >= %.1fx gloo: %s %.2f GB/s = %.2fx: %s\n", what[i], goal[i],
                   r[i]->name, r[i]->gbs, r[i]->gbs / g,
                   r[i]->gbs / g >= goal[i] ? "met" : "NOT met");
    for (int k = 0; k < o->ntp * o->nbuf; k++) {
        const char *tp = o->tp[k / o->nbuf];
        const struct run *f = find_run(res, tp, o->buf[k % o->nbuf], PP_FLOAT, HEADLINE_MIB);
        for (int m = PP_EXACT; m < PP_MODES && f; m++) {
            const struct run *x = find_run(res, tp, o->buf[k % o->nbuf], m, HEADLINE_MIB);
            if (x && strcmp(tp, "shm") == 0)
                printf("  %-21s <= %.1fx float's step: %s %s %.1f ms / %.1f ms = %.2fx: %s\n",
                       pp_mode_name(m), GOAL_EXACT, f->name, pp_mode_name(m), x->med_ms,
                       f->med_ms, x->med_ms / f->med_ms,
                       x->med_ms / f->med_ms <= GOAL_EXACT ? "met" : "NOT met");
        }
    }
    printf("\n");
}

#define RND(x, scale) ((double)bench_round_i((x) * (scale)) / (scale))

static void json_runs(struct ts_json *j, const struct opts *o, const struct results *res)
{
    ts_json_arr(j, "gloo");
    for (int i = 0; i < res->ngloo; i++) {
        ts_json_obj(j, NULL);
        ts_json_int(j, "size_mib", res->gloo[i].size_mib);
        ts_json_num(j, "median_ms", RND(res->gloo[i].med_ms, 100));
        ts_json_num(j, "algbw_gbs", RND(res->gloo[i].gbs, 1000));
        ts_json_end(j);
    }
    ts_json_end(j);
    if (res->gloo_error[0])
        ts_json_str(j, "gloo_error", res->gloo_error);
    ts_json_arr(j, "limits");
    for (int i = 0; i < o->nsizes; i++) {
        ts_json_obj(j, NULL);
        ts_json_int(j, "size_mib", o->sizes[i]);
        ts_json_num(j, "memcpy_gbs", RND(res->limit_memcpy[i], 1000));
        ts_json_num(j, "tcp_stream_gbs", RND(res->limit_tcp[i], 1000));
        ts_json_num(j, "tcp_stream_cpu_ns_per_byte", RND(res->limit_tcp_cpu[i], 1000));
        ts_json_num(j, "tcp_ps_ceiling_gbs", RND(tcp_ceiling_gbs(o, res, i), 1000));
        ts_json_end(j);
    }
    ts_json_end(j);
    ts_json_arr(j, "runs");
    for (int i = 0; i < res->nruns; i++) {
        const struct run *r = &res->runs[i];
        ts_json_obj(j, NULL);
        ts_json_str(j, "transport", r->transport);
        ts_json_bool(j, "buffers", r->buffers);
        ts_json_bool(j, "exact", r->mode != PP_FLOAT);
        ts_json_str(j, "mode", pp_mode_name(r->mode));
        ts_json_int(j, "size_mib", r->size_mib);
        ts_json_bool(j, "ok", r->done);
        if (r->done) {
            ts_json_num(j, "median_ms", RND(r->med_ms, 100));
            ts_json_num(j, "min_ms", RND(r->min_ms, 100));
            ts_json_num(j, "max_ms", RND(r->max_ms, 100));
            ts_json_num(j, "algbw_gbs", RND(r->gbs, 1000));
            ts_json_num(j, "worker_cpu_ms_per_step", bench_round1(r->worker_cpu_ms));
            ts_json_num(j, "shard_cpu_ms_per_step", bench_round1(r->shard_cpu_ms));
            ts_json_num(j, "other_cpu_ms_per_step", bench_round1(r->other_cpu_ms));
            if (limit_gbs(o, res, r->transport, r->size_mib) > 0)
                ts_json_num(j, "of_limit",
                            RND(r->gbs / limit_gbs(o, res, r->transport, r->size_mib), 1000));
        }
        ts_json_end(j);
    }
    ts_json_end(j);
}

/* best (NULL: none measured) against gloo's g, as object key. */
static void json_headline(struct ts_json *j, const struct opts *o, const char *key,
                          const struct run *best, double g)
{
    double ours = best ? RND(best->gbs, 1000) : 0;
    char unit[128];

    ts_json_obj(j, key);
    snprintf(unit, sizeof(unit), "GB/s algbw, push+pull of %d MiB, %" PRId64 " workers x %"
             PRId64 " shards, one host", HEADLINE_MIB, o->workers, o->shards);
    ts_json_num(j, "ours", ours);
    ts_json_num(j, "baseline", RND(g, 1000));
    ts_json_str(j, "unit", unit);
    ts_json_num(j, "ratio", g > 0 ? RND(ours / g, 1000) : 0);
    if (best)
        ts_json_str(j, "transport", best->name);
    ts_json_end(j);
}

/* Exact mode's cost: the float-push exact step against the float step, shm at 64 MiB, with
 * the zero-copy buffers where measured (the fastest float step: the hardest comparison). */
static void json_headline_exact(struct ts_json *j, const struct opts *o,
                                const struct results *res)
{
    for (int b = 1; b >= 0; b--) {
        const struct run *f = find_run(res, "shm", b, PP_FLOAT, HEADLINE_MIB);
        const struct run *x = find_run(res, "shm", b, PP_EXACT_F32, HEADLINE_MIB);
        char unit[160];

        if (!f || !x)
            continue;
        snprintf(unit, sizeof(unit), "ms per step, exact mode (float pushes) against float, "
                 "push+pull of %d MiB, %" PRId64 " workers x %" PRId64 " shards, %s",
                 HEADLINE_MIB, o->workers, o->shards, f->name);
        ts_json_obj(j, "headline_exact");
        ts_json_num(j, "ours", RND(x->med_ms, 100));
        ts_json_num(j, "baseline", RND(f->med_ms, 100));
        ts_json_str(j, "unit", unit);
        ts_json_num(j, "ratio", RND(x->med_ms / f->med_ms, 1000));
        ts_json_end(j);
        return;
    }
}

ts_status pushpull_write_json(const struct opts *o, const struct results *res, bool ok,
                              struct ts_err *err)
{
    double g = gloo_gbs(res, HEADLINE_MIB);
    struct ts_json j;

    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "name", "pushpull");
    ts_json_str(&j, "machine", res->machine);
    ts_json_bool(&j, "ok", ok);
    ts_json_bool(&j, "quick", o->quick);
    ts_json_int(&j, "workers", o->workers);
    ts_json_int(&j, "shards", o->shards);
    ts_json_int(&j, "partition_kib", o->partition_kib);
    ts_json_int(&j, "replicas", o->replicas ? o->replicas : 1);
    ts_json_int(&j, "warmup", WARMUP);
    ts_json_int(&j, "iters", o->iters);
    ts_json_int(&j, "metrics_port", o->metrics_port);
    ts_json_uint(&j, "scrapes", res->scrapes);
    json_runs(&j, o, res);
    json_headline(&j, o, "headline", best_run(o, res, HEADLINE_MIB, false), g);
    json_headline(&j, o, "headline_copy", best_run(o, res, HEADLINE_MIB, true), g);
    json_headline_exact(&j, o, res);
    ts_json_end(&j);
    return bench_write_json(&j, o->out, err);
}

void pushpull_report(const struct opts *o, const struct results *res)
{
    print_algbw(o, res);
    print_tcp_ceiling(o, res);
    print_detail(o, res);
    print_goals(o, res);
}
