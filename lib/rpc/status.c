/* status.c - the one place where ts_status meets gRPC status codes.
 *
 * Exhaustive both ways (docs/architecture.md), but for TS_EROLLBACK and TS_ESLOTS, which only
 * the data plane carries: over gRPC they are ABORTED, as a stale map is (all say: learn what
 * changed, retry).
 * gRPC itself never emits INVALID_ARGUMENT, FAILED_PRECONDITION, ABORTED or DATA_LOSS, so a
 * client seeing one knows Tessera decided it. */
#include <grpc/status.h>

#include "rpc/rpc.h"

int ts_rpc_code_from_status(ts_status s)
{
    switch (s) {
    case TS_OK: return GRPC_STATUS_OK;
    case TS_EINVAL: return GRPC_STATUS_INVALID_ARGUMENT;
    case TS_ENOTFOUND: return GRPC_STATUS_NOT_FOUND;
    case TS_EEXIST: return GRPC_STATUS_ALREADY_EXISTS;
    case TS_ESTATE: return GRPC_STATUS_FAILED_PRECONDITION;
    case TS_ESTALE:
    case TS_EROLLBACK:
    case TS_ESLOTS: return GRPC_STATUS_ABORTED;
    case TS_ETIMEDOUT: return GRPC_STATUS_DEADLINE_EXCEEDED;
    case TS_EUNAVAIL: return GRPC_STATUS_UNAVAILABLE;
    case TS_ENOMEM: return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case TS_ECORRUPT: return GRPC_STATUS_DATA_LOSS;
    case TS_EAUTH: return GRPC_STATUS_UNAUTHENTICATED;
    case TS_EPERM: return GRPC_STATUS_PERMISSION_DENIED;
    case TS_ENOTSUP: return GRPC_STATUS_UNIMPLEMENTED;
    case TS_ECANCELLED: return GRPC_STATUS_CANCELLED;
    case TS_EIO:
    case TS_ENODEV:
    case TS_EINTERNAL: return GRPC_STATUS_INTERNAL;
    }
    return GRPC_STATUS_INTERNAL;
}

ts_status ts_rpc_status_from_code(int code)
{
    switch ((grpc_status_code)code) {
    case GRPC_STATUS_OK: return TS_OK;
    case GRPC_STATUS_INVALID_ARGUMENT:
    case GRPC_STATUS_OUT_OF_RANGE: return TS_EINVAL;
    case GRPC_STATUS_NOT_FOUND: return TS_ENOTFOUND;
    case GRPC_STATUS_ALREADY_EXISTS: return TS_EEXIST;
    case GRPC_STATUS_FAILED_PRECONDITION: return TS_ESTATE;
    case GRPC_STATUS_ABORTED: return TS_ESTALE;
    case GRPC_STATUS_DEADLINE_EXCEEDED: return TS_ETIMEDOUT;
    case GRPC_STATUS_UNAVAILABLE: return TS_EUNAVAIL;
    case GRPC_STATUS_RESOURCE_EXHAUSTED: return TS_ENOMEM;
    case GRPC_STATUS_DATA_LOSS: return TS_ECORRUPT;
    case GRPC_STATUS_UNAUTHENTICATED: return TS_EAUTH;
    case GRPC_STATUS_PERMISSION_DENIED: return TS_EPERM;
    case GRPC_STATUS_UNIMPLEMENTED: return TS_ENOTSUP;
    case GRPC_STATUS_CANCELLED: return TS_ECANCELLED;
    case GRPC_STATUS_UNKNOWN:
    case GRPC_STATUS_INTERNAL:
    case GRPC_STATUS__DO_NOT_USE: return TS_EINTERNAL;
    }
    return TS_EINTERNAL;
}

const char *ts_rpc_code_name(int code)
{
    static const char *const names[] = {
        "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
        "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
        "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
        "UNAUTHENTICATED",
    };
    if (code >= 0 && code < (int)(sizeof(names) / sizeof(names[0])))
        return names[code];
    return "UNKNOWN";
}
