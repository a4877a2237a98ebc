/* audit.c - see audit.h. */
#include "audit/audit.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/data.h"
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
        t->shape_differs = tb && (tb->numel != ta->numel || !ta->ids != !tb->ids ||
                                  (ta->ids && (ta->rows != tb->rows ||
                                               memcmp(ta->ids, tb->ids,
                                                      ta->rows * sizeof(uint64_t)))));
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
