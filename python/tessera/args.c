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
    return e == F32 ? "float32" : e == F64 ? "float64" : "int64";
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

/* ---- Client's options: the keywords of the SDK's schema (tessera_options_schema) ---- */

#define MAX_KEYWORDS 40

/* The rows with a keyword, in the schema's order (the order positional arguments take). */
static const struct tessera_option *kw_rows[MAX_KEYWORDS];
static int n_kw;

static void keywords_init(void)
{
    size_t n;
    const struct tessera_option *r = tessera_options_schema(&n);

    if (n_kw)
        return;
    for (size_t i = 0; i < n && n_kw < MAX_KEYWORDS; i++)
        if (r[i].keyword)
            kw_rows[n_kw++] = &r[i];
}

static int keyword_index(const char *name)
{
    for (int i = 0; i < n_kw; i++)
        if (!strcmp(kw_rows[i]->keyword, name))
            return i;
    return -1;
}

/* Client(*args, **kw) into o[] by the rows' order; TypeError as Python's own calls raise. */
static int collect(PyObject *args, PyObject *kw, PyObject *o[MAX_KEYWORDS])
{
    Py_ssize_t n = args ? PyTuple_GET_SIZE(args) : 0, pos = 0;
    PyObject *k, *v;

    if (n > n_kw) {
        PyErr_Format(PyExc_TypeError, "Client() takes at most %d positional arguments (%zd "
                     "given)", n_kw, n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        o[i] = PyTuple_GET_ITEM(args, i);
    while (kw && PyDict_Next(kw, &pos, &k, &v)) {
        const char *name = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
        int i = name ? keyword_index(name) : -1;
        if (i < 0) {
            PyErr_Format(PyExc_TypeError, "Client() got an unexpected keyword argument '%S'",
                         k);
            return -1;
        }
        if (o[i]) {
            PyErr_Format(PyExc_TypeError, "Client() got multiple values for argument '%s'",
                         name);
            return -1;
        }
        o[i] = v;
    }
    return 0;
}

/* Argument v for row r into *opt, through the SDK's own parsing (tessera_options_set): the
 * Python types each kind takes are checked here, the values and ranges there. */
static int set_option(struct tessera_options *opt, const struct tessera_option *r, PyObject *v,
                      PyObject *keep)
{
    const char *what = r->keyword, *text = NULL;
    unsigned long long u = 0;
    PyObject *made = NULL;
    struct tessera_error e;
    char buf[64];
    int rc = 0;

    if (!v || v == Py_None)
        return 0;
    switch (r->type) {
    case TESSERA_OPTION_STRING:
        rc = get_str(v, what, &text);
        break;
    case TESSERA_OPTION_LIST:
        rc = get_list(v, what, &text, &made);
        if (made && PyList_Append(keep, made))
            rc = -1;
        Py_XDECREF(made);
        break;
    case TESSERA_OPTION_UINT:
        if (!(rc = get_uint(v, what, r->max, &u)))
            snprintf(buf, sizeof(buf), "%llu", u), text = buf;
        break;
    case TESSERA_OPTION_BOOL:
        /* Not the truth test: "false" is a true str, and turned on by mistake an option
         * such as dynamic changes which data a worker computes. */
        if (PyUnicode_Check(v) || PyBytes_Check(v)) {
            invalid("%s: a bool expected, got %s", what, Py_TYPE(v)->tp_name);
            return -1;
        }
        if ((rc = PyObject_IsTrue(v)) >= 0)
            text = rc ? "1" : "0", rc = 0;
        break;
    case TESSERA_OPTION_DOUBLE:
        if (!PyNumber_Check(v) || PyBool_Check(v) || PyUnicode_Check(v)) {
            invalid("%s: a number expected, got %s", what, Py_TYPE(v)->tp_name);
            return -1;
        }
        snprintf(buf, sizeof(buf), "%.17g", PyFloat_AsDouble(v));
        rc = PyErr_Occurred() ? -1 : 0, text = buf;
        break;
    default:   /* CHOICE: a name or its index */
        if (PyLong_Check(v) && !PyBool_Check(v)) {
            long long x = PyLong_AsLongLong(v);
            if (x == -1 && PyErr_Occurred())
                return -1;
            snprintf(buf, sizeof(buf), "%lld", x), text = buf;
        } else if ((rc = get_str(v, what, &text)) == 0 && !PyUnicode_Check(v)) {
            invalid("%s: one of %s expected, got %s", what, r->choices, Py_TYPE(v)->tp_name);
            return -1;
        }
    }
    if (rc || !text)
        return -1;
    if (tessera_options_set(opt, what, text, &e)) {
        raise_sdk(&e);
        return -1;
    }
    return 0;
}

/* The launcher's environment (docs/launch.md) for what the arguments leave out: master,
 * job, rank, workers, and the restarts a supervisor counted. Master "local" when neither
 * says. A caller that names master "local" itself asks for one process: the environment's
 * rank and workers (another program's launcher) are not for it. */
static int options_env(PyObject *const o[MAX_KEYWORDS], struct tessera_options *opt,
                       struct tessera_launch *env)
{
#define UNSET(name) (!o[keyword_index(name)] || o[keyword_index(name)] == Py_None)
    struct tessera_error e;

    if (tessera_launch_env(env, &e)) {
        raise_sdk(&e);
        return -1;
    }
    if (!UNSET("master") && opt->master && !strcmp(opt->master, "local"))
        return 0;
    if (UNSET("master"))
        opt->master = env->master ? env->master : "local";
    if (UNSET("job") && env->job)
        opt->job = env->job;
    if (UNSET("rank") && env->rank >= 0)
        opt->rank = (unsigned)env->rank;
    if (UNSET("workers") && env->workers)
        opt->workers = (unsigned)env->workers;
    opt->restarts = env->restarts;
    return 0;
#undef UNSET
}

PyObject *options_schema(PyObject *m, PyObject *noargs)
{
    static const char *const types[] = { "str", "list", "int", "bool", "float", "choice" };
    PyObject *out = PyList_New(0);

    (void)m;
    (void)noargs;
    keywords_init();
    for (int i = 0; out && i < n_kw; i++) {
        const struct tessera_option *r = kw_rows[i];
        PyObject *d = Py_BuildValue("{s:s,s:s,s:s,s:s}", "keyword", r->keyword, "field",
                                    r->name, "type", types[r->type], "help", r->help);
        if (d && r->type == TESSERA_OPTION_UINT) {
            PyObject *max = PyLong_FromUnsignedLongLong(r->max);
            if (!max || PyDict_SetItemString(d, "max", max))
                Py_CLEAR(d);
            Py_XDECREF(max);
        }
        if (d && r->type == TESSERA_OPTION_CHOICE) {
            PyObject *c = PyUnicode_FromString(r->choices), *sep = PyUnicode_FromString("|");
            PyObject *l = c && sep ? PyUnicode_Split(c, sep, -1) : NULL;
            if (!l || PyDict_SetItemString(d, "choices", l))
                Py_CLEAR(d);
            Py_XDECREF(l);
            Py_XDECREF(sep);
            Py_XDECREF(c);
        }
        if (!d || PyList_Append(out, d))
            Py_CLEAR(out);
        Py_XDECREF(d);
    }
    return out;
}

int get_options(PyObject *args, PyObject *kw, struct tessera_options *opt,
                struct tessera_launch *env, PyObject *keep)
{
    PyObject *o[MAX_KEYWORDS] = { NULL };

    keywords_init();
    if (collect(args, kw, o))
        return -1;
    /* The SDK copies what it keeps; the arguments are kept anyway, as cheap insurance. */
    for (int i = 0; i < n_kw; i++) {
        if (o[i] && PyList_Append(keep, o[i]))
            return -1;
        if (set_option(opt, kw_rows[i], o[i], keep))
            return -1;
    }
    return options_env(o, opt, env);
}
