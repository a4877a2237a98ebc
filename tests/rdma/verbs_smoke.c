/* verbs_smoke.c - checks that a verbs device works end to end, the way the RDMA transport will
 * use it: rdma_cm connection setup, an RC queue pair, a region registered once, its address
 * and key passed in the connection's private data, and RDMA WRITE_WITH_IMM into it, each
 * write's completion, immediate, length and bytes checked by the receiver.
 *
 * Why: tests/rdma/guest.sh boots a guest with Soft-RoCE; before the transport's own tests run
 * there, this says whether the device, the modules and the user-space providers work at all,
 * with a message naming the step that failed. It also gives the device's write rate, timed with
 * our own clock (perftest's CPU-speed estimate is unreliable under emulation).
 *
 * One process, two threads: a server on ADDR:PORT (default 192.168.77.1, the guest's rxe
 * address) and a client that connects to it. Exit 0 when every write arrived right; 1 with the
 * failing step on stderr. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WRITES 256
#define WRITE_BYTES (64 * 1024)
#define INFLIGHT 16                /* writes posted and not yet completed, at most */
#define WAIT_MS 20000

struct region_info {               /* the server's private data in its accept */
    uint64_t addr;
    uint32_t rkey, len;
};

struct end {
    const char *who;
    struct rdma_event_channel *ec;
    struct rdma_cm_id *id;          /* the connection's */
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_mr *mr;
    uint8_t *buf;
    char err[256];
};

static const char *addr_s = "192.168.77.1";
static const char *port_s = "20079";

static int failf(struct end *e, const char *what, int rc)
{
    if (!e->err[0])
        snprintf(e->err, sizeof(e->err), "%s: %s: %s", e->who, what,
                 strerror(rc > 0 ? rc : errno));
    return -1;
}

/* failf for the server thread's returns. */
static void *server_fail(struct end *e, const char *what, int rc)
{
    failf(e, what, rc);
    return NULL;
}

static uint8_t pattern(uint32_t write, size_t i)
{
    return (uint8_t)(write * 131u + i * 7u + 1u);
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The next event on e's channel, which must be `want` (acknowledged; its private data, if
 * any, copied to pd). */
static int expect(struct end *e, enum rdma_cm_event_type want, struct rdma_cm_id **id,
                  void *pd, size_t pdlen)
{
    struct rdma_cm_event *ev;

    if (rdma_get_cm_event(e->ec, &ev))
        return failf(e, "rdma_get_cm_event", 0);
    if (ev->event != want) {
        snprintf(e->err, sizeof(e->err), "%s: waited for %s, got %s (status %d)", e->who,
                 rdma_event_str(want), rdma_event_str(ev->event), ev->status);
        rdma_ack_cm_event(ev);
        return -1;
    }
    if (id)
        *id = ev->id;
    if (pd && ev->param.conn.private_data && ev->param.conn.private_data_len >= pdlen)
        memcpy(pd, ev->param.conn.private_data, pdlen);
    rdma_ack_cm_event(ev);
    return 0;
}

/* A protection domain, a completion queue and an RC queue pair on e->id. */
static int make_qp(struct end *e)
{
    struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC,
                                   .cap = { .max_send_wr = INFLIGHT, .max_recv_wr = WRITES,
                                            .max_send_sge = 1, .max_recv_sge = 1 } };

    if (!(e->pd = ibv_alloc_pd(e->id->verbs)))
        return failf(e, "ibv_alloc_pd", 0);
    if (!(e->cq = ibv_create_cq(e->id->verbs, WRITES + INFLIGHT, NULL, NULL, 0)))
        return failf(e, "ibv_create_cq", 0);
    qa.send_cq = qa.recv_cq = e->cq;
    if (rdma_create_qp(e->id, e->pd, &qa))
        return failf(e, "rdma_create_qp", 0);
    return 0;
}

/* Polls e's CQ for one completion, up to WAIT_MS. */
static int poll_one(struct end *e, struct ibv_wc *wc)
{
    double until = now_s() + WAIT_MS / 1000.0;
    int n;

    while ((n = ibv_poll_cq(e->cq, 1, wc)) == 0)
        if (now_s() > until) {
            snprintf(e->err, sizeof(e->err), "%s: no completion within %d ms", e->who, WAIT_MS);
            return -1;
        }
    if (n < 0)
        return failf(e, "ibv_poll_cq", 0);
    if (wc->status != IBV_WC_SUCCESS) {
        snprintf(e->err, sizeof(e->err), "%s: completion %" PRIu64 ": %s", e->who, wc->wr_id,
                 ibv_wc_status_str(wc->status));
        return -1;
    }
    return 0;
}

static void *server(void *arg)
{
    struct end *e = arg;
    struct rdma_cm_id *lid = NULL;
    struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP };
    struct rdma_addrinfo *ai = NULL;
    struct region_info ri;
    struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
                                  .private_data = &ri, .private_data_len = sizeof(ri) };
    size_t len = (size_t)WRITES * WRITE_BYTES;
    int rc;

    if ((rc = rdma_getaddrinfo(addr_s, port_s, &hints, &ai)))
        return server_fail(e, "rdma_getaddrinfo", rc);
    if (!(e->ec = rdma_create_event_channel()) ||
        rdma_create_id(e->ec, &lid, NULL, RDMA_PS_TCP) || rdma_bind_addr(lid, ai->ai_src_addr) ||
        rdma_listen(lid, 1))
        return server_fail(e, "listen", 0);
    rdma_freeaddrinfo(ai);
    if (expect(e, RDMA_CM_EVENT_CONNECT_REQUEST, &e->id, NULL, 0) || make_qp(e))
        return NULL;
    if (!(e->buf = aligned_alloc(4096, len)))
        return server_fail(e, "aligned_alloc", ENOMEM);
    memset(e->buf, 0, len);
    /* Registered once; the peer writes into it by its address and key. */
    if (!(e->mr = ibv_reg_mr(e->pd, e->buf, len, IBV_ACCESS_LOCAL_WRITE |
                                                 IBV_ACCESS_REMOTE_WRITE)))
        return server_fail(e, "ibv_reg_mr", 0);
    for (uint32_t i = 0; i < WRITES; i++) {   /* a WRITE_WITH_IMM consumes a receive */
        struct ibv_recv_wr wr = { .wr_id = i }, *bad;
        if (ibv_post_recv(e->id->qp, &wr, &bad))
            return server_fail(e, "ibv_post_recv", 0);
    }
    ri = (struct region_info){ (uintptr_t)e->buf, e->mr->rkey, (uint32_t)len };
    if (rdma_accept(e->id, &cp))
        return server_fail(e, "rdma_accept", 0);
    if (expect(e, RDMA_CM_EVENT_ESTABLISHED, NULL, NULL, 0))
        return NULL;
    for (uint32_t k = 0; k < WRITES; k++) {
        struct ibv_wc wc;
        if (poll_one(e, &wc))
            return NULL;
        uint32_t w = ntohl(wc.imm_data);
        if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc.wc_flags & IBV_WC_WITH_IMM) ||
            w >= WRITES || wc.byte_len != WRITE_BYTES) {
            snprintf(e->err, sizeof(e->err), "server: completion %u: opcode %d, imm %u, %u "
                     "bytes; want RECV_RDMA_WITH_IMM, imm below %d, %d bytes", k, wc.opcode, w,
                     wc.byte_len, WRITES, WRITE_BYTES);
            return NULL;
        }
        const uint8_t *p = e->buf + (size_t)w * WRITE_BYTES;
        for (size_t i = 0; i < WRITE_BYTES; i++)
            if (p[i] != pattern(w, i)) {
                snprintf(e->err, sizeof(e->err), "server: write %u byte %zu is %u, want %u", w,
                         i, p[i], pattern(w, i));
                return NULL;
            }
    }
    expect(e, RDMA_CM_EVENT_DISCONNECTED, NULL, NULL, 0);
    rdma_destroy_id(lid);
    return NULL;
}

static int client(struct end *e, double *secs)
{
    struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *ai = NULL;
    struct region_info ri = { 0 };
    struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
                                  .retry_count = 7, .rnr_retry_count = 7 };
    int rc, posted = 0, done = 0;
    double t0;

    if ((rc = rdma_getaddrinfo(addr_s, port_s, &hints, &ai)))
        return failf(e, "rdma_getaddrinfo", rc);
    if (!(e->ec = rdma_create_event_channel()) ||
        rdma_create_id(e->ec, &e->id, NULL, RDMA_PS_TCP) ||
        rdma_resolve_addr(e->id, NULL, ai->ai_dst_addr, 2000))
        return failf(e, "rdma_resolve_addr", 0);
    rdma_freeaddrinfo(ai);
    if (expect(e, RDMA_CM_EVENT_ADDR_RESOLVED, NULL, NULL, 0) ||
        rdma_resolve_route(e->id, 2000) ||
        expect(e, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL, NULL, 0) || make_qp(e))
        return -1;
    if (!(e->buf = aligned_alloc(4096, WRITE_BYTES)) ||
        !(e->mr = ibv_reg_mr(e->pd, e->buf, WRITE_BYTES, IBV_ACCESS_LOCAL_WRITE)))
        return failf(e, "ibv_reg_mr", 0);
    if (rdma_connect(e->id, &cp) ||
        expect(e, RDMA_CM_EVENT_ESTABLISHED, NULL, &ri, sizeof(ri)))
        return e->err[0] ? -1 : failf(e, "rdma_connect", 0);
    if (ri.len != (uint32_t)WRITES * WRITE_BYTES) {
        snprintf(e->err, sizeof(e->err), "client: the server's region is %u bytes, want %u",
                 ri.len, (uint32_t)WRITES * WRITE_BYTES);
        return -1;
    }
    t0 = now_s();
    while (done < WRITES) {
        /* Each write is filled, posted and completed before its buffer is refilled: one
         * source buffer, so one write in flight from it at a time. */
        struct ibv_sge sge = { (uintptr_t)e->buf, WRITE_BYTES, e->mr->lkey };
        struct ibv_send_wr wr = { .wr_id = (uint64_t)posted, .sg_list = &sge, .num_sge = 1,
                                  .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                                  .send_flags = IBV_SEND_SIGNALED,
                                  .imm_data = htonl((uint32_t)posted),
                                  .wr.rdma = { ri.addr + (uint64_t)posted * WRITE_BYTES,
                                               ri.rkey } }, *bad;
        struct ibv_wc wc;
        for (size_t i = 0; i < WRITE_BYTES; i++)
            e->buf[i] = pattern((uint32_t)posted, i);
        if (ibv_post_send(e->id->qp, &wr, &bad))
            return failf(e, "ibv_post_send", 0);
        posted++;
        if (poll_one(e, &wc))
            return -1;
        done++;
    }
    *secs = now_s() - t0;
    rdma_disconnect(e->id);
    return 0;
}

static void end_free(struct end *e)
{
    if (e->id && e->id->qp)
        rdma_destroy_qp(e->id);
    if (e->mr)
        ibv_dereg_mr(e->mr);
    if (e->cq)
        ibv_destroy_cq(e->cq);
    if (e->pd)
        ibv_dealloc_pd(e->pd);
    if (e->id)
        rdma_destroy_id(e->id);
    if (e->ec)
        rdma_destroy_event_channel(e->ec);
    free(e->buf);
}

int main(int argc, char **argv)
{
    struct end s = { .who = "server" }, c = { .who = "client" };
    pthread_t th;
    double secs = 0;
    int rc;

    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: verbs_smoke [ADDR [PORT]]\n\nConnects to itself over rdma_cm on ADDR "
               "(default %s, the rxe device's address in tests/rdma/guest.sh's guest) and "
               "PORT (default %s),\nmakes %d RDMA WRITE_WITH_IMM of %d bytes into a region "
               "registered once, and checks each\ncompletion, immediate, length and byte. "
               "Exit 0 when all arrived right, 1 saying which step failed.\n", addr_s, port_s,
               WRITES, WRITE_BYTES);
        return 0;
    }
    if (argc > 1)
        addr_s = argv[1];
    if (argc > 2)
        port_s = argv[2];
    if (pthread_create(&th, NULL, server, &s)) {
        fprintf(stderr, "verbs_smoke: pthread_create failed\n");
        return 1;
    }
    struct timespec pause = { 0, 200 * 1000 * 1000 };   /* the server listens first */
    nanosleep(&pause, NULL);
    rc = client(&c, &secs);
    if (rc)   /* the server may wait for a connection that will not come */
        pthread_cancel(th);
    pthread_join(th, NULL);
    if (rc || s.err[0]) {
        fprintf(stderr, "verbs_smoke: %s\n", c.err[0] ? c.err : s.err);
        return 1;
    }
    printf("verbs_smoke: %d RDMA WRITE_WITH_IMM of %d KiB over %s, every completion and byte "
           "checked: %.1f MB/s\n", WRITES, WRITE_BYTES / 1024,
           ibv_get_device_name(c.id->verbs->device), WRITES * (double)WRITE_BYTES / secs / 1e6);
    end_free(&c);
    end_free(&s);
    return 0;
}
