/* table_policy.c - bench_table_policy: is the memory tier's eviction as good as LRU on the
 * sparse tables' Zipf workload?
 *
 * Why: issue 48 asks for LRU, or a policy shown to be better on the Zipf workload; the memory
 * tier (lib/table/rows.c) evicts by CLOCK, one reference bit a row, because exact LRU reorders
 * a list under the table's lock on every hit, with a window of new rows admitted by
 * frequency (W-TinyLFU's design) in front of it. This measures its hit rate against LRU's.
 *
 * One table of --rows rows (dim --dim, Adagrad, exact BSP, one rank) over a disk tier in a
 * temporary directory, its memory share --fractions of the rows' bytes (each fraction a table
 * and tier of its own). First every row is made (pushes of 65536 ascending ids: "populate",
 * untimed), then --warmup and --steps sparse steps: a batch of --batch ids drawn Zipf(1.05)
 * over the rows and spread by a multiplicative hash (as bench/embeddings.py), its distinct
 * ids pulled and pushed (ascending). "ours": the real table's hit rate over the timed steps
 * (ts_table_tiers: rows found in memory or in a write-back batch, against rows read from the
 * disk; the pull's and the push's look-ups both count, as in a shard).
 *
 * Baselines from the same run, on the same sequence of look-ups (creations included, only the
 * timed steps counted) with the capacity the real table had (quota_rows: the rows its share
 * holds, in memory and in batches): exact LRU; a plain CLOCK (what rows.c did before its
 * admission, without its pins and batches); LFU with admission by frequency (a row is kept
 * only if it was looked up more often than the row it would evict: what TinyLFU-style caches
 * do, with every look-up counted exactly); and Belady's OPT (evict the row next used furthest
 * in the future: the best any policy can do, as it knows the future).
 *
 * Output: a table and bench/results/table_policy.json; headline = the real table's hit rate
 * at 10% in memory against exact LRU's. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "benchlib.h"
#include "table/table.h"
#include "table/tier.h"
#include "util/flags.h"
#include "util/json.h"

#define ZIPF_A 1.05
#define HASH 0x9E3779B97F4A7C15ull     /* odd: a bijection of 0..rows-1 when rows is not 2^k */
#define POPULATE 65536
#define MAX_FRACTIONS 8

struct opts {
    int64_t rows, dim, batch, steps, warmup;
    const char *fractions, *dir, *out;
    bool quick;
};

struct res {
    double fraction;
    uint64_t capacity;             /* rows the real table's share holds */
    double ours, lru, clock, lfu, opt;   /* hit rates */
    uint64_t hits, misses, evictions;
};

struct run {
    struct opts o;
    char machine[192];
    double fracs[MAX_FRACTIONS];
    size_t nfracs;
    double *cdf;                   /* rows */
    uint64_t **steps;              /* warmup + steps sorted distinct id lists */
    size_t *nstep;
    uint64_t *trace;               /* every look-up: populate, then each step's ids twice */
    size_t *bounds;                /* where each step's look-ups start in trace */
    size_t ntrace, counted_from;   /* the timed steps' look-ups start here */
    float *grad, *out;
    double mean_distinct;
    struct res res[MAX_FRACTIONS];
};

static double r4(double x) { return (double)bench_round_i(x * 1e4) / 1e4; }

/* A Zipf(ZIPF_A) rank 0..rows-1 (rank 0 the hottest), by the CDF. */
static uint64_t zipf_draw(const struct run *r, uint64_t *s)
{
    double u = (double)(bench_rng_next(s) >> 11) * 0x1p-53;
    size_t lo = 0, hi = (size_t)r->o.rows - 1;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (r->cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* ---- the policies, simulated on r->trace ---- */

/* Exact LRU of cap rows: a list through prev/next by id, most recent at the head. */
static double sim_lru(const struct run *r, uint64_t cap)
{
    size_t n = (size_t)r->o.rows;
    uint64_t *prev = malloc(n * sizeof(*prev)), *next = malloc(n * sizeof(*next));
    bool *in = calloc(n, 1);
    uint64_t head = UINT64_MAX, tail = UINT64_MAX, held = 0, hits = 0, looks = 0;

    if (!prev || !next || !in) {
        free(prev), free(next), free(in);
        return -1;
    }
    for (size_t i = 0; i < r->ntrace; i++) {
        uint64_t id = r->trace[i];
        bool counted = i >= r->counted_from;

        looks += counted;
        if (in[id]) {
            hits += counted;
            if (id == head)
                continue;
            next[prev[id]] = next[id];   /* unlink */
            if (id == tail)
                tail = prev[id];
            else
                prev[next[id]] = prev[id];
        } else {
            if (held == cap) {           /* evict the tail */
                uint64_t v = tail;

                in[v] = false;
                tail = prev[v];
                if (tail != UINT64_MAX)
                    next[tail] = UINT64_MAX;
                else
                    head = UINT64_MAX;
                held--;
            }
            in[id] = true;
            held++;
        }
        prev[id] = UINT64_MAX;           /* to the head */
        next[id] = head;
        if (head != UINT64_MAX)
            prev[head] = id;
        head = id;
        if (tail == UINT64_MAX)
            tail = id;
    }
    free(prev), free(next), free(in);
    return looks ? (double)hits / (double)looks : 0;
}

/* CLOCK of cap slots: a hit sets the row's bit; a miss sweeps the hand, clearing bits, to the
 * first row without one. */
static double sim_clock(const struct run *r, uint64_t cap)
{
    size_t n = (size_t)r->o.rows;
    uint64_t *slot = malloc(cap * sizeof(*slot)), *pos = malloc(n * sizeof(*pos));
    bool *ref = calloc(cap, 1);
    uint64_t held = 0, hand = 0, hits = 0, looks = 0;

    if (!slot || !pos || !ref) {
        free(slot), free(pos), free(ref);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        pos[i] = UINT64_MAX;
    for (size_t i = 0; i < r->ntrace; i++) {
        uint64_t id = r->trace[i], s;
        bool counted = i >= r->counted_from;

        looks += counted;
        if (pos[id] != UINT64_MAX) {
            hits += counted;
            ref[pos[id]] = true;
            continue;
        }
        if (held < cap) {
            s = held++;
        } else {
            while (ref[hand]) {
                ref[hand] = false;
                hand = (hand + 1) % cap;
            }
            s = hand;
            pos[slot[s]] = UINT64_MAX;
            hand = (hand + 1) % cap;
        }
        slot[s] = id;
        pos[id] = s;
        ref[s] = false;
    }
    free(slot), free(pos), free(ref);
    return looks ? (double)hits / (double)looks : 0;
}

/* A max-heap of (next use, id). */
struct heap {
    uint64_t (*e)[2];
    size_t n;
};

static void heap_push(struct heap *h, uint64_t at, uint64_t id)
{
    size_t i = h->n++;

    while (i && h->e[(i - 1) / 2][0] < at) {
        h->e[i][0] = h->e[(i - 1) / 2][0];
        h->e[i][1] = h->e[(i - 1) / 2][1];
        i = (i - 1) / 2;
    }
    h->e[i][0] = at;
    h->e[i][1] = id;
}

static void heap_pop(struct heap *h)
{
    uint64_t at = h->e[--h->n][0], id = h->e[h->n][1];
    size_t i = 0;

    for (;;) {
        size_t c = 2 * i + 1;

        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->e[c + 1][0] > h->e[c][0])
            c++;
        if (h->e[c][0] <= at)
            break;
        h->e[i][0] = h->e[c][0];
        h->e[i][1] = h->e[c][1];
        i = c;
    }
    h->e[i][0] = at;
    h->e[i][1] = id;
}

/* Belady's OPT of cap rows: on a miss with the memory full, the row whose next look-up is
 * furthest away goes (a row never looked up again first; heap entries go stale when their row
 * is used again: skipped). */
static double sim_opt(const struct run *r, uint64_t cap)
{
    size_t n = (size_t)r->o.rows;
    uint64_t *nextuse = malloc(r->ntrace * sizeof(*nextuse)), *last = malloc(n * sizeof(*last));
    uint64_t *cur = malloc(n * sizeof(*cur));   /* a held row's next use */
    bool *in = calloc(n, 1);
    struct heap h = { malloc((r->ntrace + 1) * sizeof(*h.e)), 0 };
    uint64_t held = 0, hits = 0, looks = 0;
    double rate = -1;

    if (!nextuse || !last || !cur || !in || !h.e)
        goto out;
    for (size_t i = 0; i < n; i++)
        last[i] = UINT64_MAX;            /* never again */
    for (size_t i = r->ntrace; i-- > 0;) {
        nextuse[i] = last[r->trace[i]];
        last[r->trace[i]] = i;
    }
    for (size_t i = 0; i < r->ntrace; i++) {
        uint64_t id = r->trace[i];
        bool counted = i >= r->counted_from;

        looks += counted;
        if (in[id]) {
            hits += counted;
        } else if (held == cap) {
            for (;;) {                   /* the furthest next use among rows held */
                uint64_t at = h.e[0][0], v = h.e[0][1];

                heap_pop(&h);
                if (in[v] && cur[v] == at) {
                    in[v] = false;
                    break;
                }
            }
        } else {
            held++;
        }
        in[id] = true;
        cur[id] = nextuse[i];
        heap_push(&h, cur[id], id);
    }
    rate = looks ? (double)hits / (double)looks : 0;
out:
    free(nextuse), free(last), free(cur), free(in), free(h.e);
    return rate;
}

/* LFU with admission by frequency, cap rows: every row's look-ups counted (held or not); on
 * a miss with the memory full, the held row of fewest look-ups goes if the new row has more,
 * else the new row is not kept past its step (a step holds the rows it uses: its push finds
 * them). Heap keys are MAX - count, so the top is the fewest; entries go stale when their
 * row's count moves: skipped. */
static double sim_lfu(const struct run *r, uint64_t cap)
{
    size_t n = (size_t)r->o.rows, total = (size_t)(r->o.warmup + r->o.steps);
    uint64_t *count = calloc(n, sizeof(*count));
    bool *in = calloc(n, 1), *visiting = calloc(n, 1);
    struct heap h = { malloc((r->ntrace + 1) * sizeof(*h.e)), 0 };
    uint64_t held = 0, hits = 0, looks = 0;
    double rate = -1;

    if (!count || !in || !visiting || !h.e)
        goto out;
    for (size_t s = 0, i = 0; i < r->ntrace; i++) {
        uint64_t id = r->trace[i];
        bool counted = i >= r->counted_from;

        if (s < total && i == r->bounds[s] + 2 * r->nstep[s]) {   /* step s is over */
            for (size_t k = 0; k < r->nstep[s]; k++)
                visiting[r->steps[s][k]] = false;
            s++;
        }
        looks += counted;
        count[id]++;
        if (in[id] || visiting[id]) {
            hits += counted;
        } else if (held == cap) {
            for (;;) {                   /* the held row of fewest look-ups */
                uint64_t at = h.e[0][0], v = h.e[0][1];

                if (in[v] && at == UINT64_MAX - count[v]) {
                    if (count[v] < count[id]) {
                        in[v] = false;
                        heap_pop(&h);
                        in[id] = true;
                    }
                    break;
                }
                heap_pop(&h);
            }
        } else {
            held++;
            in[id] = true;
        }
        if (in[id])
            heap_push(&h, UINT64_MAX - count[id], id);
        else if (i >= r->bounds[0])
            visiting[id] = true;         /* not kept: held through its step only */
    }
    rate = looks ? (double)hits / (double)looks : 0;
out:
    free(count), free(in), free(visiting), free(h.e);
    return rate;
}

/* ---- the real table ---- */

static ts_status push_sorted(struct ts_table *t, uint64_t step, const uint64_t *ids, size_t n,
                             const float *grad, struct ts_err *err)
{
    struct ts_row_push in = { .step = step, .n = n, .ids = ids, .grad = grad,
                              .encoding = TS_ENC_FIXED_F32 };
    bool applied;

    return ts_table_push(t, &in, &applied, err);
}

static ts_status one_fraction(struct run *r, size_t k, struct ts_err *err)
{
    struct ts_table_cfg cfg = { .name = "policy", .dim = (uint32_t)r->o.dim,
                                .max_id = (uint64_t)r->o.rows - 1, .init = "normal:0.01",
                                .seed = 1, .optimizer = "adagrad:lr=0.05" };
    struct res *x = &r->res[k];
    struct ts_table_budget budget;
    struct ts_table_tiers a, b;
    struct ts_tier *tier = NULL;
    struct ts_table *t = NULL;
    struct ts_job job;
    char dir[4096];
    uint64_t step = 0, *ids = NULL;
    size_t total = (size_t)(r->o.warmup + r->o.steps);
    ts_status st;

    snprintf(dir, sizeof(dir), "%s/bench-table-policy-XXXXXX", r->o.dir);
    if (!mkdtemp(dir))
        return ts_err_set(err, TS_EIO, "mkdtemp in %s failed: give --dir a writable directory",
                          r->o.dir);
    if ((st = ts_job_init(&job, "policy", 1, true, "sgd", 256, err)) ||
        (st = ts_job_set_mode(&job, TS_MODE_BSP, 0, err)) ||
        (st = ts_tier_open(dir, &tier, err)))
        goto out;
    ts_table_budget_init(&budget, 0);
    budget.tier = tier;
    if ((st = ts_table_create(&job, &cfg, &budget, &t, err)))
        goto out;
    budget.limit = (uint64_t)(r->fracs[k] * (double)r->o.rows * (double)ts_table_row_bytes(t));
    x->fraction = r->fracs[k];
    if (!(ids = malloc(POPULATE * sizeof(*ids)))) {
        st = ts_err_set(err, TS_ENOMEM, "out of memory");
        goto out;
    }
    fprintf(stderr, "bench_table_policy: %.0f%% in memory: making %" PRId64 " rows\n",
            r->fracs[k] * 100, r->o.rows);
    for (uint64_t first = 0; !st && first < (uint64_t)r->o.rows; first += POPULATE) {
        size_t n = (size_t)((uint64_t)r->o.rows - first < POPULATE ? (uint64_t)r->o.rows - first
                                                                   : POPULATE);

        for (size_t i = 0; i < n; i++)
            ids[i] = first + i;
        st = push_sorted(t, step++, ids, n, r->grad, err);
    }
    for (size_t s = 0; !st && s < total; s++) {
        if (s == (size_t)r->o.warmup)
            ts_table_tiers(t, &a);
        if (!(st = ts_table_pull(t, 0, step, 0, r->steps[s], r->nstep[s], r->out, err)))
            st = push_sorted(t, step++, r->steps[s], r->nstep[s], r->grad, err);
    }
    if (st)
        goto out;
    ts_table_tiers(t, &b);
    x->capacity = b.quota_rows;
    x->hits = b.hits - a.hits;
    x->misses = b.misses - a.misses;
    x->evictions = b.evictions - a.evictions;
    x->ours = x->hits + x->misses ? (double)x->hits / (double)(x->hits + x->misses) : 0;
    fprintf(stderr, "bench_table_policy: %.0f%% in memory (%" PRIu64 " rows): simulating LRU, "
            "CLOCK, LFU and OPT\n", r->fracs[k] * 100, x->capacity);
    x->lru = sim_lru(r, x->capacity);
    x->clock = sim_clock(r, x->capacity);
    x->lfu = sim_lfu(r, x->capacity);
    x->opt = sim_opt(r, x->capacity);
    if (x->lru < 0 || x->clock < 0 || x->lfu < 0 || x->opt < 0)
        st = ts_err_set(err, TS_ENOMEM, "out of memory for the simulations");
out:
    ts_table_free(t);
    ts_tier_close(tier);
    rmdir(dir);
    free(ids);
    return st;
}

/* ---- phases ---- */

static ts_status prepare(void *arg, struct ts_err *err)
{
    struct run *r = arg;
    size_t n = (size_t)r->o.rows, total = (size_t)(r->o.warmup + r->o.steps), at = 0;
    size_t cap = (size_t)r->o.batch, pop = n < POPULATE ? n : POPULATE;
    size_t gcap = (pop > cap ? pop : cap) * (size_t)r->o.dim;   /* the largest push */
    uint64_t seed = 11, *draw = malloc(cap * sizeof(*draw));
    double sum = 0, acc = 0, distinct = 0;

    r->cdf = malloc(n * sizeof(*r->cdf));
    r->steps = calloc(total, sizeof(*r->steps));
    r->nstep = calloc(total, sizeof(*r->nstep));
    r->trace = malloc((n + 2 * total * cap) * sizeof(*r->trace));
    r->bounds = malloc(total * sizeof(*r->bounds));
    r->grad = malloc(gcap * sizeof(float));
    r->out = malloc(cap * (size_t)r->o.dim * sizeof(float));
    if (!draw || !r->cdf || !r->steps || !r->nstep || !r->trace || !r->bounds || !r->grad ||
        !r->out) {
        free(draw);
        return ts_err_set(err, TS_ENOMEM, "out of memory for %zu rows", n);
    }
    for (size_t i = 0; i < n; i++)
        sum += 1.0 / pow((double)(i + 1), ZIPF_A);
    for (size_t i = 0; i < n; i++) {
        acc += 1.0 / pow((double)(i + 1), ZIPF_A) / sum;
        r->cdf[i] = acc;
    }
    r->cdf[n - 1] = 1.0;
    for (size_t i = 0; i < gcap; i++)
        r->grad[i] = 0.001f * (float)(i % 7) - 0.003f;
    for (size_t i = 0; i < n; i++)   /* populate: every row made, ascending */
        r->trace[at++] = i;
    for (size_t s = 0; s < total; s++) {
        size_t m = 0;

        for (size_t i = 0; i < cap; i++)
            draw[i] = zipf_draw(r, &seed) * HASH % n;
        qsort(draw, cap, sizeof(*draw), bench_cmp_u64);
        for (size_t i = 0; i < cap; i++)
            if (!m || draw[i] != draw[m - 1])
                draw[m++] = draw[i];
        if (!(r->steps[s] = malloc(m * sizeof(uint64_t)))) {
            free(draw);
            return ts_err_set(err, TS_ENOMEM, "out of memory");
        }
        memcpy(r->steps[s], draw, m * sizeof(uint64_t));
        r->nstep[s] = m;
        r->bounds[s] = at;
        if (s == (size_t)r->o.warmup)
            r->counted_from = at;
        if (s >= (size_t)r->o.warmup)
            distinct += (double)m;
        for (int pass = 0; pass < 2; pass++)   /* the pull's look-ups, then the push's */
            for (size_t i = 0; i < m; i++)
                r->trace[at++] = draw[i];
    }
    r->ntrace = at;
    r->mean_distinct = distinct / (double)r->o.steps;
    free(draw);
    return TS_OK;
}

static ts_status measure(void *arg, struct ts_err *err)
{
    struct run *r = arg;
    ts_status st = TS_OK;

    for (size_t k = 0; !st && k < r->nfracs; k++)
        st = one_fraction(r, k, err);
    return st;
}

static void print_table(const void *arg)
{
    const struct run *r = arg;

    printf("bench_table_policy: %" PRId64 " rows of dim %" PRId64 " (Adagrad, exact BSP, one "
           "rank) over a disk tier; batches of %" PRId64 " ids Zipf(%.2f), %.0f distinct a step "
           "(pulled, then pushed); hit rates over %" PRId64 " steps after %" PRId64 " (%s)\n\n",
           r->o.rows, r->o.dim, r->o.batch, ZIPF_A, r->mean_distinct, r->o.steps, r->o.warmup,
           r->machine);
    printf("%-9s | %9s | %12s | %8s | %9s | %8s | %8s | %9s\n", "in memory", "rows held",
           "ours", "LRU", "CLOCK sim", "LFU+adm", "OPT", "evictions");
    for (size_t k = 0; k < r->nfracs; k++) {
        const struct res *x = &r->res[k];

        printf("%8.1f%% | %9" PRIu64 " | %11.2f%% | %7.2f%% | %8.2f%% | %7.2f%% | %7.2f%% | %9"
               PRIu64 "\n", x->fraction * 100, x->capacity, x->ours * 100, x->lru * 100,
               x->clock * 100, x->lfu * 100, x->opt * 100, x->evictions);
    }
    printf("(ours: the table's own look-ups found in memory or a write-back batch; the others: "
           "the same look-ups through a model of that capacity; LFU+adm keeps a row only if it "
           "was looked up more often than the one it would evict; OPT knows the future)\n");
}

/* The result nearest 10% in memory: the headline's. */
static const struct res *headline(const struct run *r)
{
    const struct res *best = &r->res[0];

    for (size_t k = 1; k < r->nfracs; k++)
        if (fabs(r->res[k].fraction - 0.1) < fabs(best->fraction - 0.1))
            best = &r->res[k];
    return best;
}

static ts_status write_json(const void *arg, struct ts_err *err)
{
    const struct run *r = arg;
    const struct res *h = headline(r);
    struct ts_json j;

    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "name", "table_policy");
    ts_json_str(&j, "machine", r->machine);
    ts_json_bool(&j, "quick", r->o.quick);
    ts_json_int(&j, "rows", r->o.rows);
    ts_json_int(&j, "dim", r->o.dim);
    ts_json_int(&j, "batch", r->o.batch);
    ts_json_num(&j, "zipf", ZIPF_A);
    ts_json_num(&j, "distinct_a_step", r4(r->mean_distinct));
    ts_json_int(&j, "steps", r->o.steps);
    ts_json_int(&j, "warmup", r->o.warmup);
    ts_json_arr(&j, "fractions");
    for (size_t k = 0; k < r->nfracs; k++) {
        const struct res *x = &r->res[k];

        ts_json_obj(&j, NULL);
        ts_json_num(&j, "in_memory", x->fraction);
        ts_json_uint(&j, "rows_held", x->capacity);
        ts_json_num(&j, "ours", r4(x->ours));
        ts_json_num(&j, "lru", r4(x->lru));
        ts_json_num(&j, "clock_model", r4(x->clock));
        ts_json_num(&j, "lfu_admission", r4(x->lfu));
        ts_json_num(&j, "opt", r4(x->opt));
        ts_json_uint(&j, "hits", x->hits);
        ts_json_uint(&j, "disk_reads", x->misses);
        ts_json_uint(&j, "evictions", x->evictions);
        ts_json_end(&j);
    }
    ts_json_end(&j);
    ts_json_obj(&j, "headline");
    ts_json_num(&j, "ours", r4(h->ours));
    ts_json_num(&j, "baseline", r4(h->lru));
    ts_json_str(&j, "unit", "hit rate");
    ts_json_str(&j, "what", "the memory tier's hit rate (CLOCK with admission by frequency) "
                "with 10% of the table in memory, against exact LRU of the same capacity on "
                "the same look-ups");
    ts_json_num(&j, "ratio", r4(h->lru > 0 ? h->ours / h->lru : 0));
    ts_json_end(&j);
    return bench_write_json(&j, r->o.out, err);
}

static void release(void *arg)
{
    struct run *r = arg;
    size_t total = (size_t)(r->o.warmup + r->o.steps);

    for (size_t s = 0; r->steps && s < total; s++)
        free(r->steps[s]);
    free(r->steps);
    free(r->nstep);
    free(r->cdf);
    free(r->trace);
    free(r->bounds);
    free(r->grad);
    free(r->out);
    free(r);
}

/* "0.01,0.1" into r->fracs; false on a bad list. */
static bool parse_fractions(struct run *r, const char *s)
{
    char *end;

    r->nfracs = 0;
    while (*s) {
        double f = strtod(s, &end);

        if (end == s || !(f > 0 && f <= 1) || r->nfracs == MAX_FRACTIONS)
            return false;
        r->fracs[r->nfracs++] = f;
        s = end;
        if (*s == ',')
            s++;
        else if (*s)
            return false;
    }
    return r->nfracs > 0;
}

int main(int argc, char **argv)
{
    static const char about[] =
        "Measures the hit rate of a sparse table's memory tier (CLOCK with admission by\n"
        "frequency, lib/table)\n"
        "on Zipf batches with a share of the table in memory, beside exact LRU, a plain\n"
        "CLOCK, LFU with admission and Belady's OPT of the same capacity on the same\n"
        "look-ups. Prints a table\n"
        "and writes JSON whose headline is ours against LRU at 10% in memory.";
    struct opts o = { 0 };
    const struct ts_flag flags[] = {
        { "rows", TS_FLAG_INT, &o.rows, "N", "rows of the table (default 1000000)", 2,
          1ll << 30 },
        { "dim", TS_FLAG_INT, &o.dim, "N", "floats a row (default 16)", 1, TS_TABLE_DIM_MAX },
        { "batch", TS_FLAG_INT, &o.batch, "N", "ids drawn a step, repeats included (default "
          "4096)", 1, 1 << 20 },
        { "steps", TS_FLAG_INT, &o.steps, "N", "steps counted (default 1000)", 1, 100000 },
        { "warmup", TS_FLAG_INT, &o.warmup, "N", "steps first, not counted (default 300)", 0,
          100000 },
        { "fractions", TS_FLAG_STR, &o.fractions, "LIST", "shares of the table in memory "
          "(default 0.01,0.1,0.25)", 0, 0 },
        { "dir", TS_FLAG_STR, &o.dir, "DIR", "where the disk tiers go (default $TMPDIR or "
          "/tmp)", 0, 0 },
        { "out", TS_FLAG_STR, &o.out, "FILE", "results (default "
          "bench/results/table_policy.json)", 0, 0 },
        { "quick", TS_FLAG_BOOL, &o.quick, NULL, "smoke run: 20000 rows, 20 steps (explicit "
          "flags still win)", 0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    static const struct bench_phases phases = {
        "bench_table_policy", prepare, measure, print_table, write_json, release };
    struct run *r;
    int done;

    if ((done = ts_flags_program("bench_table_policy", NULL, about, flags, argc, argv)) >= 0)
        return done;
    if (!(r = calloc(1, sizeof(*r)))) {
        fprintf(stderr, "bench_table_policy: out of memory\n");
        return 2;
    }
    o.rows = o.rows ? o.rows : o.quick ? 20000 : 1000000;
    o.dim = o.dim ? o.dim : 16;
    o.batch = o.batch ? o.batch : 4096;
    o.steps = o.steps ? o.steps : o.quick ? 20 : 1000;
    o.warmup = o.warmup ? o.warmup : o.quick ? 10 : 300;
    o.fractions = o.fractions ? o.fractions : "0.01,0.1,0.25";
    o.dir = o.dir ? o.dir : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    o.out = o.out ? o.out : "bench/results/table_policy.json";
    r->o = o;
    if (!parse_fractions(r, o.fractions)) {
        fprintf(stderr, "bench_table_policy: --fractions: '%s': up to %d numbers in (0, 1] "
                "separated by commas expected\n", o.fractions, MAX_FRACTIONS);
        free(r);
        return 2;
    }
    bench_machine_desc(r->machine, sizeof(r->machine));
    return bench_run(&phases, r, o.out);
}
