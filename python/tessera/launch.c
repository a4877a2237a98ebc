/* launch.c - tessera.launch_env(): this process's place in a job, as its launcher wrote it
 * into the environment (tessera_launch_env; docs/launch.md); Client's master, job, rank and
 * workers, as the arguments and that environment made them; and Client.serve_metrics, how
 * the job is watched from Prometheus. */
#include "client.h"

#include <stdint.h>

PyObject *client_where(const struct tessera_options *opt)
{
    return Py_BuildValue("(ssII)", opt->master && opt->master[0] ? opt->master : "local",
                         opt->job && opt->job[0] ? opt->job : "default", opt->rank,
                         opt->workers);
}

PyObject *client_get_where(struct client *self, void *closure)
{
    if (!self->where)
        return invalid("Client: not connected");
    return Py_NewRef(PyTuple_GET_ITEM(self->where, (intptr_t)closure));
}

static PyObject *int_or_none(int v, int none)
{
    return v == none ? Py_NewRef(Py_None) : PyLong_FromLong(v);
}

static PyObject *str_or_none(const char *s)
{
    return s ? PyUnicode_FromString(s) : Py_NewRef(Py_None);
}

static PyObject *mod_launch_env(PyObject *m, PyObject *noargs)
{
    struct tessera_launch l;
    struct tessera_error e;

    (void)m;
    (void)noargs;
    if (tessera_launch_env(&l, &e))
        return raise_sdk(&e);
    return Py_BuildValue("{s:N,s:N,s:N,s:N,s:N,s:I}", "master", str_or_none(l.master), "job",
                         str_or_none(l.job), "rank", int_or_none(l.rank, -1), "workers",
                         int_or_none(l.workers, 0), "local_rank", int_or_none(l.local_rank, -1),
                         "restarts", l.restarts);
}

PyObject *client_serve_metrics(struct client *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = { "port", "host", NULL };
    PyObject *oport = NULL;
    const char *host = NULL;
    unsigned long long port = 0;
    struct tessera_error e = { 0 };
    int rc, bound = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|Oz:serve_metrics", kwlist, &oport, &host) ||
        open_or_raise(self) || get_uint(oport, "port", 65535, &port))
        return NULL;
    SDK_CALL(self, rc, &e, tessera_serve_metrics(self->t, host, (int)port, &bound, &e));
    return rc ? raise_sdk(&e) : PyLong_FromLong(bound);
}

PyMethodDef launch_methods[] = {
    { "launch_env", mod_launch_env, METH_NOARGS,
      "launch_env() -> dict\n\nWhat the launcher (tessera run, torchrun, srun, a Kubernetes "
      "indexed Job) told this\nprocess: master, job, rank, workers, local_rank (None where no "
      "variable says),\nrestarts (0). Client() and tessera.torch.attach() take what their "
      "arguments leave out\nfrom here. A malformed variable raises InvalidArgument naming "
      "it." },
    { "options", options_schema, METH_NOARGS,
      "options() -> [dict]\n\nClient's keywords, from the SDK's options schema "
      "(tessera_options_schema), in the\norder positional arguments take: each a dict of "
      "keyword, field (struct tessera_options's),\ntype (str, list, int, bool, float or "
      "choice), help, and max (int) or choices (choice).\nTo build a command line or a "
      "config file from (docs/python.md)." },
    { NULL, NULL, 0, NULL },
};
