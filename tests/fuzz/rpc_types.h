/* rpc_types.h - the request types fuzz_rpc picks from with its input's first byte: every
 * method's input type of tessera.v1.Master, Shard and Verify and of the health and reflection
 * services every server carries, each once, in the services' order. In one place, so that
 * fuzz_seeds writes seeds whose first byte picks what it means. */
#ifndef TS_FUZZ_RPC_TYPES_H
#define TS_FUZZ_RPC_TYPES_H

#include <stdbool.h>
#include <stddef.h>

#include "grpc/health/v1/health.pb-c.h"
#include "grpc/reflection/v1/reflection.pb-c.h"
#include "tessera/v1/master.pb-c.h"
#include "tessera/v1/shard.pb-c.h"
#include "tessera/v1/verify.pb-c.h"

/* Fills out (room for max) and returns how many; 0 if max is too small. */
static inline size_t fuzz_rpc_types(const ProtobufCMessageDescriptor **out, size_t max)
{
    static const ProtobufCServiceDescriptor *const svcs[] = {
        &tessera__v1__master__descriptor, &tessera__v1__shard__descriptor,
        &tessera__v1__verify__descriptor, &grpc__health__v1__health__descriptor,
        &grpc__reflection__v1__server_reflection__descriptor,
    };
    size_t n = 0;

    for (size_t s = 0; s < sizeof(svcs) / sizeof(svcs[0]); s++) {
        for (unsigned i = 0; i < svcs[s]->n_methods; i++) {
            const ProtobufCMessageDescriptor *d = svcs[s]->methods[i].input;
            bool seen = false;

            for (size_t k = 0; k < n; k++)
                seen = seen || out[k] == d;
            if (seen)
                continue;
            if (n == max)
                return 0;
            out[n++] = d;
        }
    }
    return n;
}

#endif
