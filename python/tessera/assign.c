/* assign.c - what a push carries besides a gradient: Client.assign (tessera_assign, a tensor's
 * next push an assignment of values) and Client.set_lr (tessera_set_lr, the learning rate and
 * weight decay of its updates); docs/python.md. The SDK reads assigned values when that push
 * goes out, so the binding holds their buffer (self->assigned[id]) from assign() until a push
 * of the tensor succeeded (assigned_release, called by push, step and the *_some methods),
 * until it is armed again, or until the client closes. */
#include "client.h"

void assigned_release(struct client *self, const int *ids, Py_ssize_t n)
{
    Py_ssize_t all = ntensors(self);

    if (!self->assigned)
        return;
    for (Py_ssize_t k = 0; k < (ids ? n : all); k++)
        arr_put(&self->assigned[ids ? ids[k] : k]);
}

PyObject *client_assign(struct client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "id", "values", NULL };
    PyObject *oid, *ovalues = Py_None;
    struct tessera_error e = { 0 };
    struct arr v = { 0 };
    int id, rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:assign", kwlist, &oid, &ovalues) ||
        open_or_raise(self) || get_id(self, oid, "id", &id) ||
        (ovalues != Py_None &&
         arr_get(ovalues, "values", F32, 0, (long long)self->numel[id], &v)))
        return NULL;
    SDK_CALL(self, rc, &e, tessera_assign(self->t, id, v.held ? v.b.buf : NULL, &e));
    if (rc) {
        arr_put(&v);
        return raise_sdk(&e);
    }
    arr_put(&self->assigned[id]);
    self->assigned[id] = v;
    Py_RETURN_NONE;
}

PyObject *client_set_lr(struct client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "id", "lr", "weight_decay", NULL };
    PyObject *oid;
    double lr;
    int decay = 1, id = -1, rc;
    struct tessera_error e = { 0 };

    if (!PyArg_ParseTupleAndKeywords(args, kw, "Od|p:set_lr", kwlist, &oid, &lr, &decay) ||
        open_or_raise(self) || (oid != Py_None && get_id(self, oid, "id", &id)))
        return NULL;
    SDK_CALL(self, rc, &e, tessera_set_lr(self->t, id, (float)lr, decay, &e));
    if (rc)
        return raise_sdk(&e);
    Py_RETURN_NONE;
}
