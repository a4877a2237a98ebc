/* rows.c - Client.register_table, pull_rows, prefetch_rows, push_rows, table_sha256 and table_rows: the
 * SDK's sparse tables (tessera.h, "Sparse embedding tables"; docs/embeddings.md). ids and
 * rows are taken through the buffer protocol where they lie (NumPy arrays, CPU torch
 * tensors), checked completely, then one SDK call without the GIL. */
#include "client.h"

#include <string.h>

/* A registered table handle from o; raises InvalidArgument otherwise. */
static int get_table(struct client *self, PyObject *o, int *table)
{
    unsigned long long v = 0;

    if (!o || o == Py_None) {
        invalid("table: a table handle (an int) is required");
        return -1;
    }
    if (get_uint(o, "table", INT32_MAX, &v))
        return -1;
    if ((int)v >= self->ntables) {
        invalid("table: %llu is not a registered table (0..%d)", v, self->ntables - 1);
        return -1;
    }
    *table = (int)v;
    return 0;
}

PyObject *client_register_table(struct client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "name", "dim", "max_id", "init", "seed", "optimizer",
                              "ttl_steps", "ttl_seconds", NULL };
    PyObject *oname, *odim, *omax, *oinit = Py_None, *oseed = Py_None, *oopt = Py_None;
    PyObject *ottl = Py_None, *osec = Py_None;
    struct tessera_table_spec spec = TESSERA_TABLE_SPEC_INIT;
    struct tessera_error e = { 0 };
    unsigned long long dim = 0, max_id = 0, seed = 0, ttl = 0, sec = 0;
    int rc, id = -1;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|OOOOO:register_table", kwlist, &oname,
                                     &odim, &omax, &oinit, &oseed, &oopt, &ottl, &osec))
        return NULL;
    if (open_or_raise(self) || get_str(oname, "name", &spec.name) ||
        get_uint(odim, "dim", 4096, &dim) || get_uint(omax, "max_id", INT64_MAX, &max_id) ||
        get_str(oinit, "init", &spec.init) || get_uint(oseed, "seed", UINT64_MAX, &seed) ||
        get_str(oopt, "optimizer", &spec.optimizer) ||
        get_uint(ottl, "ttl_steps", UINT64_MAX, &ttl) ||
        get_uint(osec, "ttl_seconds", UINT64_MAX, &sec))
        return NULL;
    spec.ttl_steps = ttl;
    spec.ttl_seconds = sec;
    if (!spec.name || odim == Py_None || omax == Py_None)
        return invalid("name, dim and max_id are required");
    spec.dim = (uint32_t)dim;
    spec.max_id = max_id;
    spec.seed = seed;
    SDK_CALL(self, rc, &e, tessera_table_register(self->t, &spec, &id, &e));
    if (rc)
        return raise_sdk(&e);
    if (id >= self->ntables) {   /* a new one (the same spec again: its handle) */
        self->table_dim[id] = spec.dim;
        self->ntables = id + 1;
    }
    return PyLong_FromLong(id);
}

/* pull_rows and push_rows (push: 1, or 2 with slot): ids int64, n of them; rows float32,
 * n x dim. */
static PyObject *rows_call(struct client *self, PyObject *otable, PyObject *ostep,
                           PyObject *oids, PyObject *orows, int push, uint32_t slot)
{
    struct tessera_error e = { 0 };
    struct arr ids = { 0 }, rows = { 0 };
    PyObject *ret = NULL;
    uint64_t step;
    int table, rc;
    Py_ssize_t n;

    if (open_or_raise(self) || get_table(self, otable, &table) ||
        get_step(ostep, push ? "step" : "version", &step) ||
        arr_get(oids, "ids", I64, 0, -1, &ids))
        goto out;
    n = ids.b.len / (Py_ssize_t)sizeof(int64_t);
    if (arr_get(orows, push ? "grads" : "out", F32, !push,
                (long long)n * self->table_dim[table], &rows))
        goto out;
    if (push == 2)
        SDK_CALL(self, rc, &e, tessera_push_rows_slot(self->t, table, step, slot, (size_t)n,
                                                      ids.b.buf, rows.b.buf, &e));
    else if (push)
        SDK_CALL(self, rc, &e, tessera_push_rows(self->t, table, step, (size_t)n, ids.b.buf,
                                                 rows.b.buf, &e));
    else
        SDK_CALL(self, rc, &e, tessera_pull_rows(self->t, table, step, (size_t)n, ids.b.buf,
                                                 rows.b.buf, &e));
    ret = rc ? raise_sdk(&e) : Py_NewRef(Py_None);
out:
    arr_put(&ids);
    arr_put(&rows);
    return ret;
}

PyObject *client_pull_rows(struct client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "table", "version", "ids", "out", NULL };
    PyObject *t, *v, *ids, *out;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO:pull_rows", kwlist, &t, &v, &ids, &out))
        return NULL;
    return rows_call(self, t, v, ids, out, 0, 0);
}

PyObject *client_prefetch_rows(struct client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "table", "ids", NULL };
    struct tessera_error e = { 0 };
    struct arr ids = { 0 };
    PyObject *t, *oids, *ret = NULL;
    int table, rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:prefetch_rows", kwlist, &t, &oids))
        return NULL;
    if (open_or_raise(self) || get_table(self, t, &table) ||
        arr_get(oids, "ids", I64, 0, -1, &ids))
        goto out;
    SDK_CALL(self, rc, &e, tessera_prefetch_rows(self->t, table,
                                                 (size_t)(ids.b.len / (Py_ssize_t)sizeof(int64_t)),
                                                 ids.b.buf, &e));
    ret = rc ? raise_sdk(&e) : Py_NewRef(Py_None);
out:
    arr_put(&ids);
    return ret;
}

PyObject *client_push_rows(struct client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "table", "step", "ids", "grads", "slot", NULL };
    PyObject *t, *s, *ids, *grads, *oslot = Py_None;
    unsigned long long slot = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO|O:push_rows", kwlist, &t, &s, &ids, &grads,
                                     &oslot))
        return NULL;
    if (oslot != Py_None && get_uint(oslot, "slot", UINT32_MAX, &slot))
        return NULL;
    return rows_call(self, t, s, ids, grads, oslot == Py_None ? 1 : 2, (uint32_t)slot);
}

/* table_sha256 and table_rows. */
static PyObject *table_fp(struct client *self, PyObject *args, PyObject *kw, int sha)
{
    static char *kwlist[] = { "table", "version", NULL };
    struct tessera_error e = { 0 };
    PyObject *ot, *ov;
    char hex[65] = "";
    uint64_t version, count = 0;
    int table, rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, sha ? "OO:table_sha256" : "OO:table_rows",
                                     kwlist, &ot, &ov) ||
        open_or_raise(self) || get_table(self, ot, &table) || get_step(ov, "version", &version))
        return NULL;
    if (sha)
        SDK_CALL(self, rc, &e, tessera_table_sha256(self->t, table, version, hex, &e));
    else
        SDK_CALL(self, rc, &e, tessera_table_rows(self->t, table, version, &count, &e));
    if (rc)
        return raise_sdk(&e);
    return sha ? PyUnicode_FromString(hex) : PyLong_FromUnsignedLongLong(count);
}

PyObject *client_table_sha256(struct client *self, PyObject *args, PyObject *kw)
{
    return table_fp(self, args, kw, 1);
}

PyObject *client_table_rows(struct client *self, PyObject *args, PyObject *kw)
{
    return table_fp(self, args, kw, 0);
}

PyObject *client_table_version(struct client *self, PyObject *arg)
{
    int table;

    if (open_or_raise(self) || get_table(self, arg, &table))
        return NULL;
    return PyLong_FromUnsignedLongLong(tessera_table_version(self->t, table));
}
