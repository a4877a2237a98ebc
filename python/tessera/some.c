/* some.c - Client.push_some, pull_some and step_some: tessera_push_some, tessera_pull_some
 * and tessera_step_some, tessera_step in pieces for tessera.torch's overlap (docs/python.md,
 * "Overlap"). Checked completely like every method, then one SDK call without the GIL. */
#include "client.h"

#include <string.h>

/* push_some / pull_some / step_some: ids (a sequence of tensor ids, ascending), grads parallel
 * to them (push, step), params one array per tensor by id (pull, step; push: None, or for a
 * rollback to land in). Checked completely, then one SDK call. */
static PyObject *some(struct client *self, PyObject *ostep, PyObject *oids, PyObject *ograds,
                      PyObject *oparams, int pull)
{
    Py_ssize_t n = ntensors(self), k = 0, m = 0, ng = 0;
    PyObject *ids = NULL, *gs = NULL, *ret = NULL;
    struct tessera_error e = { 0 };
    struct arr *a = PyMem_Calloc(2 * (size_t)n + 1, sizeof(*a));
    void **ptrs = PyMem_Calloc(2 * (size_t)n + 1, sizeof(*ptrs));
    int *id = PyMem_Calloc((size_t)n + 1, sizeof(*id)), rc, havep = oparams != Py_None;
    uint64_t step;

    if (!a || !ptrs || !id) {
        PyErr_NoMemory();
        goto out;
    }
    if (open_or_raise(self) || get_step(ostep, ograds ? "step" : "version", &step))
        goto out;
    ids = PySequence_Check(oids) ? PySequence_Fast(oids, "ids") : NULL;
    if (!ids || (m = PySequence_Fast_GET_SIZE(ids)) < 1 || m > n) {
        PyErr_Clear();
        invalid("ids: a sequence of 1..%zd tensor ids expected, got %s", n,
                Py_TYPE(oids)->tp_name);
        goto out;
    }
    for (k = 0; k < m; k++)
        if (get_id(self, PySequence_Fast_GET_ITEM(ids, k), "ids[]", &id[k]))
            goto out;
    if (ograds) {
        gs = PySequence_Check(ograds) ? PySequence_Fast(ograds, "grads") : NULL;
        if (!gs || PySequence_Fast_GET_SIZE(gs) != m) {
            PyErr_Clear();
            invalid("grads: a sequence of %zd arrays (one per id) expected", m);
            goto out;
        }
        for (; ng < m; ng++) {
            char label[200];
            snprintf(label, sizeof(label), "grads[%zd] (%s)", ng,
                     PyUnicode_AsUTF8(PyList_GET_ITEM(self->names, id[ng])));
            if (arr_get(PySequence_Fast_GET_ITEM(gs, ng), label, self->push_elem, 0,
                        (long long)self->numel[id[ng]], &a[n + ng]))
                goto out;
            ptrs[n + id[ng]] = a[n + ng].b.buf;
        }
    }
    if (havep && get_all(self, oparams, "params", F32, 1, a, ptrs))
        goto out;
    if (ograds && pull)
        SDK_CALL(self, rc, &e, tessera_step_some(self->t, step, (size_t)m, id,
                                                 (const void *const *)(ptrs + n),
                                                 (float *const *)ptrs, &e));
    else if (ograds)
        SDK_CALL(self, rc, &e, tessera_push_some(self->t, step, (size_t)m, id,
                                                 (const void *const *)(ptrs + n),
                                                 havep ? (float *const *)ptrs : NULL, &e));
    else
        SDK_CALL(self, rc, &e, tessera_pull_some(self->t, step, (size_t)m, id,
                                                 (float *const *)ptrs, &e));
    for (k = 0; havep && k < n; k++)
        arr_put(&a[k]);
    if (!rc && ograds)
        assigned_release(self, id, m);
    ret = rc ? raise_sdk(&e) : Py_NewRef(Py_None);
out:
    while (ng-- > 0)
        arr_put(&a[n + ng]);
    Py_XDECREF(ids);
    Py_XDECREF(gs);
    PyMem_Free(a);
    PyMem_Free(ptrs);
    PyMem_Free(id);
    return ret;
}

PyObject *client_push_some(struct client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "step", "ids", "grads", "params", NULL };
    PyObject *ostep, *oids, *ograds, *oparams = Py_None;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|O:push_some", kwlist, &ostep, &oids,
                                     &ograds, &oparams))
        return NULL;
    return some(self, ostep, oids, ograds, oparams, 0);
}

PyObject *client_pull_some(struct client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "version", "ids", "params", NULL };
    PyObject *ostep, *oids, *oparams;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:pull_some", kwlist, &ostep, &oids, &oparams))
        return NULL;
    return some(self, ostep, oids, NULL, oparams, 1);
}

PyObject *client_step_some(struct client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "step", "ids", "grads", "params", NULL };
    PyObject *ostep, *oids, *ograds, *oparams;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO:step_some", kwlist, &ostep, &oids,
                                     &ograds, &oparams))
        return NULL;
    return some(self, ostep, oids, ograds, oparams, 1);
}
