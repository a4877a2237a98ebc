/* ctr.c - the CTR click-log generator and its metrics (lib/data/ctr.h) as module functions of
 * tessera._tessera: ctr_samples, ctr_holdout, ctr_auc, ctr_logloss and ctr_optimum
 * (docs/embeddings.md, "The CTR data generator"; docs/python.md). A Python trainer draws the
 * very samples `tessera train --model ctr` draws: the same ts_ctr_cfg_default(seed, features,
 * rows), ts_ctr_init and ts_ctr_sample. Every argument is checked before anything is drawn and
 * a bad one raises InvalidArgument naming it; the draws and the metrics run without the GIL.
 * The table is the module's methods (_tessera.c), in the tree's build only (TESSERA_IN_TREE):
 * a package pip builds against the installed SDK has no generator (python/setup.py). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "data/ctr.h"

#define CTR_MAX_N 10000000ull   /* samples one call draws or scores, at most */

/* The generator of the last (seed, features, rows) asked for: ts_ctr_init takes about 25 ms
 * (it solves the bias), a trainer asks for the same one every step. Read and written under
 * the GIL; a call copies it before releasing the GIL. */
static struct {
    int valid;
    uint64_t seed, rows;
    uint32_t features;
    struct ts_ctr_gen gen;
} cache;

/* The generator's arguments: seed 0..2^64-1, features 1..64, rows 2..2^40. */
static int get_cfg(PyObject *oseed, PyObject *ofeat, PyObject *orows, uint64_t *seed,
                   uint32_t *features, uint64_t *rows)
{
    unsigned long long s = 1, f = 8, r = 100000;

    if (get_uint(oseed, "seed", UINT64_MAX, &s) ||
        get_uint(ofeat, "features", UINT64_MAX, &f) ||
        get_uint(orows, "rows", UINT64_MAX, &r))
        return -1;
    if (f < 1 || f > TS_CTR_MAX_FEATURES) {
        invalid("features: %llu is not in 1..%d", f, TS_CTR_MAX_FEATURES);
        return -1;
    }
    if (r < 2 || r > TS_CTR_MAX_ROWS) {
        invalid("rows: %llu is not in 2..%llu (2^40)", r, (unsigned long long)TS_CTR_MAX_ROWS);
        return -1;
    }
    *seed = s;
    *features = (uint32_t)f;
    *rows = r;
    return 0;
}

/* Copies the generator of (seed, features, rows) into *g, making it if the cache holds
 * another. -1 with InvalidArgument / MemoryError. */
static int get_gen(uint64_t seed, uint32_t features, uint64_t rows, struct ts_ctr_gen *g)
{
    struct ts_ctr_cfg cfg;
    struct ts_err err = { 0 };
    ts_status rc;

    if (cache.valid && cache.seed == seed && cache.features == features && cache.rows == rows) {
        *g = cache.gen;
        return 0;
    }
    ts_ctr_cfg_default(&cfg, seed, features, rows);
    Py_BEGIN_ALLOW_THREADS
    rc = ts_ctr_init(g, &cfg, &err);
    Py_END_ALLOW_THREADS
    if (rc == TS_ENOMEM) {
        PyErr_NoMemory();
        return -1;
    }
    if (rc) {
        invalid("%s", err.msg);
        return -1;
    }
    cache.gen = *g;
    cache.seed = seed;
    cache.features = features;
    cache.rows = rows;
    cache.valid = 1;
    return 0;
}

/* first and n: samples first .. first + n - 1, n in lo..CTR_MAX_N, not past 2^64 - 1. */
static int get_range(PyObject *ofirst, PyObject *on, unsigned long long lo, uint64_t *first,
                     uint64_t *n)
{
    unsigned long long f = 0, c = 0;

    if (ofirst == Py_None || on == Py_None) {
        invalid("%s: an int is required", ofirst == Py_None ? "first" : "n");
        return -1;
    }
    if (get_uint(ofirst, "first", UINT64_MAX, &f) || get_uint(on, "n", CTR_MAX_N, &c))
        return -1;
    if (c < lo) {
        invalid("n: %llu is not in %llu..%llu", c, lo, CTR_MAX_N);
        return -1;
    }
    if (c && f > UINT64_MAX - (c - 1)) {
        invalid("n: samples %llu .. %llu + %llu - 1 run past 2^64 - 1", f, f, c);
        return -1;
    }
    *first = f;
    *n = c;
    return 0;
}

/* A new NumPy array numpy.empty(shape, dtype). */
static PyObject *np_empty(PyObject *np, const char *dtype, Py_ssize_t a, Py_ssize_t b)
{
    PyObject *shape = b < 0 ? Py_BuildValue("(n)", a) : Py_BuildValue("(nn)", a, b);
    PyObject *r = shape ? PyObject_CallMethod(np, "empty", "Os", shape, dtype) : NULL;

    Py_XDECREF(shape);
    return r;
}

static PyObject *mod_ctr_samples(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "first", "n", "seed", "features", "rows", "out", NULL };
    static const char *keys[4] = { "ids", "dense", "label", "p_true" };
    static const enum elem kinds[4] = { I64, F32, F32, F64 };
    static const char *dtypes[4] = { "int64", "float32", "float32", "float64" };
    PyObject *ofirst = Py_None, *on = Py_None, *oseed = Py_None, *ofeat = Py_None;
    PyObject *orows = Py_None, *oout = Py_None, *np = NULL, *ret = NULL;
    struct ts_ctr_gen *g = NULL;
    struct arr a[4] = { 0 };
    uint64_t first, n, seed, rows;
    uint32_t features, nd;
    char what[32];

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOOO:ctr_samples", kwlist, &ofirst, &on,
                                     &oseed, &ofeat, &orows, &oout) ||
        get_range(ofirst, on, 0, &first, &n) ||
        get_cfg(oseed, ofeat, orows, &seed, &features, &rows))
        return NULL;
    if (oout != Py_None && !PyDict_Check(oout))
        return invalid("out: a dict of arrays ('ids', 'dense', 'label', 'p_true') or None "
                       "expected, got %s", Py_TYPE(oout)->tp_name);
    if (!(g = malloc(sizeof(*g))))
        return PyErr_NoMemory();
    if (get_gen(seed, features, rows, g))
        goto out;
    nd = g->cfg.dense;
    ret = oout == Py_None ? PyDict_New() : Py_NewRef(oout);
    if (!ret || !(np = PyImport_ImportModule("numpy")))
        goto fail;
    for (int k = 0; k < 4; k++) {
        PyObject *o = PyDict_GetItemString(ret, keys[k]);   /* borrowed */
        long long cols = k == 0 ? features : k == 1 ? nd : 1;
        if (!o) {
            PyObject *x = np_empty(np, dtypes[k], (Py_ssize_t)n, k < 2 ? (Py_ssize_t)cols : -1);
            if (!x || PyDict_SetItemString(ret, keys[k], x)) {
                Py_XDECREF(x);
                goto fail;
            }
            Py_DECREF(x);
            o = PyDict_GetItemString(ret, keys[k]);
        }
        snprintf(what, sizeof(what), "out['%s']", keys[k]);
        if (arr_get(o, what, kinds[k], 1, (long long)n * cols, &a[k]))
            goto fail;
    }
    Py_BEGIN_ALLOW_THREADS
    {
        int64_t *ids = a[0].b.buf;
        float *dense = a[1].b.buf, *label = a[2].b.buf;
        double *p = a[3].b.buf;
        uint64_t u[TS_CTR_MAX_FEATURES];
        for (uint64_t i = 0; i < n; i++) {
            ts_ctr_sample(g, first + i, u, dense + i * nd, label + i, p + i);
            for (uint32_t f = 0; f < features; f++)
                ids[i * features + f] = (int64_t)u[f];
        }
    }
    Py_END_ALLOW_THREADS
    goto out;
fail:
    Py_CLEAR(ret);
out:
    for (int k = 0; k < 4; k++)
        arr_put(&a[k]);
    Py_XDECREF(np);
    free(g);
    return ret;
}

static PyObject *mod_ctr_holdout(PyObject *m, PyObject *oj)
{
    unsigned long long j = 0;

    if (oj == Py_None)
        return invalid("j: an int in 0..%llu expected, got None", TS_CTR_HOLDOUT - 1);
    if (get_uint(oj, "j", TS_CTR_HOLDOUT - 1, &j))
        return NULL;
    return PyLong_FromUnsignedLongLong(ts_ctr_holdout_index(j));
}

/* ctr_auc (auc) and ctr_logloss: float32 x and label of one length. */
static PyObject *metric(PyObject *args, PyObject *kw, int auc)
{
    static char *kw_auc[] = { "score", "label", NULL }, *kw_ll[] = { "p", "label", NULL };
    PyObject *ox, *oy, *ret = NULL;
    struct arr x = { 0 }, y = { 0 };
    struct ts_ctr_scored *scratch = NULL;
    const char *xname = auc ? "score" : "p";
    double v = 0;
    size_t n;

    if (!PyArg_ParseTupleAndKeywords(args, kw, auc ? "OO:ctr_auc" : "OO:ctr_logloss",
                                     auc ? kw_auc : kw_ll, &ox, &oy) ||
        arr_get(ox, xname, F32, 0, -1, &x))
        return NULL;
    n = (size_t)(x.b.len / (Py_ssize_t)sizeof(float));
    if (arr_get(oy, "label", F32, 0, (long long)n, &y))
        goto out;
    if (auc && n && !(scratch = malloc(n * sizeof(*scratch)))) {
        PyErr_NoMemory();
        goto out;
    }
    Py_BEGIN_ALLOW_THREADS
    v = auc ? ts_ctr_auc(x.b.buf, y.b.buf, n, scratch) : ts_ctr_logloss(x.b.buf, y.b.buf, n);
    Py_END_ALLOW_THREADS
    ret = PyFloat_FromDouble(v);
out:
    free(scratch);
    arr_put(&x);
    arr_put(&y);
    return ret;
}

static PyObject *mod_ctr_auc(PyObject *m, PyObject *args, PyObject *kw)
{
    return metric(args, kw, 1);
}

static PyObject *mod_ctr_logloss(PyObject *m, PyObject *args, PyObject *kw)
{
    return metric(args, kw, 0);
}

static PyObject *mod_ctr_optimum(PyObject *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "first", "n", "seed", "features", "rows", NULL };
    PyObject *ofirst = Py_None, *on = Py_None, *oseed = Py_None, *ofeat = Py_None;
    PyObject *orows = Py_None, *ret = NULL;
    struct ts_ctr_gen *g = NULL;
    struct ts_err err = { 0 };
    uint64_t first, n, seed, rows;
    uint32_t features;
    double auc = 0, ll = 0;
    ts_status rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOO:ctr_optimum", kwlist, &ofirst, &on,
                                     &oseed, &ofeat, &orows) ||
        get_range(ofirst, on, 1, &first, &n) ||
        get_cfg(oseed, ofeat, orows, &seed, &features, &rows))
        return NULL;
    if (!(g = malloc(sizeof(*g))))
        return PyErr_NoMemory();
    if (get_gen(seed, features, rows, g))
        goto out;
    Py_BEGIN_ALLOW_THREADS
    rc = ts_ctr_optimum(g, first, (size_t)n, &auc, &ll, &err);
    Py_END_ALLOW_THREADS
    if (rc == TS_ENOMEM)
        PyErr_NoMemory();
    else if (rc)
        invalid("%s", err.msg);
    else
        ret = Py_BuildValue("(dd)", auc, ll);
out:
    free(g);
    return ret;
}

#define KW (PyCFunction)(void (*)(void))

PyMethodDef ctr_methods[] = {
    { "ctr_samples", KW mod_ctr_samples, METH_VARARGS | METH_KEYWORDS,
      "ctr_samples(first, n, seed=1, features=8, rows=100000, out=None) -> dict\n\n"
      "Samples first .. first + n - 1 (n at most 10^7) of lib/data/ctr.h's click log with\n"
      "the defaults of `tessera train --model ctr` (--seed, --ctr-features, --ctr-rows):\n"
      "{'ids': int64 (n, features), 'dense': float32 (n, 4), 'label': float32 (n,),\n"
      "'p_true': float64 (n,)}. out: a dict of such arrays to write into (keys left out are\n"
      "made). Held-out sample j is ctr_holdout(j)." },
    { "ctr_holdout", (PyCFunction)mod_ctr_holdout, METH_O,
      "ctr_holdout(j) -> int\n\nThe index of held-out sample j: 2^62 + j (training samples "
      "are 0 .. 2^62 - 1)." },
    { "ctr_auc", KW mod_ctr_auc, METH_VARARGS | METH_KEYWORDS,
      "ctr_auc(score, label) -> float\n\nROC AUC (Mann-Whitney U, ties count a half) of "
      "float32 scores against float32\nlabels (positive when > 0.5); NaN when a class is "
      "empty (ts_ctr_auc)." },
    { "ctr_logloss", KW mod_ctr_logloss, METH_VARARGS | METH_KEYWORDS,
      "ctr_logloss(p, label) -> float\n\nMean binary cross-entropy of float32 probabilities "
      "p (clamped to [1e-7, 1 - 1e-7])\nagainst float32 labels; 0 for none "
      "(ts_ctr_logloss)." },
    { "ctr_optimum", KW mod_ctr_optimum, METH_VARARGS | METH_KEYWORDS,
      "ctr_optimum(first, n, seed=1, features=8, rows=100000) -> (auc, logloss)\n\n"
      "The planted model's own AUC and log-loss on samples first .. first + n - 1: the best\n"
      "a trained model can reach there (ts_ctr_optimum)." },
    { NULL, NULL, 0, NULL },
};
