/* server.c - the server's lifecycle: registration, completion-queue threads, shutdown.
 *
 * Each worker thread owns a completion queue and keeps one request posted per registered
 * method plus one for unknown methods (without it, a call to an unknown method hangs until the
 * client's deadline). A request that arrives is re-posted at once and its call dispatched
 * (call.c). Shutdown follows the sequence written down in docs/rpc.md: shutdown_and_notify
 * per queue, wait for calls in flight up to the grace period, cancel the rest, and let each
 * worker shut its own queue once nothing is outstanding on it. */
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/reflection/v1/reflection.pb-c.h"
#include "rpc/internal.h"
#include "rpc/internal_reflection.h"
#include "util/log.h"
#include "util/proc.h"

extern unsigned char ts_descset[];
extern unsigned int ts_descset_len;

static const struct ts_rpc_service health_svc = {
    "grpc.health.v1.Health", ts__health_methods, NULL };
static const struct ts_rpc_service refl_v1_svc = {
    "grpc.reflection.v1.ServerReflection", ts__reflection_v1_methods, NULL };
static const struct ts_rpc_service refl_v1alpha_svc = {
    "grpc.reflection.v1alpha.ServerReflection", ts__reflection_v1alpha_methods, NULL };

ts_status ts_rpc_server_create(const struct ts_rpc_server_opts *o, struct ts_rpc_server **out,
                               struct ts_err *err)
{
    struct ts_rpc_server *s;

    if (!o || !o->listen || !o->listen[0])
        return ts_err_set(err, TS_EINVAL, "rpc server: listen address required");
    s = calloc(1, sizeof(*s));
    if (!s)
        return ts_err_set(err, TS_ENOMEM, "rpc server: out of memory");
    s->opts = *o;
    if (s->opts.threads <= 0)
        s->opts.threads = 2;
    if (s->opts.max_streams <= 0)
        s->opts.max_streams = 256;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    grpc_init();
    *out = s;
    return TS_OK;
}

static ts_status add_service(struct ts_rpc_server *s, const struct ts_rpc_service *svc,
                             struct ts_err *err)
{
    if (s->started)
        return ts_err_set(err, TS_ESTATE, "rpc server: add '%s' before start", svc->name);
    for (int i = 0; i < s->nservices; i++)
        if (strcmp(s->services[i]->name, svc->name) == 0)
            return ts_err_set(err, TS_EEXIST, "rpc server: service '%s' added twice", svc->name);
    if (s->nservices == (int)(sizeof(s->services) / sizeof(s->services[0])))
        return ts_err_set(err, TS_ENOMEM, "rpc server: too many services");
    s->services[s->nservices++] = svc;
    return TS_OK;
}

ts_status ts_rpc_server_add(struct ts_rpc_server *s, const struct ts_rpc_service *svc,
                            struct ts_err *err)
{
    if (!svc || !svc->name || !svc->methods)
        return ts_err_set(err, TS_EINVAL, "rpc server: service needs a name and methods");
    return add_service(s, svc, err);
}

/* The built-in services. Their ctx is the server or the reflection index, so they are copied
 * into the server with ctx set and the static tables stay const. */
static ts_status add_builtins(struct ts_rpc_server *s, struct ts_err *err)
{
    const char *names[sizeof(s->services) / sizeof(s->services[0]) + 3];
    size_t n = 0;
    ts_status st;

    for (int i = 0; i < s->nservices; i++)
        names[n++] = s->services[i]->name;
    names[n++] = health_svc.name;
    names[n++] = refl_v1_svc.name;
    names[n++] = refl_v1alpha_svc.name;
    st = ts__reflection_create(ts_descset, ts_descset_len, names, n, &s->reflection, err);
    if (st)
        return st;
    s->builtin[0] = health_svc;
    s->builtin[0].ctx = s;
    s->builtin[1] = refl_v1_svc;
    s->builtin[1].ctx = s->reflection;
    s->builtin[2] = refl_v1alpha_svc;
    s->builtin[2].ctx = s->reflection;
    for (int i = 0; i < 3; i++)
        if ((st = add_service(s, &s->builtin[i], err)))
            return st;
    return TS_OK;
}

static ts_status register_methods(struct ts_rpc_server *s, struct ts_err *err)
{
    int n = 0;

    for (int i = 0; i < s->nservices; i++)
        for (const struct ts_rpc_method *m = s->services[i]->methods; m->name; m++)
            n++;
    s->methods = calloc((size_t)n, sizeof(*s->methods));
    if (!s->methods)
        return ts_err_set(err, TS_ENOMEM, "rpc server: out of memory");
    for (int i = 0; i < s->nservices; i++) {
        for (const struct ts_rpc_method *m = s->services[i]->methods; m->name; m++) {
            struct ts__method *tm = &s->methods[s->nmethods];
            tm->svc = s->services[i];
            tm->m = m;
            snprintf(tm->path, sizeof(tm->path), "/%s/%s", tm->svc->name, m->name);
            /* A client-streaming method has no single request to read up front. */
            tm->handle = grpc_server_register_method(
                s->server, tm->path, NULL,
                (m->flags & TS_RPC_STREAM_IN) ? GRPC_SRM_PAYLOAD_NONE
                                              : GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER,
                0);
            if (!tm->handle)
                return ts_err_set(err, TS_EEXIST, "rpc server: cannot register %s", tm->path);
            s->nmethods++;
        }
    }
    return TS_OK;
}

void ts__request_post(struct ts__worker *w, struct ts__method *m)
{
    struct ts__request *r = calloc(1, sizeof(*r));
    grpc_call_error e;

    if (!r)
        abort();
    r->w = w;
    r->method = m;
    r->tag.kind = m ? TS__TAG_REQUEST : TS__TAG_UNKNOWN;
    grpc_metadata_array_init(&r->md);
    atomic_fetch_add(&w->live, 1);
    if (m) {
        e = grpc_server_request_registered_call(w->srv->server, m->handle, &r->call,
                                                &r->deadline, &r->md,
                                                (m->m->flags & TS_RPC_STREAM_IN) ? NULL
                                                                                 : &r->payload,
                                                w->cq, w->cq, &r->tag);
    } else {
        grpc_call_details_init(&r->details);
        e = grpc_server_request_call(w->srv->server, &r->call, &r->details, &r->md, w->cq, w->cq,
                                     &r->tag);
    }
    if (e != GRPC_CALL_OK) {
        /* Only after shutdown began; nothing will complete this tag. */
        atomic_fetch_sub(&w->live, 1);
        grpc_metadata_array_destroy(&r->md);
        if (!m)
            grpc_call_details_destroy(&r->details);
        free(r);
    }
}

static void request_free(struct ts__request *r)
{
    grpc_metadata_array_destroy(&r->md);
    if (!r->method)
        grpc_call_details_destroy(&r->details);
    if (r->payload)
        grpc_byte_buffer_destroy(r->payload);
    free(r);
}

static void on_request(struct ts__worker *w, struct ts__request *r, bool ok)
{
    struct ts_rpc_call *c;

    if (!ok) { /* cancelled by shutdown */
        request_free(r);
        return;
    }
    if (!atomic_load(&w->srv->stopping))
        ts__request_post(w, r->method);
    c = ts__call_from_request(r);
    request_free(r);
    if (!c->method)
        ts__call_unknown(c);
    else
        ts__call_dispatch(c);
}

static void handle_event(struct ts__worker *w, struct ts__tag *t, bool ok)
{
    switch (t->kind) {
    case TS__TAG_REQUEST:
    case TS__TAG_UNKNOWN:
        on_request(w, (struct ts__request *)t, ok);
        break;
    case TS__TAG_FINISH:
        ts__call_finished((struct ts_rpc_call *)((char *)t - offsetof(struct ts_rpc_call,
                                                                      finish_tag)));
        break;
    case TS__TAG_OP:
        ts__call_op_done((struct ts_rpc_call *)((char *)t - offsetof(struct ts_rpc_call, op_tag)),
                         ok);
        break;
    case TS__TAG_CLOSE:
        ts__call_closed((struct ts_rpc_call *)((char *)t - offsetof(struct ts_rpc_call,
                                                                    close_tag)));
        break;
    case TS__TAG_SHUTDOWN:
        atomic_store(&w->shutdown_seen, true);
        pthread_mutex_lock(&w->srv->mu);
        pthread_cond_broadcast(&w->srv->cv);
        pthread_mutex_unlock(&w->srv->mu);
        return; /* not counted in live */
    }
    atomic_fetch_sub(&w->live, 1);
}

static void *worker_main(void *arg)
{
    struct ts__worker *w = arg;
    bool cq_shut = false;

    for (;;) {
        gpr_timespec until = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                          gpr_time_from_millis(100, GPR_TIMESPAN));
        grpc_event ev = grpc_completion_queue_next(w->cq, until, NULL);

        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type == GRPC_OP_COMPLETE)
            handle_event(w, ev.tag, ev.success != 0);
        /* Streaming threads decrement live from outside, so re-check on every wake-up. */
        if (!cq_shut && atomic_load(&w->shutdown_seen) && atomic_load(&w->live) == 0) {
            grpc_completion_queue_shutdown(w->cq);
            cq_shut = true;
        }
    }
    return NULL;
}

static ts_status start_workers(struct ts_rpc_server *s, struct ts_err *err)
{
    s->workers = calloc((size_t)s->opts.threads, sizeof(*s->workers));
    if (!s->workers)
        return ts_err_set(err, TS_ENOMEM, "rpc server: out of memory");
    for (int i = 0; i < s->opts.threads; i++) {
        struct ts__worker *w = &s->workers[i];
        w->srv = s;
        w->shutdown_tag.kind = TS__TAG_SHUTDOWN;
        w->cq = grpc_completion_queue_create_for_next(NULL);
        grpc_server_register_completion_queue(s->server, w->cq, NULL);
        s->nworkers++;
    }
    return TS_OK;
}

/* The largest request any method of s takes (struct ts_rpc_method.max_request). */
static size_t largest_request(const struct ts_rpc_server *s)
{
    size_t most = TS_RPC_REQUEST_MAX;

    for (int i = 0; i < s->nservices; i++)
        for (const struct ts_rpc_method *m = s->services[i]->methods; m->name; m++)
            if (m->max_request > most)
                most = m->max_request;
    return most;
}

ts_status ts_rpc_server_start(struct ts_rpc_server *s, struct ts_err *err)
{
    grpc_arg args[] = {
        { .type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
          .value.integer = (int)s->opts.max_message },
        /* Without this a second server on a busy port "binds" too (docs/rpc.md). */
        { .type = GRPC_ARG_INTEGER, .key = GRPC_ARG_ALLOW_REUSEPORT, .value.integer = 0 },
    };
    grpc_channel_args ca = { .num_args = 2, .args = args };
    grpc_server_credentials *creds;
    ts_status st;

    if (s->started)
        return ts_err_set(err, TS_ESTATE, "rpc server: started twice");
    if ((st = add_builtins(s, err)))
        return st;
    if (!s->opts.max_message)
        s->opts.max_message = largest_request(s);
    args[0].value.integer = (int)s->opts.max_message;
    s->server = grpc_server_create(&ca, NULL);
    if ((st = register_methods(s, err)) || (st = start_workers(s, err)))
        return st;
    if ((st = ts__server_creds(&creds, &s->mtls, err)))
        return st;
    s->port = grpc_server_add_http2_port(s->server, s->opts.listen, creds);
    grpc_server_credentials_release(creds);
    if (s->port <= 0)
        return ts_err_set(err, TS_EUNAVAIL,
                          "cannot listen on %s: address in use or not local (pick another port)",
                          s->opts.listen);
    grpc_server_start(s->server);
    s->started = true;
    for (int i = 0; i < s->nservices; i++)
        ts_rpc_server_set_serving(s, s->services[i]->name, true);
    ts_rpc_server_set_serving(s, "", true);
    for (int i = 0; i < s->nworkers; i++) {
        for (int k = 0; k < s->nmethods; k++)
            ts__request_post(&s->workers[i], &s->methods[k]);
        ts__request_post(&s->workers[i], NULL);
        pthread_create(&s->workers[i].thread, NULL, worker_main, &s->workers[i]);
    }
    return TS_OK;
}

int ts_rpc_server_port(const struct ts_rpc_server *s)
{
    return s->port;
}

static bool all_shutdown_seen(struct ts_rpc_server *s)
{
    for (int i = 0; i < s->nworkers; i++)
        if (!atomic_load(&s->workers[i].shutdown_seen))
            return false;
    return true;
}

void ts_rpc_server_shutdown(struct ts_rpc_server *s, int grace_ms)
{
    int64_t until = ts_now_ms() + (grace_ms > 0 ? grace_ms : 0), idle_since = ts_now_ms();

    if (!s || !s->started || s->stopped)
        return;
    s->stopped = true;
    for (int i = 0; i < s->nhealth; i++)
        ts_rpc_server_set_serving(s, s->health[i].name, false);
    atomic_store(&s->stopping, true);
    ts_rpc_server_wake(s);
    for (int i = 0; i < s->nworkers; i++)
        grpc_server_shutdown_and_notify(s->server, s->workers[i].cq, &s->workers[i].shutdown_tag);

    /* gRPC's shutdown also waits for idle client connections to go away; once no call has
     * been in flight for a moment, nothing is left to drain, so stop waiting for them. */
    pthread_mutex_lock(&s->mu);
    while (!all_shutdown_seen(s) && ts_now_ms() < until) {
        struct timespec ts;
        if (atomic_load(&s->calls) > 0)
            idle_since = ts_now_ms();
        else if (ts_now_ms() - idle_since >= 100)
            break;
        ts_abstime_ms(&ts, 20);
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    pthread_mutex_unlock(&s->mu);
    if (!all_shutdown_seen(s)) {
        if (atomic_load(&s->calls) > 0)
            ts_log(TS_WARN, "rpc", "%d calls still running after %d ms grace: cancelling them",
                   atomic_load(&s->calls), grace_ms);
        grpc_server_cancel_all_calls(s->server);
    }
    for (int i = 0; i < s->nworkers; i++)
        pthread_join(s->workers[i].thread, NULL);
}

void ts_rpc_server_free(struct ts_rpc_server *s)
{
    if (!s)
        return;
    ts_rpc_server_shutdown(s, 0);
    if (s->server)
        grpc_server_destroy(s->server);
    for (int i = 0; i < s->nworkers; i++) {
        if (!s->started) { /* never ran: its queue was not shut down by its thread */
            grpc_completion_queue_shutdown(s->workers[i].cq);
            while (grpc_completion_queue_next(s->workers[i].cq, gpr_inf_future(GPR_CLOCK_REALTIME),
                                              NULL).type != GRPC_QUEUE_SHUTDOWN)
                ;
        }
        grpc_completion_queue_destroy(s->workers[i].cq);
    }
    ts__reflection_free(s->reflection);
    free(s->workers);
    free(s->methods);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    grpc_shutdown();
}

void ts_rpc_server_wake(struct ts_rpc_server *s)
{
    pthread_mutex_lock(&s->mu);
    s->gen++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}
