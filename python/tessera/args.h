/* args.h - the binding's argument checks and errors (args.c), shared by _tessera.c.
 *
 * Everything a method takes from Python is checked here before any SDK call: arrays through
 * the buffer protocol (C-contiguous, the right item format and element count, writable where
 * the SDK writes), integers, strings and option lists; each refusal raises
 * tessera.InvalidArgument naming the argument. SDK failures become tessera.Error with the
 * gRPC status name. Ownership: an arr from arr_get holds a buffer (and maybe a torch .numpy()
 * view) until arr_put. */
#ifndef TS_PY_ARGS_H
#define TS_PY_ARGS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "tessera.h"

/* The module's functions, NULL-terminated: fixed.c's exact-mode helpers, snapshot.c's
 * snapshot_read and snapshot_import, launch.c's launch_env, ctr.c's CTR generator and
 * metrics. */
extern PyMethodDef fixed_methods[], snapshot_methods[], launch_methods[], ctr_methods[];

/* The module's exceptions, created at import (PyInit__tessera). */
extern PyObject *Error, *InvalidArgument, *Rollback, *Slots;

enum elem { F32, I64, F64 };   /* F64: only ctr.c's p_true */

struct arr {
    Py_buffer b;
    PyObject *view;   /* the .detach().numpy() of a torch tensor, or NULL */
    int held;
};

/* Raise tessera.Error (InvalidArgument for TESSERA_EINVAL, Rollback for TESSERA_EROLLBACK,
 * Slots for TESSERA_ESLOTS) for an SDK code and message, or for an SDK error; invalid() raises
 * InvalidArgument with a formatted message. All return NULL, for `return raise_...(...)`. */
PyObject *raise_code(int code, const char *msg);
PyObject *raise_sdk(const struct tessera_error *e);
PyObject *invalid(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Releases what arr_get took (a no-op if it holds nothing). */
void arr_put(struct arr *a);
/* Takes a view of o as a C-contiguous array of `numel` items of `want` (numel < 0: any count),
 * writable if asked. A torch tensor (no buffer protocol) is viewed through .detach().numpy(),
 * which shares its memory. On failure raises InvalidArgument naming `what` and returns -1. */
int arr_get(PyObject *o, const char *what, enum elem want, int writable, long long numel,
            struct arr *a);
/* arr_get for a float32 output (writable), where the read-only buffer at exactly `own` (may
 * be NULL) is accepted too: a tensor's params from tessera_buffers, which Python may not write
 * but the SDK's pulls do. */
int arr_get_out(PyObject *o, const char *what, long long numel, const float *own,
                struct arr *a);
/* An int in [0, max] (None: keeps *out). */
int get_uint(PyObject *o, const char *what, unsigned long long max, unsigned long long *out);
/* step or version: an int >= 0, required. */
int get_step(PyObject *o, const char *what, uint64_t *out);
/* shape: an int or a sequence of 1..8 ints. Returns ndim, or -1 with InvalidArgument. */
int get_shape(PyObject *o, uint64_t shape[8]);
/* A str without NUL bytes, or None (NULL). */
int get_str(PyObject *o, const char *what, const char **out);
/* compress / sync_every: a str, or a dict {tensor: value} made into "NAME=VALUE,..." (a key
 * None or "" gives a bare VALUE: compress's default codec). *keep owns the new string. */
int get_list(PyObject *o, const char *what, const char **out, PyObject **keep);
/* tessera.options(): Client's keywords as the SDK's schema has them, a list of dicts
 * (keyword, field, type, help; max for an int, choices for a choice), in the order positional
 * arguments take. */
PyObject *options_schema(PyObject *m, PyObject *noargs);
/* Client(...)'s arguments into *opt (its defaults already set), and what they leave out of
 * master, job, rank and workers from the launcher's environment (tessera_launch_env, read
 * into *env; master "local" when no variable names one). The objects *opt points into are
 * appended to keep; keep and env must outlive opt. -1 with the exception set on bad input. */
int get_options(PyObject *args, PyObject *kw, struct tessera_options *opt,
                struct tessera_launch *env, PyObject *keep);

#endif
