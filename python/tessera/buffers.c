/* buffers.c - see buffers.h. One exporter object per array: the buffer protocol over memory
 * that is not Python's, with the owner's export count kept by hold/drop. */
#include "buffers.h"

struct exporter {
    PyObject_HEAD
    PyObject *owner;                    /* strong: the memory lives as long as it */
    const struct buf_owner_ops *ops;
    void *ptr;
    Py_ssize_t n, itemsize;             /* n is the shape, itemsize the stride */
    const char *format;                 /* "f" or "q" */
    int readonly;
};

static int exporter_getbuffer(struct exporter *self, Py_buffer *view, int flags)
{
    if (!view) {
        PyErr_SetString(PyExc_BufferError, "tessera buffer: a view is required");
        return -1;
    }
    if ((flags & PyBUF_WRITABLE) == PyBUF_WRITABLE && self->readonly) {
        PyErr_SetString(PyExc_BufferError, "tessera buffer: the parameters are read-only (on "
                        "one host, the shard's own pages): pull into them, never write them");
        return -1;
    }
    if (self->ops->hold(self->owner))
        return -1;
    view->obj = Py_NewRef(self);
    view->buf = self->ptr;
    view->len = self->n * self->itemsize;
    view->readonly = self->readonly;
    view->itemsize = self->itemsize;
    view->format = (flags & PyBUF_FORMAT) == PyBUF_FORMAT ? (char *)self->format : NULL;
    view->ndim = 1;
    view->shape = (flags & PyBUF_ND) == PyBUF_ND ? &self->n : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? &self->itemsize : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    return 0;
}

static void exporter_releasebuffer(struct exporter *self, Py_buffer *view)
{
    self->ops->drop(self->owner);
}

static void exporter_dealloc(struct exporter *self)
{
    Py_XDECREF(self->owner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyBufferProcs exporter_as_buffer = {
    .bf_getbuffer = (getbufferproc)exporter_getbuffer,
    .bf_releasebuffer = (releasebufferproc)exporter_releasebuffer,
};

static PyTypeObject exporter_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tessera.Buffer",
    .tp_basicsize = sizeof(struct exporter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory of a tessera.Client (Client.buffers), exported to NumPy without a copy;"
              " it keeps the Client alive.",
    .tp_dealloc = (destructor)exporter_dealloc,
    .tp_as_buffer = &exporter_as_buffer,
};

int buffers_ready(void)
{
    return PyType_Ready(&exporter_type);
}

PyObject *buffer_array(PyObject *owner, const struct buf_owner_ops *ops, void *ptr,
                       Py_ssize_t n, enum elem e, int readonly)
{
    struct exporter *x = PyObject_New(struct exporter, &exporter_type);
    PyObject *np, *mv, *arr = NULL;

    if (!x)
        return NULL;
    x->owner = Py_NewRef(owner);
    x->ops = ops;
    x->ptr = ptr;
    x->n = n;
    x->itemsize = e == F32 ? 4 : 8;
    x->format = e == F32 ? "f" : "q";
    x->readonly = readonly;
    /* One export, taken here rather than by numpy.asarray(x), which would turn a refused
     * export (a closed owner) into a 0-d object array; the array's base keeps the memoryview's
     * buffer, released when the last array or view over it is freed. */
    mv = PyMemoryView_FromObject((PyObject *)x);
    Py_DECREF(x);
    if (!mv)
        return NULL;
    np = PyImport_ImportModule("numpy");
    if (np)
        arr = PyObject_CallMethod(np, "asarray", "O", mv);
    Py_XDECREF(np);
    Py_DECREF(mv);
    return arr;
}
