/* serve.c - see serve.h. */
#include "rpc/serve.h"

#include "util/proc.h"

ts_status ts_serve_start(const struct ts_serve_opts *o, struct ts_rpc_service *svc,
                         struct ts_rpc_server **out, struct ts_err *err)
{
    struct ts_rpc_server_opts so = { .listen = o->listen, .threads = (int)o->threads };
    struct ts_rpc_server *srv = NULL;
    ts_status st;

    *out = NULL;
    if ((st = ts_rpc_server_create(&so, &srv, err)) ||
        (st = ts_rpc_server_add(srv, svc, err)) || (st = ts_rpc_server_start(srv, err)) ||
        (o->port_file && (st = ts_port_file_write(o->port_file, ts_rpc_server_port(srv), err)))) {
        ts_rpc_server_free(srv);
        return st;
    }
    *out = srv;
    return TS_OK;
}
