/* client.h - tessera.Client's object and the helpers its methods share, for _tessera.c,
 * step.c (step, and an elastic job's slots, step_slots, join), some.c (push_some, pull_some,
 * step_some: tessera_step in pieces, docs/python.md "Overlap"), work.c (claim_work,
 * next_task, task_done: the master's schedule, docs/scheduler.md), rows.c (sparse tables)
 * and launch.c (the launcher's environment, serve_metrics).
 * Threads: as _tessera.c says, the lock is held around every SDK call on t. */
#ifndef TS_PY_CLIENT_H
#define TS_PY_CLIENT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>

#include <stdio.h>

#include "args.h"
#include "tessera.h"

/* A tensor's tessera_buffers, once asked for (NULL before). */
struct bufs {
    const float *params;
    void *grad;
};

struct client {
    PyObject_HEAD
    tessera *t;
    PyThread_type_lock lock;   /* held around every SDK call on t */
    int exact;
    int elastic;               /* connected with elastic=True (rows.c refuses tables) */
    int state_len;             /* optimizer state floats per element (assign, pull_state) */
    enum elem push_elem;       /* what push / step / buffers' grad take: I64 in exact mode,
                                * unless exact_push is float */
    PyObject *names;           /* list: tensor id -> name */
    uint64_t *numel;           /* tensor id -> elements (PyMem; read without the SDK) */
    struct bufs *bufs;         /* tensor id -> its buffers (PyMem) */
    struct arr *assigned;      /* tensor id -> the values assign() armed, held until its push
                                * (assign.c; PyMem) */
    PyObject *keep;            /* list: owners of the option strings, alive as long as t */
    PyObject *where;           /* (master, job, rank, workers) as connected (launch.c) */
    /* Sparse tables (rows.c): each handle's row dim, the handles registered. */
    uint32_t table_dim[256];
    int ntables;
    /* Client.buffers' arrays (buffers.h). Read and written with the GIL held only: */
    Py_ssize_t exports;        /* arrays over the SDK's pages alive now */
    int closed;                /* close() began: no new export */
    tessera *deferred;         /* closed with exports alive: tessera_close at the last drop */
};

/* Runs expr (an SDK call on self->t) under the client's lock with the GIL released; a client
 * closed meanwhile (by another thread) gives TESSERA_ESTATE. */
#define SDK_CALL(self, rc, e, expr)                                                         \
    do {                                                                                    \
        Py_BEGIN_ALLOW_THREADS                                                              \
        PyThread_acquire_lock((self)->lock, WAIT_LOCK);                                     \
        if ((self)->t) {                                                                    \
            (rc) = (expr);                                                                  \
        } else {                                                                            \
            (rc) = (e)->code = TESSERA_ESTATE;                                              \
            snprintf((e)->message, sizeof((e)->message), "the client is closed");           \
        }                                                                                   \
        PyThread_release_lock((self)->lock);                                                \
        Py_END_ALLOW_THREADS                                                                \
    } while (0)

/* Raises ESTATE unless the client is open; -1 then. */
int open_or_raise(struct client *self);
Py_ssize_t ntensors(const struct client *self);
/* A registered tensor id from o; raises InvalidArgument otherwise. */
int get_id(struct client *self, PyObject *o, const char *what, int *id);
/* One array per registered tensor, by id, from the sequence o (a[], ptrs[]: ntensors each);
 * writable: outputs, where the tensors' read-only params from buffers() are accepted too. */
int get_all(struct client *self, PyObject *o, const char *what, enum elem want, int writable,
            struct arr *a, void **ptrs);

/* some.c: the methods. */
PyObject *client_push_some(struct client *self, PyObject *args, PyObject *kw);
PyObject *client_pull_some(struct client *self, PyObject *args, PyObject *kw);
PyObject *client_step_some(struct client *self, PyObject *args, PyObject *kw);

/* rows.c: the sparse tables' methods. */
PyObject *client_register_table(struct client *self, PyObject *args, PyObject *kw);
PyObject *client_pull_rows(struct client *self, PyObject *args, PyObject *kw);
PyObject *client_prefetch_rows(struct client *self, PyObject *args, PyObject *kw);
PyObject *client_push_rows(struct client *self, PyObject *args, PyObject *kw);
PyObject *client_table_sha256(struct client *self, PyObject *args, PyObject *kw);
PyObject *client_table_rows(struct client *self, PyObject *args, PyObject *kw);
PyObject *client_table_version(struct client *self, PyObject *arg);

/* assign.c: the method, and the release of what it holds once ids (NULL: every tensor; n of
 * them) were pushed. */
PyObject *client_assign(struct client *self, PyObject *args, PyObject *kw);
void assigned_release(struct client *self, const int *ids, Py_ssize_t n);
PyObject *client_set_lr(struct client *self, PyObject *args, PyObject *kw);
PyObject *client_pull_state(struct client *self, PyObject *args, PyObject *kw);

/* work.c: the methods. */
PyObject *client_claim_work(struct client *self, PyObject *args, PyObject *kw);
PyObject *client_next_task(struct client *self, PyObject *unused);
PyObject *client_task_done(struct client *self, PyObject *args, PyObject *kw);

/* step.c: the whole-step methods: step, and an elastic job's (docs/elastic.md). */
PyObject *client_step(struct client *self, PyObject *args, PyObject *kw);
PyObject *client_slots(struct client *self, PyObject *unused);
PyObject *client_step_slots(struct client *self, PyObject *args, PyObject *kw);
PyObject *client_join(struct client *self, PyObject *oparams);
PyObject *client_elastic_recover(struct client *self, PyObject *args, PyObject *kw);

/* launch.c: the (master, job, rank, workers) tuple of opt for client->where (NULL with an
 * exception set), and the getter of its item (intptr_t)closure: Client.master, .job, .rank,
 * .workers. */
PyObject *client_where(const struct tessera_options *opt);
PyObject *client_get_where(struct client *self, void *closure);
PyObject *client_serve_metrics(struct client *self, PyObject *args, PyObject *kw);

#endif
