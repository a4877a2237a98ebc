/* rpc_run.h - what the RPC fuzz targets share: checks of a decoded message's strings, and a
 * unary request run through a service's handler as lib/rpc's server runs it (call.c,
 * run_unary), with a call that has no gRPC call behind it.
 *
 * fuzz_rpc checks the decoders; fuzz_master and fuzz_shard_rpc run their handlers. A call is
 * a scratch call (rpc.h) given the method it serves and a worker of a server that checks no
 * client certificates (lib/rpc/internal.h), as a plaintext server with an admin token sees its
 * callers: every member role, and admin only for a caller that sends the token. Its peer is
 * "ipv4:127.0.0.1:40000" (ts_rpc_caller: 127.0.0.1). */
#ifndef TS_FUZZ_RPC_RUN_H
#define TS_FUZZ_RPC_RUN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rpc/internal.h"

#define FUZZ_TOKEN "fuzz-admin-token-0123456789"

/* UTF-8 as proto3 means it, written apart from wirecheck.c's so that they check each other. */
static inline bool fuzz_utf8(const unsigned char *s)
{
    static const uint32_t least[4] = { 0, 0x80, 0x800, 0x10000 };

    while (*s) {
        unsigned c = *s++;
        unsigned more = c < 0x80 ? 0 : c >= 0xc2 && c <= 0xdf ? 1 : c >= 0xe0 && c <= 0xef ? 2
                        : c >= 0xf0 && c <= 0xf4 ? 3 : 4;
        uint32_t cp = c & (0x7f >> more);

        if (more == 4)
            return false;
        for (unsigned k = 0; k < more; k++, s++) {
            if ((*s & 0xc0) != 0x80)
                return false; /* the terminating NUL included: nothing past it is read */
            cp = cp << 6 | (*s & 0x3f);
        }
        if (cp < least[more] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
            return false;
    }
    return true;
}

/* Aborts unless every string field of m, nested messages included, is valid UTF-8. */
static inline void fuzz_strings_ok(const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;

    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        void *const *v = (void *const *)(base + f->offset);
        size_t n = 1;

        if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF &&
            *(const uint32_t *)(base + f->quantifier_offset) != f->id)
            continue;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            n = *(const size_t *)(base + f->quantifier_offset);
            v = (void *const *)*v;
        }
        for (size_t k = 0; k < n; k++) {
            if (!v[k])
                continue;
            if (f->type == PROTOBUF_C_TYPE_STRING && !fuzz_utf8(v[k]))
                abort();
            if (f->type == PROTOBUF_C_TYPE_MESSAGE)
                fuzz_strings_ok(v[k]);
        }
    }
}

/* The admin token callers may send: set once, before any call (ts_rpc_tls_setup reads it from
 * a file, which is gone again when this returns). */
static inline void fuzz_rpc_token(void)
{
    char path[] = "/tmp/tessera-fuzz-token-XXXXXX";
    struct ts_rpc_tls t = { .token_file = path, .server = true };
    struct ts_err err = { 0 };
    int fd = mkstemp(path);

    if (fd < 0 || write(fd, FUZZ_TOKEN "\n", sizeof(FUZZ_TOKEN)) != (ssize_t)sizeof(FUZZ_TOKEN))
        abort();
    close(fd);
    if (ts_rpc_tls_setup(&t, &err)) {
        fprintf(stderr, "fuzz: admin token: %s\n", err.msg);
        abort();
    }
    unlink(path);
}

/* Runs method m of svc on the request bytes data[0..n), as a unary call of a caller that sends
 * the admin token or not: held to the method's max_request and decoded as the server decodes
 * (a refusal is the call's end), the handler, then the reply packed as it would be sent. Checked: the status is one err.h names;
 * a reply packs, unpacks again as its type, and holds only valid UTF-8 in its strings (a
 * client in any language must read it). Returns the handler's status (TS_EINVAL for bytes the
 * server would not decode) with its message in err. */
static inline ts_status fuzz_rpc_run(const struct ts_rpc_service *svc,
                                     const struct ts_rpc_method *m, const uint8_t *data,
                                     size_t n, bool admin, struct ts_err *err)
{
    static struct ts_rpc_server srv;   /* zero: no mutual TLS (tls.c reads mtls) */
    static struct ts__worker w = { .srv = &srv };
    size_t most = m->max_request ? m->max_request : TS_RPC_REQUEST_MAX;
    struct ts_rpc_call *call;
    struct ts__method *meth;
    grpc_metadata md;
    grpc_slice sl;
    grpc_byte_buffer *bb;
    ProtobufCMessage *req, *resp, *back;
    ts_status st = TS_OK;
    uint8_t *packed;
    size_t len;

    /* What call.c's decode refuses before it unpacks (within_limit). */
    if (n > most)
        return ts_err_set(err, TS_ENOMEM, "request: %zu bytes of %s, over the %zu this method "
                          "takes", n, m->req->name, most);
    call = ts_rpc_scratch_new();
    sl = grpc_slice_from_copied_buffer((const char *)data, n);
    bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    if (!call || !bb)
        abort();
    meth = ts_rpc_alloc(call, sizeof(*meth));
    *meth = (struct ts__method){ .svc = svc, .m = m };
    snprintf(meth->path, sizeof(meth->path), "/%s/%s", svc->name, m->name);
    call->method = meth;
    call->w = &w;
    snprintf(call->peer, sizeof(call->peer), "ipv4:127.0.0.1:40000");
    if (admin) {
        md = (grpc_metadata){ .key = grpc_slice_from_static_string("authorization"),
                              .value = grpc_slice_from_static_string("Bearer " FUZZ_TOKEN) };
        call->md.metadata = &md;
        call->md.count = 1;
    }
    req = ts__unpack(m->req, bb, true, err);
    grpc_byte_buffer_destroy(bb);
    if (!req) {
        ts_rpc_scratch_free(call);
        return err->code ? err->code : TS_EINVAL;
    }
    /* What the server checks before the handler (call.c, ts__call_dispatch). */
    if (m->roles && (st = ts_rpc_need_role(call, m->roles, err)))
        goto out;
    resp = ts_rpc_new(call, m->resp);
    st = m->fn(call, req, resp, err);
    if (!strcmp(ts_status_name(st), "EUNKNOWN"))
        abort(); /* a status err.h does not name */
    if (st)
        goto out;
    len = protobuf_c_message_get_packed_size(resp);
    if (!(packed = malloc(len ? len : 1)) || protobuf_c_message_pack(resp, packed) != len)
        abort();
    if (!(back = protobuf_c_message_unpack(m->resp, NULL, len, packed)))
        abort(); /* a reply no client could read */
    fuzz_strings_ok(back);
    protobuf_c_message_free_unpacked(back, NULL);
    free(packed);
out:
    protobuf_c_message_free_unpacked(req, NULL);
    ts_rpc_scratch_free(call);
    return st;
}

#endif
