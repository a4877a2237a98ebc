/* fuzz_rpc.c - libFuzzer target: decoding and validating every gRPC request message.
 *
 * Each request a service takes is decoded by ts__unpack (lib/rpc/call.c): the wire check
 * (wirecheck.c) refuses a string field holding a NUL byte or invalid UTF-8, which protobuf-c
 * would let through cut short or unchecked, then protobuf-c unpacks. input[0] picks the
 * request type (every method's input type of tessera.v1.Master, Shard and Verify, and of the
 * health and reflection services every server carries), the rest is the message. The bytes
 * go through ts__unpack from a grpc_byte_buffer, as a server receives them, and through
 * ts__wire_check and protobuf_c_message_unpack directly: both must agree, a refusal must name
 * the field, and every string in a message that was let through must be valid UTF-8.
 * A decoded message then meets the master's validators that run without a server: the
 * membership table's (members.c) for RegisterShard, RegisterWorker,
 * Heartbeat and Deregister, on a fresh table, and the data-checksum map's (datamap.c) for
 * CheckData. The handlers themselves, with a state behind them, are fuzz_master's and
 * fuzz_shard_rpc's.
 * Seeds: tests/fuzz/corpus-rpc (written by fuzz_seeds). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datamap.h"
#include "members.h"
#include "rpc/internal.h"
#include "rpc_run.h"
#include "rpc_types.h"
#include "util/log.h"


int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_TYPES 64
#define NOW_MS 1000000

static const ProtobufCMessageDescriptor *types[MAX_TYPES];
static size_t ntypes;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    ts_log_set_level(TS_ERROR); /* registrations log at INFO */
    if (!(ntypes = fuzz_rpc_types(types, MAX_TYPES)))
        abort();
    return 0;
}

static struct ts_members *members_new(void)
{
    struct ts_members *m;
    struct ts_member_grant g;
    struct ts_err err = { 0 };

    /* One shard (id 1) and one worker (id 1) to heartbeat and deregister. */
    if (ts_members_create(NULL, &m, &err) ||
        ts_members_register_shard(m, "127.0.0.1:7000", "shard-a", 0, NULL, 0, false, false,
                                  NOW_MS, &g, NULL, &err) ||
        ts_members_register_worker(m, "127.0.0.1", 1, "", "", "worker-a", 0, NOW_MS, &g, NULL,
                                   &err))
        abort();
    return m;
}

/* A refusal says why; a retry of an accepted registration gets the same id back. */
static void refused_ok(ts_status st, const struct ts_err *err)
{
    if (st && (!err->msg[0] || err->code != st))
        abort();
}

static void register_shard(const Tessera__V1__RegisterShardRequest *req)
{
    struct ts_endpoint ep[TS_MEMBERS_MAX_ENDPOINTS];
    struct ts_member_grant g, again;
    struct ts_err err = { 0 };
    struct ts_members *m;
    size_t n = req->n_data_planes;
    ts_status st;

    /* As services/master/rpc.c converts them (its register_shard). */
    if (n > TS_MEMBERS_MAX_ENDPOINTS)
        return;
    memset(ep, 0, sizeof(ep));
    for (size_t i = 0; i < n; i++) {
        const Tessera__V1__DataPlaneEndpoint *d = req->data_planes[i];
        if (d->address.len > sizeof(ep[i].addr))
            return;
        snprintf(ep[i].transport, sizeof(ep[i].transport), "%s", d->transport);
        ep[i].len = d->address.len;
        if (d->address.len) /* an empty bytes field is NULL, which memcpy may not get */
            memcpy(ep[i].addr, d->address.data, d->address.len);
    }
    m = members_new();
    st = ts_members_register_shard(m, req->addr, req->instance, req->lease_ms, ep, n,
                                   req->redo_log, req->resumed, NOW_MS, &g, NULL, &err);
    refused_ok(st, &err);
    if (!st && (ts_members_register_shard(m, req->addr, req->instance, req->lease_ms, ep, n,
                                          req->redo_log, req->resumed, NOW_MS, &again, NULL,
                                          &err) || again.id != g.id))
        abort();
    ts_members_free(m);
}

static void register_worker(const Tessera__V1__RegisterWorkerRequest *req)
{
    struct ts_member_grant g, again;
    struct ts_err err = { 0 };
    struct ts_members *m = members_new();
    ts_status st;

    st = ts_members_register_worker(m, req->host, req->pid, req->role, req->addr, req->instance,
                                    req->lease_ms, NOW_MS, &g, NULL, &err);
    refused_ok(st, &err);
    if (!st && (ts_members_register_worker(m, req->host, req->pid, req->role, req->addr,
                                           req->instance, req->lease_ms, NOW_MS, &again, NULL,
                                           &err) || again.id != g.id))
        abort();
    ts_members_free(m);
}

static void heartbeat(const Tessera__V1__HeartbeatRequest *req)
{
    struct ts_member_grant g;
    struct ts_err err = { 0 };
    struct ts_members *m = members_new();
    ts_status st;

    st = ts_members_heartbeat(m, (enum ts_member_kind)req->kind, req->id, req->known_epoch,
                              req->clock, NOW_MS, &g, NULL, &err);
    refused_ok(st, &err);
    if (!st && req->kind == TESSERA__V1__MEMBER_KIND__MEMBER_KIND_WORKER) {
        struct ts_member_report r = { req->staleness_last, req->staleness_max,
                                      req->steps_skipped, req->loss_scale };
        ts_members_report(m, req->id, &r);
    } else if (!st) {
        ts_members_moves(m, req->id, req->moves_epoch, req->moves_pending);
    }
    ts_members_free(m);
}

static void deregister(const Tessera__V1__DeregisterRequest *req)
{
    struct ts_err err = { 0 };
    struct ts_members *m = members_new();
    uint64_t epoch;

    refused_ok(ts_members_deregister(m, (enum ts_member_kind)req->kind, req->id, req->reason,
                                     &epoch, NULL, &err), &err);
    ts_members_free(m);
}

/* The first worker's map becomes the job's reference; the same request again must match it. */
static void check_data(const Tessera__V1__CheckDataRequest *req)
{
    struct datamap *d = calloc(1, sizeof(*d));
    struct ts_err err = { 0 };
    char source[96];
    ts_status st;

    if (!d)
        abort();
    datamap_init(d);
    st = datamap_check(d, req, true, source, sizeof(source), &err);
    refused_ok(st, &err);
    if (!st && datamap_check(d, req, false, source, sizeof(source), &err))
        abort();
    datamap_fini(d);
    free(d);
}

static void validate(const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;

    if (d == &tessera__v1__register_shard_request__descriptor)
        register_shard((const void *)m);
    else if (d == &tessera__v1__register_worker_request__descriptor)
        register_worker((const void *)m);
    else if (d == &tessera__v1__heartbeat_request__descriptor)
        heartbeat((const void *)m);
    else if (d == &tessera__v1__deregister_request__descriptor)
        deregister((const void *)m);
    else if (d == &tessera__v1__check_data_request__descriptor)
        check_data((const void *)m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const ProtobufCMessageDescriptor *d;
    struct ts_err err = { 0 }, err2 = { 0 };
    ProtobufCMessage *m, *direct = NULL;
    grpc_byte_buffer *bb;
    grpc_slice sl;
    ts_status st;

    if (size == 0)
        return 0;
    d = types[data[0] % ntypes];
    data++, size--;

    /* The server's path: the bytes as gRPC hands them over. */
    sl = grpc_slice_from_copied_buffer((const char *)data, size);
    bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    m = ts__unpack(d, bb, true, &err);
    grpc_byte_buffer_destroy(bb);

    /* The same in two steps, which must agree with it. */
    st = ts__wire_check(d, data, size, &err2);
    if (st) {
        if (st != TS_EINVAL || err2.code != TS_EINVAL || !strstr(err2.msg, ": holds a NUL"))
            abort(); /* a refusal names the field */
    } else {
        direct = protobuf_c_message_unpack(d, NULL, size, data);
    }
    if (!m != !direct || (m && strcmp(err.msg, "") != 0) || strcmp(err.msg, err2.msg) != 0)
        abort();
    if (direct)
        protobuf_c_message_free_unpacked(direct, NULL);
    if (!m)
        return 0;
    if (!protobuf_c_message_check(m))
        abort();
    fuzz_strings_ok(m);
    validate(m);
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}
