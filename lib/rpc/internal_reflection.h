/* internal_reflection.h - gRPC server reflection, answered from the descriptor set built in.
 *
 * Why: a client with no .proto file (grpcurl, grpc-js-reflection-client, python with
 * reflection_pb2) asks the server which services it has and for the FileDescriptorProtos that
 * define them, then describes and calls any method. protobuf-c keeps no serialized descriptors,
 * so the build embeds `protoc --include_imports --descriptor_set_out` output (ts_descset) and
 * this module indexes it once: file name -> serialized FileDescriptorProto and the transitive
 * closure of its imports; fully-qualified symbol -> file for services, methods, messages
 * (nested too), enums, enum values, fields and extensions.
 *
 * grpc.reflection.v1 and v1alpha are wire-identical (only the package differs), so the one
 * protobuf-c binding of v1 serves both method tables below.
 *
 * Ownership: ts__reflection_create() returns an index the caller frees with
 * ts__reflection_free(); it copies what it keeps, so set and services may go after the call.
 * An answer allocates nothing: it points into the index, the request and its own reply struct.
 * Threads: a built index is immutable; answer from any number of threads without locks. */
#ifndef TS_RPC_INTERNAL_REFLECTION_H
#define TS_RPC_INTERNAL_REFLECTION_H

#include <stddef.h>

#include "grpc/reflection/v1/reflection.pb-c.h"
#include "rpc/rpc.h"
#include "util/err.h"

/* The descriptor set of every .proto the servers speak, with imports, embedded at build time
 * by `xxd -i -n ts_descset descset.bin` (generated descset.c, linked into lib/rpc). */
extern unsigned char ts_descset[];
extern unsigned int ts_descset_len;

struct ts__reflection;

/* Builds the index of the FileDescriptorSet set[0..len). services are the full names of the
 * services the server serves ("tessera.v1.Master"), listed by list_services in this order; each
 * must be a service defined in the set, so that a client can describe everything it is told
 * about. On TS_OK the caller owns *out (free with ts__reflection_free()).
 * TS_EINVAL: set NULL or empty, a service name NULL or not a service in the set.
 * TS_ECORRUPT: the set does not parse, a file appears twice, imports a file missing from the
 * set (build it with --include_imports), or two files define the same symbol.
 * TS_ENOMEM: out of memory. */
ts_status ts__reflection_create(const unsigned char *set, size_t len,
                                const char *const *services, size_t nservices,
                                struct ts__reflection **out, struct ts_err *err) TS_MUST_CHECK;

/* NULL is a no-op. */
void ts__reflection_free(struct ts__reflection *r);

/* One answer, embedded by the caller (on the stack): resp is the message to send; the other
 * members are the storage resp points into. Nothing in it is heap memory. */
struct ts__reflection_reply {
    Grpc__Reflection__V1__ServerReflectionResponse resp;
    union {
        Grpc__Reflection__V1__FileDescriptorResponse files;
        Grpc__Reflection__V1__ListServiceResponse list;
        Grpc__Reflection__V1__ErrorResponse error;
    } u;
    char msg[320]; /* error_message */
};

/* Answers one request into *out; cannot fail. A request the index cannot answer gets an
 * error_response: NOT_FOUND (5) naming the unknown symbol, file or extension, UNIMPLEMENTED
 * (12) for all_extension_numbers_of_type and for a request kind this version does not know.
 * file_by_filename and file_containing_symbol return the file and its transitive imports, each
 * once, the requested file first. resp echoes req->host as valid_host and req itself as
 * original_request.
 * Lifetime: out->resp borrows from r, from req and from *out; keep all three until it is sent.
 * There is nothing to release afterwards. req is not modified. */
void ts__reflection_answer(const struct ts__reflection *r,
                           const Grpc__Reflection__V1__ServerReflectionRequest *req,
                           struct ts__reflection_reply *out);

/* The method tables of grpc.reflection.v1.ServerReflection and
 * grpc.reflection.v1alpha.ServerReflection (reflection_svc.c): ServerReflectionInfo, a bidi
 * stream answering each request in order until the client half-closes. The service's ctx must
 * be the struct ts__reflection *. Both end with an entry whose name is NULL. */
extern const struct ts_rpc_method ts__reflection_v1_methods[];
extern const struct ts_rpc_method ts__reflection_v1alpha_methods[];

#endif
