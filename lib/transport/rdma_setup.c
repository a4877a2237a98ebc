/* rdma_setup.c - making rdma connections: probing for a device, addresses, a connection's
 * resources (protection domain, queues, ring and registrations), listening and accepting
 * through a thread of the listener's own, connecting (rdma_internal.h; the design is at the
 * top of rdma.c). */
#include "transport/transport.h"

#if TS_HAVE_RDMA

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "transport/internal.h"
#include "transport/rdma_internal.h"

static void *listen_main(void *arg);

/* ---- Probing ---- */

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static char probe_why[160];      /* empty: a device with an active port exists */

static void probe_devices(void)
{
    int n = 0;
    struct ibv_device **devs = ibv_get_device_list(&n);

    snprintf(probe_why, sizeof(probe_why), "no RDMA device (ibv_devices lists none)");
    for (int i = 0; devs && i < n; i++) {
        struct ibv_context *ctx = ibv_open_device(devs[i]);
        struct ibv_device_attr da;

        if (!ctx)
            continue;
        if (ibv_query_device(ctx, &da) == 0)
            for (uint8_t p = 1; p <= da.phys_port_cnt; p++) {
                struct ibv_port_attr pa;
                if (ibv_query_port(ctx, p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE)
                    probe_why[0] = '\0';
            }
        if (probe_why[0])
            snprintf(probe_why, sizeof(probe_why), "RDMA device %s has no active port",
                     ibv_get_device_name(devs[i]));
        ibv_close_device(ctx);
        if (!probe_why[0])
            break;
    }
    if (devs)
        ibv_free_device_list(devs);
}

ts_status rdma_probe(struct ts_err *e)
{
    pthread_once(&probe_once, probe_devices);
    if (probe_why[0])
        return ts_err_set(e, TS_ENODEV, "rdma: %s", probe_why);
    return TS_OK;
}

/* ---- Addresses ---- */

/* Resolves "HOST:PORT" or "[V6]:PORT" numerically into ss. */
static ts_status blob_addr(const struct ts_blob *b, struct sockaddr_storage *ss,
                           struct ts_err *e)
{
    struct addrinfo hints = { .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV,
                              .ai_socktype = SOCK_STREAM }, *res;
    char host[TS_BLOB_MAX + 1], port[16];
    ts_status st;
    int rc;

    if ((st = ts__split_addr(b, "rdma", host, sizeof(host), port, sizeof(port), e)))
        return st;
    if ((rc = getaddrinfo(host, port, &hints, &res)))
        return ts_err_set(e, TS_EINVAL, "rdma: address '%s': %s", host, gai_strerror(rc));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return TS_OK;
}

/* Waits up to the deadline for the next event on ec (its fd non-blocking); TS_ETIMEDOUT. */
static ts_status cm_next(struct rdma_event_channel *ec, int64_t deadline,
                         struct rdma_cm_event **ev, struct ts_err *e)
{
    struct pollfd p = { .fd = ec->fd, .events = POLLIN };

    for (;;) {
        if (rdma_get_cm_event(ec, ev) == 0)
            return TS_OK;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return ts_err_set(e, TS_EIO, "rdma: rdma_get_cm_event: %s", strerror(errno));
        if (deadline >= 0 && ts__left_ms(deadline) == 0)
            return ts_err_set(e, TS_ETIMEDOUT, "rdma: no connection event in time");
        if (poll(&p, 1, ts__left_ms(deadline)) < 0 && errno != EINTR)
            return ts_err_set(e, TS_EIO, "rdma: poll: %s", strerror(errno));
    }
}

static int nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);

    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static struct rdma_event_channel *channel_new(void)
{
    struct rdma_event_channel *ec = rdma_create_event_channel();

    if (ec && nonblock(ec->fd) < 0) {
        rdma_destroy_event_channel(ec);
        return NULL;
    }
    return ec;
}

/* Whether peer can be reached by RDMA from here: a device with an active port, and the address
 * resolving to one of this host's RDMA devices (rdma_resolve_addr, bounded). Remembered per
 * address: the answer does not change while the devices stay. */
#define USABLE_MEMO 32
static pthread_mutex_t usable_mu = PTHREAD_MUTEX_INITIALIZER;
static struct { char text[TS_BLOB_MAX + 1]; bool ok; } usable_memo[USABLE_MEMO];
static size_t usable_next;

static bool resolves(const struct sockaddr_storage *ss)
{
    struct rdma_event_channel *ec = channel_new();
    struct rdma_cm_id *id = NULL;
    struct rdma_cm_event *ev;
    struct ts_err e = { 0 };
    bool ok = false;

    if (!ec)
        return false;
    if (rdma_create_id(ec, &id, NULL, RDMA_PS_TCP) == 0 &&
        rdma_resolve_addr(id, NULL, (struct sockaddr *)ss, 1000) == 0 &&
        cm_next(ec, ts__deadline(1500), &ev, &e) == TS_OK) {
        ok = ev->event == RDMA_CM_EVENT_ADDR_RESOLVED;
        rdma_ack_cm_event(ev);
    }
    if (id)
        rdma_destroy_id(id);
    rdma_destroy_event_channel(ec);
    return ok;
}

bool rdma_usable(const struct ts_blob *peer)
{
    struct sockaddr_storage ss;
    struct ts_err e = { 0 };
    char text[TS_BLOB_MAX + 1];
    bool ok;

    if (rdma_probe(&e) || peer->len >= sizeof(text) || blob_addr(peer, &ss, &e))
        return false;
    memcpy(text, peer->data, peer->len);
    text[peer->len] = '\0';
    pthread_mutex_lock(&usable_mu);
    for (size_t i = 0; i < USABLE_MEMO; i++)
        if (strcmp(usable_memo[i].text, text) == 0) {
            ok = usable_memo[i].ok;
            pthread_mutex_unlock(&usable_mu);
            return ok;
        }
    pthread_mutex_unlock(&usable_mu);
    ok = resolves(&ss);
    pthread_mutex_lock(&usable_mu);
    snprintf(usable_memo[usable_next].text, sizeof(usable_memo[0].text), "%s", text);
    usable_memo[usable_next].ok = ok;
    usable_next = (usable_next + 1) % USABLE_MEMO;
    pthread_mutex_unlock(&usable_mu);
    return ok;
}

/* ---- A connection's resources ---- */

void rdma_conn_free(struct rdma_conn *c)
{
    if (c->id && c->id->qp)
        rdma_destroy_qp(c->id);
    if (c->rx_mr)
        ibv_dereg_mr(c->rx_mr);
    if (c->tx_mr)
        ibv_dereg_mr(c->tx_mr);
    if (c->cred_mr)
        ibv_dereg_mr(c->cred_mr);
    for (size_t i = 0; i < RDMA_MRS; i++)
        if (c->mrs[i].mr)
            ibv_dereg_mr(c->mrs[i].mr);
    if (c->scq)
        ibv_destroy_cq(c->scq);
    if (c->rcq) {
        if (c->cq_armed) {   /* an event may be waiting: destroying needs every one acked */
            struct ibv_cq *cq;
            void *ctx;
            if (ibv_get_cq_event(c->cc, &cq, &ctx) == 0)
                ibv_ack_cq_events(cq, 1);
        }
        ibv_destroy_cq(c->rcq);
    }
    if (c->cc)
        ibv_destroy_comp_channel(c->cc);
    if (c->pd)
        ibv_dealloc_pd(c->pd);
    if (c->id)
        rdma_destroy_id(c->id);
    if (c->ec)
        rdma_destroy_event_channel(c->ec);
    if (c->rx)
        munmap(c->rx, 2 * (size_t)RDMA_RING);
    if (c->tx)
        munmap(c->tx, RDMA_RING);
    if (c->cred)
        munmap((void *)c->cred, 4096);
    if (c->efd >= 0)
        close(c->efd);
    pthread_mutex_destroy(&c->scq_mu);
    pthread_mutex_destroy(&c->cm_mu);
    free(c);
}

static struct rdma_conn *conn_alloc(void)
{
    struct rdma_conn *c = calloc(1, sizeof(*c));

    if (!c)
        return NULL;
    c->base.ops = &ts_transport_rdma;
    c->efd = -1;
    pthread_mutex_init(&c->scq_mu, NULL);
    pthread_mutex_init(&c->cm_mu, NULL);
    if ((c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        rdma_conn_free(c);
        return NULL;
    }
    return c;
}

/* RDMA_RING bytes of a memfd mapped twice in a row at *out. */
static int map_ring(uint8_t **out)
{
    int fd = memfd_create("tessera-rdma-ring", MFD_CLOEXEC);
    uint8_t *r;

    *out = NULL;
    if (fd < 0 || ftruncate(fd, RDMA_RING) < 0)
        goto fail;
    r = mmap(NULL, 2 * (size_t)RDMA_RING, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
             -1, 0);
    if (r == MAP_FAILED)
        goto fail;
    /* MAP_FIXED over our own reservation only. */
    if (mmap(r, RDMA_RING, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_POPULATE, fd, 0) ==
            MAP_FAILED ||
        mmap(r + RDMA_RING, RDMA_RING, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_FIXED | MAP_POPULATE, fd, 0) == MAP_FAILED) {
        munmap(r, 2 * (size_t)RDMA_RING);
        goto fail;
    }
    close(fd);
    *out = r;
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    return -1;
}

int rdma_post_recvs(struct rdma_conn *c, int n)
{
    struct ibv_recv_wr wr[RDMA_RQ_DEPTH], *bad;

    for (int i = 0; i < n; i++)
        wr[i] = (struct ibv_recv_wr){ .wr_id = 0, .next = i + 1 < n ? &wr[i + 1] : NULL };
    return n ? ibv_post_recv(c->id->qp, wr, &bad) : 0;
}

/* The protection domain, queues, registrations and posted receives of c, on its id's device;
 * *mine gets what the peer needs. */
static ts_status conn_setup(struct rdma_conn *c, struct rdma_wire_info *mine, struct ts_err *e)
{
    struct ibv_context *v = c->id->verbs;
    struct ibv_qp_init_attr qa = { 0 };
    const char *what;
    int rc;

    what = "ibv_alloc_pd";
    if (!(c->pd = ibv_alloc_pd(v)))
        goto fail;
    what = "ibv_create_comp_channel";
    if (!(c->cc = ibv_create_comp_channel(v)) || nonblock(c->cc->fd) < 0)
        goto fail;
    what = "ibv_create_cq";
    if (!(c->scq = ibv_create_cq(v, RDMA_SQ_DEPTH, NULL, NULL, 0)) ||
        !(c->rcq = ibv_create_cq(v, RDMA_RQ_DEPTH, NULL, c->cc, 0)))
        goto fail;
    qa.send_cq = c->scq;
    qa.recv_cq = c->rcq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = RDMA_SQ_DEPTH;
    qa.cap.max_recv_wr = RDMA_RQ_DEPTH;
    qa.cap.max_send_sge = 2;   /* a write from staging and from pinned memory (rdma.c) */
    qa.cap.max_recv_sge = 1;
    qa.cap.max_inline_data = sizeof(uint64_t);
    what = "rdma_create_qp";
    if (rdma_create_qp(c->id, c->pd, &qa))
        goto fail;
    what = "mapping the ring";
    if (map_ring(&c->rx) < 0)
        goto fail;
    c->tx = mmap(NULL, RDMA_RING, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    c->cred = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (c->tx == MAP_FAILED || c->cred == MAP_FAILED) {
        c->tx = c->tx == MAP_FAILED ? NULL : c->tx;
        c->cred = c->cred == MAP_FAILED ? NULL : c->cred;
        goto fail;
    }
    what = "ibv_reg_mr";
    if (!(c->rx_mr = ibv_reg_mr(c->pd, c->rx, RDMA_RING,
                                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)) ||
        !(c->tx_mr = ibv_reg_mr(c->pd, c->tx, RDMA_RING, IBV_ACCESS_LOCAL_WRITE)) ||
        !(c->cred_mr = ibv_reg_mr(c->pd, (void *)c->cred, 4096,
                                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)))
        goto fail;
    what = "ibv_post_recv";
    if ((rc = rdma_post_recvs(c, RDMA_RQ_DEPTH))) {
        errno = rc;
        goto fail;
    }
    what = "ibv_req_notify_cq";
    if (ibv_req_notify_cq(c->rcq, 0))
        goto fail;
    c->cq_armed = true;
    c->base.view_max = RDMA_RING;
    *mine = (struct rdma_wire_info){ .magic = RDMA_WIRE_MAGIC, .version = RDMA_WIRE_VERSION,
                                .ring_addr = (uintptr_t)c->rx, .ring_size = RDMA_RING,
                                .ring_rkey = c->rx_mr->rkey,
                                .credit_addr = (uintptr_t)c->cred,
                                .credit_rkey = c->cred_mr->rkey };
    return TS_OK;
fail:
    return ts_err_set(e, errno == ENOMEM ? TS_ENOMEM : TS_EIO, "rdma %s: %s: %s", c->base.peer,
                      what, strerror(errno ? errno : EIO));
}

/* Checks the peer's wire_info (private data of len bytes) and keeps it. */
static ts_status take_peer(struct rdma_conn *c, const void *pd, size_t len, struct ts_err *e)
{
    struct rdma_wire_info w;

    if (!pd || len < sizeof(w))
        return ts_err_set(e, TS_ECORRUPT, "rdma %s: the peer sent %zu bytes of connection data, "
                          "not %zu (not a Tessera rdma peer?)", c->base.peer, len, sizeof(w));
    memcpy(&w, pd, sizeof(w));
    if (w.magic != RDMA_WIRE_MAGIC || w.version != RDMA_WIRE_VERSION)
        return ts_err_set(e, TS_ECORRUPT, "rdma %s: the peer speaks another protocol (magic %#llx "
                          "version %u; this build: version %u)", c->base.peer,
                          (unsigned long long)w.magic, w.version, RDMA_WIRE_VERSION);
    if (w.ring_size != RDMA_RING)
        return ts_err_set(e, TS_ECORRUPT, "rdma %s: the peer's ring is %llu bytes, ours %u",
                          c->base.peer, (unsigned long long)w.ring_size, RDMA_RING);
    c->peer = w;
    return TS_OK;
}

static void conn_peer_name(struct rdma_conn *c)
{
    strcpy(c->base.peer, "rdma:");
    ts__addr_text(rdma_get_peer_addr(c->id), c->base.peer + 5, sizeof(c->base.peer) - 5);
}

/* ---- Listening and accepting ----
 *
 * rdma_cm has no kernel backlog: a connector's REQ is answered only when the listener's owner
 * reads the CONNECT_REQUEST and calls rdma_accept. So a listener has a thread of its own that
 * does, as a TCP kernel would: it takes each request (its resources, rdma_accept with ours),
 * waits for the peer's RTU (ESTABLISHED), and queues the connection for accept(). A request
 * whose peer never completes it is dropped after RDMA_CM_MS; at most RDMA_PENDING_MAX requests
 * are set up or queued at once (more are rejected), so a flood costs bounded memory. */

ts_status rdma_listen_on(const char *host, struct ts_listener **out, struct ts_blob *addr,
                         struct ts_err *e)
{
    struct rdma_listener *l = calloc(1, sizeof(*l));
    struct sockaddr_storage ss;
    struct ts_blob b;
    char text[TS_BLOB_MAX];
    ts_status st;

    host = host && *host ? host : "127.0.0.1";
    if (!l)
        return ts_err_set(e, TS_ENOMEM, "rdma listen: out of memory");
    l->base.ops = &ts_transport_rdma;
    l->stop_fd = -1;
    b.len = (size_t)snprintf((char *)b.data, sizeof(b.data), strchr(host, ':') ? "[%s]:0" :
                             "%s:0", host);
    if ((st = blob_addr(&b, &ss, e)))
        goto fail;
    if (!(l->ec = channel_new()) || rdma_create_id(l->ec, &l->id, NULL, RDMA_PS_TCP)) {
        st = ts_err_set(e, TS_EIO, "rdma listen: rdma_create_id: %s", strerror(errno));
        goto fail;
    }
    /* An address no RDMA device serves is not this backend's: ENODEV, as probe. */
    if (rdma_bind_addr(l->id, (struct sockaddr *)&ss)) {
        st = ts_err_set(e, errno == EADDRNOTAVAIL || errno == ENODEV ? TS_ENODEV : TS_EIO,
                        "rdma listen on %s: %s (listen on an address of an RDMA device's "
                        "interface)", host, strerror(errno));
        goto fail;
    }
    if (rdma_listen(l->id, 128)) {
        st = ts_err_set(e, TS_EIO, "rdma listen on %s: %s", host, strerror(errno));
        goto fail;
    }
    if ((l->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        st = ts_err_set(e, TS_EIO, "rdma listen: eventfd: %s", strerror(errno));
        goto fail;
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    if ((errno = pthread_create(&l->thread, NULL, listen_main, l))) {
        st = ts_err_set(e, TS_EIO, "rdma listen: thread: %s", strerror(errno));
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
        goto fail;
    }
    ts__addr_text(rdma_get_local_addr(l->id), text, sizeof(text));
    addr->len = strlen(text);
    memcpy(addr->data, text, addr->len);
    *out = &l->base;
    return TS_OK;
fail:
    if (l->stop_fd >= 0)
        close(l->stop_fd);
    if (l->id)
        rdma_destroy_id(l->id);
    if (l->ec)
        rdma_destroy_event_channel(l->ec);
    free(l);
    return st;
}

/* Removes entry i of a list of n connections (not freed). */
static void list_remove(struct rdma_conn **list, size_t *n, size_t i)
{
    memmove(&list[i], &list[i + 1], (*n - i - 1) * sizeof(list[0]));
    (*n)--;
}

/* A connection request (its event acked: an id cannot be destroyed before), with the peer's
 * private data: its resources, then rdma_accept with ours; kept pending until the peer's RTU
 * makes it ESTABLISHED. Rejected at once when RDMA_PENDING_MAX are pending or queued, or when it
 * cannot be served. The listener's thread. */
static void on_request(struct rdma_listener *l, struct rdma_cm_id *id, const void *pd,
                       size_t len)
{
    struct rdma_conn_param cp = { .retry_count = 7, .rnr_retry_count = 7 };
    struct rdma_conn *c = NULL;
    struct rdma_wire_info mine;
    struct ts_err e = { 0 };
    size_t queued;

    pthread_mutex_lock(&l->mu);
    queued = l->nready;
    pthread_mutex_unlock(&l->mu);
    if (l->npending + queued >= RDMA_PENDING_MAX || !(c = conn_alloc())) {
        rdma_reject(id, NULL, 0);
        rdma_destroy_id(id);
        return;
    }
    c->id = id;
    id->context = c;
    conn_peer_name(c);
    if (take_peer(c, pd, len, &e) || conn_setup(c, &mine, &e)) {
        rdma_reject(c->id, NULL, 0);
        rdma_conn_free(c);
        return;
    }
    cp.private_data = &mine;
    cp.private_data_len = sizeof(mine);
    if (rdma_accept(c->id, &cp)) {
        rdma_conn_free(c);
        return;
    }
    c->deadline = ts__deadline(RDMA_CM_MS);
    l->pending[l->npending++] = c;
}

/* An established connection: on its own event channel from now on (the peer's disconnect is
 * its business), queued for accept(). The listener's thread. */
static void on_established(struct rdma_listener *l, size_t i)
{
    struct rdma_conn *c = l->pending[i];

    list_remove(l->pending, &l->npending, i);
    if (!(c->ec = channel_new()) || rdma_migrate_id(c->id, c->ec)) {
        rdma_conn_free(c);
        return;
    }
    pthread_mutex_lock(&l->mu);
    l->ready[l->nready++] = c;   /* on_request kept pending + ready under RDMA_PENDING_MAX */
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

static void *listen_main(void *arg)
{
    struct rdma_listener *l = arg;
    struct pollfd p[2] = { { .fd = l->ec->fd, .events = POLLIN },
                           { .fd = l->stop_fd, .events = POLLIN } };

    for (;;) {
        struct rdma_cm_event *ev;
        int64_t until = -1;

        for (size_t i = 0; i < l->npending; i++) {   /* requests whose peer never finished */
            if (ts__left_ms(l->pending[i]->deadline) == 0) {
                rdma_conn_free(l->pending[i]);
                list_remove(l->pending, &l->npending, i--);
            } else if (until < 0 || l->pending[i]->deadline < until) {
                until = l->pending[i]->deadline;
            }
        }
        if (poll(p, 2, ts__left_ms(until)) < 0 && errno != EINTR)
            break;
        if (p[1].revents)
            break;
        while (rdma_get_cm_event(l->ec, &ev) == 0) {
            struct rdma_cm_id *id = ev->id;
            enum rdma_cm_event_type type = ev->event;
            size_t i;

            if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
                uint8_t pd[sizeof(struct rdma_wire_info)];
                size_t len = ev->param.conn.private_data ? ev->param.conn.private_data_len : 0;
                len = len < sizeof(pd) ? len : sizeof(pd);
                if (len)
                    memcpy(pd, ev->param.conn.private_data, len);
                rdma_ack_cm_event(ev);
                on_request(l, id, pd, len);
                continue;
            }
            rdma_ack_cm_event(ev);
            for (i = 0; i < l->npending && l->pending[i]->id != id; i++)
                ;
            if (i == l->npending)
                continue;   /* the listener's own id */
            if (type == RDMA_CM_EVENT_ESTABLISHED) {
                on_established(l, i);
            } else {   /* the peer gave up, or was unreachable */
                rdma_conn_free(l->pending[i]);
                list_remove(l->pending, &l->npending, i);
            }
        }
    }
    return NULL;
}

void rdma_unlisten(struct ts_listener *base)
{
    struct rdma_listener *l = (struct rdma_listener *)base;

    eventfd_write(l->stop_fd, 1);
    pthread_join(l->thread, NULL);
    while (l->npending)
        rdma_conn_free(l->pending[--l->npending]);
    while (l->nready)   /* queued and never accepted: the peers see them end */
        rdma_close(&l->ready[--l->nready]->base);
    rdma_destroy_id(l->id);
    rdma_destroy_event_channel(l->ec);
    close(l->stop_fd);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

ts_status rdma_accept_conn(struct ts_listener *base, int ms, struct ts_conn **out,
                           struct ts_err *e)
{
    struct rdma_listener *l = (struct rdma_listener *)base;
    int64_t deadline = ts__deadline(ms);

    pthread_mutex_lock(&l->mu);
    while (!l->nready) {
        if (deadline >= 0 && ts__left_ms(deadline) == 0) {
            pthread_mutex_unlock(&l->mu);
            return ts_err_set(e, TS_ETIMEDOUT, "rdma accept: no peer within %d ms", ms);
        }
        if (deadline < 0) {
            pthread_cond_wait(&l->cv, &l->mu);
        } else {
            struct timespec ts;
            ts_abstime_ms(&ts, ts__left_ms(deadline));
            pthread_cond_timedwait(&l->cv, &l->mu, &ts);
        }
    }
    *out = &l->ready[0]->base;
    list_remove(l->ready, &l->nready, 0);
    pthread_mutex_unlock(&l->mu);
    return TS_OK;
}

/* ---- Connecting ---- */

/* Waits for the event `want` on c's channel; any other ends the attempt, saying what. */
static ts_status cm_expect(struct rdma_conn *c, enum rdma_cm_event_type want, int64_t deadline,
                           struct rdma_cm_event **ev, struct ts_err *e)
{
    ts_status st = cm_next(c->ec, deadline, ev, e);

    if (st == TS_ETIMEDOUT) {
        ts_err_clear(e);   /* say which step: the first message set wins */
        return ts_err_set(e, TS_EUNAVAIL, "rdma connect %s: no %s in time", c->base.peer,
                          rdma_event_str(want));
    }
    if (st)
        return st;
    if ((*ev)->event != want) {
        enum rdma_cm_event_type got = (*ev)->event;
        int status = (*ev)->status;
        rdma_ack_cm_event(*ev);
        return ts_err_set(e, TS_EUNAVAIL, "rdma connect %s: %s (status %d) instead of %s%s",
                          c->base.peer, rdma_event_str(got), status, rdma_event_str(want),
                          got == RDMA_CM_EVENT_REJECTED ? ": refused (nothing listens there, or "
                          "the peer could not take the connection)" : "");
    }
    return TS_OK;
}

ts_status rdma_connect_to(const struct ts_blob *to, int ms, struct ts_conn **out,
                          struct ts_err *e)
{
    int64_t deadline = ts__deadline(ms);
    int step = ms < 0 || ms > RDMA_CM_MS ? RDMA_CM_MS : ms > 0 ? ms : 1;
    struct rdma_conn_param cp = { .retry_count = 7, .rnr_retry_count = 7 };
    struct sockaddr_storage ss;
    struct rdma_cm_event *ev;
    struct rdma_wire_info mine;
    struct rdma_conn *c;
    ts_status st;

    if ((st = blob_addr(to, &ss, e)))
        return st;
    if (!(c = conn_alloc()))
        return ts_err_set(e, TS_ENOMEM, "rdma connect: out of memory");
    strcpy(c->base.peer, "rdma:");
    ts__addr_text((struct sockaddr *)&ss, c->base.peer + 5, sizeof(c->base.peer) - 5);
    if (!(c->ec = channel_new()) || rdma_create_id(c->ec, &c->id, c, RDMA_PS_TCP)) {
        st = ts_err_set(e, TS_EIO, "rdma connect %s: rdma_create_id: %s", c->base.peer,
                        strerror(errno));
        goto fail;
    }
    if (rdma_resolve_addr(c->id, NULL, (struct sockaddr *)&ss, step)) {
        st = ts_err_set(e, TS_EUNAVAIL, "rdma connect %s: rdma_resolve_addr: %s", c->base.peer,
                        strerror(errno));
        goto fail;
    }
    if ((st = cm_expect(c, RDMA_CM_EVENT_ADDR_RESOLVED, deadline, &ev, e)))
        goto fail;
    rdma_ack_cm_event(ev);
    if (rdma_resolve_route(c->id, step)) {
        st = ts_err_set(e, TS_EUNAVAIL, "rdma connect %s: rdma_resolve_route: %s", c->base.peer,
                        strerror(errno));
        goto fail;
    }
    if ((st = cm_expect(c, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, &ev, e)))
        goto fail;
    rdma_ack_cm_event(ev);
    if ((st = conn_setup(c, &mine, e)))
        goto fail;
    cp.private_data = &mine;
    cp.private_data_len = sizeof(mine);
    if (rdma_connect(c->id, &cp)) {
        st = ts_err_set(e, TS_EUNAVAIL, "rdma connect %s: %s", c->base.peer, strerror(errno));
        goto fail;
    }
    if ((st = cm_expect(c, RDMA_CM_EVENT_ESTABLISHED, deadline, &ev, e)))
        goto fail;
    st = take_peer(c, ev->param.conn.private_data, ev->param.conn.private_data_len, e);
    rdma_ack_cm_event(ev);
    if (st)
        goto fail;
    *out = &c->base;
    return TS_OK;
fail:
    rdma_conn_free(c);
    return st;
}

#endif /* TS_HAVE_RDMA */
