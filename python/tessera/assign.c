/* assign.c - Client.assign: tessera_assign, a tensor's next push an assignment of values
 * (docs/python.md, "Assignments"). The SDK reads the values when that push goes out, so the
 * binding holds their buffer (self->assigned[id]) from assign() until a push of the tensor
 * succeeded (assigned_release, called by push, step and the *_some methods), until it is armed
 * again, or until the client closes. */
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
