/* args.c - see args.h. */
#include "args.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

PyObject *Error, *InvalidArgument, *Rollback, *Slots;

/* ---- errors ---- */

PyObject *raise_code(int code, const char *msg)
{
    int grpc = tessera_grpc_code(code);
    PyObject *cls = grpc == tessera_grpc_code(TESSERA_EINVAL) ? InvalidArgument
                    : code == TESSERA_EROLLBACK                 ? Rollback
                    : code == TESSERA_ESLOTS                    ? Slots
                                                                : Error;
    PyObject *m = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
    PyObject *name = PyUnicode_FromString(tessera_grpc_code_name(grpc));
    PyObject *gc = PyLong_FromLong(grpc), *tc = PyLong_FromLong(code);
    PyObject *text = m && name ? PyUnicode_FromFormat("%U: %U", name, m) : NULL;
    PyObject *exc = text ? PyObject_CallOneArg(cls, text) : NULL;

    if (exc && gc && tc && !PyObject_SetAttrString(exc, "message", m) &&
        !PyObject_SetAttrString(exc, "code", name) &&
        !PyObject_SetAttrString(exc, "grpc_code", gc) &&
        !PyObject_SetAttrString(exc, "tessera_code", tc))
        PyErr_SetObject(cls, exc);
    Py_XDECREF(exc);
    Py_XDECREF(text);
    Py_XDECREF(tc);
    Py_XDECREF(gc);
    Py_XDECREF(name);
    Py_XDECREF(m);
    return NULL;
}

PyObject *raise_sdk(const struct tessera_error *e)
{
    /* A signal handler's exception (KeyboardInterrupt) that ended the call: it, not the SDK's
     * TESSERA_ECANCELLED, is what the caller sees (_tessera.c, interrupted). */
    if (e->code == TESSERA_ECANCELLED && PyErr_Occurred())
        return NULL;
    return raise_code(e->code ? e->code : TESSERA_EINTERNAL, e->message);
}

PyObject *invalid(const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return raise_code(TESSERA_EINVAL, msg);
}

/* The pending Python exception's text, for a message that wraps it (cleared). */
static void pending_text(char *buf, size_t cap)
{
    PyObject *type, *value, *tb, *s;
    const char *text;

    PyErr_Fetch(&type, &value, &tb);
    s = value ? PyObject_Str(value) : NULL;
    text = s ? PyUnicode_AsUTF8(s) : NULL;
    snprintf(buf, cap, "%s", text ? text : "unknown error");
    PyErr_Clear();
    Py_XDECREF(s);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

/* ---- arrays: the buffer protocol, checked ---- */



static const char *elem_name(enum elem e)
{
    return e == F32 ? "float32" : "int64";
}

/* The NumPy name of a buffer's items ("float32"), else a description of its format. */
static const char *format_name(const Py_buffer *b, char *buf, size_t cap)
{
    static const struct { char c; Py_ssize_t size; const char *name; } names[] = {
        { 'f', 4, "float32" }, { 'd', 8, "float64" }, { 'e', 2, "float16" },
        { 'q', 8, "int64" }, { 'l', 8, "int64" }, { 'i', 4, "int32" }, { 'l', 4, "int32" },
        { 'h', 2, "int16" }, { 'b', 1, "int8" }, { 'Q', 8, "uint64" }, { 'L', 8, "uint64" },
        { 'I', 4, "uint32" }, { 'H', 2, "uint16" }, { 'B', 1, "uint8" }, { '?', 1, "bool" },
    };
    const char *f = b->format ? b->format : "B";

    if (*f == '>' || *f == '!') {
        snprintf(buf, cap, "big-endian '%s'", f);
        return buf;
    }
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    for (size_t i = 0; f[0] && !f[1] && i < sizeof(names) / sizeof(names[0]); i++)
        if (names[i].c == f[0] && names[i].size == b->itemsize)
            return names[i].name;
    snprintf(buf, cap, "'%s' (item size %zd)", b->format ? b->format : "B", b->itemsize);
    return buf;
}

static int is_elem(const Py_buffer *b, enum elem e)
{
    char tmp[64];

    return strcmp(format_name(b, tmp, sizeof(tmp)), elem_name(e)) == 0;
}

/* "float64 array of 12 elements", "read-only non-contiguous float32 array of 12 elements". */
static void describe(const Py_buffer *b, char *out, size_t cap)
{
    char tmp[64];
    Py_ssize_t n = b->itemsize > 0 ? b->len / b->itemsize : 0;

    snprintf(out, cap, "%s%s%s array of %zd elements", b->readonly ? "read-only " : "",
             PyBuffer_IsContiguous(b, 'C') ? "" : "non-contiguous ",
             format_name(b, tmp, sizeof(tmp)), n);
}

void arr_put(struct arr *a)
{
    if (a->held)
        PyBuffer_Release(&a->b);
    Py_CLEAR(a->view);
    a->held = 0;
}

/* arr_get, and arr_get_out where own is the one read-only buffer accepted as writable. */
static int take(PyObject *o, const char *what, enum elem want, int writable, long long numel,
                const void *own, struct arr *a)
{
    char got[160], exp[160], why[200];
    int bad;

    memset(a, 0, sizeof(*a));
    snprintf(exp, sizeof(exp), "%s%s array of %lld elements",
             writable ? "writable C-contiguous " : "C-contiguous ", elem_name(want), numel);
    if (numel < 0)
        snprintf(exp, sizeof(exp), "%s%s array", writable ? "writable C-contiguous " :
                 "C-contiguous ", elem_name(want));
    if (!PyObject_CheckBuffer(o) && PyObject_HasAttrString(o, "detach") &&
        PyObject_HasAttrString(o, "numpy")) {
        a->view = PyObject_CallMethod(o, "detach", NULL);
        if (a->view)
            Py_SETREF(a->view, PyObject_CallMethod(a->view, "numpy", NULL));
        if (!a->view) {
            pending_text(why, sizeof(why));
            invalid("%s: %s expected; the tensor has no NumPy view (%s): pass a CPU tensor",
                    what, exp, why);
            return -1;
        }
        o = a->view;
    }
    if (!PyObject_CheckBuffer(o)) {
        invalid("%s: %s (NumPy array or CPU torch tensor) expected, got %s", what, exp,
                Py_TYPE(o)->tp_name);
        goto fail;
    }
    /* Asked with strides and format rather than PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE, so that
     * a strided or read-only array is described in the message, not just refused. */
    if (PyObject_GetBuffer(o, &a->b, PyBUF_RECORDS_RO)) {
        pending_text(why, sizeof(why));
        invalid("%s: %s expected, got %s (%s)", what, exp, Py_TYPE(o)->tp_name, why);
        goto fail;
    }
    a->held = 1;
    bad = !is_elem(&a->b, want) || !PyBuffer_IsContiguous(&a->b, 'C') ||
          (writable && a->b.readonly && !(own && a->b.buf == own)) ||
          (numel >= 0 && a->b.len != numel * a->b.itemsize);
    if (bad) {
        describe(&a->b, got, sizeof(got));
        invalid("%s: %s expected, got %s%s", what, exp, got,
                !PyBuffer_IsContiguous(&a->b, 'C') ? (writable ?
                " (the values are written in place, so pass the array itself, not a strided "
                "view)" : " (numpy.ascontiguousarray or tensor.contiguous() makes one)") : "");
        goto fail;
    }
    return 0;
fail:
    arr_put(a);
    return -1;
}

int arr_get(PyObject *o, const char *what, enum elem want, int writable, long long numel,
            struct arr *a)
{
    return take(o, what, want, writable, numel, NULL, a);
}

int arr_get_out(PyObject *o, const char *what, long long numel, const float *own,
                struct arr *a)
{
    return take(o, what, F32, 1, numel, own, a);
}

/* ---- scalar arguments ---- */

/* An int in [0, max] (None: keeps *out). */
int get_uint(PyObject *o, const char *what, unsigned long long max,
                    unsigned long long *out)
{
    unsigned long long v;

    if (!o || o == Py_None)
        return 0;
    if (!PyLong_Check(o) || PyBool_Check(o)) {
        invalid("%s: an int in 0..%llu expected, got %s", what, max, Py_TYPE(o)->tp_name);
        return -1;
    }
    v = PyLong_AsUnsignedLongLong(o);
    if (PyErr_Occurred() || v > max) {
        PyErr_Clear();
        PyObject *r = PyObject_Repr(o);
        invalid("%s: %s is not in 0..%llu", what, r ? PyUnicode_AsUTF8(r) : "?", max);
        Py_XDECREF(r);
        return -1;
    }
    *out = v;
    return 0;
}

/* A str without NUL bytes, or None (NULL). */
int get_str(PyObject *o, const char *what, const char **out)
{
    Py_ssize_t n;
    const char *s;

    if (!o || o == Py_None)
        return 0;
    if (!PyUnicode_Check(o)) {
        invalid("%s: a str expected, got %s", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    s = PyUnicode_AsUTF8AndSize(o, &n);
    if (!s || (size_t)n != strlen(s)) {
        PyErr_Clear();
        invalid("%s: not a valid string (a NUL byte or a lone surrogate)", what);
        return -1;
    }
    *out = s;
    return 0;
}

/* batch: a number, required. */
int get_batch(PyObject *o, double *out)
{
    if (!o || o == Py_None) {
        invalid("batch: required: the global batch size, which the shards divide the summed "
                "gradient by");
        return -1;
    }
    if (!PyNumber_Check(o) || PyBool_Check(o) || PyUnicode_Check(o)) {
        invalid("batch: a number >= 1 expected, got %s", Py_TYPE(o)->tp_name);
        return -1;
    }
    *out = PyFloat_AsDouble(o);
    return *out == -1.0 && PyErr_Occurred() ? -1 : 0;
}

/* step, version: an int >= 0, required. */
int get_step(PyObject *o, const char *what, uint64_t *out)
{
    unsigned long long v = 0;

    if (!o || o == Py_None) {
        invalid("%s: an int >= 0 is required", what);
        return -1;
    }
    if (get_uint(o, what, UINT64_MAX, &v))
        return -1;
    *out = v;
    return 0;
}

/* shape: an int or a sequence of 1..8 ints. Returns ndim, or -1 with InvalidArgument. */
int get_shape(PyObject *o, uint64_t shape[8])
{
    PyObject *seq;
    Py_ssize_t n;

    if (PyLong_Check(o)) {
        unsigned long long v = 0;
        if (get_uint(o, "shape", UINT64_MAX, &v))
            return -1;
        shape[0] = v;
        return 1;
    }
    seq = PySequence_Check(o) ? PySequence_Fast(o, "shape") : NULL;
    if (!seq || (n = PySequence_Fast_GET_SIZE(seq)) < 1 || n > 8) {
        PyErr_Clear();
        Py_XDECREF(seq);
        invalid("shape: an int or a sequence of 1..8 ints expected, got %s",
                Py_TYPE(o)->tp_name);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long long v = 0;
        char what[32];
        snprintf(what, sizeof(what), "shape[%zd]", i);
        if (get_uint(PySequence_Fast_GET_ITEM(seq, i), what, UINT64_MAX, &v)) {
            Py_DECREF(seq);
            return -1;
        }
        shape[i] = v;
    }
    Py_DECREF(seq);
    return (int)n;
}

/* compress / compress_pull / sync_every: a str, or a dict {tensor: value} made into "NAME=VALUE,..." (a key
 * None or "" gives a bare VALUE: compress's default codec). *keep owns the new string. */
int get_list(PyObject *o, const char *what, const char **out, PyObject **keep)
{
    PyObject *k, *v, *parts, *sep, *joined;
    Py_ssize_t pos = 0;

    if (!o || o == Py_None || PyUnicode_Check(o))
        return get_str(o, what, out);
    if (!PyDict_Check(o)) {
        invalid("%s: a str \"TENSOR=VALUE,...\" or a dict {tensor: value} expected, got %s",
                what, Py_TYPE(o)->tp_name);
        return -1;
    }
    if (!(parts = PyList_New(0)))
        return -1;
    while (PyDict_Next(o, &pos, &k, &v)) {
        PyObject *item;
        if ((k != Py_None && !PyUnicode_Check(k)) ||
            (!PyUnicode_Check(v) && (!PyLong_Check(v) || PyBool_Check(v)))) {
            invalid("%s: keys must be tensor names (str) and values str or int, got %s: %s",
                    what, Py_TYPE(k)->tp_name, Py_TYPE(v)->tp_name);
            Py_DECREF(parts);
            return -1;
        }
        item = k == Py_None || !PyUnicode_GET_LENGTH(k) ? PyObject_Str(v)
                                                        : PyUnicode_FromFormat("%U=%S", k, v);
        if (!item || PyList_Append(parts, item)) {
            Py_XDECREF(item);
            Py_DECREF(parts);
            return -1;
        }
        Py_DECREF(item);
    }
    sep = PyUnicode_FromString(",");
    joined = sep ? PyUnicode_Join(sep, parts) : NULL;
    Py_XDECREF(sep);
    Py_DECREF(parts);
    if (!joined)
        return -1;
    *keep = joined;
    return get_str(joined, what, out);
}

/* One of n names, or its index as an int: *out; absent or None: unchanged. Otherwise raises
 * InvalidArgument naming `what` and the choices. */
static int get_choice(PyObject *o, const char *what, const char *const *names, int n, int *out)
{
    char choices[128] = "";

    if (!o || o == Py_None)
        return 0;
    for (int i = 0; PyUnicode_Check(o) && i < n; i++)
        if (PyUnicode_CompareWithASCIIString(o, names[i]) == 0) {
            *out = i;
            return 0;
        }
    if (PyLong_Check(o) && !PyBool_Check(o)) {
        long v = PyLong_AsLong(o);
        if (v >= 0 && v < n) {
            *out = (int)v;
            return 0;
        }
        PyErr_Clear();
    }
    for (int i = 0; i < n; i++)
        snprintf(choices + strlen(choices), sizeof(choices) - strlen(choices), "%s\"%s\"",
                 i == 0 ? "" : i + 1 == n ? " or " : ", ", names[i]);
    PyObject *r = PyObject_Repr(o);
    invalid("%s: %s expected, got %s", what, choices, r ? PyUnicode_AsUTF8(r) : "?");
    Py_XDECREF(r);
    return -1;
}

int get_loss_scale(PyObject *o, int *out)
{
    static const char *const names[] = { "none", "sdk", "caller" };

    return get_choice(o, "loss_scale", names, 3, out);
}

/* exact_push: "fixed" (int64 pushes) or "float" (the shards round), or 0 / 1. */
static int get_exact_push(PyObject *o, int *out)
{
    static const char *const names[] = { "fixed", "float" };

    return get_choice(o, "exact_push", names, 2, out);
}

/* dynamic: a bool (or an int; None: off) into *out. Stricter than the truth test keep and
 * exact take: there a str such as "false" is true, and dynamic assignment turned on by
 * mistake changes which data a worker computes. */
static int get_flag(PyObject *o, const char *what, int *out)
{
    if (!o || o == Py_None)
        return 0;
    if (!PyLong_Check(o)) {
        invalid("%s: a bool expected, got %s", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    *out = PyObject_IsTrue(o);
    return *out < 0 ? -1 : 0;
}

/* Client's keyword arguments, in struct tessera_options order. */
static char *option_names[] = { "master", "job", "rank", "workers", "exact", "optimizer",
                                "batch", "transport", "timeout_ms", "data_seed", "micro_batch",
                                "mode", "staleness", "compress", "sync_every", "loss_scale",
                                "keep", "exact_push", "compress_pull", "dynamic",
                                "call_timeout_ms", "elastic", NULL };
enum { O_MASTER, O_JOB, O_RANK, O_WORKERS, O_EXACT, O_OPTIMIZER, O_BATCH, O_TRANSPORT,
       O_TIMEOUT, O_SEED, O_MICRO, O_MODE, O_STALENESS, O_COMPRESS, O_SYNC, O_LOSS,
       O_KEEP, O_EXACT_PUSH, O_PULL, O_DYNAMIC, O_CALL, O_ELASTIC, O_COUNT };

/* The arguments o[] into *opt (the SDK checks the values it alone understands). Strings made
 * from dicts are appended to keep, which must outlive opt. */
static int options_from(PyObject *const o[O_COUNT], struct tessera_options *opt, PyObject *keep)
{
    unsigned long long v[O_COUNT] = { [O_WORKERS] = 1 };
    PyObject *made[3] = { NULL, NULL, NULL };
    int rc;

    rc = get_str(o[O_MASTER], "master", &opt->master) || get_str(o[O_JOB], "job", &opt->job) ||
         get_uint(o[O_RANK], "rank", UINT32_MAX, &v[O_RANK]) ||
         get_uint(o[O_WORKERS], "workers", UINT32_MAX, &v[O_WORKERS]) ||
         (opt->exact = o[O_EXACT] ? PyObject_IsTrue(o[O_EXACT]) : 0) < 0 ||
         get_str(o[O_OPTIMIZER], "optimizer", &opt->optimizer) ||
         get_batch(o[O_BATCH], &opt->batch) ||
         get_str(o[O_TRANSPORT], "transport", &opt->transport) ||
         get_uint(o[O_TIMEOUT], "timeout_ms", INT32_MAX, &v[O_TIMEOUT]) ||
         get_uint(o[O_SEED], "data_seed", UINT64_MAX, &v[O_SEED]) ||
         get_uint(o[O_MICRO], "micro_batch", UINT32_MAX, &v[O_MICRO]) ||
         get_str(o[O_MODE], "mode", &opt->mode) ||
         get_uint(o[O_STALENESS], "staleness", UINT32_MAX, &v[O_STALENESS]) ||
         get_list(o[O_COMPRESS], "compress", &opt->compress, &made[0]) ||
         get_list(o[O_SYNC], "sync_every", &opt->sync_every, &made[1]) ||
         get_loss_scale(o[O_LOSS], &opt->loss_scale) ||
         (opt->keep = o[O_KEEP] ? PyObject_IsTrue(o[O_KEEP]) : 0) < 0 ||
         get_exact_push(o[O_EXACT_PUSH], &opt->exact_push) ||
         get_list(o[O_PULL], "compress_pull", &opt->pull_compress, &made[2]) ||
         get_flag(o[O_DYNAMIC], "dynamic", &opt->dynamic) ||
         get_uint(o[O_CALL], "call_timeout_ms", INT32_MAX, &v[O_CALL]) ||
         get_flag(o[O_ELASTIC], "elastic", &opt->elastic);
    for (int i = 0; i < 3; i++) {
        if (made[i] && PyList_Append(keep, made[i]))
            rc = -1;
        Py_XDECREF(made[i]);
    }
    opt->rank = (unsigned)v[O_RANK];
    opt->workers = (unsigned)v[O_WORKERS];
    opt->timeout_ms = (int)v[O_TIMEOUT];
    opt->data_seed = v[O_SEED];
    opt->micro_batch = (unsigned)v[O_MICRO];
    opt->staleness = (unsigned)v[O_STALENESS];
    opt->call_timeout_ms = (int)v[O_CALL];
    return rc ? -1 : 0;
}

/* Whether argument i was left out (None counts as left out). */
#define UNSET(o, i) (!(o)[i] || (o)[i] == Py_None)

/* The launcher's environment (docs/launch.md) for what the arguments leave out: master,
 * job, rank, workers, and the restarts a supervisor counted. Master "local" when neither
 * says. A caller that names master "local" itself asks for one process: the environment's
 * rank and workers (another program's launcher) are not for it. */
static int options_env(PyObject *const o[O_COUNT], struct tessera_options *opt,
                       struct tessera_launch *env)
{
    struct tessera_error e;

    if (tessera_launch_env(env, &e)) {
        raise_sdk(&e);
        return -1;
    }
    if (!UNSET(o, O_MASTER) && opt->master && !strcmp(opt->master, "local"))
        return 0;
    if (UNSET(o, O_MASTER))
        opt->master = env->master ? env->master : "local";
    if (UNSET(o, O_JOB) && env->job)
        opt->job = env->job;
    if (UNSET(o, O_RANK) && env->rank >= 0)
        opt->rank = (unsigned)env->rank;
    if (UNSET(o, O_WORKERS) && env->workers)
        opt->workers = (unsigned)env->workers;
    opt->restarts = env->restarts;
    return 0;
}

int get_options(PyObject *args, PyObject *kw, struct tessera_options *opt,
                struct tessera_launch *env, PyObject *keep)
{
    PyObject *o[O_COUNT] = { NULL };

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOOOOOOOOOOOOOOOOOOOOO:Client", option_names,
                                     &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7],
                                     &o[8], &o[9], &o[10], &o[11], &o[12], &o[13], &o[14],
                                     &o[15], &o[16], &o[17], &o[18], &o[19], &o[20], &o[21]))
        return -1;
    /* The SDK copies what it keeps; the arguments are kept anyway, as cheap insurance. */
    for (int i = 0; i < O_COUNT; i++)
        if (o[i] && PyList_Append(keep, o[i]))
            return -1;
    return options_from(o, opt, keep) || options_env(o, opt, env) ? -1 : 0;
}
