/* assign.c - what a push carries besides a gradient: Client.assign (tessera_assign, a tensor's
 * next push an assignment of values, with the optimizer's state and update count or without)
 * and Client.set_lr (tessera_set_lr, the learning rate and weight decay of its updates); and
 * Client.pull_state, what a checkpoint reads back; docs/python.md. The SDK reads assigned
 * values when that push goes out, so the binding holds their buffer (self->assigned[id]) from
 * assign() until a push of the tensor succeeded (assigned_release, called by push, step and
 * the *_some methods), until it is armed again, or until the client closes. */
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
    static char *kwlist[] = { "id", "values", "state", "updates", NULL };
    PyObject *oid, *ovalues = Py_None, *ostate = Py_None, *oupdates = Py_None;
    struct tessera_error e = { 0 };
    struct arr v = { 0 }, s = { 0 };
    unsigned long long updates = 0;
    int id, rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OOO:assign", kwlist, &oid, &ovalues,
                                     &ostate, &oupdates) ||
        open_or_raise(self) || get_id(self, oid, "id", &id) ||
        get_uint(oupdates, "updates", UINT64_MAX, &updates))
        return NULL;
    if (oupdates != Py_None && ostate == Py_None)
        return invalid("updates: the update count goes with the optimizer's state (state=, "
                       "an empty array for sgd)");
    if (ovalues != Py_None &&
        arr_get(ovalues, "values", F32, 0, (long long)self->numel[id], &v))
        return NULL;
    if (ostate != Py_None &&
        arr_get(ostate, "state", F32, 0, (long long)self->state_len * (long long)self->numel[id],
                &s)) {
        arr_put(&v);
        return NULL;
    }
    /* The state is copied at once (tessera_assign_state); the values then too. */
    if (s.held && oupdates != Py_None)
        SDK_CALL(self, rc, &e, tessera_assign_state_updates(self->t, id,
                                                            v.held ? v.b.buf : NULL, s.b.buf,
                                                            (uint64_t)updates, &e));
    else if (s.held)
        SDK_CALL(self, rc, &e, tessera_assign_state(self->t, id, v.held ? v.b.buf : NULL,
                                                    s.b.buf, &e));
    else
        SDK_CALL(self, rc, &e, tessera_assign(self->t, id, v.held ? v.b.buf : NULL, &e));
    arr_put(&s);
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

PyObject *client_pull_state(struct client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "id", "version", "out", "return_updates", NULL };
    PyObject *oid, *over, *oout;
    struct tessera_error e = { 0 };
    struct arr o = { 0 };
    uint64_t version, updates = 0;
    int id, rc, want_updates = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|p:pull_state", kwlist, &oid, &over, &oout,
                                     &want_updates) ||
        open_or_raise(self) || get_id(self, oid, "id", &id) ||
        get_step(over, "version", &version) ||
        arr_get(oout, "out", F32, 1, (long long)self->state_len * (long long)self->numel[id], &o))
        return NULL;
    if (want_updates)
        SDK_CALL(self, rc, &e, tessera_pull_state_updates(self->t, id, version, o.b.buf,
                                                          &updates, &e));
    else
        SDK_CALL(self, rc, &e, tessera_pull_state(self->t, id, version, o.b.buf, &e));
    arr_put(&o);
    if (rc)
        return raise_sdk(&e);
    if (want_updates)
        return Py_BuildValue("(OK)", oout, (unsigned long long)updates);
    return Py_NewRef(oout);
}
