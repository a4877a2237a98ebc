/* buffers.h - NumPy arrays over memory the SDK owns (tessera_buffers), for Client.buffers.
 *
 * tessera_buffers hands out pages that live until tessera_close unmaps them: a tensor's
 * parameters (on one host, partly the shard's own pages, mapped read-only) and its gradient
 * buffer (a region the shards on this host read in place). A Python array over them must never
 * outlive them, or reading it faults and takes the interpreter down. So each array is made from
 * an exporter object that holds a reference to its owner (the Client) and counts itself as a
 * live export with the owner (ops->hold at each export, ops->drop at its release): the owner
 * stays allocated while any array exists, and its close() can see the count and leave the
 * pages mapped until it falls to zero (_tessera.c, client_close_handle).
 *
 * The array's base is a memoryview of the exporter; every NumPy view or torch.from_numpy
 * tensor made from the array keeps that base alive, so the count covers them too.
 * Threads: called with the GIL held; hold and drop run with it. */
#ifndef TS_PY_BUFFERS_H
#define TS_PY_BUFFERS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "args.h"

struct buf_owner_ops {
    /* A new export of memory of owner: 0, or -1 with an exception set (the owner is closed
     * and the memory may be gone: no new array may see it). */
    int (*hold)(PyObject *owner);
    /* That export was released. May close the owner (the last export of a closed one). */
    void (*drop)(PyObject *owner);
};

/* Readies the exporter type (once, at import). 0, or -1 with an exception. */
int buffers_ready(void);

/* A 1-d NumPy array of n items of e at ptr, without a copy: read-only if readonly (NumPy then
 * refuses to make it writable). It keeps owner alive; ops->hold is called once now. New
 * reference, or NULL with an exception. */
PyObject *buffer_array(PyObject *owner, const struct buf_owner_ops *ops, void *ptr,
                       Py_ssize_t n, enum elem e, int readonly);

#endif
