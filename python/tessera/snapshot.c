/* snapshot.c - the module's snapshot functions over tessera_snapshot_* (include/tessera.h): a
 * snapshot's tensors and sparse tables read whole from a store, and a snapshot written from
 * tensors.
 * tessera.snapshot (python/tessera/snapshot.py) turns them into torch state dicts and back;
 * docs/python.md, "Snapshots and torch files". No cluster is needed.
 * Ownership: what they return is Python's; they keep nothing. The GIL is released while the
 * store is read or written. */
#include "args.h"

/* {"name", "shape", "values", "state", "updates"} of tensor i, its arrays float32 bytearrays
 * (state None without state; updates None where the snapshot has no count). */
static PyObject *read_tensor(tessera_snapshot *s, int i, int slen)
{
    struct tessera_error e = { 0 };
    const uint64_t *shape;
    const char *name;
    uint64_t numel;
    int64_t updates = -1;
    int ndim, rc;
    PyObject *v = NULL, *sv = NULL, *oshape = NULL, *d = NULL;

    if (tessera_snapshot_tensor(s, i, &name, &shape, &ndim, &numel, &e))
        return raise_sdk(&e);
    v = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(numel * sizeof(float)));
    sv = slen ? PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)((uint64_t)slen * numel *
                                                                 sizeof(float)))
              : Py_NewRef(Py_None);
    if (!(oshape = PyTuple_New(ndim)) || !v || !sv)
        goto out;
    for (int k = 0; k < ndim; k++) {
        PyObject *x = PyLong_FromUnsignedLongLong(shape[k]);

        if (!x)
            goto out;
        PyTuple_SET_ITEM(oshape, k, x);
    }
    Py_BEGIN_ALLOW_THREADS
    rc = tessera_snapshot_read(s, i, (float *)PyByteArray_AS_STRING(v),
                               slen ? (float *)PyByteArray_AS_STRING(sv) : NULL, &updates, &e);
    Py_END_ALLOW_THREADS
    if (rc)
        d = raise_sdk(&e);
    else if (updates < 0)
        d = Py_BuildValue("{s:s,s:O,s:O,s:O,s:O}", "name", name, "shape", oshape, "values", v,
                          "state", sv, "updates", Py_None);
    else
        d = Py_BuildValue("{s:s,s:O,s:O,s:O,s:L}", "name", name, "shape", oshape, "values", v,
                          "state", sv, "updates", (long long)updates);
out:
    Py_XDECREF(v);
    Py_XDECREF(sv);
    Py_XDECREF(oshape);
    return d;
}

/* {"name", "dim", "max_id", "init", "seed", "optimizer", "ttl_steps", "ttl_seconds",
 * "state_len", "ids",
 * "values", "state", "updates", "steps"} of table i: ids int64, values float32 (rows x dim)
 * bytearrays; with all, state float32 (rows x state_len x dim; None for sgd), updates and
 * steps int64 bytearrays, else None. */
static PyObject *read_table(tessera_snapshot *s, int i, int all)
{
    struct tessera_error e = { 0 };
    struct tessera_table_spec spec = TESSERA_TABLE_SPEC_INIT;
    const char *name;
    uint32_t dim;
    uint64_t rows;
    int rc, slen;
    PyObject *ids = NULL, *v = NULL, *sv = NULL, *up = NULL, *steps = NULL, *d = NULL;

    if (tessera_snapshot_table(s, i, &name, &dim, &rows, &e) ||
        tessera_snapshot_table_spec(s, i, &spec, &slen, &e))
        return raise_sdk(&e);
    ids = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(rows * sizeof(uint64_t)));
    v = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(rows * dim * sizeof(float)));
    sv = all && slen ? PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(rows * (uint64_t)slen *
                                                                        dim * sizeof(float)))
                     : Py_NewRef(Py_None);
    up = all ? PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(rows * sizeof(uint64_t)))
             : Py_NewRef(Py_None);
    steps = all ? PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(rows * sizeof(uint64_t)))
                : Py_NewRef(Py_None);
    if (ids && v && sv && up && steps) {
        Py_BEGIN_ALLOW_THREADS
        rc = tessera_snapshot_read_rows(
            s, i, (uint64_t *)PyByteArray_AS_STRING(ids), (float *)PyByteArray_AS_STRING(v),
            sv != Py_None ? (float *)PyByteArray_AS_STRING(sv) : NULL,
            up != Py_None ? (uint64_t *)PyByteArray_AS_STRING(up) : NULL,
            steps != Py_None ? (uint64_t *)PyByteArray_AS_STRING(steps) : NULL, &e);
        Py_END_ALLOW_THREADS
        d = rc ? raise_sdk(&e)
               : Py_BuildValue("{s:s,s:I,s:K,s:s,s:K,s:s,s:K,s:K,s:i,s:O,s:O,s:O,s:O,s:O}",
                               "name", name, "dim", dim, "max_id",
                               (unsigned long long)spec.max_id, "init", spec.init, "seed",
                               (unsigned long long)spec.seed, "optimizer", spec.optimizer,
                               "ttl_steps", (unsigned long long)spec.ttl_steps, "ttl_seconds",
                               (unsigned long long)spec.ttl_seconds, "state_len", slen, "ids",
                               ids, "values", v, "state", sv, "updates", up, "steps", steps);
    }
    Py_XDECREF(ids);
    Py_XDECREF(v);
    Py_XDECREF(sv);
    Py_XDECREF(up);
    Py_XDECREF(steps);
    return d;
}

static PyObject *snapshot_read(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "store", "ref", "state", NULL };
    const char *dir, *ref = "HEAD";
    int with_state = 1, rc;
    struct tessera_error e = { 0 };
    struct tessera_snapshot_info in;
    tessera_snapshot *s = NULL;
    PyObject *out = NULL, *tensors = NULL, *tables = NULL;

    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|sp:snapshot_read", kwlist, &dir, &ref,
                                     &with_state))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = tessera_snapshot_open(dir, ref, &s, &e);
    Py_END_ALLOW_THREADS
    if (rc)
        return raise_sdk(&e);
    tessera_snapshot_info(s, &in);
    if (!(tensors = PyList_New(0)))
        goto out;
    for (int i = 0; i < in.ntensors; i++) {
        PyObject *t = read_tensor(s, i, with_state ? in.state_len : 0);

        if (!t || PyList_Append(tensors, t)) {
            Py_XDECREF(t);
            goto out;
        }
        Py_DECREF(t);
    }
    if (!(tables = PyList_New(0)))
        goto out;
    for (int i = 0; i < tessera_snapshot_ntables(s); i++) {
        PyObject *t = read_table(s, i, with_state);

        if (!t || PyList_Append(tables, t)) {
            Py_XDECREF(t);
            goto out;
        }
        Py_DECREF(t);
    }
    out = Py_BuildValue("{s:s,s:K,s:L,s:s,s:{s:s,s:I,s:O,s:s,s:d,s:I},s:i,s:O,s:O}", "id",
                        in.id, "step", (unsigned long long)in.step, "created_unix_ms",
                        (long long)in.created_unix_ms, "message", in.message, "job", "id",
                        in.job, "workers", in.workers, "exact", in.exact ? Py_True : Py_False,
                        "optimizer", in.optimizer, "batch", in.batch, "micro_batch",
                        in.micro_batch, "state_len", in.state_len, "tensors", tensors,
                        "tables", tables);
out:
    Py_XDECREF(tensors);
    Py_XDECREF(tables);
    tessera_snapshot_close(s);
    return out;
}

/* One (name, shape, values, state, updates) of the import's tensors into *x (state and updates
 * may be None), its buffers held in v and sv, its shape in shape (8). */
static int get_tensor(PyObject *o, Py_ssize_t i, int slen, struct tessera_import_tensor *x,
                      uint64_t *shape, struct arr *v, struct arr *sv)
{
    long long numel = 1;

    if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 5) {
        invalid("tensors[%zd]: want (name, shape, values, state or None, updates or None)", i);
        return -1;
    }
    if (!PyUnicode_Check(PyTuple_GET_ITEM(o, 0)) ||
        !(x->name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(o, 0)))) {
        PyErr_Clear();
        invalid("tensors[%zd]: the name must be a str", i);
        return -1;
    }
    if ((x->ndim = get_shape(PyTuple_GET_ITEM(o, 1), shape)) < 0)
        return -1;
    for (int d = 0; d < x->ndim; d++)
        numel *= (long long)shape[d];
    x->shape = shape;
    if (arr_get(PyTuple_GET_ITEM(o, 2), x->name, F32, 0, numel, v))
        return -1;
    x->values = v->b.buf;
    if (PyTuple_GET_ITEM(o, 4) != Py_None) {
        unsigned long long n = 0;

        if (get_uint(PyTuple_GET_ITEM(o, 4), x->name, UINT64_MAX, &n))
            return -1;
        x->has_updates = 1;
        x->updates = n;
    }
    if (PyTuple_GET_ITEM(o, 3) == Py_None)
        return 0;
    if (!slen) {
        invalid("tensor '%s': state given, but the optimizer keeps none", x->name);
        return -1;
    }
    if (arr_get(PyTuple_GET_ITEM(o, 3), x->name, F32, 0, (long long)slen * numel, sv))
        return -1;
    x->state = sv->b.buf;
    return 0;
}

/* One table of the import, a dict {name, dim, max_id, init, seed, optimizer, ttl_steps, ids,
 * values, state, updates, steps} (init, optimizer, state, updates and steps may be None), and
 * ttl_seconds if it has one (0 if not), into *x, its arrays held in bufs[0..5). */
static int get_table(PyObject *o, Py_ssize_t i, struct tessera_import_table *x,
                     struct arr bufs[5])
{
    static const char *keys[] = { "name", "dim", "max_id", "init", "seed", "optimizer",
                                  "ttl_steps", "ids", "values", "state", "updates", "steps" };
    PyObject *f[12];
    unsigned long long dim = 0, max_id = 0, seed = 0, ttl = 0, sec = 0;
    PyObject *osec;
    long long rows;
    const char *what;

    if (!PyDict_Check(o)) {
        invalid("tables[%zd]: want a dict {name, dim, max_id, init, seed, optimizer, "
                "ttl_steps, ids, values, state, updates, steps}", i);
        return -1;
    }
    for (int k = 0; k < 12; k++)
        if (!(f[k] = PyDict_GetItemString(o, keys[k]))) {
            invalid("tables[%zd]: '%s' is missing", i, keys[k]);
            return -1;
        }
    x->spec = (struct tessera_table_spec)TESSERA_TABLE_SPEC_INIT;
    if (!PyUnicode_Check(f[0]) || !(x->spec.name = PyUnicode_AsUTF8(f[0]))) {
        PyErr_Clear();
        invalid("tables[%zd].name: a str is required", i);
        return -1;
    }
    what = x->spec.name;
    if (get_uint(f[1], what, 4096, &dim) || get_uint(f[2], what, INT64_MAX, &max_id) ||
        get_str(f[3], what, &x->spec.init) || get_uint(f[4], what, UINT64_MAX, &seed) ||
        get_str(f[5], what, &x->spec.optimizer) || get_uint(f[6], what, UINT64_MAX, &ttl))
        return -1;
    x->spec.dim = (uint32_t)dim;
    x->spec.max_id = max_id;
    x->spec.seed = seed;
    x->spec.ttl_steps = ttl;
    if ((osec = PyDict_GetItemString(o, "ttl_seconds")) && get_uint(osec, what, UINT64_MAX, &sec))
        return -1;
    x->spec.ttl_seconds = sec;
    if (arr_get(f[7], what, I64, 0, -1, &bufs[0]))
        return -1;
    rows = (long long)(bufs[0].b.len / (Py_ssize_t)sizeof(int64_t));
    x->rows = (uint64_t)rows;
    x->ids = bufs[0].b.buf;
    if (arr_get(f[8], what, F32, 0, rows * (long long)dim, &bufs[1]))
        return -1;
    x->values = bufs[1].b.buf;
    if (f[9] != Py_None) {
        if (arr_get(f[9], what, F32, 0, -1, &bufs[2]))
            return -1;
        x->state = bufs[2].b.buf;
        if (!rows || !dim || bufs[2].b.len % (rows * (long long)dim * (long long)sizeof(float))) {
            invalid("table '%s': state: %zd floats, want rows x state_len x dim", what,
                    bufs[2].b.len / (Py_ssize_t)sizeof(float));
            return -1;
        }
    }
    if (f[10] != Py_None) {
        if (arr_get(f[10], what, I64, 0, rows, &bufs[3]))
            return -1;
        x->updates = bufs[3].b.buf;
    }
    if (f[11] != Py_None) {
        if (arr_get(f[11], what, I64, 0, rows, &bufs[4]))
            return -1;
        x->steps = bufs[4].b.buf;
    }
    return 0;
}

static PyObject *snapshot_import(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "store", "tensors", "job", "workers", "optimizer", "batch",
                              "exact", "step", "micro_batch", "branch", "tag", "message",
                              "tables", NULL };
    struct tessera_import_options o = { .workers = 1, .step = 1, .branch = "main" };
    unsigned long long step = 1;
    const char *dir;
    PyObject *otensors, *otables = NULL, *seq = NULL, *tseq = NULL, *out = NULL;
    struct tessera_import_tensor *xs = NULL;
    struct tessera_import_table *ts = NULL;
    struct arr *tbufs = NULL;
    Py_ssize_t nt = 0;
    uint64_t (*shapes)[8] = NULL;
    struct arr *bufs = NULL;
    struct tessera_error e = { 0 };
    char id[65];
    Py_ssize_t n = 0;
    int rc, slen;

    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sOsIsd|pKIszzO:snapshot_import", kwlist, &dir,
                                     &otensors, &o.job, &o.workers, &o.optimizer, &o.batch,
                                     &o.exact, &step, &o.micro_batch, &o.branch, &o.tag,
                                     &o.message, &otables))
        return NULL;
    o.step = step;
    if (tessera_optimizer_state_len(o.optimizer, &slen, &e))
        return raise_sdk(&e);
    if (!(seq = PySequence_Fast(otensors, "tensors: want a sequence of (name, shape, values, "
                                          "state, updates)")))
        return NULL;
    n = PySequence_Fast_GET_SIZE(seq);
    if (n > 1 << 20) {
        invalid("tensors: %zd, too many", n);
        goto out;
    }
    xs = PyMem_Calloc((size_t)n + 1, sizeof(*xs));
    shapes = PyMem_Calloc((size_t)n + 1, sizeof(*shapes));
    bufs = PyMem_Calloc(2 * (size_t)n + 1, sizeof(*bufs));
    if (!xs || !shapes || !bufs) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (get_tensor(PySequence_Fast_GET_ITEM(seq, i), i, slen, &xs[i],
                       shapes[i], &bufs[2 * i], &bufs[2 * i + 1]))
            goto out;
    if (otables && otables != Py_None) {
        if (!(tseq = PySequence_Fast(otables, "tables: want a sequence of dicts")))
            goto out;
        nt = PySequence_Fast_GET_SIZE(tseq);
        if (nt > 256) {
            invalid("tables: %zd, at most 256", nt);
            goto out;
        }
        ts = PyMem_Calloc((size_t)nt + 1, sizeof(*ts));
        tbufs = PyMem_Calloc(5 * (size_t)nt + 1, sizeof(*tbufs));
        if (!ts || !tbufs) {
            PyErr_NoMemory();
            goto out;
        }
        for (Py_ssize_t i = 0; i < nt; i++)
            if (get_table(PySequence_Fast_GET_ITEM(tseq, i), i, &ts[i], &tbufs[5 * i]))
                goto out;
        o.tables = ts;
        o.ntables = (int)nt;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = tessera_snapshot_import(dir, &o, xs, (int)n, id, &e);
    Py_END_ALLOW_THREADS
    out = rc ? raise_sdk(&e) : PyUnicode_FromString(id);
out:
    for (Py_ssize_t i = 0; bufs && i < 2 * n; i++)
        arr_put(&bufs[i]);
    for (Py_ssize_t i = 0; tbufs && i < 5 * nt; i++)
        arr_put(&tbufs[i]);
    PyMem_Free(tbufs);
    PyMem_Free(ts);
    Py_XDECREF(tseq);
    PyMem_Free(bufs);
    PyMem_Free(shapes);
    PyMem_Free(xs);
    Py_XDECREF(seq);
    return out;
}

#define KW (PyCFunction)(void (*)(void))

PyMethodDef snapshot_methods[] = {
    { "snapshot_read", KW snapshot_read, METH_VARARGS | METH_KEYWORDS,
      "snapshot_read(store, ref='HEAD', state=True) -> dict: the snapshot's id, step, job, "
      "tensors, each {name, shape, values, state, updates} with float32 bytearrays (state None "
      "without optimizer state; updates, the state's update count, None if unknown), and "
      "tables, each {name, dim, max_id, init, seed, optimizer, ttl_steps, state_len, ids "
      "(int64 bytearray), values (float32, ids x dim), state (float32, ids x state_len x dim), "
      "updates, steps (int64; these three None without state)}. Use tessera.snapshot." },
    { "snapshot_import", KW snapshot_import, METH_VARARGS | METH_KEYWORDS,
      "snapshot_import(store, tensors, job, workers, optimizer, batch, exact=False, step=1, "
      "micro_batch=0, branch='main', tag=None, message=None, tables=None) -> id: a snapshot "
      "of tensors, a sequence of (name, shape, values, state or None, updates or None), and "
      "tables, a sequence of dicts as snapshot_read gives them. Use tessera.snapshot." },
    { NULL, NULL, 0, NULL },
};
