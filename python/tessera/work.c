/* work.c - Client.claim_work, next_task and task_done: the master's schedule for this worker
 * (docs/scheduler.md; docs/python.md, "Dynamic assignment and tasks"): tessera_claim_work's
 * units of a dynamic job's data, and the priority tasks the heartbeats hand this worker
 * (tessera_next_task, tessera_task_done). Checked completely like every method, then one SDK
 * call without the GIL. Ownership: the dicts returned are new references, the caller's;
 * task_done's strings are borrowed from its arguments for the call (the SDK copies them). */
#include "client.h"

#include <stdint.h>

/* A required int in [0, max]: None is refused (get_uint would keep *out). */
static int need_uint(PyObject *o, const char *what, unsigned long long max,
                     unsigned long long *out)
{
    if (o == Py_None) {
        invalid("%s: an int in 0..%llu is required, got None", what, max);
        return -1;
    }
    return get_uint(o, what, max, out);
}

/* A float from a number (not a bool or a str: a slip, not a value); None keeps *out. */
static int get_float(PyObject *o, const char *what, double *out)
{
    double v;

    if (!o || o == Py_None)
        return 0;
    if (!PyNumber_Check(o) || PyBool_Check(o) || PyUnicode_Check(o)) {
        invalid("%s: a number expected, got %s", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        invalid("%s: a number expected, got %s (no float value)", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    *out = v;
    return 0;
}

/* claim_work(step, want, units) -> dict: struct tessera_work's fields. want is checked
 * against its C type only; the limit of 256 is the master's (WORKQ_MAX_WANT), which refuses
 * more with InvalidArgument naming want (master "local" has no queue, so no limit). */
PyObject *client_claim_work(struct client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "step", "want", "units", NULL };
    PyObject *ostep, *owant, *ounits;
    struct tessera_error e = { 0 };
    struct tessera_work w = { 0 };
    unsigned long long want = 0, units = 0;
    uint64_t step;
    int rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:claim_work", kwlist, &ostep, &owant,
                                     &ounits) ||
        open_or_raise(self) || get_step(ostep, "step", &step) ||
        need_uint(owant, "want", UINT32_MAX, &want) ||
        need_uint(ounits, "units", UINT64_MAX, &units))
        return NULL;
    SDK_CALL(self, rc, &e, tessera_claim_work(self->t, step, (uint32_t)want, units, &w, &e));
    if (rc)
        return raise_sdk(&e);
    return Py_BuildValue("{s:K,s:K,s:I,s:K,s:K,s:K,s:K,s:O,s:O}",
                         "first", (unsigned long long)w.first,
                         "step", (unsigned long long)w.step, "count", (unsigned)w.count,
                         "units", (unsigned long long)w.units,
                         "done", (unsigned long long)w.done,
                         "outstanding", (unsigned long long)w.outstanding,
                         "lost", (unsigned long long)w.lost,
                         "retry", w.retry ? Py_True : Py_False,
                         "pull", w.pull ? Py_True : Py_False);
}

/* next_task() -> None or {"id": int, "kind": str}: each task once, as the heartbeats handed
 * it. A kind this binding does not know (none today: the master refuses unknown kinds) comes
 * as "unknown (N)", for the caller to report failed. */
PyObject *client_next_task(struct client *self, PyObject *unused)
{
    struct tessera_error e = { 0 };
    struct tessera_task task = { 0 };
    int rc, got = 0;

    if (open_or_raise(self))
        return NULL;
    SDK_CALL(self, rc, &e, (got = tessera_next_task(self->t, &task), 0));
    if (rc)
        return raise_sdk(&e);
    if (!got)
        Py_RETURN_NONE;
    if (task.kind == TESSERA_TASK_EVALUATE)
        return Py_BuildValue("{s:I,s:s}", "id", (unsigned)task.id, "kind", "evaluate");
    return Py_BuildValue("{s:I,s:N}", "id", (unsigned)task.id, "kind",
                         PyUnicode_FromFormat("unknown (%d)", task.kind));
}

/* task_done(id, step, accuracy=None, loss=None, fingerprint=None, failed=False, error=None):
 * types here; values (accuracy 0..1, loss finite >= 0, fingerprint 64 lowercase hex digits)
 * are the SDK's to refuse, with TESSERA_EINVAL naming the field: InvalidArgument. A task that
 * did not fail needs both figures: None would reach the SDK as a value it cannot tell from a
 * real one, so it is refused here. */
PyObject *client_task_done(struct client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "id", "step", "accuracy", "loss", "fingerprint", "failed",
                              "error", NULL };
    PyObject *oid, *ostep, *oacc = Py_None, *oloss = Py_None, *ofp = Py_None,
             *oerr = Py_None;
    struct tessera_task_result r = { 0 };
    struct tessera_error e = { 0 };
    unsigned long long id = 0;
    int failed = 0, rc;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOOpO:task_done", kwlist, &oid, &ostep,
                                     &oacc, &oloss, &ofp, &failed, &oerr) ||
        open_or_raise(self) || need_uint(oid, "id", UINT32_MAX, &id) ||
        get_step(ostep, "step", &r.step) || get_float(oacc, "accuracy", &r.accuracy) ||
        get_float(oloss, "loss", &r.loss) || get_str(ofp, "fingerprint", &r.fingerprint) ||
        get_str(oerr, "error", &r.error))
        return NULL;
    if (!failed && (oacc == Py_None || oloss == Py_None))
        return invalid("%s: required for a task done (failed=False): the evaluation's test "
                       "%s", oacc == Py_None ? "accuracy" : "loss",
                       oacc == Py_None ? "accuracy, 0..1" : "loss, finite and >= 0");
    r.id = (uint32_t)id;
    r.failed = failed;
    SDK_CALL(self, rc, &e, tessera_task_done(self->t, &r, &e));
    if (rc)
        return raise_sdk(&e);
    Py_RETURN_NONE;
}
