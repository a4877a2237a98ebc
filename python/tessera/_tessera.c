/* _tessera.c - the CPython binding of include/tessera.h (module tessera._tessera).
 *
 * A thin layer: every method checks its Python arguments completely, then makes one SDK call
 * with the GIL released. Arrays cross by the buffer protocol, never copied: the SDK reads a
 * gradient from, and writes parameters into, the caller's own memory (a NumPy array, or a CPU
 * torch tensor through its zero-copy .numpy() view). So a wrong dtype, a strided view or a
 * wrong length must be refused here, before anything is sent: the SDK takes a bare pointer and
 * would read past the end or push garbage the shard then applies.
 *
 * Errors: one exception per failure, tessera.Error, with .code (the gRPC status name, mapped
 * by lib/rpc/status.c exactly as the services map ts_status), .grpc_code and .message; bad
 * input raises tessera.InvalidArgument, a subclass of both tessera.Error and ValueError; a
 * step the cluster took back to a snapshot raises tessera.Rollback (a tessera.Error).
 * Threads: a tessera handle is used by one thread at a time, so each Client holds a lock
 * around its SDK calls; other Python threads run while a call waits for the shards.
 * Client.buffers lends out the SDK's own memory (tessera_buffers) as NumPy arrays that keep
 * the Client alive; close() leaves that memory mapped until the last of them is freed.
 * The argument checks (Client's options included) and the error mapping are in args.c, the arrays' exporter in
 * buffers.c, the step in pieces (push_some, pull_some, step_some) in some.c, the master's
 * schedule (claim_work, next_task, task_done) in work.c, the Client object in client.h. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "buffers.h"
#include "client.h"
#include "tessera.h"

/* ---- Client ---- */

int open_or_raise(struct client *self)
{
    if (self->t && !self->closed)
        return 0;
    raise_code(TESSERA_ESTATE, "the client is closed (or was never connected)");
    return -1;
}

Py_ssize_t ntensors(const struct client *self)
{
    return PyList_GET_SIZE(self->names);
}

/* A registered tensor id from o; raises InvalidArgument otherwise. */
int get_id(struct client *self, PyObject *o, const char *what, int *id)
{
    unsigned long long v = 0;

    if (!o || !PyLong_Check(o) || PyBool_Check(o)) {
        invalid("%s: a tensor id (int, from register) expected, got %s", what,
                o ? Py_TYPE(o)->tp_name : "nothing");
        return -1;
    }
    v = PyLong_AsUnsignedLongLong(o);
    if (PyErr_Occurred() || v >= (unsigned long long)ntensors(self)) {
        PyErr_Clear();
        PyObject *r = PyObject_Repr(o);
        invalid("%s: tensor id %s is not registered (%zd tensors: ids 0..%zd)", what,
                r ? PyUnicode_AsUTF8(r) : "?", ntensors(self), ntensors(self) - 1);
        Py_XDECREF(r);
        return -1;
    }
    *id = (int)v;
    return 0;
}

static PyObject *client_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    struct client *self = (struct client *)type->tp_alloc(type, 0);

    if (!self)
        return NULL;
    self->lock = PyThread_allocate_lock();
    self->names = PyList_New(0);
    self->keep = PyList_New(0);
    if (!self->lock || !self->names || !self->keep) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

/* tessera_set_interrupt's check, from a thread of the SDK's waiting for a shard: Python's
 * signal handlers run (in the main thread only; elsewhere this is a no-op); one that raised,
 * as SIGINT's KeyboardInterrupt does, ends the wait and its exception stays set for the
 * method to raise (raise_sdk). */
static int interrupted(void *arg)
{
    PyGILState_STATE g = PyGILState_Ensure();
    int hit = PyErr_CheckSignals() < 0;

    (void)arg;
    PyGILState_Release(g);
    return hit;
}

static void close_now(tessera *t)
{
    if (!t)
        return;
    Py_BEGIN_ALLOW_THREADS
    tessera_close(t);
    Py_END_ALLOW_THREADS
}

static int client_init(struct client *self, PyObject *args, PyObject *kw)
{
    struct tessera_options opt = TESSERA_OPTIONS_INIT;
    struct tessera_launch env;
    struct tessera_error e = { 0 };
    tessera *t = NULL;
    int rc;

    if (self->t) {
        invalid("Client: already connected; make a new Client");
        return -1;
    }
    opt.workers = 1;
    if (get_options(args, kw, &opt, &env, self->keep))
        return -1;
    Py_BEGIN_ALLOW_THREADS
    rc = tessera_connect(&opt, &t, &e);
    Py_END_ALLOW_THREADS
    if (rc) {
        raise_sdk(&e);
        return -1;
    }
    tessera_set_interrupt(t, interrupted, NULL);
    /* The connect checked the spec; "momentum" is tessera_options.optimizer's default. */
    if (tessera_optimizer_state_len(opt.optimizer ? opt.optimizer : "momentum",
                                    &self->state_len, &e)) {
        close_now(t);
        raise_sdk(&e);
        return -1;
    }
    if (!(self->where = client_where(&opt))) {
        close_now(t);
        return -1;
    }
    self->t = t;
    self->exact = opt.exact;
    self->elastic = opt.elastic;
    self->push_elem = opt.exact && opt.exact_push != TESSERA_EXACT_PUSH_FLOAT ? I64 : F32;
    return 0;
}

/* Closes the handle (with the GIL): every call is refused from now on, and tessera_close runs
 * at once, or, while arrays from buffers() are alive, when the last of them is freed: it
 * unmaps their pages, and an array over unmapped pages would crash the interpreter at its
 * next read. -1 if the ResourceWarning saying so was turned into an exception. */
static int client_close_handle(struct client *self)
{
    tessera *t;

    self->closed = 1;   /* client_hold refuses from here: exports can only fall */
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(self->lock, WAIT_LOCK);   /* waits for a call in flight */
    t = self->t;
    self->t = NULL;
    PyThread_release_lock(self->lock);
    Py_END_ALLOW_THREADS
    assigned_release(self, NULL, 0);
    if (t && self->exports > 0) {
        self->deferred = t;
        return PyErr_WarnFormat(PyExc_ResourceWarning, 1, "tessera.Client.close(): %zd arrays "
                                "from buffers() are still alive; the client leaves the cluster "
                                "when the last of them is freed (del them before close)",
                                self->exports);
    }
    close_now(t);
    return 0;
}

/* buffers.h's hold and drop: the count of live arrays over this client's SDK pages. */
static int client_hold(PyObject *o)
{
    struct client *self = (struct client *)o;

    if (self->closed || !self->t) {
        raise_code(TESSERA_ESTATE, "buffers: the client is closed; its buffers are gone");
        return -1;
    }
    self->exports++;
    return 0;
}

static void client_drop(PyObject *o)
{
    struct client *self = (struct client *)o;
    tessera *t = NULL;

    if (--self->exports == 0 && self->deferred) {
        t = self->deferred;
        self->deferred = NULL;
    }
    close_now(t);
}

static const struct buf_owner_ops client_buf_ops = { client_hold, client_drop };

static void client_dealloc(struct client *self)
{
    /* Arrays from buffers() hold a reference: none is alive here, so nothing is deferred. */
    if (self->lock) {
        if (client_close_handle(self))
            PyErr_WriteUnraisable((PyObject *)self);
        PyThread_free_lock(self->lock);
    }
    close_now(self->deferred);
    Py_XDECREF(self->names);
    Py_XDECREF(self->keep);
    Py_XDECREF(self->where);
    PyMem_Free(self->numel);
    PyMem_Free(self->bufs);
    PyMem_Free(self->assigned);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *client_close(struct client *self, PyObject *unused)
{
    if (client_close_handle(self))
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *client_enter(struct client *self, PyObject *unused)
{
    return Py_NewRef(self);
}

/* set_result(failed, text=None): how this worker's part of the job ended (tessera.h). */
static PyObject *client_set_result(struct client *self, PyObject *args)
{
    int failed = 0;
    const char *text = NULL;

    if (!PyArg_ParseTuple(args, "p|z:set_result", &failed, &text))
        return NULL;
    /* Without the GIL: a call in flight may want it (interrupted) while it holds the lock. */
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(self->lock, WAIT_LOCK);
    tessera_set_result(self->t, failed, text);
    PyThread_release_lock(self->lock);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *client_exit(struct client *self, PyObject *args)
{
    PyObject *type = NULL, *value = NULL, *tb = NULL;

    if (!PyArg_ParseTuple(args, "|OOO", &type, &value, &tb))
        return NULL;
    if (type && type != Py_None) {   /* leaving on an exception: this worker failed */
        PyObject *text = value ? PyObject_Str(value) : NULL;
        const char *why = text ? PyUnicode_AsUTF8(text) : NULL;
        const char *said = why && why[0] ? why : ((PyTypeObject *)type)->tp_name;
        PyErr_Clear();
        Py_BEGIN_ALLOW_THREADS   /* as in set_result */
        PyThread_acquire_lock(self->lock, WAIT_LOCK);
        tessera_set_result(self->t, 1, said);
        PyThread_release_lock(self->lock);
        Py_END_ALLOW_THREADS
        Py_XDECREF(text);
    }
    if (client_close_handle(self))
        return NULL;
    Py_RETURN_FALSE;
}

static PyObject *client_register(struct client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "name", "shape", "init", "seed", "fan_in", "fan_out",
                              "partition_bytes", NULL };
    PyObject *oname, *oshape, *oinit = NULL, *o[4] = { NULL }, *pyname;
    const char *name = NULL, *init = "zeros";
    unsigned long long v[4] = { 0 };
    uint64_t shape[8], *grown;
    struct bufs *grown_bufs;
    struct arr *grown_assigned;
    struct tessera_error e = { 0 };
    int ndim, id = -1, rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOOOO:register", kwlist, &oname, &oshape,
                                     &oinit, &o[0], &o[1], &o[2], &o[3]))
        return NULL;
    if (open_or_raise(self) || get_str(oname, "name", &name) || get_str(oinit, "init", &init) ||
        get_uint(o[0], "seed", UINT64_MAX, &v[0]) ||
        get_uint(o[1], "fan_in", UINT64_MAX, &v[1]) ||
        get_uint(o[2], "fan_out", UINT64_MAX, &v[2]) ||
        get_uint(o[3], "partition_bytes", UINT64_MAX, &v[3]) ||
        (ndim = get_shape(oshape, shape)) < 0)
        return NULL;
    if (!name)
        return invalid("name: the tensor's name (a str) is required");
    SDK_CALL(self, rc, &e, tessera_register(self->t, name, shape, ndim, init, v[0], v[1], v[2],
                                            v[3], &id, &e));
    if (rc)
        return raise_sdk(&e);
    /* The SDK hands out ids in registration order; the name list relies on it. */
    if (id != ntensors(self))
        return raise_code(TESSERA_EINTERNAL, "register: the SDK returned an id out of order");
    grown = PyMem_Realloc(self->numel, ((size_t)id + 1) * sizeof(*grown));
    if (!grown)
        return PyErr_NoMemory();
    self->numel = grown;
    grown_bufs = PyMem_Realloc(self->bufs, ((size_t)id + 1) * sizeof(*grown_bufs));
    if (!grown_bufs)
        return PyErr_NoMemory();
    self->bufs = grown_bufs;
    self->bufs[id] = (struct bufs){ NULL, NULL };
    grown_assigned = PyMem_Realloc(self->assigned, ((size_t)id + 1) * sizeof(*grown_assigned));
    if (!grown_assigned)
        return PyErr_NoMemory();
    self->assigned = grown_assigned;
    memset(&self->assigned[id], 0, sizeof(self->assigned[id]));
    SDK_CALL(self, rc, &e, (grown[id] = tessera_numel(self->t, id), 0));
    pyname = PyUnicode_FromString(name);
    if (rc || !pyname || PyList_Append(self->names, pyname)) {
        Py_XDECREF(pyname);
        return NULL;
    }
    Py_DECREF(pyname);
    return PyLong_FromLong(id);
}

static PyObject *client_push(struct client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "id", "step", "grad", NULL };
    PyObject *oid, *ostep, *ograd;
    struct tessera_error e = { 0 };
    struct arr g;
    uint64_t step;
    int id, rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:push", kwlist, &oid, &ostep, &ograd) ||
        open_or_raise(self) || get_id(self, oid, "id", &id) ||
        get_step(ostep, "step", &step) ||
        arr_get(ograd, "grad", self->push_elem, 0,
                (long long)self->numel[id], &g))
        return NULL;
    SDK_CALL(self, rc, &e, tessera_push(self->t, id, step, g.b.buf, &e));
    arr_put(&g);
    if (rc)
        return raise_sdk(&e);
    assigned_release(self, &id, 1);
    Py_RETURN_NONE;
}

static PyObject *client_pull(struct client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "id", "version", "out", NULL };
    PyObject *oid, *over, *oout;
    struct tessera_error e = { 0 };
    struct arr p;
    uint64_t version;
    int id, rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:pull", kwlist, &oid, &over, &oout) ||
        open_or_raise(self) || get_id(self, oid, "id", &id) ||
        get_step(over, "version", &version) ||
        arr_get_out(oout, "out", (long long)self->numel[id], self->bufs[id].params, &p))
        return NULL;
    SDK_CALL(self, rc, &e, tessera_pull(self->t, id, version, p.b.buf, &e));
    arr_put(&p);
    if (rc)
        return raise_sdk(&e);
    return Py_NewRef(oout);
}

/* One array per registered tensor, by id, from the sequence o into a[] (ntensors entries,
 * zeroed by the caller); ptrs[i] gets each buffer. Outputs (writable) may be the tensors'
 * read-only params from buffers(). On failure everything taken is released. */
int get_all(struct client *self, PyObject *o, const char *what, enum elem want,
                   int writable, struct arr *a, void **ptrs)
{
    Py_ssize_t n = ntensors(self);
    PyObject *seq = PySequence_Check(o) && !PyUnicode_Check(o) ? PySequence_Fast(o, what)
                                                               : NULL;

    if (!seq || PySequence_Fast_GET_SIZE(seq) != n) {
        PyErr_Clear();
        invalid("%s: a sequence of %zd arrays (one per registered tensor, by id) expected, "
                "got %s of %zd", what, n, Py_TYPE(o)->tp_name,
                seq ? PySequence_Fast_GET_SIZE(seq) : (Py_ssize_t)-1);
        Py_XDECREF(seq);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        char label[200];
        snprintf(label, sizeof(label), "%s[%zd] (%s)", what, i,
                 PyUnicode_AsUTF8(PyList_GET_ITEM(self->names, i)));
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        long long numel = (long long)self->numel[i];
        if (writable ? arr_get_out(item, label, numel, self->bufs[i].params, &a[i])
                     : arr_get(item, label, want, 0, numel, &a[i])) {
            while (i-- > 0)
                arr_put(&a[i]);
            Py_DECREF(seq);
            return -1;
        }
        ptrs[i] = a[i].b.buf;
    }
    Py_DECREF(seq);
    return 0;
}

static PyObject *client_verify_local(struct client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "params", "version", NULL };
    PyObject *oparams, *over;
    struct tessera_local_audit au = { 0 };
    struct tessera_error e = { 0 };
    Py_ssize_t n;
    struct arr *a;
    void **ptrs;
    uint64_t version;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:verify_local", kwlist, &oparams, &over) ||
        open_or_raise(self) || get_step(over, "version", &version))
        return NULL;
    n = ntensors(self);
    a = PyMem_Calloc((size_t)n + 1, sizeof(*a));
    ptrs = PyMem_Calloc((size_t)n + 1, sizeof(*ptrs));
    if (!a || !ptrs) {
        PyMem_Free(a);
        PyMem_Free(ptrs);
        return PyErr_NoMemory();
    }
    rc = get_all(self, oparams, "params", F32, 0, a, ptrs);
    if (!rc) {
        SDK_CALL(self, rc, &e, tessera_verify_local(self->t, (float *const *)ptrs, version,
                                                    &au, &e));
        for (Py_ssize_t i = 0; i < n; i++)
            arr_put(&a[i]);
        if (rc)
            raise_sdk(&e);
    }
    PyMem_Free(a);
    PyMem_Free(ptrs);
    if (rc)
        return NULL;
    return Py_BuildValue("{s:K,s:K,s:K,s:i,s:O,s:K,s:d,s:d}", "elements",
                         (unsigned long long)au.elements, "differing",
                         (unsigned long long)au.differing, "max_ulp",
                         (unsigned long long)au.max_ulp, "first_tensor", au.first_tensor,
                         "first_name", au.first_tensor >= 0 && au.first_tensor < n ?
                         PyList_GET_ITEM(self->names, au.first_tensor) : Py_None,
                         "first_index", (unsigned long long)au.first_index,
                         "first_local", (double)au.first_local,
                         "first_shard", (double)au.first_shard);
}

/* buffers(id, params=True, grad=True) -> (params, grad): tessera_buffers as NumPy arrays over
 * the SDK's own pages (buffers.h), None for one not asked for. The same memory at every call:
 * the SDK makes it once per tensor and keeps it until tessera_close. */
static PyObject *client_buffers(struct client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "id", "params", "grad", NULL };
    struct tessera_error e = { 0 };
    PyObject *oid, *p = NULL, *g = NULL, *ret = NULL;
    const float *params = NULL;
    void *grad = NULL;
    int want_p = 1, want_g = 1, id, rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|pp:buffers", kwlist, &oid, &want_p,
                                     &want_g) ||
        open_or_raise(self) || get_id(self, oid, "id", &id))
        return NULL;
    SDK_CALL(self, rc, &e, tessera_buffers(self->t, id, want_p ? &params : NULL,
                                           want_g ? &grad : NULL, &e));
    if (rc)
        return raise_sdk(&e);
    if (params)
        self->bufs[id].params = params;
    if (grad)
        self->bufs[id].grad = grad;
    /* Made only now, with the GIL: a close() that ran meanwhile makes client_hold refuse. */
    p = !params ? Py_NewRef(Py_None)
                : buffer_array((PyObject *)self, &client_buf_ops, (void *)params,
                               (Py_ssize_t)self->numel[id], F32, 1);
    if (p)
        g = !grad ? Py_NewRef(Py_None)
                  : buffer_array((PyObject *)self, &client_buf_ops, grad,
                                 (Py_ssize_t)self->numel[id], self->push_elem, 0);
    if (g)
        ret = PyTuple_Pack(2, p, g);
    Py_XDECREF(p);
    Py_XDECREF(g);
    return ret;
}

static PyObject *client_numel(struct client *self, PyObject *oid)
{
    int id;

    if (open_or_raise(self) || get_id(self, oid, "id", &id))
        return NULL;
    return PyLong_FromUnsignedLongLong(self->numel[id]);
}

/* fn(t, id) of tensor oid, an SDK call like any other (under the handle's lock). */
static PyObject *tensor_u64(struct client *self, PyObject *oid,
                            uint64_t (*fn)(const tessera *, int))
{
    struct tessera_error e = { 0 };
    uint64_t v = 0;
    int id, rc;

    if (open_or_raise(self) || get_id(self, oid, "id", &id))
        return NULL;
    SDK_CALL(self, rc, &e, (v = fn(self->t, id), 0));
    return rc ? raise_sdk(&e) : PyLong_FromUnsignedLongLong(v);
}

static PyObject *client_partition_bytes(struct client *self, PyObject *oid)
{
    return tensor_u64(self, oid, tessera_partition_bytes);
}

static PyObject *client_version(struct client *self, PyObject *oid)
{
    return tensor_u64(self, oid, tessera_version);
}

static PyObject *client_stats(struct client *self, PyObject *unused)
{
    struct tessera_stats s = { 0 };
    struct tessera_error e = { 0 };
    int rc;

    SDK_CALL(self, rc, &e, (tessera_stats(self->t, &s), 0));
    if (rc)
        return raise_sdk(&e);
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:K,s:K,s:K}", "steps",
                         (unsigned long long)s.steps, "steps_skipped",
                         (unsigned long long)s.steps_skipped, "staleness_last",
                         (unsigned long long)s.staleness_last, "staleness_max",
                         (unsigned long long)s.staleness_max, "bytes_pushed",
                         (unsigned long long)s.bytes_pushed, "bytes_raw",
                         (unsigned long long)s.bytes_raw, "loss_scale", (double)s.loss_scale,
                         "failovers", (unsigned long long)s.failovers, "bytes_pulled",
                         (unsigned long long)s.bytes_pulled, "bytes_pulled_raw",
                         (unsigned long long)s.bytes_pulled_raw);
}

static PyObject *client_report_progress(struct client *self, PyObject *args, PyObject *kw)
{
    static char *names[] = { "loss", "accuracy", "samples_per_s", NULL };
    struct tessera_progress p = { .accuracy = Py_NAN, .samples_per_s = Py_NAN };
    struct tessera_error e = { 0 };
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "d|dd", names, &p.loss, &p.accuracy,
                                     &p.samples_per_s))
        return NULL;
    SDK_CALL(self, rc, &e, (tessera_report_progress(self->t, &p), 0));
    if (rc)
        return raise_sdk(&e);
    Py_RETURN_NONE;
}

static PyObject *client_get_transport(struct client *self, void *unused)
{
    struct tessera_error e = { 0 };
    const char *name = NULL;
    int rc;

    SDK_CALL(self, rc, &e, (name = tessera_transport(self->t), 0));
    return rc ? raise_sdk(&e) : PyUnicode_FromString(name);
}

static PyObject *client_get_worker_id(struct client *self, void *unused)
{
    struct tessera_error e = { 0 };
    uint32_t id = 0;
    int rc;

    SDK_CALL(self, rc, &e, (id = tessera_worker_id(self->t), 0));
    return rc ? raise_sdk(&e) : PyLong_FromUnsignedLong(id);
}

static PyObject *client_get_loss_scale(struct client *self, void *unused)
{
    struct tessera_error e = { 0 };
    float v = 1.0f;
    int rc;

    SDK_CALL(self, rc, &e, (v = tessera_loss_scale(self->t), 0));
    return rc ? raise_sdk(&e) : PyFloat_FromDouble(v);
}

static PyObject *client_get_resume_step(struct client *self, void *unused)
{
    struct tessera_error e = { 0 };
    uint64_t v = 0;
    int rc;

    SDK_CALL(self, rc, &e, (v = tessera_resume_step(self->t), 0));
    return rc ? raise_sdk(&e) : PyLong_FromUnsignedLongLong(v);
}

static PyObject *client_get_exact(struct client *self, void *unused)
{
    return PyBool_FromLong(self->exact);
}

static PyObject *client_get_elastic(struct client *self, void *unused)
{
    return PyBool_FromLong(self->elastic);
}

static PyObject *client_get_exact_push(struct client *self, void *unused)
{
    return PyUnicode_FromString(self->exact && self->push_elem == F32 ? "float" : "fixed");
}

static PyObject *client_get_tensors(struct client *self, void *unused)
{
    return PyList_AsTuple(self->names);
}

static PyObject *client_get_closed(struct client *self, void *unused)
{
    return PyBool_FromLong(self->t == NULL || self->closed);
}

#define KW (PyCFunction)(void (*)(void))

static PyMethodDef client_methods[] = {
    { "register", KW client_register, METH_VARARGS | METH_KEYWORDS,
      "register(name, shape, init='zeros', seed=0, fan_in=0, fan_out=0, partition_bytes=0)"
      " -> id\n\nRegisters a float32 tensor (every rank registers the same tensors in the "
      "same order);\nthe shards initialise it from (init, seed, name). Returns its id." },
    { "push", KW client_push, METH_VARARGS | METH_KEYWORDS,
      "push(id, step, grad)\n\nThis rank's gradient SUM of tensor id for `step`: float32, "
      "or int64 fixed point\nin exact mode (see to_fixed; float32 with exact_push='float'), "
      "numel elements,\nC-contiguous." },
    { "pull", KW client_pull, METH_VARARGS | METH_KEYWORDS,
      "pull(id, version, out) -> out\n\nWrites the parameters of tensor id at `version` "
      "into out (writable float32,\nC-contiguous, numel elements), waiting for that version."
      },
    { "step", KW client_step, METH_VARARGS | METH_KEYWORDS,
      "step(step, grads, params, clip_norm=None)\n\nPushes grads[id] of every registered "
      "tensor for `step`, then pulls version\nstep + 1 into params[id]; the shards work in "
      "parallel. clip_norm: the averaged\ngradient is clipped to that global norm (torch's "
      "clip_grad_norm_ of DDP's),\nand step returns the norm before clipping "
      "(tessera_step_clip); else None." },
    { "assign", KW client_assign, METH_VARARGS | METH_KEYWORDS,
      "assign(id, values=None, state=None, updates=None)\n\nMakes the next push of tensor id (push, step, push_some, "
      "step_some) an\nassignment: version step + 1 is `values` (float32, numel elements), not "
      "an\noptimizer update (state=: the optimizer's state too, pull_state's layout, copied; "
      "updates=:\nwith state, the optimizer update count it was accumulated over, pull_state's "
      "return_updates,\nwhich the tensor takes: its next update is updates + 1, Adam's t; "
      "without, the count stays\nthe tensor's own). Every rank assigns at the same step, one with values (rank 0\nby "
      "convention), the others with None; None everywhere keeps the values as they\nwere. The "
      "step's grads[id] is not read. bsp only (UNIMPLEMENTED otherwise).\nvalues is held, and "
      "must not change, until that push returns." },
    { "pull_state", KW client_pull_state, METH_VARARGS | METH_KEYWORDS,
      "pull_state(id, version, out, return_updates=False) -> out, or (out, updates)\n\nThe "
      "optimizer's state of tensor id at `version` (the one this rank holds)\ninto out (float32, "
      "writable, state floats per element x numel: each\ncomponent in turn, momentum 1, adam 2, "
      "sgd none). With return_updates, also the\ntensor's optimizer update count at that version "
      "(the updates applied to that\nstate; assignments not counted), for assign(updates=). "
      "bsp only." },
    { "set_lr", KW client_set_lr, METH_VARARGS | METH_KEYWORDS,
      "set_lr(id, lr, weight_decay=True)\n\nFrom the next push on, tensor id's updates (id "
      "None: every tensor's) use\nlearning rate lr (0: the job optimizer's) and weight decay "
      "only if weight_decay.\nThe values travel with each push: every rank sets the same "
      "before the same step." },
    { "push_some", KW client_push_some, METH_VARARGS | METH_KEYWORDS,
      "push_some(step, ids, grads, params=None)\n\nPushes grads[k] as tensor ids[k]'s "
      "gradient for `step` (ids ascending), one\nexchange; params (one array per tensor, by "
      "id) receive a rollback's values." },
    { "pull_some", KW client_pull_some, METH_VARARGS | METH_KEYWORDS,
      "pull_some(version, ids, params)\n\nPulls tensors ids (ascending) at `version` into "
      "params[id] (one array per\ntensor, by id), one exchange. With push_some: "
      "tessera_step in pieces." },
    { "step_some", KW client_step_some, METH_VARARGS | METH_KEYWORDS,
      "step_some(step, ids, grads, params)\n\npush_some and then pull_some of version step + "
      "1 in one exchange (each\npartition's pull right behind its push)." },
    { "register_table", KW client_register_table, METH_VARARGS | METH_KEYWORDS,
      "register_table(name, dim, max_id, init=None, seed=0, optimizer=None,\n"
      "               ttl_steps=0, ttl_seconds=0) -> int\n\n"
      "Registers a sparse embedding table (docs/embeddings.md): rows of dim floats,\nids "
      "0..max_id, made on the shards when a push first touches them; init\n(normal:0.01) "
      "gives a row's first values, optimizer (sgd, adagrad, adam;\nNone: the job's) its "
      "updates. ttl_steps > 0: a row no step updated in that many steps is\ndropped (made "
      "again from init when touched); ttl_seconds > 0 instead: one not updated\nin that "
      "many seconds (jobs that are not exact). Every rank registers the\nsame tables in "
      "the same order. Returns the table's handle." },
    { "pull_rows", KW client_pull_rows, METH_VARARGS | METH_KEYWORDS,
      "pull_rows(table, version, ids, out)\n\nThe rows of ids (int64, any order, repeats "
      "allowed) at `version` into out\n(float32, len(ids) x dim, written in place)." },
    { "prefetch_rows", KW client_prefetch_rows, METH_VARARGS | METH_KEYWORDS,
      "prefetch_rows(table, ids)\n\nA hint: ids (int64) will be pulled soon (the next "
      "batch); shards with a\ndisk tier read those rows into memory meanwhile. Returns at "
      "once." },
    { "push_rows", KW client_push_rows, METH_VARARGS | METH_KEYWORDS,
      "push_rows(table, step, ids, grads, slot=None)\n\nThis rank's gradients of `step`: "
      "grads (float32, len(ids) x dim) row i for\nids[i] at input position i; repeats are "
      "summed by the SDK (exactly, in exact\nmode). Every rank pushes every table every step, "
      "with no ids if none. An elastic\njob's worker pushes each slot it owns (slots()) as "
      "that slot: the gradients of\nthat slot's samples alone." },
    { "table_sha256", KW client_table_sha256, METH_VARARGS | METH_KEYWORDS,
      "table_sha256(table, version) -> str\n\nThe table's fingerprint at `version` over "
      "every row that exists, on every\nshard, in ascending id (docs/embeddings.md)." },
    { "table_version", (PyCFunction)client_table_version, METH_O,
      "table_version(table) -> int\n\nThe step the table was at when registered: 0 for a "
      "fresh job, the snapshot's\nstep when the shards restored one; training continues "
      "from it." },
    { "table_rows", KW client_table_rows, METH_VARARGS | METH_KEYWORDS,
      "table_rows(table, version) -> int\n\nThe rows the table has at `version`, over "
      "every shard." },
    { "claim_work", KW client_claim_work, METH_VARARGS | METH_KEYWORDS,
      "claim_work(step, want, units) -> dict\n\nDynamic assignment (asp, or ssp with "
      "dynamic=True): up to want (0..256) of the\njob's `units` units from the master's "
      "queue, at this worker's clock `step`.\nfirst, step, count, units, done, outstanding, "
      "lost, retry, pull: the grant is\nunits first .. first + count - 1, to push as steps "
      "step .. step + count - 1;\ncount 0: none left. tessera.Error (UNIMPLEMENTED) in "
      "another mode." },
    { "next_task", (PyCFunction)client_next_task, METH_NOARGS,
      "next_task() -> None or dict\n\nA priority task the master handed this worker (each "
      "once): {'id': int,\n'kind': 'evaluate'}; None if none (always with master 'local'). "
      "Run it at a\nstep boundary and report it with task_done." },
    { "task_done", KW client_task_done, METH_VARARGS | METH_KEYWORDS,
      "task_done(id, step, accuracy=None, loss=None, fingerprint=None, failed=False,\n"
      "          error=None)\n\nReports task id, run on the parameters of version `step`, "
      "to the master with\nthe next heartbeats: accuracy (0..1) and loss (finite, >= 0) "
      "required unless\nfailed, fingerprint their params_sha256 (64 lowercase hex digits) or "
      "None;\nfailed=True with error saying why. Bad values raise InvalidArgument." },
    { "verify_local", KW client_verify_local, METH_VARARGS | METH_KEYWORDS,
      "verify_local(params, version) -> dict\n\nCompares params[id] bit for bit with the "
      "shards' tensors at `version`." },
    { "buffers", KW client_buffers, METH_VARARGS | METH_KEYWORDS,
      "buffers(id, params=True, grad=True) -> (params, grad)\n\nThe SDK's zero-copy buffers of"
      " tensor id (tessera_buffers), as NumPy arrays over\nits own memory, the same at every "
      "call: params, read-only float32 (on one host\nthe shard's own pages, which change in "
      "place when a step completes: read them\nbetween a step's return and the next push), to "
      "pass as the out of pull / step;\ngrad, writable (float32, int64 in exact mode unless "
      "exact_push is 'float'), to fill "
      "and pass to push / step,\nwhich shards on this host then read in place. None for one "
      "not asked for.\nThe arrays keep the Client alive; close() waits for the last of them "
      "before\nthe SDK frees the memory (docs/python.md)." },
    { "numel", (PyCFunction)client_numel, METH_O, "numel(id) -> int: elements of tensor id" },
    { "partition_bytes", (PyCFunction)client_partition_bytes, METH_O,
      "partition_bytes(id) -> int: the size tensor id is cut in (register's, or the\n"
      "tensor's where register left it to the SDK; docs/placement.md)" },
    { "version", (PyCFunction)client_version, METH_O,
      "version(id) -> int: the version tensor id was at when registered (restored: > 0)" },
    { "stats", (PyCFunction)client_stats, METH_NOARGS,
      "stats() -> dict: steps, steps_skipped, staleness_last, staleness_max, bytes_pushed,\n"
      "bytes_raw, loss_scale, failovers, bytes_pulled, bytes_pulled_raw" },
    { "report_progress", KW client_report_progress, METH_VARARGS | METH_KEYWORDS,
      "report_progress(loss, accuracy=nan, samples_per_s=nan): training progress for the\n"
      "master's status page, sent with the next heartbeats (rank 0's is plotted)" },
    { "set_result", (PyCFunction)client_set_result, METH_VARARGS,
      "set_result(failed, text=None): how this worker's part of the job ended, told to the\n"
      "master at close: failed False with the final params_sha256, or True with a reason.\n"
      "Leaving a with-block on an exception sets it to failed." },
    { "serve_metrics", KW client_serve_metrics, METH_VARARGS | METH_KEYWORDS,
      "serve_metrics(port=0, host=None) -> port\n\nServes this client's figures at "
      "http://HOST:PORT/metrics for Prometheus (host None:\n127.0.0.1; port 0: a free one, "
      "returned); stopped by close()" },
    { "slots", (PyCFunction)client_slots, METH_NOARGS,
      "slots() -> [int]: the slots this worker computes now (elastic=True; docs/elastic.md);\n"
      "its rank's alone unless workers died" },
    { "step_slots", KW client_step_slots, METH_VARARGS | METH_KEYWORDS,
      "step_slots(step, slots, grads, params)\n\nstep() for several slots: grads[k] (one "
      "array per tensor) is slot slots[k]'s\ngradient. Raises tessera.Slots when the slots "
      "changed hands: params then hold\nthe values of resume_step; compute slots() for it and "
      "step again." },
    { "join", (PyCFunction)client_join, METH_O,
      "join(params) -> step: an elastic job under way, every tensor at its newest version,\n"
      "into params; the step to train next (a worker that joins or comes back starts so)" },
    { "elastic_recover", KW client_elastic_recover, METH_VARARGS | METH_KEYWORDS,
      "elastic_recover(step, params) -> step: after a table call (pull_rows, push_rows) of\n"
      "step raised tessera.Slots, params holding step's values: asks the master for this\n"
      "worker's slots and finds the step to go on from (the same one, params kept; or, for a\n"
      "worker the job went on without, a later one, pulled into params); returns it\n"
      "(resume_step). step_slots() does this itself before it raises tessera.Slots." },
    { "close", (PyCFunction)client_close, METH_NOARGS,
      "close(): leaves the cluster and frees the handle (idempotent)" },
    { "__enter__", (PyCFunction)client_enter, METH_NOARGS, NULL },
    { "__exit__", (PyCFunction)client_exit, METH_VARARGS, NULL },
    { NULL, NULL, 0, NULL },
};

static PyGetSetDef client_getset[] = {
    { "transport", (getter)client_get_transport, NULL,
      "the data-plane transport in use: 'tcp', 'shm' or 'local'", NULL },
    { "worker_id", (getter)client_get_worker_id, NULL, "the worker id the master gave this "
      "worker (tessera status lists it; 0 with master 'local'); a new one if it registers "
      "again", NULL },
    { "loss_scale", (getter)client_get_loss_scale, NULL,
      "the current loss scale (1.0 without loss scaling)", NULL },
    { "resume_step", (getter)client_get_resume_step, NULL,
      "the step the last rollback went back to (0: none): after step() raised "
      "tessera.Rollback, params hold that step's values; train on from it", NULL },
    { "exact", (getter)client_get_exact, NULL, "True in exact (fixed-point) mode", NULL },
    { "elastic", (getter)client_get_elastic, NULL, "True in an elastic job (elastic=True: "
      "slots, step_slots, elastic_recover)", NULL },
    { "exact_push", (getter)client_get_exact_push, NULL, "exact mode's pushes: 'fixed' "
      "(int64) or 'float' (the shards round them)", NULL },
    { "tensors", (getter)client_get_tensors, NULL, "the registered names, by id", NULL },
    { "closed", (getter)client_get_closed, NULL, "True once close() ran", NULL },
    { "master", (getter)client_get_where, NULL, "the master address, or 'local'", (void *)0 },
    { "job", (getter)client_get_where, NULL, "the job id", (void *)1 },
    { "rank", (getter)client_get_where, NULL, "this worker's rank", (void *)2 },
    { "workers", (getter)client_get_where, NULL, "the workers of the job", (void *)3 },
    { NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject client_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tessera.Client",
    .tp_basicsize = sizeof(struct client),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Client(master='local', job='default', rank=0, workers=1, exact=False,\n"
              "       optimizer='momentum', batch=..., transport=None, timeout_ms=0,\n"
              "       data_seed=0, micro_batch=0, mode='bsp', staleness=0, compress=None,\n"
              "       sync_every=None, loss_scale='none', keep=False,\n"
              "       exact_push='fixed', compress_pull=None, dynamic=False)\n\n"
              "A connection to a Tessera cluster (tessera_connect); master 'local' runs the\n"
              "shards' code in this process. Use as a context manager or call close().",
    .tp_new = client_new,
    .tp_init = (initproc)client_init,
    .tp_dealloc = (destructor)client_dealloc,
    .tp_methods = client_methods,
    .tp_getset = client_getset,
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "tessera._tessera",
    "The C binding of include/tessera.h; import tessera, not this.", -1, fixed_methods,
    NULL, NULL, NULL, NULL,
};

static PyObject *new_error(const char *name, const char *doc, PyObject *bases)
{
    PyObject *dict = Py_BuildValue("{s:O,s:O,s:O,s:O}", "code", Py_None, "grpc_code", Py_None,
                                   "message", Py_None, "tessera_code", Py_None);
    PyObject *cls = dict ? PyErr_NewExceptionWithDoc(name, doc, bases, dict) : NULL;

    Py_XDECREF(dict);
    return cls;
}

PyMODINIT_FUNC PyInit__tessera(void)
{
    PyObject *m = PyModule_Create(&module_def), *bases = NULL;

    if (!m || PyType_Ready(&client_type) < 0 || buffers_ready() < 0 ||
        PyModule_AddFunctions(m, snapshot_methods) || PyModule_AddFunctions(m, launch_methods))
        goto fail;
#ifdef TESSERA_IN_TREE   /* the click-log generator is lib/data's, not the installed SDK's */
    if (PyModule_AddFunctions(m, ctr_methods))
        goto fail;
#endif
    Error = new_error("tessera.Error", "A Tessera call failed. .code: the gRPC status name "
                      "(INVALID_ARGUMENT, NOT_FOUND, ...),\n.grpc_code: its number, .message: "
                      "the SDK's message.", PyExc_Exception);
    bases = Error ? PyTuple_Pack(2, Error, PyExc_ValueError) : NULL;
    InvalidArgument = bases ? new_error("tessera.InvalidArgument", "Bad input (code "
                                        "INVALID_ARGUMENT): nothing was sent or changed.",
                                        bases) : NULL;
    Py_XDECREF(bases);
    Rollback = InvalidArgument ? new_error("tessera.Rollback", "step(): the job lost every "
                                           "copy of a partition and the cluster took it back "
                                           "to its last snapshot. params hold that step's "
                                           "values; train on from Client.resume_step.",
                                           Error) : NULL;
    Slots = Rollback ? new_error("tessera.Slots", "step_slots(), step() of an elastic job: its "
                                 "slots changed hands (a worker died or came back). params "
                                 "hold the values of Client.resume_step: compute the slots "
                                 "Client.slots() names for it and step again.", Error) : NULL;
    if (!Slots || PyModule_AddObjectRef(m, "Error", Error) ||
        PyModule_AddObjectRef(m, "InvalidArgument", InvalidArgument) ||
        PyModule_AddObjectRef(m, "Rollback", Rollback) ||
        PyModule_AddObjectRef(m, "Slots", Slots) ||
        PyModule_AddObjectRef(m, "Client", (PyObject *)&client_type) ||
        PyModule_AddIntConstant(m, "LOSS_SCALE_NONE", TESSERA_LOSS_SCALE_NONE) ||
        PyModule_AddIntConstant(m, "LOSS_SCALE_SDK", TESSERA_LOSS_SCALE_SDK) ||
        PyModule_AddIntConstant(m, "LOSS_SCALE_CALLER", TESSERA_LOSS_SCALE_CALLER))
        goto fail;
    return m;
fail:
    Py_XDECREF(m);
    return NULL;
}
