/* audit.c - see audit.h. */
#include "audit/audit.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/data.h"
#include "data/splitmix.h"
#include "model/mlp.h"
#include "snapshot/snapshot.h"

#define MAX_DIST_VALUES (1u << 20)   /* values sampled (by a fixed stride) for dist */

void ts_audit_state_free(struct ts_audit_state *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++) {
        free(s->t[i].v);
        free(s->t[i].ids);
    }
    free(s->t);
    memset(s, 0, sizeof(*s));
}

static ts_status load_file(const char *path, struct ts_audit_state *out, struct ts_err *err)
{
    struct ts_verify_array a = { 0 };
    size_t len = strlen(path);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    bool npy = len > 4 && strcmp(path + len - 4, ".npy") == 0;
    ts_status st = npy ? ts_verify_npy_read(path, &a, err) : ts_verify_raw_read_f32(path, &a, err);

    if (st)
        return st;
    if (a.dtype != TS_VERIFY_F32) { /* f64 files: compared as f32 would hide bits; refuse */
        ts_verify_array_fini(&a);
        return ts_err_set(err, TS_EINVAL, "%s: dtype %s; tessera verify compares float32 "
                          "('<f4') files", path, ts_verify_dtype_name(a.dtype));
    }
    out->t = calloc(1, sizeof(*out->t));
    if (!out->t) {
        ts_verify_array_fini(&a);
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    }
    out->n = 1;
    snprintf(out->t[0].name, sizeof(out->t[0].name), "%s", base);
    out->t[0].numel = a.n;
    out->t[0].v = a.data; /* taken over */
    snprintf(out->label, sizeof(out->label), "%s (%" PRIu64 " float32%s)", path, a.n,
             npy ? ", .npy" : ", raw");
    return TS_OK;
}

ts_status ts_audit_load_snapshot(const char *ref, struct ts_store *s,
                                 const struct ts_audit_progress *progress,
                                 struct ts_audit_state *out, struct ts_err *err)
{
    uint64_t total = 0, done = 0;
    uint8_t id[TS_STORE_ID_LEN];
    char hex[TS_STORE_HEX_LEN + 1];
    ts_manifest *m = NULL;
    ts_status st;

    memset(out, 0, sizeof(*out));
    if (!s)
        return ts_err_set(err, TS_ENOTFOUND, "%s: no such file, and no store to find a "
                          "snapshot of that name in (give --store DIR)", ref);
    if ((st = ts_snap_resolve(s, ref, id, NULL, err)) || (st = ts_manifest_load(s, id, &m, err)))
        return st;
    out->t = calloc(m->n_tensors + m->n_tables + 1, sizeof(*out->t));
    if (!out->t)
        st = ts_err_set(err, TS_ENOMEM, "out of memory");
    for (size_t i = 0; i < m->n_tensors; i++)
        total += m->tensors[i]->numel * sizeof(float);
    for (size_t i = 0; !st && i < m->n_tensors; i++) {
        const ts_tensor_manifest *tm = m->tensors[i];
        struct ts_audit_tensor_data *t = &out->t[out->n++];

        snprintf(t->name, sizeof(t->name), "%s", tm->spec->name);
        t->numel = tm->numel;
        if (!(t->v = malloc(tm->numel * sizeof(float) + 1)))
            st = ts_err_set(err, TS_ENOMEM, "tensor '%s': out of memory", t->name);
        for (size_t p = 0; !st && p < tm->n_partitions; p++)
            st = ts_snap_read_partition(s, m, tm, tm->partitions[p],
                                        t->v + tm->partitions[p]->offset, NULL, err);
        done += tm->numel * sizeof(float);
        if (!st && progress && progress->fn)
            progress->fn(progress->ctx, t->name, done, total);
    }
    for (size_t i = 0; !st && i < m->n_tables; i++) {   /* tables as tensors of their rows */
        const ts_table_manifest *tm = m->tables[i];
        struct ts_audit_tensor_data *t = &out->t[out->n++];
        size_t rows = 0;

        snprintf(t->name, sizeof(t->name), "table:%s", tm->spec->name);
        st = ts_snap_read_table(s, m, tm, &t->ids, &t->v, &rows, err);
        t->rows = rows;
        t->dim = tm->spec->dim;
        t->numel = rows * tm->spec->dim;
        if (!st && !t->v && !(t->v = malloc(1)))
            st = ts_err_set(err, TS_ENOMEM, "out of memory");
        if (!st && progress && progress->fn)
            progress->fn(progress->ctx, t->name, done, total);
    }
    if (!st)
        snprintf(out->label, sizeof(out->label), "snapshot %.12s (step %" PRIu64 ")",
                 ts_store_hex(id, hex), m->step);
    ts_manifest_free(m);
    if (st)
        ts_audit_state_free(out);
    return st;
}

ts_status ts_audit_load(const char *spec, struct ts_store *store,
                        const struct ts_audit_progress *progress, struct ts_audit_state *out,
                        struct ts_err *err)
{
    struct stat sb;

    memset(out, 0, sizeof(*out));
    if (!spec || !spec[0])
        return ts_err_set(err, TS_EINVAL, "what to compare: a snapshot ref or a file");
    if (stat(spec, &sb) == 0 && S_ISREG(sb.st_mode))
        return load_file(spec, out, err);
    return ts_audit_load_snapshot(spec, store, progress, out, err);
}

int ts_audit_level(const char *name)
{
    static const struct {
        const char *name;
        int mask;
    } levels[] = { { "bits", TS_AUDIT_BITS }, { "cosine", TS_AUDIT_COSINE },
                   { "dist", TS_AUDIT_DIST }, { "all", TS_AUDIT_ALL } };

    if (!name || !name[0])
        return TS_AUDIT_ALL;
    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
        if (strcmp(name, levels[i].name) == 0)
            return levels[i].mask;
    return -1;
}

void ts_audit_report_free(struct ts_audit_report *r)
{
    if (r)
        free(r->tensors);
}

/* A common row: its id's hash and its indexes on both sides. */
struct pick {
    uint64_t h;
    size_t ia, ib;
};

/* Restores the max-heap (by h) of heap[n] below position i. */
static void sift_down(struct pick *heap, size_t n, size_t i)
{
    for (;;) {
        size_t big = i, l = 2 * i + 1, r = l + 1;
        struct pick tmp;

        if (l < n && heap[l].h > heap[big].h)
            big = l;
        if (r < n && heap[r].h > heap[big].h)
            big = r;
        if (big == i)
            return;
        tmp = heap[i];
        heap[i] = heap[big];
        heap[big] = tmp;
        i = big;
    }
}

static int by_index(const void *x, const void *y)
{
    const struct pick *p = x, *q = y;

    return p->ia < q->ia ? -1 : p->ia > q->ia;
}

void ts_audit_rows_free(struct ts_audit_rows *r)
{
    if (!r)
        return;
    free(r->ia);
    free(r->ib);
    memset(r, 0, sizeof(*r));
}

ts_status ts_audit_rows_sample(const uint64_t *a, size_t na, const uint64_t *b, size_t nb,
                               uint64_t k, struct ts_audit_rows *out, struct ts_err *err)
{
    size_t i = 0, j = 0, n = 0, most = na < nb ? na : nb;
    size_t cap = k && k < most ? (size_t)k : most;   /* rows sampled, at most */
    struct pick *heap = NULL;   /* with k: the k smallest hashes so far, the largest on top */

    memset(out, 0, sizeof(*out));
    out->ia = malloc((cap + 1) * sizeof(size_t));
    out->ib = malloc((cap + 1) * sizeof(size_t));
    if (!out->ia || !out->ib || (k && !(heap = malloc((cap + 1) * sizeof(*heap))))) {
        ts_audit_rows_free(out);
        return ts_err_set(err, TS_ENOMEM, "rows: out of memory for %zu sampled rows", cap);
    }
    while (i < na && j < nb) {   /* both ascending: the common ids in one pass */
        if (a[i] != b[j]) {
            bool a_first = a[i] < b[j];
            i += a_first;
            j += !a_first;
            continue;
        }
        out->common++;
        if (!k) {
            out->ia[n] = i;
            out->ib[n++] = j;
        } else if (n < cap) {
            heap[n++] = (struct pick){ ts_mix64(a[i]), i, j };
            for (size_t p = n == cap ? cap / 2 : 0; p-- > 0;)   /* full: heapify */
                sift_down(heap, n, p);
        } else if (ts_mix64(a[i]) < heap[0].h) {
            heap[0] = (struct pick){ ts_mix64(a[i]), i, j };
            sift_down(heap, n, 0);
        }
        i++;
        j++;
    }
    if (k) {
        qsort(heap, n, sizeof(*heap), by_index);
        for (size_t p = 0; p < n; p++) {
            out->ia[p] = heap[p].ia;
            out->ib[p] = heap[p].ib;
        }
        free(heap);
    }
    out->n = n;
    out->only_a = na - out->common;
    out->only_b = nb - out->common;
    return TS_OK;
}

ts_status ts_audit_rows_cosine(const float *va, const float *vb, uint64_t dim,
                               const struct ts_audit_rows *rows, double *cosine,
                               double *row_min, struct ts_err *err)
{
    size_t n = rows->n;
    float *xa, *xb;

    if (!n) {   /* nothing in common: the same only when neither side has a row */
        *cosine = *row_min = rows->only_a || rows->only_b ? 0.0 : 1.0;
        return TS_OK;
    }
    xa = malloc(n * dim * sizeof(float));
    xb = malloc(n * dim * sizeof(float));
    if (!xa || !xb) {
        free(xa);
        free(xb);
        return ts_err_set(err, TS_ENOMEM, "rows: out of memory for %zu sampled rows", n);
    }
    *row_min = 1.0;
    for (size_t r = 0; r < n; r++) {
        const float *ra = va + rows->ia[r] * dim, *rb = vb + rows->ib[r] * dim;
        double c = ts_verify_cosine_f32(ra, rb, dim);

        memcpy(xa + r * dim, ra, dim * sizeof(float));
        memcpy(xb + r * dim, rb, dim * sizeof(float));
        if (isnan(c) || c < *row_min)
            *row_min = isnan(*row_min) ? *row_min : c;
    }
    *cosine = ts_verify_cosine_f32(xa, xb, n * dim);
    free(xa);
    free(xb);
    return TS_OK;
}

static const struct ts_audit_tensor_data *find(const struct ts_audit_state *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->t[i].name, name) == 0)
            return &s->t[i];
    return NULL;
}

/* The MLP's parameters in its order, if s holds exactly them. */
static bool as_mlp(const struct ts_audit_state *s, float *params[TS_MLP_NTENSORS])
{
    const struct ts_mlp_tensor *mt = ts_mlp_tensors();

    if (s->n != TS_MLP_NTENSORS)
        return false;
    for (int i = 0; i < TS_MLP_NTENSORS; i++) {
        const struct ts_audit_tensor_data *t = find(s, mt[i].name);
        if (!t || t->numel != ts_mlp_numel(i))
            return false;
        params[i] = t->v;
    }
    return true;
}

/* Probe outputs of one model: h1, h2, logits for n images. */
struct outputs {
    float *h1, *h2, *z;
};

static void outputs_free(struct outputs *o)
{
    free(o->h1);
    free(o->h2);
    free(o->z);
}

static ts_status run_probe(struct ts_mlp *mlp, float *params[TS_MLP_NTENSORS],
                           const struct ts_dataset *d, int n, struct outputs *o, double *acc,
                           struct ts_err *err)
{
    int correct = 0;

    o->h1 = malloc((size_t)n * TS_MLP_H1 * sizeof(float));
    o->h2 = malloc((size_t)n * TS_MLP_H2 * sizeof(float));
    o->z = malloc((size_t)n * TS_MLP_CLASSES * sizeof(float));
    if (!o->h1 || !o->h2 || !o->z)
        return ts_err_set(err, TS_ENOMEM, "probe: out of memory");
    if (ts_mlp_forward(mlp, params, d->x, n, o->h1, o->h2, o->z))
        return ts_err_set(err, TS_EINVAL, "probe: %d images", n);
    for (int i = 0; i < n; i++) {
        const float *z = o->z + (size_t)i * TS_MLP_CLASSES;
        int best = 0;
        for (int k = 1; k < TS_MLP_CLASSES; k++)
            best = z[k] > z[best] ? k : best;
        correct += best == d->y[i];
    }
    *acc = (double)correct / n;
    return TS_OK;
}

/* Class predicted for each probe image, counted. */
static void class_counts(const float *z, int n, double counts[TS_MLP_CLASSES])
{
    memset(counts, 0, TS_MLP_CLASSES * sizeof(double));
    for (int i = 0; i < n; i++) {
        const float *r = z + (size_t)i * TS_MLP_CLASSES;
        int best = 0;
        for (int k = 1; k < TS_MLP_CLASSES; k++)
            best = r[k] > r[best] ? k : best;
        counts[best] += 1;
    }
}

/* The distribution statistics of samples x (na) and y (nb); js from the caller's two
 * probability vectors (NULL: the histograms'). */
static ts_status dist(struct ts_audit_report *r, const double *x, size_t na, const double *y,
                      size_t nb, const double *pa, const double *pb, size_t np,
                      struct ts_err *err)
{
    double ha[TS_AUDIT_HIST_BINS], hb[TS_AUDIT_HIST_BINS];
    ts_status st;

    if ((st = ts_verify_ks_2samp(x, na, y, nb, TS_VERIFY_KS_AUTO, &r->ks, err)) ||
        (st = ts_verify_psi(x, na, y, nb, 0, &r->psi, err)) ||
        (st = ts_verify_mean_std(x, na, 0, &r->mean_a, &r->std_a, err)) ||
        (st = ts_verify_mean_std(y, nb, 0, &r->mean_b, &r->std_b, err)) ||
        (st = ts_verify_histogram(x, na, y, nb, TS_AUDIT_HIST_BINS, r->edges, r->hist_a,
                                  r->hist_b, err)))
        return st;
    for (int i = 0; i < TS_AUDIT_HIST_BINS; i++) {
        ha[i] = (double)r->hist_a[i];
        hb[i] = (double)r->hist_b[i];
    }
    return pa ? ts_verify_js_distance(pa, pb, np, 0, &r->js_distance, err)
              : ts_verify_js_distance(ha, hb, TS_AUDIT_HIST_BINS, 0, &r->js_distance, err);
}

/* All values of s as doubles, at most MAX_DIST_VALUES of them by a fixed stride. */
static double *values_of(const struct ts_audit_state *s, size_t *n)
{
    uint64_t total = 0, stride, k = 0, at = 0;
    double *v;

    for (size_t i = 0; i < s->n; i++)
        total += s->t[i].numel;
    stride = total > MAX_DIST_VALUES ? (total + MAX_DIST_VALUES - 1) / MAX_DIST_VALUES : 1;
    if (!(v = malloc((total / stride + 1) * sizeof(double))))
        return NULL;
    for (size_t i = 0; i < s->n; i++)
        for (uint64_t j = 0; j < s->t[i].numel; j++, at++)
            if (at % stride == 0)
                v[k++] = s->t[i].v[j];
    *n = k;
    return v;
}

static ts_status model_levels(struct ts_audit_report *r, float *pa[TS_MLP_NTENSORS],
                              float *pb[TS_MLP_NTENSORS], const struct ts_audit_opts *o,
                              struct ts_err *err)
{
    struct ts_dataset test = { 0 };
    struct ts_mlp *mlp = NULL;
    struct outputs oa = { 0 }, ob = { 0 };
    double *x = NULL, *y = NULL, ca[TS_MLP_CLASSES], cb[TS_MLP_CLASSES];
    int n = 0;
    ts_status st = ts_fmnist_load(o->data_dir, false, &test, err);

    if (!st) {
        n = o->probe > (int)test.n ? (int)test.n : o->probe;
        st = ts_mlp_create(n, &mlp, err);
    }
    if (!st)
        st = run_probe(mlp, pa, &test, n, &oa, &r->accuracy_a, err);
    if (!st)
        st = run_probe(mlp, pb, &test, n, &ob, &r->accuracy_b, err);
    if (!st) {
        size_t nz = (size_t)n * TS_MLP_CLASSES;

        r->probe = n;
        r->layer_cosine[0] = ts_verify_cosine_f32(oa.h1, ob.h1, (size_t)n * TS_MLP_H1);
        r->layer_cosine[1] = ts_verify_cosine_f32(oa.h2, ob.h2, (size_t)n * TS_MLP_H2);
        r->layer_cosine[2] = ts_verify_cosine_f32(oa.z, ob.z, nz);
        x = malloc(nz * sizeof(double));
        y = malloc(nz * sizeof(double));
        if (!x || !y)
            st = ts_err_set(err, TS_ENOMEM, "out of memory");
        for (size_t i = 0; !st && i < nz; i++) {
            x[i] = oa.z[i];
            y[i] = ob.z[i];
        }
        class_counts(oa.z, n, ca);
        class_counts(ob.z, n, cb);
        if (!st && (o->levels & TS_AUDIT_DIST))
            st = dist(r, x, nz, y, nz, ca, cb, TS_MLP_CLASSES, err);
    }
    free(x);
    free(y);
    outputs_free(&oa);
    outputs_free(&ob);
    ts_mlp_free(mlp);
    ts_data_free(&test);
    return st;
}

/* Two tables of one dim: their rows counted, the sampled rows' cosines, and whether the ids
 * differ. */
static ts_status table_rows(const struct ts_audit_tensor_data *ta,
                            const struct ts_audit_tensor_data *tb, uint64_t sample,
                            struct ts_audit_tensor *t, struct ts_err *err)
{
    struct ts_audit_rows rows;
    ts_status st = ts_audit_rows_sample(ta->ids, ta->rows, tb->ids, tb->rows,
                                        sample == TS_AUDIT_ALL_ROWS ? 0 : sample, &rows, err);

    if (!st)
        st = ts_audit_rows_cosine(ta->v, tb->v, ta->dim, &rows, &t->cosine,
                                  &t->row_cosine_min, err);
    if (st) {
        ts_audit_rows_free(&rows);
        ts_err_prefix(err, "%s", t->name);
        return st;
    }
    t->rows_common = rows.common;
    t->rows_only_a = rows.only_a;
    t->rows_only_b = rows.only_b;
    t->rows_sampled = rows.n;
    t->rows_differ = rows.only_a || rows.only_b;
    ts_audit_rows_free(&rows);
    return TS_OK;
}

ts_status ts_audit_compare(const struct ts_audit_state *a, const struct ts_audit_state *b,
                           const struct ts_audit_opts *oin, struct ts_audit_report *r,
                           struct ts_err *err)
{
    struct ts_audit_opts o = *oin;
    float *pa[TS_MLP_NTENSORS], *pb[TS_MLP_NTENSORS];
    ts_status st = TS_OK;
    size_t k = 0;

    memset(r, 0, sizeof(*r));
    o.levels = o.levels ? o.levels : TS_AUDIT_ALL;
    o.cosine_min = o.cosine_min > 0 ? o.cosine_min : TS_VERIFY_COSINE_MIN_F32;
    o.alpha = o.alpha > 0 ? o.alpha : 0.01;
    o.psi_max = o.psi_max > 0 ? o.psi_max : 0.1;
    o.probe = o.probe > 0 ? o.probe : 1000;
    o.rows_sample = o.rows_sample ? o.rows_sample : TS_AUDIT_ROWS_SAMPLE;
    r->levels = o.levels;
    if (!(r->tensors = calloc(a->n + b->n + 1, sizeof(*r->tensors))))
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    r->pass_bits = r->pass_cosine = true;
    for (size_t i = 0; !st && i < a->n; i++) {
        const struct ts_audit_tensor_data *ta = &a->t[i], *tb = find(b, ta->name);
        struct ts_audit_tensor *t = &r->tensors[k++];

        /* Two single files are one tensor each, whatever their names. */
        if (!tb && a->n == 1 && b->n == 1)
            tb = &b->t[0];
        t->name = ta->name;
        t->numel = ta->numel;
        t->only_a = !tb;
        if (tb && ta->dim && tb->dim == ta->dim) {   /* two tables: by rows */
            t->table = true;
            if (!(st = table_rows(ta, tb, o.rows_sample, t, err)) && !t->rows_differ)
                st = ts_verify_bits_compare(ta->v, tb->v, ta->numel, NULL, &t->bits, NULL,
                                            err);
            r->pass_bits &= !t->rows_differ && t->bits.ndiff == 0;
            r->pass_cosine &= t->cosine >= o.cosine_min;
            continue;
        }
        t->shape_differs = tb && (tb->numel != ta->numel || tb->dim != ta->dim);
        if (t->only_a || t->shape_differs) {
            r->pass_bits = r->pass_cosine = false;
            continue;
        }
        st = ts_verify_bits_compare(ta->v, tb->v, ta->numel, NULL, &t->bits, NULL, err);
        t->cosine = ts_verify_cosine_f32(ta->v, tb->v, ta->numel);
        r->pass_bits &= t->bits.ndiff == 0;
        r->pass_cosine &= t->cosine >= o.cosine_min;
    }
    for (size_t i = 0; !st && i < b->n; i++)
        if (!find(a, b->t[i].name) && !(a->n == 1 && b->n == 1)) {
            r->tensors[k++] = (struct ts_audit_tensor){ .name = b->t[i].name,
                                                        .numel = b->t[i].numel,
                                                        .only_b = true };
            r->pass_bits = r->pass_cosine = false;
        }
    r->n = k;
    r->model = as_mlp(a, pa) && as_mlp(b, pb);
    if (!st && r->model && (o.levels & (TS_AUDIT_COSINE | TS_AUDIT_DIST))) {
        r->dist_of = "logits";
        st = model_levels(r, pa, pb, &o, err);
        for (int l = 0; !st && l < 3; l++)
            r->pass_cosine &= r->layer_cosine[l] >= o.cosine_min;
    } else if (!st && (o.levels & TS_AUDIT_DIST)) {
        size_t na = 0, nb = 0;
        double *x = values_of(a, &na), *y = values_of(b, &nb);

        r->dist_of = "values";
        st = !x || !y ? ts_err_set(err, TS_ENOMEM, "out of memory")
                      : dist(r, x, na, y, nb, NULL, NULL, 0, err);
        free(x);
        free(y);
    }
    if (st) {
        ts_audit_report_free(r);
        return st;
    }
    r->pass_dist = !(o.levels & TS_AUDIT_DIST) ||
                   (r->ks.pvalue >= o.alpha && r->psi <= o.psi_max);
    r->pass = (!(o.levels & TS_AUDIT_BITS) || r->pass_bits) &&
              (!(o.levels & TS_AUDIT_COSINE) || r->pass_cosine) && r->pass_dist;
    return TS_OK;
}
