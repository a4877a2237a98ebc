/* fixed.c - the binding's exact-mode helpers (module functions of tessera._tessera):
 * to_fixed, fixed_add and fixed_add_f32, over NumPy arrays or CPU torch tensors without a copy.
 * The table is the module's methods (_tessera.c). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdio.h>

#include "args.h"
#include "tessera.h"

/* dst (int64, written) and src (kind) of the same length: out = fixed(g) (to_fixed),
 * acc += fixed(g) (fixed_add_f32) or acc += x (fixed_add). */
static PyObject *fixed_call(const char *fn, PyObject *odst, const char *dname, PyObject *osrc,
                            const char *sname, enum elem kind)
{
    struct tessera_error e = { 0 };
    struct arr src, dst;
    char what[64];
    size_t n;
    int rc;

    snprintf(what, sizeof(what), "%s: %s", fn, sname);
    if (arr_get(osrc, what, kind, 0, -1, &src))
        return NULL;
    n = (size_t)(src.b.len / src.b.itemsize);
    snprintf(what, sizeof(what), "%s: %s", fn, dname);
    if (arr_get(odst, what, I64, 1, (long long)n, &dst)) {
        arr_put(&src);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (kind == I64)
        rc = tessera_fixed_add(dst.b.buf, src.b.buf, n, &e);
    else if (fn[0] == 't')
        rc = tessera_to_fixed(src.b.buf, n, dst.b.buf, &e);
    else
        rc = tessera_fixed_add_f32(dst.b.buf, src.b.buf, n, &e);
    Py_END_ALLOW_THREADS
    arr_put(&src);
    arr_put(&dst);
    if (rc)
        return raise_sdk(&e);
    return Py_NewRef(odst);
}

static PyObject *mod_to_fixed(PyObject *m, PyObject *args)
{
    PyObject *src, *out;

    if (!PyArg_ParseTuple(args, "OO:to_fixed", &src, &out))
        return NULL;
    return fixed_call("to_fixed", out, "out", src, "src", F32);
}

static PyObject *mod_fixed_add(PyObject *m, PyObject *args)
{
    PyObject *acc, *x;

    if (!PyArg_ParseTuple(args, "OO:fixed_add", &acc, &x))
        return NULL;
    return fixed_call("fixed_add", acc, "acc", x, "x", I64);
}

static PyObject *mod_fixed_add_f32(PyObject *m, PyObject *args)
{
    PyObject *acc, *g;

    if (!PyArg_ParseTuple(args, "OO:fixed_add_f32", &acc, &g))
        return NULL;
    return fixed_call("fixed_add_f32", acc, "acc", g, "g", F32);
}

PyMethodDef fixed_methods[] = {
    { "to_fixed", mod_to_fixed, METH_VARARGS,
      "to_fixed(src, out) -> out\n\nout = fixed(src): float32 -> int64 with 32 fraction bits, "
      "round half to even.\nA NaN, Inf or |value| >= 2^31 raises InvalidArgument and leaves "
      "out unchanged." },
    { "fixed_add", mod_fixed_add, METH_VARARGS,
      "fixed_add(acc, x) -> acc\n\nacc += x (int64 fixed point, overflow-checked: a sum out of"
      " range raises\nInvalidArgument and leaves acc unchanged)." },
    { "fixed_add_f32", mod_fixed_add_f32, METH_VARARGS,
      "fixed_add_f32(acc, g) -> acc\n\nacc += fixed(g) in one pass: the fastest way to add one"
      " micro-batch's float32\ngradient to an exact-mode sum." },
    { NULL, NULL, 0, NULL },
};

