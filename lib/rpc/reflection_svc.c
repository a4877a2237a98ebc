/* reflection_svc.c - the ServerReflectionInfo stream, on top of the index in reflection.c.
 *
 * Kept apart from reflection.c so that the index and its answers can be tested without a
 * server. The stream is a plain loop: each request gets exactly one response, in order, until
 * the client half-closes; clients (grpcurl, grpc-js-reflection-client) send several requests on
 * one stream. The same handler serves v1 and v1alpha, whose messages are wire-identical. */
#include "rpc/internal_reflection.h"

#include "rpc/rpc.h"

static ts_status reflection_info(struct ts_rpc_call *call, const ProtobufCMessage *req,
                                 ProtobufCMessage *resp, struct ts_err *err)
{
    const struct ts__reflection *r = ts_rpc_ctx(call);

    (void)req;
    (void)resp;
    for (;;) {
        struct ts__reflection_reply reply;
        ProtobufCMessage *msg;
        ts_status st = ts_rpc_recv(call, &msg, err);

        if (st != TS_OK || !msg)
            return st;
        ts__reflection_answer(r, (const Grpc__Reflection__V1__ServerReflectionRequest *)msg,
                              &reply);
        /* The reply points into msg (original_request), so msg lives until it is sent. */
        st = ts_rpc_send(call, &reply.resp.base, err);
        protobuf_c_message_free_unpacked(msg, NULL);
        if (st != TS_OK)
            return st;
    }
}

const struct ts_rpc_method ts__reflection_v1_methods[] = {
    { "ServerReflectionInfo", reflection_info,
      &grpc__reflection__v1__server_reflection_request__descriptor,
      &grpc__reflection__v1__server_reflection_response__descriptor,
      TS_RPC_STREAM_IN | TS_RPC_STREAM_OUT, 0, 0 },
    { 0 },
};

const struct ts_rpc_method ts__reflection_v1alpha_methods[] = {
    { "ServerReflectionInfo", reflection_info,
      &grpc__reflection__v1__server_reflection_request__descriptor,
      &grpc__reflection__v1__server_reflection_response__descriptor,
      TS_RPC_STREAM_IN | TS_RPC_STREAM_OUT, 0, 0 },
    { 0 },
};
