/* test_transport.c - lib/transport backends (tcp, shm, rdma), each through the same cases:
 * connect and accept, exact byte delivery for sizes from 0 to 40 MiB (larger than the shm and
 * rdma rings), many messages both ways at once, timeouts, interrupts that lose no byte, and
 * every way a peer can disappear (orderly close, shutdown, mid-message, process exit) ending
 * in TS_EUNAVAIL rather than a hang; shared regions passed over shm, an owned one unwritable by
 * its receiver. Each case takes the backend's name as its state. The rdma cases need a verbs
 * device and the address of its interface in TESSERA_RDMA_ADDR (tests/rdma/guest.sh sets
 * both; rdma_cm has no loopback device): elsewhere they skip, saying why. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#if TS_HAVE_RDMA
#include <arpa/inet.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include "transport/rdma_internal.h"
#endif
#include "transport/auth.h"
#include "transport/transport.h"
#include "transport/region.h"
#include "transport/shm_internal.h"     /* shm_set_hello_ms, PENDING_PER_UID */
#include "util/hook.h"
#include "util/knobs.h"
#include "util/proc.h"

#define MIB (1u << 20)

struct pair {
    struct ts_conn *a;        /* the connecting side */
    struct ts_conn *b;        /* the accepting side */
};

static const struct ts_transport_ops *backend(void **state)
{
    const struct ts_transport_ops *t = ts_transport_find((const char *)*state);
    struct ts_err err = { 0 };

    assert_non_null(t);
    if (ts_tp_probe(t, &err) == TS_ENODEV) {
        print_message("skipped: transport %s cannot run here: %s\n", t->name, err.msg);
        skip();
    }
    if (strcmp(t->name, "rdma") == 0 && !getenv("TESSERA_RDMA_ADDR")) {
        print_message("skipped: rdma: set TESSERA_RDMA_ADDR to an address of the RDMA "
                      "device's interface\n");
        skip();
    }
    return t;
}

/* Where a backend's listener binds: the RDMA device's address for rdma. */
static const char *test_host(const struct ts_transport_ops *t)
{
    return strcmp(t->name, "rdma") == 0 ? getenv("TESSERA_RDMA_ADDR") : "127.0.0.1";
}

static void must(ts_status st, const struct ts_err *err, const char *what)
{
    if (st != TS_OK)
        fail_msg("%s: %s: %s", what, ts_status_name(st), err->msg);
}

static struct ts_listener *listen_on(const struct ts_transport_ops *t, struct ts_blob *addr)
{
    struct ts_err err = { 0 };
    struct ts_listener *l = NULL;

    must(ts_tp_listen(t, test_host(t), &l, addr, &err), &err, "listen");
    return l;
}

static struct pair make_pair(const struct ts_transport_ops *t)
{
    struct ts_err err = { 0 };
    struct ts_blob addr = { 0 };
    struct ts_listener *l = listen_on(t, &addr);
    struct pair p = { 0 };

    must(ts_tp_connect(t, &addr, 5000, &p.a, &err), &err, "connect");
    must(ts_tp_accept(l, 5000, &p.b, &err), &err, "accept");
    ts_tp_unlisten(l);
    return p;
}

static void close_pair(struct pair *p)
{
    ts_tp_close(p->a);
    ts_tp_close(p->b);
}

/* Deterministic bytes that differ between messages (seed) and positions. */
static void fill(uint8_t *buf, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

    for (size_t i = 0; i < n; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(buf + i, &x, n - i < 8 ? n - i : 8);
    }
}

struct sender {
    struct ts_conn *c;
    const uint8_t *buf;
    size_t n;
    ts_status st;
    struct ts_err err;
};

static void *send_main(void *arg)
{
    struct sender *s = arg;

    s->st = ts_tp_send(s->c, s->buf, s->n < 16 ? s->n : 16, s->buf + (s->n < 16 ? s->n : 16),
                       s->n < 16 ? 0 : s->n - 16, &s->err);
    return NULL;
}

/* Sends n bytes from `from` in a thread (the receiver must run for big ones) and checks that
 * `to` receives exactly them. */
static void transfer(struct ts_conn *from, struct ts_conn *to, size_t n, uint64_t seed)
{
    uint8_t *out = malloc(n + 1), *in = malloc(n + 1);
    struct sender s = { .c = from, .buf = out, .n = n };
    struct ts_err err = { 0 };
    pthread_t th;

    assert_non_null(out);
    assert_non_null(in);
    fill(out, n, seed);
    assert_int_equal(pthread_create(&th, NULL, send_main, &s), 0);
    must(ts_tp_recv(to, in, n, 10000, &err), &err, "recv");
    pthread_join(th, NULL);
    must(s.st, &s.err, "send");
    assert_memory_equal(in, out, n);
    free(out);
    free(in);
}

static void t_connect_accept(void **state)
{
    const struct ts_transport_ops *t = backend(state);
    struct ts_err err = { 0 };
    struct ts_blob addr = { 0 }, bad = { .len = 3 };
    struct ts_listener *l = listen_on(t, &addr);
    struct ts_conn *c = NULL;
    struct pair p;

    assert_true(addr.len > 0 && addr.len <= TS_BLOB_MAX);
    assert_true(t->usable(&addr));
    /* Nobody connecting: a bounded accept says so. */
    assert_int_equal(ts_tp_accept(l, 20, &c, &err), TS_ETIMEDOUT);
    assert_null(c);
    ts_tp_unlisten(l);
    /* The listener is gone: connecting fails, promptly and without a connection. */
    ts_err_clear(&err);
    assert_int_equal(ts_tp_connect(t, &addr, 1000, &c, &err), TS_EUNAVAIL);
    assert_null(c);
    memcpy(bad.data, "bad", 3);
    ts_err_clear(&err);
    assert_int_equal(ts_tp_connect(t, &bad, 1000, &c, &err), TS_EINVAL);
    assert_true(strlen(err.msg) > 0);

    p = make_pair(t);
    assert_true(strncmp(p.a->peer, t->name, 3) == 0);
    assert_true(strncmp(p.b->peer, t->name, 3) == 0);
    close_pair(&p);
}

static void t_sizes(void **state)
{
    const size_t sizes[] = { 0, 1, 4096, 4 * MIB, 40 * MIB };
    struct pair p = make_pair(backend(state));

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        transfer(p.a, p.b, sizes[i], i);
        transfer(p.b, p.a, sizes[i], i + 100);
    }
    close_pair(&p);
}

/* ---- pinned memory ---- */

/* n bytes of fresh anonymous memory filled from seed, pinned: *id. */
static uint8_t *pinned_buffer(size_t n, uint64_t seed, uint64_t *id)
{
    uint8_t *b = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    assert_true(b != MAP_FAILED);
    fill(b, n, seed);
    *id = ts_tp_pin(b, n);
    assert_true(*id != 0);
    return b;
}

struct pinned_send {
    struct ts_conn *c;
    uint8_t head[16], *body;
    size_t n;
    ts_status st;
    struct ts_err err;
};

/* Sends, waits for the peer's answer (after which the body is the caller's again:
 * transport.h, "Pinned memory") and overwrites the body at once. */
static void *pinned_send_main(void *arg)
{
    struct pinned_send *s = arg;
    uint8_t ack;

    s->st = ts_tp_send(s->c, s->head, sizeof(s->head), s->body, s->n, &s->err);
    if (!s->st)
        s->st = ts_tp_recv(s->c, &ack, 1, 10000, &s->err);
    memset(s->body, 0xff, s->n);
    return NULL;
}

/* Sends a head and the n bytes of body from a thread and checks that `to` receives them as
 * they were, then answers; the sender overwrites the body as soon as it has the answer, so
 * the next send of the same range must carry the new bytes. */
static void send_pinned(struct ts_conn *from, struct ts_conn *to, uint8_t *body, size_t n)
{
    struct pinned_send s = { .c = from, .body = body, .n = n };
    uint8_t *want = malloc(n + sizeof(s.head)), *in = malloc(n + sizeof(s.head)), ack = 1;
    struct ts_err err = { 0 };
    pthread_t th;

    assert_non_null(want);
    assert_non_null(in);
    fill(s.head, sizeof(s.head), n);
    memcpy(want, s.head, sizeof(s.head));
    memcpy(want + sizeof(s.head), body, n);
    assert_int_equal(pthread_create(&th, NULL, pinned_send_main, &s), 0);
    must(ts_tp_recv(to, in, n + sizeof(s.head), 10000, &err), &err, "recv");
    must(ts_tp_send(to, &ack, 1, NULL, 0, &err), &err, "answer");
    pthread_join(th, NULL);
    must(s.st, &s.err, "send");
    assert_memory_equal(in, want, n + sizeof(s.head));
    free(want);
    free(in);
}

/* Pinned memory (transport.h): rdma sends a body of 16 KiB or more from it where it lies,
 * every other backend copies; either way the peer gets the bytes as they were sent, and a
 * range written again after the peer's answer is sent with its new bytes. A range unpinned,
 * unmapped, then mapped and pinned again (the kernel often hands back the same address) is
 * sent from its new pages, not through the old registration. */
static void t_pinned(void **state)
{
    const struct ts_transport_ops *t = backend(state);
    bool in_place = strcmp(t->name, "rdma") == 0;
    struct pair p = make_pair(t);
    const size_t n = 2 * MIB, small = 8192;
    uint64_t id, id2;
    uint8_t *b = pinned_buffer(n, 1, &id);

    send_pinned(p.a, p.b, b, n);
    assert_int_equal(p.a->bytes_in_place, in_place ? n : 0);
    fill(b, n, 2);
    send_pinned(p.a, p.b, b + 12345, n - 12345);   /* inside the range, unaligned */
    assert_int_equal(p.a->bytes_in_place, in_place ? 2 * n - 12345 : 0);
    /* A small body is copied: its lookup would cost more than the copy. */
    send_pinned(p.a, p.b, b, small);
    assert_int_equal(p.a->bytes_in_place, in_place ? 2 * n - 12345 : 0);
    ts_tp_unpin(id);
    /* Not pinned any more: copied. */
    fill(b, n, 3);
    send_pinned(p.a, p.b, b, n);
    assert_int_equal(p.a->bytes_in_place, in_place ? 2 * n - 12345 : 0);
    munmap(b, n);
    b = pinned_buffer(n, 4, &id2);
    assert_true(id2 != id);
    send_pinned(p.a, p.b, b, n);
    assert_int_equal(p.a->bytes_in_place, in_place ? 3 * n - 12345 : 0);
    /* More ranges than a connection keeps registered, sent one after another with no
     * receive between (as a step pushes its tensors): a registration is given up only once
     * the writes that use it completed. */
    {
        enum { RANGES = 70, EACH = 16 << 10 };
        uint8_t *many = mmap(NULL, RANGES * EACH, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), *in = malloc(RANGES * EACH);
        uint64_t ids[RANGES], before = p.a->bytes_in_place;
        struct ts_err err = { 0 };

        assert_true(many != MAP_FAILED);
        assert_non_null(in);
        fill(many, RANGES * EACH, 6);
        for (int r = 0; r < RANGES; r++)
            assert_true((ids[r] = ts_tp_pin(many + r * EACH, EACH)) != 0);
        for (int r = 0; r < RANGES; r++)
            must(ts_tp_send(p.a, NULL, 0, many + r * EACH, EACH, &err), &err, "send a range");
        must(ts_tp_recv(p.b, in, RANGES * EACH, 10000, &err), &err, "recv the ranges");
        assert_memory_equal(in, many, RANGES * EACH);
        assert_int_equal(p.a->bytes_in_place - before, in_place ? RANGES * EACH : 0);
        for (int r = 0; r < RANGES; r++)
            ts_tp_unpin(ids[r]);
        munmap(many, RANGES * EACH);
        free(in);
    }
    /* The other way, on the accepting side's own registration. */
    fill(b, n, 5);
    send_pinned(p.b, p.a, b, n);
    assert_int_equal(p.b->bytes_in_place, in_place ? n : 0);
    close_pair(&p);
    ts_tp_unpin(id2);
    munmap(b, n);
}

/* ---- many messages, both directions at once ---- */

#define NMSG 1500

struct stream {
    struct ts_conn *c;
    uint64_t seed;
    ts_status st;
    struct ts_err err;
    char what[64];
};

static size_t msg_len(uint64_t i)
{
    return (size_t)((i * 7919) % 70000);  /* 0 .. 68 KiB, crossing ring chunk boundaries */
}

static void *tx_main(void *arg)
{
    struct stream *s = arg;
    uint8_t *buf = malloc(70000);
    uint64_t head[2];

    for (uint64_t i = 0; i < NMSG && s->st == TS_OK; i++) {
        head[0] = s->seed + i;
        head[1] = msg_len(i);
        fill(buf, msg_len(i), s->seed + i);
        s->st = ts_tp_send(s->c, head, sizeof(head), buf, msg_len(i), &s->err);
    }
    free(buf);
    return NULL;
}

static void *rx_main(void *arg)
{
    struct stream *s = arg;
    uint8_t *buf = malloc(70000), *want = malloc(70000);
    uint64_t head[2];

    for (uint64_t i = 0; i < NMSG && s->st == TS_OK; i++) {
        if ((s->st = ts_tp_recv(s->c, head, sizeof(head), 10000, &s->err)))
            break;
        if (head[0] != s->seed + i || head[1] != msg_len(i)) {
            s->st = TS_ECORRUPT;
            snprintf(s->what, sizeof(s->what), "message %llu: header out of order",
                     (unsigned long long)i);
            break;
        }
        if ((s->st = ts_tp_recv(s->c, buf, msg_len(i), 10000, &s->err)))
            break;
        fill(want, msg_len(i), s->seed + i);
        if (memcmp(buf, want, msg_len(i)) != 0) {
            s->st = TS_ECORRUPT;
            snprintf(s->what, sizeof(s->what), "message %llu: body differs",
                     (unsigned long long)i);
        }
    }
    free(buf);
    free(want);
    return NULL;
}

static void t_concurrent(void **state)
{
    struct pair p = make_pair(backend(state));
    struct stream s[4] = { { .c = p.a, .seed = 1000 }, { .c = p.b, .seed = 1000 },
                           { .c = p.b, .seed = 5000 }, { .c = p.a, .seed = 5000 } };
    void *(*fn[4])(void *) = { tx_main, rx_main, tx_main, rx_main };
    pthread_t th[4];

    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, fn[i], &s[i]), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++)
        if (s[i].st != TS_OK)
            fail_msg("stream %d: %s: %s %s", i, ts_status_name(s[i].st), s[i].err.msg,
                     s[i].what);
    close_pair(&p);
}

/* ---- timeouts and interrupts ---- */

static void t_timeout(void **state)
{
    struct pair p = make_pair(backend(state));
    struct ts_err err = { 0 };
    uint8_t b[8];

    assert_int_equal(ts_tp_recv(p.b, b, sizeof(b), 30, &err), TS_ETIMEDOUT);
    assert_int_equal(ts_tp_recv(p.b, b, sizeof(b), 0, NULL), TS_ETIMEDOUT);
    /* Nothing was consumed: the connection is still in step. */
    transfer(p.a, p.b, 100, 7);
    close_pair(&p);
}

struct blocked {
    struct ts_conn *c;
    ts_status st;
};

static void *recv_forever(void *arg)
{
    struct blocked *b = arg;
    uint8_t buf[64];

    b->st = ts_tp_recv(b->c, buf, sizeof(buf), -1, NULL);
    return NULL;
}

static void t_interrupt(void **state)
{
    struct pair p = make_pair(backend(state));
    struct blocked b = { .c = p.b, .st = TS_EINTERNAL };
    struct ts_err err = { 0 };
    uint8_t buf[10];
    pthread_t th;

    /* A recv blocked forever wakes up, and the connection still works afterwards. */
    assert_int_equal(pthread_create(&th, NULL, recv_forever, &b), 0);
    ts_sleep_ms(30);
    ts_tp_interrupt(p.b);
    pthread_join(th, NULL);
    assert_int_equal(b.st, TS_ECANCELLED);
    transfer(p.a, p.b, 4096, 3);

    /* An interrupt with no recv waiting is kept for the next one that would wait... */
    ts_tp_interrupt(p.b);
    assert_int_equal(ts_tp_recv(p.b, buf, sizeof(buf), -1, &err), TS_ECANCELLED);
    /* ...but data that has arrived wins (a small send is in the peer's buffer or ring when it
     * returns), and the interrupt then cancels the next wait. */
    memset(buf, 0x33, sizeof(buf));
    must(ts_tp_send(p.a, buf, sizeof(buf), NULL, 0, &err), &err, "send");
    ts_tp_interrupt(p.b);
    memset(buf, 0, sizeof(buf));
    must(ts_tp_recv(p.b, buf, sizeof(buf), -1, &err), &err, "recv with an interrupt pending");
    assert_int_equal(buf[9], 0x33);
    assert_int_equal(ts_tp_recv(p.b, buf, sizeof(buf), -1, NULL), TS_ECANCELLED);
    transfer(p.b, p.a, 10, 5);
    close_pair(&p);
}

/* ---- peers that go away ---- */

static void t_peer_close(void **state)
{
    struct pair p = make_pair(backend(state));
    struct ts_err err = { 0 };
    uint8_t buf[1000] = { 0 };
    ts_status st = TS_OK;

    /* Bytes sent before the close are delivered, then the close is seen. */
    must(ts_tp_send(p.a, buf, 100, NULL, 0, &err), &err, "send");
    ts_tp_close(p.a);
    must(ts_tp_recv(p.b, buf, 100, 5000, &err), &err, "recv before close");
    assert_int_equal(ts_tp_recv(p.b, buf, 10, 5000, &err), TS_EUNAVAIL);
    /* Sending to a closed peer fails (TCP may accept one send before the reset arrives). */
    for (int i = 0; i < 200 && st == TS_OK; i++) {
        st = ts_tp_send(p.b, buf, sizeof(buf), NULL, 0, NULL);
        if (st == TS_OK)
            ts_sleep_ms(1);
    }
    assert_int_equal(st, TS_EUNAVAIL);
    ts_tp_close(p.b);

    /* A peer that closes mid-message: the receiver gets a torn message, not a hang. */
    p = make_pair(backend(state));
    must(ts_tp_send(p.a, buf, 500, NULL, 0, &err), &err, "send");
    ts_tp_close(p.a);
    ts_err_clear(&err);
    assert_int_equal(ts_tp_recv(p.b, buf, 1000, 5000, &err), TS_EUNAVAIL);
    ts_tp_close(p.b);
}

static void t_shutdown(void **state)
{
    struct pair p = make_pair(backend(state));
    struct blocked b = { .c = p.b, .st = TS_EINTERNAL };
    uint8_t buf[8];
    pthread_t th;

    /* Shutdown from another thread ends a blocked recv without freeing the connection. */
    assert_int_equal(pthread_create(&th, NULL, recv_forever, &b), 0);
    ts_sleep_ms(30);
    ts_tp_shutdown(p.b);
    pthread_join(th, NULL);
    assert_int_equal(b.st, TS_EUNAVAIL);
    assert_int_equal(ts_tp_send(p.b, buf, sizeof(buf), NULL, 0, NULL), TS_EUNAVAIL);
    /* The peer sees the connection closed. */
    assert_int_equal(ts_tp_recv(p.a, buf, sizeof(buf), 5000, NULL), TS_EUNAVAIL);
    close_pair(&p);
}

/* The child of t_peer_exits, a fresh process (exec'd: a verbs context does not survive a
 * fork): connects to the blob with the backend, sends 64 bytes when asked, and exits without
 * closing anything. */
static int peer_exits_child(const char *name, const char *blob, const char *sends)
{
    const struct ts_transport_ops *t = ts_transport_find(name);
    struct ts_blob addr = { .len = strlen(blob) };
    struct ts_conn *c = NULL;
    uint8_t buf[64];

    if (!t || addr.len > sizeof(addr.data))
        return 3;
    memcpy(addr.data, blob, addr.len);
    if (ts_tp_connect(t, &addr, 5000, &c, NULL) != TS_OK)
        return 1;
    memset(buf, 0x5a, sizeof(buf));
    if (strcmp(sends, "1") == 0 && ts_tp_send(c, buf, sizeof(buf), NULL, 0, NULL) != TS_OK)
        return 2;
    _exit(0);
}

/* A child process connects, optionally sends n bytes, and exits without closing anything. */
static void t_peer_exits(void **state)
{
    const struct ts_transport_ops *t = backend(state);
    struct ts_blob addr = { 0 };
    struct ts_listener *l = listen_on(t, &addr);
    struct ts_err err = { 0 };
    uint8_t buf[64];
    int status;

    for (int sends = 0; sends < 2; sends++) {
        struct ts_conn *c = NULL;
        uint8_t *big;
        char blob[TS_BLOB_MAX + 1];
        pid_t pid;

        memcpy(blob, addr.data, addr.len);
        blob[addr.len] = '\0';
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            execl("/proc/self/exe", "test_transport", "peer-exits-child", t->name, blob,
                  sends ? "1" : "0", (char *)NULL);
            _exit(4);
        }
        must(ts_tp_accept(l, 5000, &c, &err), &err, "accept");
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        if (sends && strcmp(t->name, "rdma") == 0) {
            /* A write the dying process had posted may or may not have left its host (no
             * kernel buffer outlives it): the bytes, or the end; never a hang. */
            ts_status st = ts_tp_recv(c, buf, sizeof(buf), 5000, &err);
            assert_true(st == TS_OK || st == TS_EUNAVAIL);
            if (st == TS_OK)
                assert_int_equal(buf[63], 0x5a);
        } else if (sends) {
            must(ts_tp_recv(c, buf, sizeof(buf), 5000, &err), &err, "recv from exited child");
            assert_int_equal(buf[63], 0x5a);
        }
        assert_int_equal(ts_tp_recv(c, buf, sizeof(buf), 5000, &err), TS_EUNAVAIL);
        /* A sender into the dead peer fails too, even past what buffers or the ring hold. */
        big = calloc(1, 40 * MIB);
        assert_int_equal(ts_tp_send(c, big, 40 * MIB, NULL, 0, NULL), TS_EUNAVAIL);
        free(big);
        ts_tp_close(c);
    }
    ts_tp_unlisten(l);
}

/* ---- shared regions (region.h) and descriptors beside the stream ---- */

/* shm passes descriptors in order, beside the bytes; both ends then see the same memory.
 * tcp cannot, and says so. */
static void t_regions(void **state)
{
    const struct ts_transport_ops *t = backend(state);
    struct pair p = make_pair(t);
    struct ts_err err = { 0 };
    struct ts_region r1, r2, m1 = TS_REGION_NONE, m2 = TS_REGION_NONE;
    int fd1 = -1, fd2 = -1;

    if (strcmp(t->name, "shm") != 0) {
        assert_false(ts_tp_can_share(p.a));
        assert_false(ts_tp_can_share(p.b));
        close_pair(&p);
        return;
    }
    assert_true(ts_tp_can_share(p.a) && ts_tp_can_share(p.b));
    must(ts_region_create("t1", 10000, TS_REGION_OWNED, &r1, &err), &err, "create");
    must(ts_region_create("t2", 3 * ts_page_size(), TS_REGION_OWNED, &r2, &err), &err,
         "create");
    assert_int_equal(r1.size, ts_page_round(10000));
    /* No descriptor yet: a bounded wait. */
    assert_int_equal(ts_tp_recv_fd(p.b, 20, &fd1, &err), TS_ETIMEDOUT);
    ts_err_clear(&err);
    must(ts_tp_send_fd(p.a, r1.fd, &err), &err, "send r1");
    must(ts_tp_send_fd(p.a, r2.fd, &err), &err, "send r2");
    must(ts_tp_recv_fd(p.b, 1000, &fd1, &err), &err, "recv 1");
    must(ts_tp_recv_fd(p.b, 1000, &fd2, &err), &err, "recv 2");
    must(ts_region_map(fd1, 10000, TS_REGION_OWNED, &m1, &err), &err, "map 1");
    assert_int_equal(m1.size, r1.size);
    memcpy(r1.base, "written by the creator", 23);
    assert_string_equal((const char *)m1.base, "written by the creator");
    /* Wanting more than there is, or mapping a part that is not page-aligned, is refused. */
    assert_int_equal(ts_region_map(dup(fd2), 4 * ts_page_size(), TS_REGION_OWNED, &m2, &err),
                     TS_ECORRUPT);
    assert_non_null(strstr(err.msg, "at least"));
    ts_err_clear(&err);
    {
        uint8_t *at = mmap(NULL, 2 * ts_page_size(), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
                           -1, 0);
        assert_true(at != MAP_FAILED);
        assert_int_equal(ts_region_map_at(fd2, at, 100, 64, &err), TS_ECORRUPT);
        assert_int_equal(ts_region_map_at(fd2, at, 2 * ts_page_size(), ts_page_size() + 1,
                                          &err), TS_ECORRUPT);
        ts_err_clear(&err);
        ((uint8_t *)r2.base)[ts_page_size() + 5] = 42;
        must(ts_region_map_at(fd2, at, ts_page_size(), 10, &err), &err, "map_at");
        assert_int_equal(at[5], 42);
        munmap(at, 2 * ts_page_size());
    }
    close(fd2);
    /* A memfd not sealed against shrinking would let its owner make us fault: refused. */
    {
        int raw = memfd_create("unsealed", MFD_CLOEXEC);
        assert_true(raw >= 0);
        assert_int_equal(ftruncate(raw, 4096), 0);
        ts_err_clear(&err);
        assert_int_equal(ts_region_map(raw, 1, TS_REGION_OWNED, &m2, &err), TS_ECORRUPT);
        assert_non_null(strstr(err.msg, "sealed"));
        assert_null(m2.base);
    }
    ts_region_free(&m1);
    ts_region_free(&r1);
    ts_region_free(&r2);
    ts_region_free(&r2);   /* freeing twice is harmless */
    close_pair(&p);
}

/* Whether a writable shared mapping of fd is refused (and so not made). */
static bool no_writable_map(int fd, size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

    if (p != MAP_FAILED) {
        munmap(p, n);
        return false;
    }
    return errno == EPERM || errno == EACCES;
}

/* An owned region as a receiver gets it: no way to write it, not through the descriptor, a
 * re-open of it, a read-only mapping made writable, a hole punched, or a seal added; the
 * creator's mapping still writes and the receiver sees it. A shared region is refused where
 * an owned one is expected, and is writable by its receiver. */
static void t_region_owned(void **state)
{
    struct pair p = make_pair(backend(state));
    struct ts_err err = { 0 };
    struct ts_region r, s, m = TS_REGION_NONE;
    size_t n = 2 * ts_page_size();
    char path[64];
    uint8_t *ro;
    int fd = -1, re;

    must(ts_region_create("owned", n, TS_REGION_OWNED, &r, &err), &err, "create");
    must(ts_tp_send_fd(p.a, r.fd, &err), &err, "send");
    must(ts_tp_recv_fd(p.b, 1000, &fd, &err), &err, "recv");
    assert_true(no_writable_map(fd, n));
    assert_int_equal(pwrite(fd, "x", 1, 0), -1);
    assert_int_equal(errno, EPERM);
    assert_int_equal(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096), -1);
    assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), -1);
    /* memfds are mode 0777: the re-open works, writing through it does not. */
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    re = open(path, O_RDWR | O_CLOEXEC);
    assert_true(re >= 0);
    assert_true(no_writable_map(re, n));
    assert_int_equal(pwrite(re, "x", 1, 0), -1);
    close(re);
    ro = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
    assert_true(ro != MAP_FAILED);
    assert_int_equal(mprotect(ro, n, PROT_READ | PROT_WRITE), -1);
    /* The creator's mapping still writes, after the seal, and the receiver sees it. */
    memcpy(r.base, "owner", 6);
    assert_string_equal((const char *)ro, "owner");
    munmap(ro, n);
    must(ts_region_map(fd, n, TS_REGION_OWNED, &m, &err), &err, "map owned");
    ((uint8_t *)r.base)[n - 1] = 7;
    assert_int_equal(((const uint8_t *)m.base)[n - 1], 7);
    ts_region_free(&m);

    /* A shared region where an owned one is expected: refused, whole or in part. */
    must(ts_region_create("shared", n, TS_REGION_SHARED, &s, &err), &err, "create shared");
    must(ts_tp_send_fd(p.a, s.fd, &err), &err, "send shared");
    must(ts_tp_recv_fd(p.b, 1000, &fd, &err), &err, "recv shared");
    {
        uint8_t *at = mmap(NULL, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        assert_true(at != MAP_FAILED);
        assert_int_equal(ts_region_map_at(fd, at, 0, n, &err), TS_ECORRUPT);
        assert_non_null(strstr(err.msg, "writes by others"));
        munmap(at, n);
    }
    ts_err_clear(&err);
    assert_int_equal(ts_region_map(dup(fd), n, TS_REGION_OWNED, &m, &err), TS_ECORRUPT);
    assert_non_null(strstr(err.msg, "F_SEAL_FUTURE_WRITE"));
    assert_null(m.base);
    /* Mapped as shared, it is writable by the receiver, as asked. */
    must(ts_region_map(fd, n, TS_REGION_SHARED, &m, &err), &err, "map shared");
    ((uint8_t *)m.base)[3] = 9;
    assert_int_equal(((const uint8_t *)s.base)[3], 9);
    ts_region_free(&m);
    ts_region_free(&s);
    ts_region_free(&r);
    close_pair(&p);
}

/* ---- addresses and the table ---- */

static void t_usable(void **state)
{
    const struct ts_transport_ops *t = backend(state);
    struct ts_blob addr = { 0 }, other;
    struct ts_listener *l = listen_on(t, &addr);
    struct ts_conn *c = NULL;
    struct ts_err err = { 0 };

    assert_true(t->usable(&addr));
    if (strcmp(t->name, "shm") == 0) {
        /* Another host's boot id (the first 36 bytes of the blob), then another netns. */
        other = addr;
        memcpy(other.data, "00000000-1111-2222-3333-444444444444", 36);
        assert_false(t->usable(&other));
        assert_int_equal(ts_tp_connect(t, &other, 1000, &c, &err), TS_EUNAVAIL);
        assert_non_null(strstr(err.msg, "tcp"));
        other = addr;
        other.data[37] = other.data[37] == '1' ? '2' : '1';
        assert_false(t->usable(&other));
        other.len = 5;
        assert_false(t->usable(&other));
    }
    ts_tp_unlisten(l);
}

/* ---- the shm listener: its directory, who gets in, and no head-of-line blocking ---- */

/* The socket's path in an shm address ("BOOTID NETNS PATH"). */
static void blob_path(const struct ts_blob *b, char *path)
{
    char text[TS_BLOB_MAX + 1];

    memcpy(text, b->data, b->len);
    text[b->len] = '\0';
    assert_int_equal(sscanf(text, "%*s %*s %107s", path), 1);
}

/* A raw connection to the socket at path that sends nothing. */
static int silent_connect(const char *path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    assert_true(fd >= 0);
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

/* Whether the peer of fd has closed it (within ms). */
static bool hung_up(int fd, int ms)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };
    char b;

    return poll(&p, 1, ms) == 1 && recv(fd, &b, 1, MSG_DONTWAIT) == 0;
}

/* Accepts until a connection comes, allowing only errors about other peers (those it closed
 * while waiting): TS_EUNAVAIL. */
static struct ts_conn *accept_through(struct ts_listener *l, int *dropped)
{
    struct ts_err err = { 0 };
    struct ts_conn *c = NULL;
    ts_status st;

    *dropped = 0;
    while ((st = ts_tp_accept(l, 5000, &c, &err)) == TS_EUNAVAIL) {
        (*dropped)++;
        ts_err_clear(&err);
    }
    must(st, &err, "accept");
    return c;
}

/* The socket is a file in a directory of mode 0700 that is ours; both go with the listener. */
static void t_shm_dir(void **state)
{
    struct ts_blob addr = { 0 };
    struct ts_listener *l = listen_on(backend(state), &addr);
    char path[108], dir[108];
    struct stat st;

    blob_path(&addr, path);
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    snprintf(dir, sizeof(dir), "%.*s", (int)(strrchr(path, '/') - path), path);
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0700);
    assert_int_equal(st.st_uid, geteuid());
    assert_non_null(strstr(dir, "/tessera-shm-"));
    ts_tp_unlisten(l);
    assert_int_equal(stat(path, &st), -1);
    assert_int_equal(stat(dir, &st), -1);
}

/* $TESSERA_SHM_DIR is the base; a directory a dead process of ours left there (kill -9) is
 * swept at the next listen, a live one's and another pid namespace's are not; a base too long
 * for a socket path, one with a space, a relative one and an unknown TESSERA_SHM_GROUP are
 * refused. */
static void t_shm_dir_env(void **state)
{
    const struct ts_transport_ops *t = backend(state);
    char base[] = "/tmp/tessera-test-XXXXXX", ns[64], link[64], dead[160], live[160];
    char other[160], path[108], longer[200];
    struct ts_listener *l = NULL;
    struct ts_blob addr = { 0 };
    struct ts_err err = { 0 };
    struct stat st;
    ssize_t n;
    pid_t pid;

    assert_non_null(mkdtemp(base));
    n = readlink("/proc/self/ns/pid", link, sizeof(link) - 1);
    assert_true(n > 5);
    link[n] = '\0';
    snprintf(ns, sizeof(ns), "%.*s", (int)strspn(link + 5, "0123456789"), link + 5);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(0);
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    snprintf(dead, sizeof(dead), "%s/tessera-shm-%s-%d-AbCdEf", base, ns, (int)pid);
    snprintf(live, sizeof(live), "%s/tessera-shm-%s-%d-AbCdEf", base, ns, (int)getpid());
    snprintf(other, sizeof(other), "%s/tessera-shm-1%s-%d-AbCdEf", base, ns, (int)pid);
    assert_int_equal(mkdir(dead, 0700), 0);
    assert_int_equal(mkdir(live, 0700), 0);
    assert_int_equal(mkdir(other, 0700), 0);
    snprintf(path, sizeof(path), "%s/sock", dead);
    close(open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600));

    setenv("TESSERA_SHM_DIR", base, 1);
    ts_knob_reread();
    must(ts_tp_listen(t, NULL, &l, &addr, &err), &err, "listen in TESSERA_SHM_DIR");
    blob_path(&addr, path);
    assert_int_equal(strncmp(path, base, strlen(base)), 0);
    assert_int_equal(stat(dead, &st), -1);
    assert_int_equal(stat(live, &st), 0);
    assert_int_equal(stat(other, &st), 0);
    ts_tp_unlisten(l);
    rmdir(live);
    rmdir(other);

    memset(longer, 'a', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    memcpy(longer, "/tmp/", 5);
    setenv("TESSERA_SHM_DIR", longer, 1);
    ts_knob_reread();
    assert_int_equal(ts_tp_listen(t, NULL, &l, &addr, &err), TS_EINVAL);
    assert_non_null(strstr(err.msg, "too long"));
    ts_err_clear(&err);
    setenv("TESSERA_SHM_DIR", "/tmp/a b", 1);
    ts_knob_reread();
    assert_int_equal(ts_tp_listen(t, NULL, &l, &addr, &err), TS_EINVAL);
    assert_non_null(strstr(err.msg, "white space"));
    ts_err_clear(&err);
    setenv("TESSERA_SHM_DIR", "tmp", 1);
    ts_knob_reread();
    assert_int_equal(ts_tp_listen(t, NULL, &l, &addr, &err), TS_EINVAL);
    assert_non_null(strstr(err.msg, "absolute"));
    unsetenv("TESSERA_SHM_DIR");
    ts_knob_reread();
    ts_err_clear(&err);
    setenv("TESSERA_SHM_GROUP", "no-such-group-tessera", 1);
    ts_knob_reread();
    assert_int_equal(ts_tp_listen(t, NULL, &l, &addr, &err), TS_EINVAL);
    assert_non_null(strstr(err.msg, "TESSERA_SHM_GROUP"));
    unsetenv("TESSERA_SHM_GROUP");
    ts_knob_reread();
    assert_int_equal(rmdir(base), 0);   /* nothing was left in it */
}

/* Fifty connections that never send their hello do not delay a real one: accept returns it
 * at once (one at a time, each would have held it for HELLO_MS, 5 s: over four minutes). The
 * oldest silent ones of the uid are closed to make room; the rest go with the listener. */
static void t_shm_silent(void **state)
{
    const struct ts_transport_ops *t = backend(state);
    struct ts_blob addr = { 0 };
    struct ts_listener *l = listen_on(t, &addr);
    struct ts_err err = { 0 };
    struct ts_conn *a = NULL, *b;
    int silent[50], dropped, closed = 0;
    char path[108];
    int64_t t0;

    blob_path(&addr, path);
    for (int i = 0; i < 50; i++)
        silent[i] = silent_connect(path);
    t0 = ts_now_ms();
    must(ts_tp_connect(t, &addr, 5000, &a, &err), &err, "connect");
    b = accept_through(l, &dropped);
    /* Far below one HELLO_MS, with room for a loaded machine. */
    assert_true(ts_now_ms() - t0 < 1000);
    transfer(a, b, 4096, 11);
    for (int i = 0; i < 50; i++)
        closed += hung_up(silent[i], 0);
    /* All but the PENDING_PER_UID - 1 newest silent ones (the real one was the last in). */
    assert_int_equal(dropped, 50 - (PENDING_PER_UID - 1));
    assert_int_equal(closed, 50 - (PENDING_PER_UID - 1));
    for (int i = 0; i < PENDING_PER_UID - 1; i++)
        assert_false(hung_up(silent[50 - 1 - i], 0));
    ts_tp_unlisten(l);
    for (int i = 0; i < 50; i++) {
        assert_true(i < 50 - (PENDING_PER_UID - 1) || hung_up(silent[i], 1000));
        close(silent[i]);
    }
    ts_tp_close(a);
    ts_tp_close(b);
}

/* A connection whose hello never comes is closed after the hello timeout (shortened here),
 * with an error naming it; the listener goes on; one that hangs up first is named too. */
static void t_shm_hello_timeout(void **state)
{
    const struct ts_transport_ops *t = backend(state);
    struct ts_blob addr = { 0 };
    struct ts_listener *l;
    struct ts_err err = { 0 };
    struct ts_conn *a = NULL, *b = NULL;
    char path[108];
    int fd;

    shm_set_hello_ms(100);
    l = listen_on(t, &addr);
    blob_path(&addr, path);
    fd = silent_connect(path);
    assert_int_equal(ts_tp_accept(l, 5000, &b, &err), TS_EUNAVAIL);
    assert_non_null(strstr(err.msg, "no hello within 100 ms"));
    assert_null(b);
    assert_true(hung_up(fd, 1000));
    close(fd);
    close(silent_connect(path));
    ts_err_clear(&err);
    assert_int_equal(ts_tp_accept(l, 5000, &b, &err), TS_EUNAVAIL);
    assert_non_null(strstr(err.msg, "hung up before its hello"));
    must(ts_tp_connect(t, &addr, 5000, &a, &err), &err, "connect");
    must(ts_tp_accept(l, 5000, &b, &err), &err, "accept after the silent one");
    transfer(a, b, 100, 12);
    ts_tp_close(a);
    ts_tp_close(b);
    ts_tp_unlisten(l);
    shm_set_hello_ms(0);
}

/* Tests as root only: ids of a user and group that nothing else here uses. */
#define OTHER_UID 47111
#define OTHER_GID 47112
#define SHM_GID 47113

/* In a child: becomes OTHER_UID with primary group gid and supplementary groups sup (n). */
static void become(gid_t gid, const gid_t *sup, size_t n)
{
    if (setgroups(n, sup) != 0 || setresgid(gid, gid, gid) != 0 ||
        setresuid(OTHER_UID, OTHER_UID, OTHER_UID) != 0)
        _exit(90);
}

static int child_status(pid_t pid)
{
    int status;

    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* Who gets in, checked by the kernel: with TESSERA_SHM_GROUP, a process of another user whose
 * group is that one connects and is accepted; one that is in the group only as a
 * supplementary group reaches the socket, but accept refuses it (TS_EAUTH, naming its uid and
 * pid) before reading anything, and the listener goes on. Without a group, another user cannot
 * even reach the socket, and usable() says so (it gets tcp). */
static void t_shm_peers(void **state)
{
    const struct ts_transport_ops *t = backend(state);
    const gid_t sup = SHM_GID;
    struct ts_blob addr = { 0 };
    struct ts_listener *l;
    struct ts_err err = { 0 };
    struct ts_conn *c = NULL;
    char path[108], want[64];
    uint8_t buf[8];
    pid_t pid;

    if (geteuid() != 0) {
        print_message("skipped: other users' processes need root\n");
        skip();
    }
    setenv("TESSERA_SHM_GROUP", "47113", 1);
    ts_knob_reread();
    l = listen_on(t, &addr);
    unsetenv("TESSERA_SHM_GROUP");
    ts_knob_reread();
    blob_path(&addr, path);
    /* In the group: usable, connects, is accepted, talks. */
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        become(SHM_GID, NULL, 0);
        if (!t->usable(&addr) || ts_tp_connect(t, &addr, 5000, &c, NULL))
            _exit(1);
        memset(buf, 0x77, sizeof(buf));
        _exit(ts_tp_send(c, buf, sizeof(buf), NULL, 0, NULL) ? 2 : 0);
    }
    must(ts_tp_accept(l, 5000, &c, &err), &err, "accept a member of the group");
    must(ts_tp_recv(c, buf, sizeof(buf), 5000, &err), &err, "recv");
    assert_int_equal(buf[7], 0x77);
    assert_int_equal(child_status(pid), 0);
    ts_tp_close(c);
    /* In it only as a supplementary group: not usable, and refused when it connects anyway. */
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd;
        become(OTHER_GID, &sup, 1);
        if (t->usable(&addr))
            _exit(1);
        fd = silent_connect(path);
        _exit(hung_up(fd, 5000) ? 0 : 2);
    }
    assert_int_equal(ts_tp_accept(l, 5000, &c, &err), TS_EAUTH);
    snprintf(want, sizeof(want), "refused pid %d of uid %d", (int)pid, OTHER_UID);
    assert_non_null(strstr(err.msg, want));
    assert_int_equal(child_status(pid), 0);
    ts_tp_unlisten(l);

    /* No group: another user cannot reach the socket at all. */
    l = listen_on(t, &addr);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        become(OTHER_GID, &sup, 1);
        _exit(t->usable(&addr) || ts_tp_connect(t, &addr, 1000, &c, NULL) != TS_EUNAVAIL);
    }
    assert_int_equal(child_status(pid), 0);
    assert_int_equal(ts_tp_accept(l, 50, &c, &err), TS_ETIMEDOUT);
    ts_tp_unlisten(l);
}

/* The connector's side: a socket in our directory that a process of another user listens on
 * (a path swapped under us) is refused (TS_EAUTH) before the memfd goes anywhere. */
static void t_shm_swapped(void **state)
{
    const struct ts_transport_ops *t = backend(state);
    char dir[] = "/tmp/tessera-test-XXXXXX", text[TS_BLOB_MAX + 1], boot[40], netns[24];
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    struct ts_blob addr = { 0 }, fake = { 0 };
    struct ts_listener *l;
    struct ts_err err = { 0 };
    struct ts_conn *c = NULL;
    int ready[2], hold[2], fd;
    pid_t pid;
    char b;

    if (geteuid() != 0) {
        print_message("skipped: other users' processes need root\n");
        skip();
    }
    l = listen_on(t, &addr);    /* for this host's boot id and netns */
    memcpy(text, addr.data, addr.len);
    text[addr.len] = '\0';
    assert_int_equal(sscanf(text, "%39s %23s", boot, netns), 2);
    ts_tp_unlisten(l);
    assert_non_null(mkdtemp(dir));
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/sock", dir);
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(hold), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* Bound as root (so the file is ours), listening as another user; held until the
         * test closes hold (or ends, failed or not). */
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
            _exit(1);
        close(ready[0]);
        close(hold[1]);
        become(OTHER_GID, NULL, 0);
        if (listen(fd, 8) != 0 || write(ready[1], "r", 1) != 1)
            _exit(2);
        close(ready[1]);
        _exit(read(hold[0], &b, 1) == 0 ? 0 : 3);
    }
    close(ready[1]);
    close(hold[0]);
    assert_int_equal(read(ready[0], &b, 1), 1);
    close(ready[0]);
    fake.len = (size_t)snprintf((char *)fake.data, sizeof(fake.data), "%s %s %s", boot, netns,
                                sa.sun_path);
    assert_true(t->usable(&fake));
    assert_int_equal(ts_tp_connect(t, &fake, 1000, &c, &err), TS_EAUTH);
    assert_non_null(strstr(err.msg, "held by uid 47111"));
    assert_null(c);
    close(hold[1]);
    assert_int_equal(child_status(pid), 0);
    unlink(sa.sun_path);
    rmdir(dir);
}

#if TS_HAVE_RDMA
/* ---- rdma: a raw verbs peer that breaks the protocol ---- */

struct raw_peer {
    struct rdma_event_channel *ec;
    struct rdma_cm_id *id;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_mr *mr;
    uint8_t buf[64 * 1024];
    struct rdma_wire_info theirs;
};

/* The next event on r's channel: 0 when it is `want` (the REP's private data into theirs). */
static int raw_event(struct raw_peer *r, enum rdma_cm_event_type want)
{
    struct rdma_cm_event *ev;
    int ok;

    if (rdma_get_cm_event(r->ec, &ev))
        return -1;
    ok = ev->event == want;
    if (ok && want == RDMA_CM_EVENT_ESTABLISHED &&
        ev->param.conn.private_data_len >= sizeof(r->theirs))
        memcpy(&r->theirs, ev->param.conn.private_data, sizeof(r->theirs));
    rdma_ack_cm_event(ev);
    return ok ? 0 : -1;
}

/* Connects a raw rdma_cm peer to addr with `info` as its private data; 0 once established,
 * -1 when refused. */
static int raw_connect(struct raw_peer *r, const struct ts_blob *addr,
                       const struct rdma_wire_info *info)
{
    struct addrinfo hints = { .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV }, *res;
    struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC,
                                   .cap = { .max_send_wr = 8, .max_recv_wr = 8,
                                            .max_send_sge = 1, .max_recv_sge = 1 } };
    struct rdma_conn_param cp = { .private_data = info, .private_data_len = sizeof(*info),
                                  .retry_count = 7, .rnr_retry_count = 7 };
    char text[TS_BLOB_MAX + 1], *colon;

    memcpy(text, addr->data, addr->len);
    text[addr->len] = '\0';
    colon = strrchr(text, ':');
    *colon = '\0';
    assert_int_equal(getaddrinfo(text, colon + 1, &hints, &res), 0);
    assert_non_null(r->ec = rdma_create_event_channel());
    assert_int_equal(rdma_create_id(r->ec, &r->id, NULL, RDMA_PS_TCP), 0);
    assert_int_equal(rdma_resolve_addr(r->id, NULL, res->ai_addr, 2000), 0);
    freeaddrinfo(res);
    assert_int_equal(raw_event(r, RDMA_CM_EVENT_ADDR_RESOLVED), 0);
    assert_int_equal(rdma_resolve_route(r->id, 2000), 0);
    assert_int_equal(raw_event(r, RDMA_CM_EVENT_ROUTE_RESOLVED), 0);
    assert_non_null(r->pd = ibv_alloc_pd(r->id->verbs));
    assert_non_null(r->cq = ibv_create_cq(r->id->verbs, 16, NULL, NULL, 0));
    qa.send_cq = qa.recv_cq = r->cq;
    assert_int_equal(rdma_create_qp(r->id, r->pd, &qa), 0);
    assert_non_null(r->mr = ibv_reg_mr(r->pd, r->buf, sizeof(r->buf),
                                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
    assert_int_equal(rdma_connect(r->id, &cp), 0);
    return raw_event(r, RDMA_CM_EVENT_ESTABLISHED);
}

static void raw_close(struct raw_peer *r)
{
    rdma_disconnect(r->id);
    if (r->id->qp)
        rdma_destroy_qp(r->id);
    if (r->mr)
        ibv_dereg_mr(r->mr);
    ibv_destroy_cq(r->cq);
    ibv_dealloc_pd(r->pd);
    rdma_destroy_id(r->id);
    rdma_destroy_event_channel(r->ec);
}

/* One WRITE_WITH_IMM of len bytes from r's buffer at the peer's ring + off; 0 when it
 * completed, else the completion's status. */
static int raw_write(struct raw_peer *r, uint64_t off, uint32_t len, uint32_t imm)
{
    struct ibv_sge sge = { .addr = (uintptr_t)r->buf, .length = len, .lkey = r->mr->lkey };
    struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1,
                              .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                              .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(imm),
                              .wr.rdma = { .remote_addr = r->theirs.ring_addr + off,
                                           .rkey = r->theirs.ring_rkey } }, *bad;
    struct ibv_wc wc;
    int n;

    assert_int_equal(ibv_post_send(r->id->qp, &wr, &bad), 0);
    while ((n = ibv_poll_cq(r->cq, 1, &wc)) == 0)
        ;
    assert_int_equal(n, 1);
    return wc.status;
}

/* A peer whose connection data is wrong is refused at connection time and the listener goes
 * on; one that writes past the ring, or announces more bytes than its credit, ends its own
 * connection (TS_EUNAVAIL on the receiver, whatever it wrote unread) and nothing else. */
static void t_rdma_bad_peer(void **state)
{
    const struct ts_transport_ops *t = backend(state);
    struct ts_blob addr = { 0 };
    struct ts_listener *l = listen_on(t, &addr);
    struct rdma_wire_info good = { .magic = RDMA_WIRE_MAGIC, .version = RDMA_WIRE_VERSION,
                                   .ring_size = RDMA_RING }, bad;
    struct ts_err err = { 0 };
    struct ts_conn *c = NULL, *a = NULL;
    uint8_t buf[16];

    /* Refused: not our protocol, another version, another ring size. */
    for (int k = 0; k < 3; k++) {
        struct raw_peer *r = calloc(1, sizeof(*r));
        bad = good;
        if (k == 0)
            bad.magic = 0;
        else if (k == 1)
            bad.version = 99;
        else
            bad.ring_size = RDMA_RING * 2;
        assert_int_equal(raw_connect(r, &addr, &bad), -1);
        raw_close(r);
        free(r);
    }
    assert_int_equal(ts_tp_accept(l, 50, &c, &err), TS_ETIMEDOUT);

    /* Past the ring: the NIC refuses the write (the key covers the ring only). */
    for (int k = 0; k < 2; k++) {
        struct raw_peer *r = calloc(1, sizeof(*r));
        good.ring_addr = (uintptr_t)r->buf;
        assert_int_equal(raw_connect(r, &addr, &good), 0);
        must(ts_tp_accept(l, 5000, &c, &err), &err, "accept the raw peer");
        if (k == 0)
            assert_int_not_equal(raw_write(r, RDMA_RING - 8, 64, 64), IBV_WC_SUCCESS);
        else   /* 8 bytes written, 1 more than the ring announced */
            assert_int_equal(raw_write(r, 0, 8, RDMA_RING + 1), IBV_WC_SUCCESS);
        ts_err_clear(&err);
        assert_int_equal(ts_tp_recv(c, buf, sizeof(buf), 5000, &err), TS_EUNAVAIL);
        assert_true(strlen(err.msg) > 0);
        ts_tp_close(c);
        raw_close(r);
        free(r);
    }

    /* The listener still serves a real peer. */
    must(ts_tp_connect(t, &addr, 5000, &a, &err), &err, "connect");
    must(ts_tp_accept(l, 5000, &c, &err), &err, "accept");
    memset(buf, 7, sizeof(buf));
    must(ts_tp_send(a, buf, sizeof(buf), NULL, 0, &err), &err, "send");
    memset(buf, 0, sizeof(buf));
    must(ts_tp_recv(c, buf, sizeof(buf), 5000, &err), &err, "recv");
    assert_int_equal(buf[15], 7);
    ts_tp_close(a);
    ts_tp_close(c);
    ts_tp_unlisten(l);
}
#endif

static void t_table(void **state)
{
    size_t k = 0;

    assert_ptr_equal(ts_transports[k++], &ts_transport_shm);
#if TS_HAVE_RDMA
    assert_ptr_equal(ts_transports[k++], &ts_transport_rdma);
    assert_ptr_equal(ts_transport_find("rdma"), &ts_transport_rdma);
#else
    assert_null(ts_transport_find("rdma"));
#endif
    assert_ptr_equal(ts_transports[k++], &ts_transport_tcp);
    assert_null(ts_transports[k]);
    assert_ptr_equal(ts_transport_find("tcp"), &ts_transport_tcp);
    assert_ptr_equal(ts_transport_find("shm"), &ts_transport_shm);
    assert_null(ts_transport_find("nccl"));
    assert_null(ts_transport_find(NULL));
}

/* TESSERA_DATA_MAC (docs/security.md): "always" MACs a local connection too; "never" turns
 * MACs off between hosts only in a build with test hooks (util/hook.h): any other keeps them. */
static void t_data_mac_setting(void **state)
{
    struct ts_conn remote = { .local_in = false }, local = { .local_in = true };

    (void)state;
    unsetenv("TESSERA_DATA_MAC");
    ts_knob_reread();
    assert_true(ts_dp_mac_wanted(&remote));
    assert_false(ts_dp_mac_wanted(&local));
    setenv("TESSERA_DATA_MAC", "always", 1);
    ts_knob_reread();
    assert_true(ts_dp_mac_wanted(&local));
    setenv("TESSERA_DATA_MAC", "never", 1);
    ts_knob_reread();
    assert_int_equal(ts_dp_mac_wanted(&remote), !TS_TEST_HOOKS);
    assert_false(ts_dp_mac_wanted(&local));
    unsetenv("TESSERA_DATA_MAC");
    ts_knob_reread();
}

/* cmocka_unit_test_prestate, with the backend in the name. */
#if TS_HAVE_RDMA
#define RDMA(f) , { #f "/rdma", f, NULL, NULL, "rdma" }
#define RDMA_ONLY(f) { #f "/rdma", f, NULL, NULL, "rdma" },
#else
#define RDMA(f)
#define RDMA_ONLY(f)
#endif
/* Every backend this build has. */
#define EVERY(f) { #f "/tcp", f, NULL, NULL, "tcp" }, { #f "/shm", f, NULL, NULL, "shm" } RDMA(f)
#define SHM(f) { #f "/shm", f, NULL, NULL, "shm" }

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "peer-exits-child") == 0)
        return peer_exits_child(argv[2], argv[3], argv[4]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_table),
        cmocka_unit_test(t_data_mac_setting),
        EVERY(t_connect_accept),
        EVERY(t_sizes),
        EVERY(t_pinned),
        EVERY(t_concurrent),
        EVERY(t_timeout),
        EVERY(t_interrupt),
        EVERY(t_peer_close),
        EVERY(t_shutdown),
        EVERY(t_peer_exits),
        EVERY(t_usable),
        EVERY(t_regions),
        SHM(t_region_owned),
        SHM(t_shm_dir),
        SHM(t_shm_dir_env),
        SHM(t_shm_silent),
        SHM(t_shm_hello_timeout),
        SHM(t_shm_peers),
        SHM(t_shm_swapped),
        RDMA_ONLY(t_rdma_bad_peer)
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
