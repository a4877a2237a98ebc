/* test_rpc.c - lib/rpc end to end in one process: a real server on a loopback port and the
 * real client. The test services borrow tessera.v1 names, because the server's reflection index
 * accepts only services in the embedded descriptor set. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "grpc/health/v1/health.pb-c.h"
#include "rpc/rpc.h"
#include "rpc/serve.h"
#include "tessera/v1/master.pb-c.h"
#include "tessera/v1/shard.pb-c.h"
#include "util/knobs.h"
#include "util/log.h"
#include "util/proc.h"

/* ShardStatus behaves by map_epoch: 0 answers, 100+k returns ts_status k, 1000+ms sleeps ms
 * or until ts_rpc_done() and then answers, 2000+ms sleeps 1000+ms ignoring ts_rpc_done(),
 * PEER_EPOCH answers with the member the caller's certificate names in addr ("-": none),
 * BLANKS_EPOCH fails with a message that ends in blanks. */
#define PEER_EPOCH 5000
#define BLANKS_EPOCH 6000
static ts_status status_fn(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                           ProtobufCMessage *rs, struct ts_err *err)
{
    const Tessera__V1__ShardStatusRequest *req = (const void *)rq;
    Tessera__V1__ShardStatusResponse *resp = (void *)rs;
    int64_t until;

    if (req->map_epoch == PEER_EPOCH) {
        char who[TS_MEMBER_MAX + 1];
        resp->addr = ts_rpc_strdup(call, ts_rpc_peer_identity(call, who, sizeof(who)) ? who
                                                                                       : "-");
        return TS_OK;
    }
    if (req->map_epoch == BLANKS_EPOCH)
        return ts_err_set(err, TS_EPERM, "cut at a blank \t ");
    if (req->map_epoch >= 100 && req->map_epoch < 1000)
        return ts_err_set(err, (ts_status)(req->map_epoch - 100), "map_epoch: code %d asked",
                          (int)(req->map_epoch - 100));
    if (req->map_epoch >= 1000) {
        until = ts_now_ms() + (int64_t)(req->map_epoch - 1000);
        while (ts_now_ms() < until && (req->map_epoch >= 2000 || !ts_rpc_done(call)))
            ts_sleep_ms(5);
    }
    resp->addr = ts_rpc_strdup(call, "arena string");
    resp->shard_id = 7;
    resp->epoch = req->map_epoch;
    return TS_OK;
}

static const struct ts_rpc_method shard_methods[] = {
    { "ShardStatus", status_fn, &tessera__v1__shard_status_request__descriptor,
      &tessera__v1__shard_status_response__descriptor, 0, 0, 0 },
    { NULL, NULL, NULL, NULL, 0, 0, 0 },
};
/* The same handler on its own thread, as a blocking method would be. */
static const struct ts_rpc_method master_methods[] = {
    { "ClusterStatus", status_fn, &tessera__v1__shard_status_request__descriptor,
      &tessera__v1__shard_status_response__descriptor, TS_RPC_OWN_THREAD, 0, 0 },
    { NULL, NULL, NULL, NULL, 0, 0, 0 },
};
static const struct ts_rpc_service shard_svc = { "tessera.v1.Shard", shard_methods, NULL };
static const struct ts_rpc_service master_svc = { "tessera.v1.Master", master_methods, NULL };

struct fixture {
    struct ts_rpc_server *srv;
    struct ts_rpc_channel *ch;
    char addr[64];
};

static struct ts_rpc_server *start_server(const char *listen, struct ts_err *err)
{
    struct ts_rpc_server *s;
    struct ts_rpc_server_opts o = { .listen = listen, .threads = 2 };

    if (ts_rpc_server_create(&o, &s, err))
        return NULL;
    if (ts_rpc_server_add(s, &shard_svc, err) || ts_rpc_server_add(s, &master_svc, err) ||
        ts_rpc_server_start(s, err)) {
        ts_rpc_server_free(s);
        return NULL;
    }
    return s;
}

static int setup(void **state)
{
    static struct fixture f;
    struct ts_err e = { 0 };

    memset(&f, 0, sizeof(f));
    f.srv = start_server("127.0.0.1:0", &e);
    if (!f.srv)
        return -1;
    snprintf(f.addr, sizeof(f.addr), "127.0.0.1:%d", ts_rpc_server_port(f.srv));
    if (ts_rpc_channel_create(f.addr, NULL, &f.ch, &e))
        return -1;
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    ts_rpc_channel_free(f->ch);
    ts_rpc_server_free(f->srv);
    return 0;
}

static ts_status call(struct ts_rpc_channel *ch, const char *method, uint64_t map_epoch,
                      int deadline_ms, Tessera__V1__ShardStatusResponse **resp,
                      struct ts_err *err)
{
    Tessera__V1__ShardStatusRequest req = TESSERA__V1__SHARD_STATUS_REQUEST__INIT;
    req.map_epoch = map_epoch;
    return ts_rpc_unary(ch, method, &req.base, &tessera__v1__shard_status_response__descriptor,
                        (ProtobufCMessage **)resp, deadline_ms, err);
}

#define SHARD_STATUS "/tessera.v1.Shard/ShardStatus"
#define SLOW_STATUS "/tessera.v1.Master/ClusterStatus"

static void unary_ok(void **state)
{
    struct fixture *f = *state;
    Tessera__V1__ShardStatusResponse *r;

    assert_int_equal(call(f->ch, SHARD_STATUS, 0, 2000, &r, NULL), TS_OK);
    assert_int_equal(r->shard_id, 7);
    assert_string_equal(r->addr, "arena string");
    tessera__v1__shard_status_response__free_unpacked(r, NULL);
}

static void every_status_reaches_the_client(void **state)
{
    struct fixture *f = *state;
    Tessera__V1__ShardStatusResponse *r = NULL;

    for (int st = TS_EINVAL; st <= TS_EPERM; st++) {
        struct ts_err e = { 0 };
        ts_status got = call(f->ch, SHARD_STATUS, 100 + (uint64_t)st, 2000, &r, &e);
        ts_status want = ts_rpc_status_from_code(ts_rpc_code_from_status(st));
        if (st == TS_EUNAVAIL) {
            /* Retried until the deadline, then reported as UNAVAILABLE all the same. */
            assert_int_equal(got, TS_EUNAVAIL);
            continue;
        }
        assert_int_equal(got, want);
        assert_null(r);
        assert_non_null(strstr(e.msg, "map_epoch: code"));
        assert_non_null(strstr(e.msg, "ShardStatus"));
    }
}

/* HTTP/2 forbids a header value that ends in whitespace (grpc-js drops such a grpc-message):
 * the server trims it. */
static void status_message_ends_without_blanks(void **state)
{
    struct fixture *f = *state;
    Tessera__V1__ShardStatusResponse *r = NULL;
    struct ts_err e = { 0 };
    size_t n;

    assert_int_equal(call(f->ch, SHARD_STATUS, BLANKS_EPOCH, 5000, &r, &e), TS_EPERM);
    n = strlen(e.msg);
    assert_true(n > 14);
    assert_string_equal(e.msg + n - 14, "cut at a blank");
}

static void unknown_method_is_unimplemented(void **state)
{
    struct fixture *f = *state;
    Tessera__V1__ShardStatusResponse *r;
    struct ts_err e = { 0 };

    assert_int_equal(call(f->ch, "/tessera.v1.Shard/Nope", 0, 2000, &r, &e), TS_ENOTSUP);
    assert_non_null(strstr(e.msg, "UNIMPLEMENTED"));
    assert_non_null(strstr(e.msg, "/tessera.v1.Shard/Nope"));
}

static void deadline_exceeded(void **state)
{
    struct fixture *f = *state;
    Tessera__V1__ShardStatusResponse *r;
    struct ts_err e = { 0 };
    int64_t t0 = ts_now_ms();

    /* The handlers ignore the deadline; an answer that races it would make this flaky. */
    assert_int_equal(call(f->ch, SHARD_STATUS, 2000 + 400, 100, &r, &e), TS_ETIMEDOUT);
    assert_true(ts_now_ms() - t0 < 400);
    assert_non_null(strstr(e.msg, "DEADLINE_EXCEEDED"));
    ts_err_clear(&e);
    assert_int_equal(call(f->ch, SLOW_STATUS, 2000 + 400, 100, &r, &e), TS_ETIMEDOUT);
}

static void health_check_and_watch(void **state)
{
    struct fixture *f = *state;
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    Grpc__Health__V1__HealthCheckResponse *r;
    struct ts_rpc_stream *st;
    struct ts_err e = { 0 };

    req.service = "tessera.v1.Shard";
    assert_int_equal(ts_rpc_unary(f->ch, "/grpc.health.v1.Health/Check", &req.base,
                                  &grpc__health__v1__health_check_response__descriptor,
                                  (ProtobufCMessage **)&r, 2000, NULL), TS_OK);
    assert_int_equal(r->status, GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
    grpc__health__v1__health_check_response__free_unpacked(r, NULL);
    req.service = "no.such.Service";
    assert_int_equal(ts_rpc_unary(f->ch, "/grpc.health.v1.Health/Check", &req.base,
                                  &grpc__health__v1__health_check_response__descriptor,
                                  (ProtobufCMessage **)&r, 2000, &e), TS_ENOTFOUND);

    /* Watch: SERVING now, NOT_SERVING after the change, then cancel by freeing. */
    req.service = "tessera.v1.Shard";
    assert_int_equal(ts_rpc_stream_open(f->ch, "/grpc.health.v1.Health/Watch", &req.base, 5000,
                                        &st, NULL), TS_OK);
    assert_int_equal(ts_rpc_stream_read(st, &grpc__health__v1__health_check_response__descriptor,
                                        (ProtobufCMessage **)&r, NULL), TS_OK);
    assert_non_null(r);
    assert_int_equal(r->status, GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
    grpc__health__v1__health_check_response__free_unpacked(r, NULL);
    ts_rpc_server_set_serving(f->srv, "tessera.v1.Shard", false);
    assert_int_equal(ts_rpc_stream_read(st, &grpc__health__v1__health_check_response__descriptor,
                                        (ProtobufCMessage **)&r, NULL), TS_OK);
    assert_non_null(r);
    assert_int_equal(r->status,
                     GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING);
    grpc__health__v1__health_check_response__free_unpacked(r, NULL);
    ts_rpc_stream_free(st);
    ts_rpc_server_set_serving(f->srv, "tessera.v1.Shard", true);

    /* A stream whose deadline passes ends with DEADLINE_EXCEEDED. */
    assert_int_equal(ts_rpc_stream_open(f->ch, "/grpc.health.v1.Health/Watch", &req.base, 300,
                                        &st, NULL), TS_OK);
    assert_int_equal(ts_rpc_stream_read(st, &grpc__health__v1__health_check_response__descriptor,
                                        (ProtobufCMessage **)&r, NULL), TS_OK);
    grpc__health__v1__health_check_response__free_unpacked(r, NULL);
    ts_err_clear(&e);
    assert_int_equal(ts_rpc_stream_read(st, &grpc__health__v1__health_check_response__descriptor,
                                        (ProtobufCMessage **)&r, &e), TS_ETIMEDOUT);
    ts_rpc_stream_free(st);
}

static int free_port(void)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t n = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;

    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &n), 0);
    port = ntohs(a.sin_port);
    close(fd);
    return port;
}

struct late {
    char listen[64];
    struct ts_rpc_server *srv;
};

static void *start_late(void *arg)
{
    struct late *l = arg;
    ts_sleep_ms(400);
    l->srv = start_server(l->listen, NULL);
    return NULL;
}

static void retries_until_the_server_is_up(void **state)
{
    struct late l;
    struct ts_rpc_channel *ch;
    Tessera__V1__ShardStatusResponse *r;
    struct ts_err e = { 0 };
    pthread_t t;

    snprintf(l.listen, sizeof(l.listen), "127.0.0.1:%d", free_port());
    assert_int_equal(ts_rpc_channel_create(l.listen, NULL, &ch, NULL), TS_OK);
    /* Nobody listens: UNAVAILABLE at once (a refused connection), with the target named. The
     * deadline only has to outlast that on a loaded host: at 150 ms an ASan build under a
     * full make test ran past it once (DEADLINE_EXCEEDED). */
    assert_int_equal(call(ch, SHARD_STATUS, 0, 2000, &r, &e), TS_EUNAVAIL);
    assert_non_null(strstr(e.msg, l.listen));
    pthread_create(&t, NULL, start_late, &l);
    assert_int_equal(call(ch, SHARD_STATUS, 0, 5000, &r, NULL), TS_OK);
    tessera__v1__shard_status_response__free_unpacked(r, NULL);
    pthread_join(t, NULL);
    assert_non_null(l.srv);

    /* A second server on the same port is refused, not silently shared (SO_REUSEPORT). */
    ts_err_clear(&e);
    assert_null(start_server(l.listen, &e));
    assert_int_equal(e.code, TS_EUNAVAIL);
    ts_rpc_channel_free(ch);
    ts_rpc_server_free(l.srv);
}

struct slow_call {
    const char *addr;
    uint64_t epoch;
    ts_status st;
};

static void *slow_client(void *arg)
{
    struct slow_call *s = arg;
    struct ts_rpc_channel *ch;
    Tessera__V1__ShardStatusResponse *r = NULL;

    if (ts_rpc_channel_create(s->addr, NULL, &ch, NULL))
        return NULL;
    s->st = call(ch, SLOW_STATUS, s->epoch, 10000, &r, NULL);
    if (r)
        tessera__v1__shard_status_response__free_unpacked(r, NULL);
    ts_rpc_channel_free(ch);
    return NULL;
}

/* Shutdown lets a call in flight finish within the grace period. */
static void shutdown_drains_calls_in_flight(void **state)
{
    struct ts_rpc_server *srv = start_server("127.0.0.1:0", NULL);
    char addr[64];
    struct slow_call s = { addr, 1000 + 500, TS_EINTERNAL };
    pthread_t t;
    int64_t t0;

    assert_non_null(srv);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", ts_rpc_server_port(srv));
    pthread_create(&t, NULL, slow_client, &s);
    ts_sleep_ms(200);
    t0 = ts_now_ms();
    ts_rpc_server_shutdown(srv, 5000);
    pthread_join(t, NULL);
    /* The handler checks ts_rpc_done(), which turns true at shutdown: it answers early, OK. */
    assert_int_equal(s.st, TS_OK);
    assert_true(ts_now_ms() - t0 < 3000);
    ts_rpc_server_free(srv);
}

/* The address a shard or the verify service registers: --advertise, or the listen host. */
static void advertised_address(void **state)
{
    (void)state;
    char out[64];
    const struct { const char *listen, *adv, *want; } ok[] = {
        { "127.0.0.1:0", NULL, "127.0.0.1:4242" },
        { "10.1.0.2:7001", "", "10.1.0.2:4242" },
        { "0.0.0.0:7001", "shard-0.tessera-shards:7001", "shard-0.tessera-shards:7001" },
        { "[::]:0", "[fd00::2]:7001", "[fd00::2]:7001" },
        { "0.0.0.0:0", "node-3", "node-3:4242" },
        { "[::]:0", "[fd00::2]", "[fd00::2]:4242" },
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        assert_int_equal(ts_serve_advertised(ok[i].listen, ok[i].adv, 4242, out, sizeof(out),
                                             NULL), TS_OK);
        assert_string_equal(out, ok[i].want);
    }
    const struct { const char *listen, *adv; } bad[] = {
        { "0.0.0.0:7001", NULL }, { "[::]:0", "" },
        { "127.0.0.1:0", ":7001" }, { "127.0.0.1:0", "h:" }, { "127.0.0.1:0", "h:70000" },
        { "127.0.0.1:0", "h:7001x" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct ts_err e = { 0 };
        assert_int_equal(ts_serve_advertised(bad[i].listen, bad[i].adv, 4242, out, sizeof(out),
                                             &e), TS_EINVAL);
        assert_non_null(strstr(e.msg, "--advertise"));
    }
}

/* Where /metrics listens: --metrics-listen, else the gRPC listen host (loopback for a program
 * without one); its port from either flag, not two different ones. */
static void metrics_address(void **state)
{
    (void)state;
    char host[64];
    int64_t port;
    const struct {
        const char *listen;
        int64_t port;
        const char *grpc, *host;
        int64_t want;
    } ok[] = {
        { NULL, 9400, "127.0.0.1:7070", "127.0.0.1", 9400 },
        { NULL, 0, "0.0.0.0:7071", "0.0.0.0", 0 },
        { NULL, 9400, "[::]:7071", "[::]", 9400 },
        { NULL, 9400, ":7071", "0.0.0.0", 9400 },
        { NULL, 9400, NULL, "127.0.0.1", 9400 },          /* a worker: no gRPC server */
        { NULL, -1, "10.0.0.5:7070", "10.0.0.5", -1 },    /* off */
        { "0.0.0.0", 9400, "127.0.0.1:7070", "0.0.0.0", 9400 },
        { "10.0.0.5:9401", -1, "127.0.0.1:7070", "10.0.0.5", 9401 },
        { "10.0.0.5:9401", 9401, NULL, "10.0.0.5", 9401 },
        { "[::1]:9402", -1, NULL, "[::1]", 9402 },
        { "[::1]", 0, NULL, "[::1]", 0 },
        { "::1", 9400, NULL, "::1", 9400 },
        { "node-3", 9400, NULL, "node-3", 9400 },
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        assert_int_equal(ts_serve_metrics_addr(ok[i].listen, ok[i].port, ok[i].grpc, host,
                                               sizeof(host), &port, NULL), TS_OK);
        assert_string_equal(host, ok[i].host);
        assert_int_equal(port, ok[i].want);
    }
    const struct { const char *listen; int64_t port; } bad[] = {
        { "0.0.0.0", -1 }, { "h:9400", 9401 }, { ":9400", -1 }, { "h:", 9400 },
        { "h:70000", -1 }, { "h:94x", -1 }, { "[::1", 9400 }, { "[::1]x", 9400 },
        { "h:-1", -1 }, { "", 9400 },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct ts_err e = { 0 };
        port = 77;
        assert_int_equal(ts_serve_metrics_addr(bad[i].listen, bad[i].port, "127.0.0.1:0", host,
                                               sizeof(host), &port, &e), TS_EINVAL);
        assert_non_null(strstr(e.msg, "--metrics-listen"));
        assert_int_equal(port, 77);   /* nothing written */
    }
}

/* This process's certificate: stem's of dir. */
static void use_cert(const char *dir, const char *stem)
{
    char cert[300], key[300], ca[300];
    struct ts_err e = { 0 };

    snprintf(cert, sizeof(cert), "%s/%s.pem", dir, stem);
    snprintf(key, sizeof(key), "%s/%s.key", dir, stem);
    snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
    if (ts_rpc_tls_setup(&(struct ts_rpc_tls){ .cert = cert, .key = key, .ca = ca }, &e))
        fail_msg("%s: %s", stem, e.msg);
}

/* One call's peer on each end: the server reads the caller's member, the client the server's
 * (a server made with shard-0's certificate, a channel with client.pem's). Plaintext: none. */
static ts_status peer_call(struct ts_rpc_channel *ch, Tessera__V1__ShardStatusResponse **r,
                           struct ts_rpc_peer *peer, struct ts_err *e)
{
    Tessera__V1__ShardStatusRequest req = TESSERA__V1__SHARD_STATUS_REQUEST__INIT;

    req.map_epoch = PEER_EPOCH;
    return ts_rpc_unary_peer(ch, SHARD_STATUS, &req.base,
                             &tessera__v1__shard_status_response__descriptor,
                             (ProtobufCMessage **)r, 5000, peer, e);
}

static void peer_certificates_on_both_ends(void **state)
{
    (void)state;
    char dir[] = "/tmp/tessera-rpc-peer-XXXXXX", addr[64], stem[TS_MEMBER_MAX + 1], p[300];
    struct ts_rpc_server *srv;
    struct ts_rpc_channel *ch;
    struct ts_rpc_peer peer;
    Tessera__V1__ShardStatusResponse *r;
    struct ts_err e = { 0 };

    unsetenv("TESSERA_TLS_DIR");
    ts_knob_reread();
    assert_int_equal(ts_rpc_tls_setup(NULL, NULL), TS_OK);   /* plaintext */
    assert_non_null(srv = start_server("127.0.0.1:0", &e));
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", ts_rpc_server_port(srv));
    assert_int_equal(ts_rpc_channel_create(addr, NULL, &ch, &e), TS_OK);
    memset(&peer, 0xff, sizeof(peer));
    assert_int_equal(peer_call(ch, &r, &peer, &e), TS_OK);
    assert_string_equal(r->addr, "-");
    assert_false(peer.tls);
    assert_int_equal(peer.roles, 0);
    assert_string_equal(peer.identity, "");
    protobuf_c_message_free_unpacked(&r->base, NULL);
    ts_rpc_channel_free(ch);
    ts_rpc_server_free(srv);

    assert_non_null(mkdtemp(dir));
    assert_int_equal(ts_certs_init(dir, NULL, &e), TS_OK);
    use_cert(dir, "shard-0");        /* read when the server starts */
    assert_non_null(srv = start_server("127.0.0.1:0", &e));
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", ts_rpc_server_port(srv));
    use_cert(dir, "client");         /* read when the channel is made */
    assert_int_equal(ts_rpc_channel_create(addr, NULL, &ch, &e), TS_OK);
    if (peer_call(ch, &r, &peer, &e))
        fail_msg("%s", e.msg);
    assert_string_equal(r->addr, "worker/*");
    assert_true(peer.tls);
    assert_string_equal(peer.identity, "shard/0");
    assert_int_equal(peer.roles, TS_ROLE_SHARD | TS_ROLE_SERVER);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    ts_rpc_channel_free(ch);
    ts_rpc_server_free(srv);

    assert_int_equal(ts_rpc_tls_setup(NULL, NULL), TS_OK);
    for (size_t i = 0; ts_certs_stem(NULL, i, stem, sizeof(stem)); i++) {
        snprintf(p, sizeof(p), "%s/%s.pem", dir, stem);
        unlink(p);
        snprintf(p, sizeof(p), "%s/%s.key", dir, stem);
        unlink(p);
    }
    assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(unary_ok),
        cmocka_unit_test(every_status_reaches_the_client),
        cmocka_unit_test(status_message_ends_without_blanks),
        cmocka_unit_test(unknown_method_is_unimplemented),
        cmocka_unit_test(deadline_exceeded),
        cmocka_unit_test(health_check_and_watch),
    };
    const struct CMUnitTest solo[] = {
        cmocka_unit_test(retries_until_the_server_is_up),
        cmocka_unit_test(shutdown_drains_calls_in_flight),
        cmocka_unit_test(advertised_address),
        cmocka_unit_test(metrics_address),
        cmocka_unit_test(peer_certificates_on_both_ends),
    };
    ts_log_set_level(TS_ERROR);
    return cmocka_run_group_tests(tests, setup, teardown) |
           cmocka_run_group_tests(solo, NULL, NULL);
}
