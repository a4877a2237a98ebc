/* health.c - grpc.health.v1.Health on every server (Kubernetes probes, load balancers).
 *
 * Check answers SERVING or NOT_SERVING for "" (the server) and for each service it serves, and
 * NOT_FOUND for others, as the health protocol says. Watch sends the current status at once and
 * again on every change; for an unknown service it sends SERVICE_UNKNOWN and keeps watching.
 * The table lives in the server (internal.h) under its mutex; every change bumps the server's
 * generation and wakes the watchers. */
#include <stdio.h>
#include <string.h>

#include "grpc/health/v1/health.pb-c.h"
#include "rpc/internal.h"

int ts__health_get(struct ts_rpc_server *s, const char *service, uint64_t *gen)
{
    int r = -1;

    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->nhealth; i++)
        if (strcmp(s->health[i].name, service) == 0)
            r = s->health[i].serving ? 1 : 0;
    if (gen)
        *gen = s->gen;
    pthread_mutex_unlock(&s->mu);
    return r;
}

void ts_rpc_server_set_serving(struct ts_rpc_server *s, const char *service, bool serving)
{
    int i;

    pthread_mutex_lock(&s->mu);
    for (i = 0; i < s->nhealth; i++)
        if (strcmp(s->health[i].name, service) == 0)
            break;
    if (i == s->nhealth && i < (int)(sizeof(s->health) / sizeof(s->health[0]))) {
        snprintf(s->health[i].name, sizeof(s->health[i].name), "%s", service);
        s->health[i].serving = !serving; /* so that the new entry counts as a change */
        s->nhealth++;
    }
    if (i < s->nhealth && s->health[i].serving != serving) {
        s->health[i].serving = serving;
        s->gen++;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

static Grpc__Health__V1__HealthCheckResponse__ServingStatus to_proto(int h)
{
    if (h < 0)
        return GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN;
    return h ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
             : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
}

static ts_status health_check(struct ts_rpc_call *call, const ProtobufCMessage *req_,
                              ProtobufCMessage *resp_, struct ts_err *err)
{
    const Grpc__Health__V1__HealthCheckRequest *req = (const void *)req_;
    Grpc__Health__V1__HealthCheckResponse *resp = (void *)resp_;
    int h = ts__health_get(ts_rpc_ctx(call), req->service, NULL);

    if (h < 0)
        return ts_err_set(err, TS_ENOTFOUND, "service: '%.100s' is not served here",
                          req->service);
    resp->status = to_proto(h);
    return TS_OK;
}

static ts_status health_watch(struct ts_rpc_call *call, const ProtobufCMessage *req_,
                              ProtobufCMessage *unused, struct ts_err *err)
{
    const Grpc__Health__V1__HealthCheckRequest *req = (const void *)req_;
    struct ts_rpc_server *s = ts_rpc_ctx(call);
    int last = -2;

    for (;;) {
        Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
        int h = ts__health_get(s, req->service, NULL);
        ts_status st;

        if (h != last) {
            resp.status = to_proto(h);
            if ((st = ts_rpc_send(call, &resp.base, err)))
                return st == TS_ECANCELLED ? TS_OK : st;
            last = h;
        }
        if (ts_rpc_done(call))
            return TS_OK;
        ts_rpc_wait(call, 1000);
    }
}

const struct ts_rpc_method ts__health_methods[] = {
    { "Check", health_check, &grpc__health__v1__health_check_request__descriptor,
      &grpc__health__v1__health_check_response__descriptor, 0, 0, 0 },
    { "Watch", health_watch, &grpc__health__v1__health_check_request__descriptor,
      &grpc__health__v1__health_check_response__descriptor, TS_RPC_STREAM_OUT, 0, 0 },
    { NULL, NULL, NULL, NULL, 0, 0, 0 },
};
