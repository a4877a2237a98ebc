/* rdma.c - the "rdma" backend: frames between hosts by RDMA WRITE into the receiver's ring,
 * over libibverbs and librdmacm (RoCE, InfiniBand, iWARP; Soft-RoCE in tests/rdma).
 *
 * Why: over TCP every byte is copied by the kernel twice (into the socket, out of it) and each
 * wake-up costs system calls; with RDMA the NIC places the sender's bytes straight into the
 * receiver's memory, and the receiver hands them to the shard in place (recv_view), with no
 * copy and no system call on the data path.
 *
 * Connection: rdma_cm (address and route resolution, an RC queue pair, the REQ/REP private
 * data carrying each side's ring and credit word: struct rdma_wire_info), one protection domain,
 * two completion queues and one event channel per connection. The blob is "HOST:PORT", the
 * address the listener's rdma_cm id is bound to (an address of an RDMA device's netdev).
 *
 * Ring: each side registers a receive ring (RDMA_RING bytes, a power of two, mapped twice in a row
 * like shm's so that a view never wraps) for remote writes, and a send staging area of the
 * same size for local reads. send copies the frame into the staging area at the offset the
 * bytes will have in the peer's ring and posts RDMA WRITE_WITH_IMM of up to RDMA_CHUNK bytes at a
 * time (the immediate: the bytes written); RC delivers them in order, and each write's
 * completion on the receiver (one posted receive consumed, reposted at once) tells it how far
 * the bytes go. So the receiver spends no CPU on the bytes themselves. A large body in pinned
 * memory (transport.h; the SDK's tessera_buffers gradients) is not copied: the range is
 * registered with the connection's protection domain on its first use (pinned_mr), each
 * write gathers the header from staging and the body from where it lies; the device may read
 * it after send returns, until the connection's next receive returns (which waits for those
 * writes' completions) or it closes.
 *
 * Flow control: the receiver writes how many bytes it has consumed (a 64-bit counter) into the
 * sender's credit word with an inline RDMA WRITE, once an eighth of the ring was consumed since
 * the last one, and always before it waits for more: no byte is written over one the receiver
 * has not released, and a receiver that waits has told the sender everything it freed.
 *
 * Waiting: the receiver polls its receive queue's completions for a short spin, then arms the
 * completion channel and sleeps in poll(2) on it, on an eventfd (interrupt) and on the
 * connection's rdma_cm channel (the peer's disconnect), in slices. A sender without space polls
 * the credit word with growing naps (a full ring is rare: the receiver consumes as fast as the
 * shard applies); its writes' completions come on their own queue, which both the sending and
 * the receiving thread (its credit writes) reap under a mutex.
 *
 * Death of the peer: its kernel tears the connection down (a DREQ) when the process dies, which
 * moves our queue pair to the error state: posted receives complete flushed and rdma_cm says
 * DISCONNECTED. Either ends the connection (TS_EUNAVAIL) once the bytes that arrived are read.
 * A host that vanishes without a word is found by the writes' retries (a send) or by the map's
 * epoch (a receiver waiting), as for tcp (TS_TP_LIVENESS_MS is tcp's alone).
 *
 * Keys: each connection has its own protection domain, so the remote key of its ring works
 * only through its own queue pair: a peer can write into the ring of its own connection and
 * nowhere else, before and after the data-plane handshake (auth.h) alike, exactly as a TCP
 * peer can send bytes before proving the job's key. The registrations die with the connection.
 * Bytes cross a NIC: local_in and local_out are false, so frames are hashed and MACed.
 * (This file moves the bytes and holds the ops table; rdma_setup.c makes the connections.) */
#include "transport/transport.h"

#if TS_HAVE_RDMA

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "transport/internal.h"
#include "transport/rdma_internal.h"
#include "util/log.h"

/* ---- Moving bytes ---- */

/* Marks c ended (the first reason wins). */
static void conn_end(struct rdma_conn *c, const char *why)
{
    bool was = false;

    /* A sleeper notices within RDMA_SLICE_MS: its queue pair's flushed receives wake it sooner. */
    if (atomic_compare_exchange_strong(&c->dead, &was, true))
        snprintf(c->why, sizeof(c->why), "%s", why);
}

/* Reaps the send queue's completions: frees their slots, ends c on an error. Either thread. */
static void reap_sends(struct rdma_conn *c)
{
    struct ibv_wc wc[RDMA_CQ_BATCH];
    int n;

    pthread_mutex_lock(&c->scq_mu);
    while ((n = ibv_poll_cq(c->scq, RDMA_CQ_BATCH, wc)) > 0) {
        for (int i = 0; i < n; i++) {
            if (wc[i].status != IBV_WC_SUCCESS) {
                char why[96];
                snprintf(why, sizeof(why), "a write failed: %s",
                         ibv_wc_status_str(wc[i].status));
                conn_end(c, why);
            }
            if (wc[i].wr_id == RDMA_WR_IN_PLACE)
                atomic_fetch_sub(&c->in_place_out, 1);
        }
        atomic_fetch_sub(&c->sq_out, (unsigned)n);
    }
    if (n < 0)
        conn_end(c, "polling the send queue failed");
    pthread_mutex_unlock(&c->scq_mu);
}

/* Reads c's rdma_cm events without waiting: a disconnect ends c. Either thread. */
static void look_at_peer(struct rdma_conn *c)
{
    struct rdma_cm_event *ev;

    if (pthread_mutex_trylock(&c->cm_mu))
        return;   /* the other thread is looking */
    while (rdma_get_cm_event(c->ec, &ev) == 0) {
        enum rdma_cm_event_type t = ev->event;
        rdma_ack_cm_event(ev);
        if (t == RDMA_CM_EVENT_DISCONNECTED || t == RDMA_CM_EVENT_DEVICE_REMOVAL ||
            t == RDMA_CM_EVENT_TIMEWAIT_EXIT)
            conn_end(c, t == RDMA_CM_EVENT_DEVICE_REMOVAL ? "the RDMA device went away" :
                     "the peer disconnected");
    }
    pthread_mutex_unlock(&c->cm_mu);
}

static ts_status ended(struct rdma_conn *c, const char *what, size_t done, size_t n,
                       struct ts_err *e)
{
    if (atomic_load(&c->shut))
        return ts_err_set(e, TS_EUNAVAIL, "rdma %s: connection to %s was shut down", what,
                          c->base.peer);
    if (!atomic_load(&c->dead))
        return ts_err_set(e, TS_EUNAVAIL, "rdma %s: peer %s stalled for %d ms after %zu of %zu "
                          "bytes", what, c->base.peer, TS_TP_STALL_MS, done, n);
    return ts_err_set(e, TS_EUNAVAIL, "rdma %s: peer %s: %s after %zu of %zu bytes%s", what,
                      c->base.peer, c->why, done, n, done ? " (torn)" : "");
}

/* Takes a send slot (waiting for completions when all are in flight). */
static bool sq_slot(struct rdma_conn *c)
{
    int64_t deadline = ts__deadline(TS_TP_STALL_MS);

    for (;;) {
        unsigned n = atomic_load(&c->sq_out);
        if (n < RDMA_SQ_DEPTH && atomic_compare_exchange_weak(&c->sq_out, &n, n + 1))
            return true;
        if (n >= RDMA_SQ_DEPTH)
            reap_sends(c);
        if (atomic_load(&c->dead) || atomic_load(&c->shut) || ts__left_ms(deadline) == 0)
            return false;
    }
}

/* Writes our consumed count into the peer's credit word (inline: v is copied at posting). */
static void send_credit(struct rdma_conn *c)
{
    uint64_t v = c->rx_tail;
    struct ibv_sge sge = { .addr = (uintptr_t)&v, .length = sizeof(v), .lkey = 0 };
    struct ibv_send_wr wr = { .wr_id = RDMA_WR_CREDIT, .sg_list = &sge, .num_sge = 1,
                              .opcode = IBV_WR_RDMA_WRITE,
                              .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE,
                              .wr.rdma = { .remote_addr = c->peer.credit_addr,
                                           .rkey = c->peer.credit_rkey } }, *bad;
    int rc;

    if (v == c->rx_credited || !sq_slot(c))
        return;
    if ((rc = ibv_post_send(c->id->qp, &wr, &bad))) {
        atomic_fetch_sub(&c->sq_out, 1);
        conn_end(c, "posting a credit failed");
        return;
    }
    c->rx_credited = v;
}

/* Waits until the peer's ring has room (at least 1 byte), up to TS_TP_STALL_MS; *room. */
static bool tx_room(struct rdma_conn *c, uint64_t *room)
{
    int64_t deadline = ts__deadline(TS_TP_STALL_MS);
    unsigned nap = 1;

    for (;;) {
        uint64_t used = c->tx_head - atomic_load_explicit(c->cred, memory_order_acquire);
        if (used < RDMA_RING) {
            *room = RDMA_RING - used;
            return true;
        }
        reap_sends(c);
        look_at_peer(c);
        if (atomic_load(&c->dead) || atomic_load(&c->shut) || ts__left_ms(deadline) == 0)
            return false;
        usleep(nap);
        nap = nap < 1000 ? nap * 2 : 1000;
    }
}

static bool in_place_done(struct rdma_conn *c);

/* Drops registration i, once no write from pinned memory is in flight (one may use it: a
 * send returns before its writes complete). False if the connection ended meanwhile. */
static bool drop_mr(struct rdma_conn *c, size_t i)
{
    if (atomic_load(&c->in_place_out) && !in_place_done(c))
        return false;
    ibv_dereg_mr(c->mrs[i].mr);
    c->mrs[i].pin = 0;
    c->mrs[i].mr = NULL;
    return true;
}

/* The registration of the pinned range holding body, made on this connection's first send
 * from it; NULL when body is not pinned or cannot be registered (the send then copies).
 * Registrations of ranges unpinned since are dropped first. Sending thread. */
static struct ibv_mr *pinned_mr(struct rdma_conn *c, const void *body, size_t blen)
{
    struct ts__pin pin;
    uint64_t gen = ts__pin_gen();
    size_t i, free_at = RDMA_MRS;

    if (gen != c->mrs_gen) {
        for (i = 0; i < RDMA_MRS; i++)
            if (c->mrs[i].pin && !ts__pin_alive(c->mrs[i].pin) && !drop_mr(c, i))
                return NULL;
        c->mrs_gen = gen;
    }
    if (!ts__pin_find(body, blen, &pin))
        return NULL;
    for (i = 0; i < RDMA_MRS; i++) {
        if (c->mrs[i].pin == pin.id)
            return c->mrs[i].mr;
        if (!c->mrs[i].pin && free_at == RDMA_MRS)
            free_at = i;
    }
    if (free_at == RDMA_MRS) {   /* full: give one up, in turn */
        free_at = c->mrs_next++ % RDMA_MRS;
        if (!drop_mr(c, free_at))
            return NULL;
    }
    /* Read by our device only: no remote access. */
    struct ibv_mr *mr = ibv_reg_mr(c->pd, (void *)pin.base, pin.len, 0);
    if (!mr) {
        if (!c->mrs_failed)   /* once a connection: each send would say it again */
            ts_log(TS_WARN, "transport", "%s: cannot register %zu bytes of pinned memory "
                   "(%s; the process's ulimit -l?): sends from it are copied", c->base.peer,
                   pin.len, strerror(errno));
        c->mrs_failed = true;
        return NULL;
    }
    ts_log(TS_DEBUG, "transport", "%s: %zu bytes of pinned memory registered: sends from it "
           "go in place", c->base.peer, pin.len);
    c->mrs[free_at].pin = pin.id;
    c->mrs[free_at].mr = mr;
    return mr;
}

/* Waits until the device has read every write from pinned memory (their completions reaped),
 * so the caller may write it again; up to TS_TP_STALL_MS. A receive calls it before it
 * returns: by then the peer has answered what was sent, so the writes have long completed
 * and this costs one look at the send queue. */
static bool in_place_done(struct rdma_conn *c)
{
    int64_t deadline = ts__deadline(TS_TP_STALL_MS);
    unsigned nap = 1;

    for (;;) {
        reap_sends(c);
        if (!atomic_load(&c->in_place_out))
            return true;
        if (atomic_load(&c->dead) || ts__left_ms(deadline) == 0) {
            /* Not read yet, and the caller is about to write the range again (a receive
             * returned, or a registration goes): end the connection, so nothing reads it. */
            conn_end(c, "writes from pinned memory did not complete");
            return false;
        }
        if (nap > 1)
            usleep(nap);
        nap = nap < 1000 ? nap * 2 : 1000;
    }
}

/* Sends head then body as one stream into the peer's ring. Head (and a body that is not in
 * pinned memory) is copied into the staging area at the offset it will have in the ring; a
 * pinned body is written from where it lies, as a second piece of the same write, and may
 * still be read by the device after we return: the next receive on c waits for that
 * (transport.h, "Pinned memory"). */
static ts_status rdma_send(struct ts_conn *base, const void *head, size_t hlen,
                           const void *body, size_t blen, struct ts_err *e)
{
    struct rdma_conn *c = (struct rdma_conn *)base;
    struct ibv_mr *zmr = blen >= RDMA_IN_PLACE_MIN ? pinned_mr(c, body, blen) : NULL;
    const uint8_t *src[2] = { head, body };
    size_t len[2] = { hlen, blen }, n = hlen + blen, done = 0;

    while (done < n) {
        uint64_t room, off = c->tx_head & (RDMA_RING - 1);
        size_t piece, copied = 0, in_place = 0;

        if (atomic_load(&c->dead) || atomic_load(&c->shut) || !tx_room(c, &room))
            goto fail;
        piece = n - done;
        piece = piece < room ? piece : room;
        piece = piece < RDMA_CHUNK ? piece : RDMA_CHUNK;
        piece = piece < RDMA_RING - off ? piece : RDMA_RING - off;   /* one write never wraps */
        for (size_t at = done; at < done + piece;) {   /* the head's bytes, then the body's */
            int k = at >= hlen;
            size_t from = k ? at - hlen : at, take = len[k] - from;
            take = take < done + piece - at ? take : done + piece - at;
            if (k && zmr) {
                in_place += take;
            } else {
                memcpy(c->tx + off + copied, src[k] + from, take);
                copied += take;
            }
            at += take;
        }
        /* In place: the body from where this piece's copied head bytes end. */
        struct ibv_sge sge[2] = {
            { .addr = (uintptr_t)(c->tx + off), .length = (uint32_t)copied,
              .lkey = c->tx_mr->lkey },
            { .addr = in_place ? (uintptr_t)(src[1] + (done + copied - hlen)) : 0,
              .length = (uint32_t)in_place, .lkey = zmr ? zmr->lkey : 0 } };
        struct ibv_send_wr wr = { .wr_id = in_place ? RDMA_WR_IN_PLACE : RDMA_WR_COPY,
                                  .sg_list = copied ? sge : sge + 1,
                                  .num_sge = copied && in_place ? 2 : 1,
                                  .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                                  .send_flags = IBV_SEND_SIGNALED,
                                  .imm_data = htonl((uint32_t)piece),
                                  .wr.rdma = { .remote_addr = c->peer.ring_addr + off,
                                               .rkey = c->peer.ring_rkey } }, *bad;
        if (!sq_slot(c))
            goto fail;
        if (in_place)
            atomic_fetch_add(&c->in_place_out, 1);
        if (ibv_post_send(c->id->qp, &wr, &bad)) {
            atomic_fetch_sub(&c->sq_out, 1);
            if (in_place)
                atomic_fetch_sub(&c->in_place_out, 1);
            conn_end(c, "posting a write failed");
            goto fail;
        }
        c->tx_head += piece;
        done += piece;
        c->base.bytes_in_place += in_place;
    }
    reap_sends(c);
    return TS_OK;
fail:
    /* Writes from the caller's pinned pages may still be in flight, and a failed send is the
     * connection's end for the caller: end it here, so nothing of it is sent or read again. */
    if (atomic_load(&c->in_place_out))
        conn_end(c, "a send from pinned memory was cut short");
    return ended(c, "send", done, n, e);
}

/* Takes the receive queue's completions: bytes announced, receives posted again. */
static void poll_recvs(struct rdma_conn *c)
{
    struct ibv_wc wc[RDMA_CQ_BATCH];
    int n, ok;

    while ((n = ibv_poll_cq(c->rcq, RDMA_CQ_BATCH, wc)) > 0) {
        ok = 0;
        for (int i = 0; i < n; i++) {
            if (wc[i].status != IBV_WC_SUCCESS) {
                conn_end(c, wc[i].status == IBV_WC_WR_FLUSH_ERR ? "the peer disconnected" :
                         ibv_wc_status_str(wc[i].status));
                continue;
            }
            ok++;
            if (wc[i].opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc[i].wc_flags & IBV_WC_WITH_IMM))
                continue;
            /* A peer that claims more than the credit it was given is broken: its bytes would
             * have overwritten ones not yet released. What came before it stays readable. */
            if (c->rx_avail + ntohl(wc[i].imm_data) - c->rx_tail > RDMA_RING) {
                c->broken = true;
                conn_end(c, "the peer wrote past its credit");
            } else if (!c->broken) {
                c->rx_avail += ntohl(wc[i].imm_data);
            }
        }
        if (ok && !atomic_load(&c->dead) && rdma_post_recvs(c, ok))
            conn_end(c, "posting receives failed");
    }
    if (n < 0)
        conn_end(c, "polling the receive queue failed");
}

/* Waits for c->rx_avail to pass `need` (a count of bytes ever), up to deadline. first: the
 * wait for a message's first byte, which an interrupt ends. */
static ts_status rx_wait(struct rdma_conn *c, uint64_t need, int64_t deadline, bool first,
                         int ms, size_t done, size_t n, struct ts_err *e)
{
    int64_t spin_end = ts_now_us() + RDMA_SPIN_US;
    struct pollfd p[3] = { { .fd = c->cc->fd, .events = POLLIN },
                           { .fd = c->ec->fd, .events = POLLIN },
                           { .fd = c->efd, .events = POLLIN } };

    send_credit(c);   /* the peer may be waiting for the room we freed */
    for (;;) {
        poll_recvs(c);
        if (c->rx_avail > need)
            return TS_OK;
        if (atomic_load(&c->dead) || atomic_load(&c->shut))
            return ended(c, "recv", done, n, e);
        if (ts_now_us() < spin_end)
            continue;
        if (!c->cq_armed) {
            if (ibv_req_notify_cq(c->rcq, 0)) {
                conn_end(c, "arming the receive queue failed");
                continue;
            }
            c->cq_armed = true;
            continue;   /* a completion may have come before arming: poll again */
        }
        int left = ts__left_ms(deadline);
        int rc = poll(p, first ? 3 : 2, left < 0 || left > RDMA_SLICE_MS ? RDMA_SLICE_MS : left);
        if (rc < 0 && errno != EINTR)
            return ts_err_set(e, TS_EIO, "rdma recv: poll: %s", strerror(errno));
        if (p[0].revents) {
            struct ibv_cq *cq;
            void *ctx;
            if (ibv_get_cq_event(c->cc, &cq, &ctx) == 0) {
                ibv_ack_cq_events(cq, 1);
                c->cq_armed = false;
            }
        }
        look_at_peer(c);
        poll_recvs(c);
        /* A shutdown wakes us through the eventfd too: it ends the connection, not the wait. */
        if (c->rx_avail > need || atomic_load(&c->dead) || atomic_load(&c->shut))
            continue;
        if (first && p[2].revents) {
            eventfd_t v;
            if (eventfd_read(c->efd, &v) == 0 && v)
                return ts_err_set(e, TS_ECANCELLED, "rdma recv from %s: interrupted",
                                  c->base.peer);
        }
        if (deadline >= 0 && ts__left_ms(deadline) == 0) {
            if (first)
                return ts_err_set(e, TS_ETIMEDOUT, "rdma recv from %s: nothing within %d ms",
                                  c->base.peer, ms);
            return ended(c, "recv", done, n, e);
        }
    }
    return TS_OK;
}

/* Bytes released: tell the peer once an eighth of the ring is free again. */
static void rx_release(struct rdma_conn *c, size_t n)
{
    c->rx_tail += n;
    if (c->rx_tail - c->rx_credited >= RDMA_RING / 8)
        send_credit(c);
}

static ts_status rdma_recv(struct ts_conn *base, void *buf, size_t n, int ms, struct ts_err *e)
{
    struct rdma_conn *c = (struct rdma_conn *)base;
    size_t got = 0;
    ts_status st;

    if (n == 0)
        return TS_OK;
    poll_recvs(c);
    if (c->rx_avail == c->rx_tail &&
        (st = rx_wait(c, c->rx_tail, ts__deadline(ms), true, ms, 0, n, e)))
        return st;
    while (got < n) {
        uint64_t have = c->rx_avail - c->rx_tail;
        if (!have) {
            if ((st = rx_wait(c, c->rx_tail, ts__deadline(TS_TP_STALL_MS), false, ms, got, n,
                              e)))
                return st;
            continue;
        }
        size_t take = have < n - got ? (size_t)have : n - got;
        memcpy((uint8_t *)buf + got, c->rx + (c->rx_tail & (RDMA_RING - 1)), take);
        got += take;
        rx_release(c, take);
        if (got < n)
            poll_recvs(c);
    }
    if (atomic_load(&c->in_place_out) && !in_place_done(c))
        return ended(c, "recv", got, n, e);
    return TS_OK;
}

static ts_status rdma_recv_view(struct ts_conn *base, size_t n, const void **p, struct ts_err *e)
{
    struct rdma_conn *c = (struct rdma_conn *)base;
    ts_status st;

    if (n == 0 || n > RDMA_RING)
        return ts_err_set(e, TS_EINVAL, "rdma recv_view of %zu bytes (1 .. %u)", n, RDMA_RING);
    poll_recvs(c);
    while (c->rx_avail - c->rx_tail < n) {
        if ((st = rx_wait(c, c->rx_tail + n - 1, ts__deadline(TS_TP_STALL_MS), false, -1,
                          (size_t)(c->rx_avail - c->rx_tail), n, e)))
            return st;
    }
    if (atomic_load(&c->in_place_out) && !in_place_done(c))
        return ended(c, "recv", n, n, e);
    *p = c->rx + (c->rx_tail & (RDMA_RING - 1));
    return TS_OK;
}

static void rdma_release(struct ts_conn *base, size_t n)
{
    rx_release((struct rdma_conn *)base, n);
}

static void rdma_interrupt(struct ts_conn *base)
{
    eventfd_write(((struct rdma_conn *)base)->efd, 1);
}

static void rdma_shutdown(struct ts_conn *base)
{
    struct rdma_conn *c = (struct rdma_conn *)base;

    atomic_store(&c->shut, true);
    rdma_disconnect(c->id);   /* the peer sees DISCONNECTED; our queue pair errors out */
    eventfd_write(c->efd, 1);
}

/* An orderly close delivers what was sent: the writes still in flight complete first (up to
 * RDMA_LINGER_MS), as a TCP socket's buffer drains after close. Then the peer sees DISCONNECTED. */
void rdma_close(struct ts_conn *base)
{
    struct rdma_conn *c = (struct rdma_conn *)base;
    int64_t deadline = ts__deadline(RDMA_LINGER_MS);

    while (!atomic_load(&c->shut) && !atomic_load(&c->dead) && atomic_load(&c->sq_out) &&
           ts__left_ms(deadline) > 0) {
        reap_sends(c);
        usleep(50);
    }
    if (!atomic_load(&c->shut))
        rdma_disconnect(c->id);
    rdma_conn_free(c);
}

const struct ts_transport_ops ts_transport_rdma = {
    .name = "rdma",
    .probe = rdma_probe,
    .usable = rdma_usable,
    .listen = rdma_listen_on,
    .accept = rdma_accept_conn,
    .unlisten = rdma_unlisten,
    .connect = rdma_connect_to,
    .send = rdma_send,
    .recv = rdma_recv,
    .recv_view = rdma_recv_view,
    .release = rdma_release,
    .interrupt = rdma_interrupt,
    .shutdown = rdma_shutdown,
    .close = rdma_close,
};

#endif /* TS_HAVE_RDMA */
