/* step.c - tessera.Client's whole steps: step() (tessera_step, tessera_step_clip), and an
 * elastic job's (docs/elastic.md; tessera_slots, tessera_step_slots, tessera_join): slots(),
 * step_slots() and join(). A step whose slots changed hands raises tessera.Slots (args.c), as
 * tessera_step_slots returns TESSERA_ESLOTS. The step in pieces is some.c's. */
#include "client.h"

PyObject *client_step(struct client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "step", "grads", "params", "clip_norm", NULL };
    PyObject *ostep, *ograds, *oparams, *oclip = Py_None, *ret = NULL;
    struct tessera_error e = { 0 };
    Py_ssize_t n;
    struct arr *a = NULL;
    void **ptrs = NULL;
    uint64_t step;
    double clip = 0, total = 0;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|O:step", kwlist, &ostep, &ograds, &oparams,
                                     &oclip) ||
        open_or_raise(self) || get_step(ostep, "step", &step))
        return NULL;
    if (oclip != Py_None && (clip = PyFloat_AsDouble(oclip)) == -1.0 && PyErr_Occurred())
        return NULL;
    n = ntensors(self);
    a = PyMem_Calloc(2 * (size_t)n + 1, sizeof(*a));
    ptrs = PyMem_Calloc(2 * (size_t)n + 1, sizeof(*ptrs));
    if (!a || !ptrs) {
        PyErr_NoMemory();
        goto out;
    }
    if (get_all(self, ograds, "grads", self->push_elem, 0, a, ptrs))
        goto out;
    if (get_all(self, oparams, "params", F32, 1, a + n, ptrs + n)) {
        for (Py_ssize_t i = 0; i < n; i++)
            arr_put(&a[i]);
        goto out;
    }
    if (oclip != Py_None)
        SDK_CALL(self, rc, &e, tessera_step_clip(self->t, step, (const void *const *)ptrs,
                                                 (float *const *)(ptrs + n), (float)clip,
                                                 &total, &e));
    else
        SDK_CALL(self, rc, &e, tessera_step(self->t, step, (const void *const *)ptrs,
                                            (float *const *)(ptrs + n), &e));
    for (Py_ssize_t i = 0; i < 2 * n; i++)
        arr_put(&a[i]);
    if (rc) {
        raise_sdk(&e);
    } else {
        assigned_release(self, NULL, 0);
        ret = oclip != Py_None ? PyFloat_FromDouble(total) : Py_NewRef(Py_None);
    }
out:
    PyMem_Free(a);
    PyMem_Free(ptrs);
    return ret;
}

PyObject *client_slots(struct client *self, PyObject *unused)
{
    uint32_t slots[1024];
    size_t n = 0;
    int rc;
    struct tessera_error e = { 0 };
    PyObject *out;

    (void)unused;
    if (open_or_raise(self))
        return NULL;
    SDK_CALL(self, rc, &e, (n = tessera_slots(self->t, slots, 1024), 0));
    if (rc)
        return raise_sdk(&e);
    if (!(out = PyList_New((Py_ssize_t)n)))
        return NULL;
    for (size_t i = 0; i < n; i++)
        PyList_SET_ITEM(out, (Py_ssize_t)i, PyLong_FromUnsignedLong(slots[i]));
    return out;
}

/* step_slots(step, slots, grads, params): grads[k], one array per tensor, is slot slots[k]'s. */
PyObject *client_step_slots(struct client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "step", "slots", "grads", "params", NULL };
    PyObject *ostep, *oslots, *ograds, *oparams, *sl = NULL, *gl = NULL, *ret = NULL;
    struct tessera_error e = { 0 };
    Py_ssize_t n = 0, ns = 0, held = 0;
    struct arr *a = NULL;
    void **ptrs = NULL;
    const void *const **per = NULL;
    uint32_t *slots = NULL;
    uint64_t step;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO:step_slots", kwlist, &ostep, &oslots,
                                     &ograds, &oparams) ||
        open_or_raise(self) || get_step(ostep, "step", &step))
        return NULL;
    sl = PySequence_Fast(oslots, "slots: a sequence of ints expected");
    gl = sl ? PySequence_Fast(ograds, "grads: a sequence (one per slot) expected") : NULL;
    if (!gl)
        goto out;
    ns = PySequence_Fast_GET_SIZE(sl);
    if (ns < 1 || ns > 1024 || PySequence_Fast_GET_SIZE(gl) != ns) {
        invalid("slots, grads: 1..1024 slots and one list of gradients each expected, got %zd "
                "slots and %zd lists", ns, PySequence_Fast_GET_SIZE(gl));
        goto out;
    }
    n = ntensors(self);
    a = PyMem_Calloc((size_t)(ns + 1) * (size_t)n + 1, sizeof(*a));
    ptrs = PyMem_Calloc((size_t)(ns + 1) * (size_t)n + 1, sizeof(*ptrs));
    per = PyMem_Calloc((size_t)ns, sizeof(*per));
    slots = PyMem_Calloc((size_t)ns, sizeof(*slots));
    if (!a || !ptrs || !per || !slots) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t k = 0; k < ns; k++) {
        unsigned long long v;
        if (get_uint(PySequence_Fast_GET_ITEM(sl, k), "slots[]", 1023, &v) ||
            get_all(self, PySequence_Fast_GET_ITEM(gl, k), "grads[]", self->push_elem, 0,
                    a + k * n, ptrs + k * n))
            goto release;
        held = k + 1;
        slots[k] = (uint32_t)v;
        per[k] = (const void *const *)(ptrs + k * n);
    }
    if (get_all(self, oparams, "params", F32, 1, a + ns * n, ptrs + ns * n))
        goto release;
    SDK_CALL(self, rc, &e, tessera_step_slots(self->t, step, (size_t)ns, slots, per,
                                              (float *const *)(ptrs + ns * n), &e));
    held = ns + 1;
    if (rc) {
        raise_sdk(&e);
    } else {
        assigned_release(self, NULL, 0);
        ret = Py_NewRef(Py_None);
    }
release:
    for (Py_ssize_t i = 0; i < held * n; i++)
        arr_put(&a[i]);
out:
    PyMem_Free(a);
    PyMem_Free(ptrs);
    PyMem_Free(per);
    PyMem_Free(slots);
    Py_XDECREF(sl);
    Py_XDECREF(gl);
    return ret;
}

/* join(params) -> step: every tensor at the newest version the job reached, into params. */
/* join (recover 0) and elastic_recover (recover 1, step given): params by tensor id. */
static PyObject *params_call(struct client *self, PyObject *oparams, int recover,
                             uint64_t step)
{
    struct tessera_error e = { 0 };
    Py_ssize_t n;
    struct arr *a;
    void **ptrs;
    int rc;

    if (open_or_raise(self))
        return NULL;
    n = ntensors(self);
    a = PyMem_Calloc((size_t)n + 1, sizeof(*a));
    ptrs = PyMem_Calloc((size_t)n + 1, sizeof(*ptrs));
    if (!a || !ptrs) {
        PyMem_Free(a);
        PyMem_Free(ptrs);
        return PyErr_NoMemory();
    }
    rc = get_all(self, oparams, "params", F32, 1, a, ptrs);
    if (!rc) {
        if (recover)
            SDK_CALL(self, rc, &e, tessera_elastic_recover(self->t, step,
                                                           (float *const *)ptrs, &e));
        else
            SDK_CALL(self, rc, &e, tessera_join(self->t, (float *const *)ptrs, &step, &e));
        for (Py_ssize_t i = 0; i < n; i++)
            arr_put(&a[i]);
        if (rc)
            raise_sdk(&e);
    }
    PyMem_Free(a);
    PyMem_Free(ptrs);
    if (rc)
        return NULL;
    return recover ? PyLong_FromUnsignedLongLong(tessera_resume_step(self->t))
                   : PyLong_FromUnsignedLongLong(step);
}

PyObject *client_join(struct client *self, PyObject *oparams)
{
    return params_call(self, oparams, 0, 0);
}

PyObject *client_elastic_recover(struct client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "step", "params", NULL };
    PyObject *ostep, *oparams;
    uint64_t step;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:elastic_recover", kwlist, &ostep, &oparams) ||
        get_step(ostep, "step", &step))
        return NULL;
    return params_call(self, oparams, 1, step);
}
