/* shm.c - the "shm" backend: frames between processes on one host through shared memory.
 * (This file moves the bytes and holds the ops table; shm_setup.c makes the connections.)
 *
 * Why: on one host, TCP loopback copies every byte through the kernel twice and pays a system
 * call per send and per wake-up. Here the connecting side creates a memfd holding two
 * single-producer/single-consumer byte rings (one per direction) and passes it over a Unix
 * socket with SCM_RIGHTS; both map it and from then on bytes move with memcpy alone.
 *
 * Ring: head (bytes ever written) and tail (bytes ever read) are 64-bit counters in their own
 * cache lines, so producer and consumer never write the same line; the ring size is a power
 * of two and the counters never wrap in practice (2^64 bytes). The producer copies in, then
 * publishes head (release); the consumer reads head (acquire), copies out, publishes tail.
 * Big messages stream through in chunks (CHUNK), so a frame larger than the ring works and
 * the consumer starts copying while the producer is still writing.
 *
 * Views: each ring is mapped twice, back to back, so any size bytes from any offset are one
 * contiguous range of addresses. That lets recv_view hand the consumer a payload in place (the
 * shard adds a pushed gradient straight from the ring, with no copy into a private buffer);
 * the bytes stay the consumer's until release() moves tail past them.
 *
 * Waiting: spin (briefly for a first byte, longer mid-message, when the peer is busy copying
 * the next chunk), then sleep on a futex: each ring has a sequence word per direction
 * (data, space) and a "waiter present" word. A waiter reads the sequence, announces itself,
 * re-checks the counters and sleeps only if the sequence has not moved; the other side bumps
 * the sequence and calls FUTEX_WAKE only when a waiter is announced, so the fast path makes no
 * system call. Both the announcement and the counter update are sequentially consistent
 * (a Dekker pair): one of the two sides always sees the other.
 *
 * Death of the peer: close() sets closed flags in the shared header and wakes everyone, so an
 * orderly hang-up is seen at once. A peer that is killed sets nothing, so the Unix socket stays
 * open for the life of the connection and a sleeper wakes every SLICE_MS to poll it for a
 * hang-up (the kernel closes it when the process dies): TS_EUNAVAIL within ~SLICE_MS.
 *
 * The blob is "BOOTID NETNS PATH": PATH is the listener's Unix socket, in a directory that
 * only its user (and a group it names) can reach (shm_dir.c). usable() requires the same
 * running kernel and network namespace as ours, and PATH reachable from here (a peer in
 * another mount namespace gets tcp). Both ends check who the other is with SO_PEERCRED. */
#include "transport/transport.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "transport/shm_internal.h"

enum wait_kind { W_DATA, W_SPACE };

/* ---- futex ---- */

static long futex_wait(_Atomic uint32_t *w, uint32_t val, int ms)
{
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

    /* Not FUTEX_PRIVATE: the word lives in memory shared with another process. */
    return syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void futex_bump(_Atomic uint32_t *w)
{
    atomic_fetch_add(w, 1);
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* ---- moving bytes ---- */

static bool peer_gone(struct shm_conn *c)
{
    struct pollfd p = { .fd = c->sock, .events = POLLRDHUP };

    return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR));
}

/* Bytes ready for the waiter: data in rx (consumer) or free space in tx (producer). */
static uint64_t ready(struct shm_conn *c, enum wait_kind k)
{
    if (k == W_DATA)
        return atomic_load(&c->rx->head) - atomic_load_explicit(&c->rx->tail,
                                                                memory_order_relaxed);
    return c->size - (c->tx_head - atomic_load(&c->tx->tail));
}

/* Why a wait must end without bytes, or TS_OK to keep waiting. Only a recv waiting for its
 * first byte takes an interrupt. */
static ts_status wait_stop(struct shm_conn *c, enum wait_kind k, bool first, struct ts_err *e)
{
    const char *what = k == W_DATA ? "recv" : "send";

    if (atomic_load(&c->shut))
        return ts_err_set(e, TS_EUNAVAIL, "shm %s: connection to %s was shut down", what,
                          c->base.peer);
    if (k == W_DATA ? atomic_load(&c->rx->writer_closed) : atomic_load(&c->tx->reader_closed))
        return ts_err_set(e, TS_EUNAVAIL, "shm %s: peer %s closed the connection%s", what,
                          c->base.peer, first ? "" : " mid-message (torn)");
    if (k == W_DATA && first && atomic_exchange(&c->intr, 0))
        return ts_err_set(e, TS_ECANCELLED, "shm recv from %s: interrupted", c->base.peer);
    return TS_OK;
}

static ts_status wait_end(_Atomic uint32_t *waiting, ts_status st)
{
    atomic_store(waiting, 0);
    return st;
}

/* Waits until ready(c, k) >= need (1 .. size) and returns it in *n. first: the wait for a
 * message's first byte (interruptible, bounded by ms); otherwise a stall, bounded by
 * TS_TP_STALL_MS. A view waits for a whole payload (need > 1); the producer's publish after
 * each chunk moves the sequence, so the waiter re-checks until enough has come.
 * Once spinning is over, each round reads the sequence word and announces the waiter BEFORE
 * checking the counters and flags, so a change after the check moves the sequence and the
 * futex wait returns at once: no wake-up is lost. */
static ts_status wait_ready(struct shm_conn *c, enum wait_kind k, bool first, int ms,
                            uint64_t need, uint64_t *n, struct ts_err *e)
{
    struct ring_ctl *r = k == W_DATA ? c->rx : c->tx;
    _Atomic uint32_t *seq = k == W_DATA ? &r->data_seq : &r->space_seq;
    _Atomic uint32_t *waiting = k == W_DATA ? &r->data_waiting : &r->space_waiting;
    const char *what = k == W_DATA ? "recv" : "send";
    int64_t deadline = -2, spin_end = 0;
    bool spinning = true;
    ts_status st;
    uint32_t s = 0;
    int left;

    for (unsigned spin = 0;; spin++) {
        /* The clock is read once nothing was ready at once, then every 64 polls. Spinning
         * pays only when the rest comes within one chunk's copy; a view missing more than
         * that sleeps at once and leaves the core to the producer (2 cores, 4 processes). */
        if (spin == 1)
            spin_end = ts_now_us() + (first || need - *n > CHUNK ? SPIN_FIRST_US : SPIN_MID_US);
        else if (spin > 1 && spinning && (spin & 63) == 0 && ts_now_us() >= spin_end)
            spinning = false;
        if (!spinning) {
            s = atomic_load(seq);
            /* A view sleeps until its whole payload is in: one wake-up, not one per chunk. */
            if (k == W_DATA)
                atomic_store(&r->data_need, atomic_load_explicit(&r->tail,
                                                                 memory_order_relaxed) + need);
            atomic_store(waiting, 1);
        }
        if ((*n = ready(c, k)) > c->size)
            return wait_end(waiting, ts_err_set(e, TS_ECORRUPT, "shm: ring counters from %s "
                                                "are inconsistent", c->base.peer));
        if (*n >= need)
            return wait_end(waiting, TS_OK);
        if ((st = wait_stop(c, k, first, e)))
            return wait_end(waiting, st);
        if (spinning) {
            cpu_relax();
            continue;
        }
        if (deadline == -2)
            deadline = ts__deadline(ms);
        left = deadline < 0 ? SLICE_MS : ts__left_ms(deadline);
        if (left <= 0 && first)
            return wait_end(waiting, ts_err_set(e, TS_ETIMEDOUT, "shm %s: nothing within %d "
                                                "ms", what, ms));
        if (left <= 0)
            return wait_end(waiting, ts_err_set(e, TS_EUNAVAIL, "shm %s: peer %s stalled for "
                                                "%d ms mid-message", what, c->base.peer, ms));
        if (futex_wait(seq, s, left < SLICE_MS ? left : SLICE_MS) < 0 &&
            errno == ETIMEDOUT && ready(c, k) < need && peer_gone(c))
            return wait_end(waiting, ts_err_set(e, TS_EUNAVAIL, "shm %s: peer %s is gone "
                                                "(process exited)", what, c->base.peer));
    }
}

/* Makes bytes written to tx visible and wakes a sleeping consumer. */
static void publish_tx(struct shm_conn *c)
{
    atomic_store(&c->tx->head, c->tx_head);
    /* data_need is stored before data_waiting, both seq_cst: seeing the waiter means seeing
     * what it waits for. */
    if (atomic_load(&c->tx->data_waiting) && c->tx_head >= atomic_load(&c->tx->data_need))
        futex_bump(&c->tx->data_seq);
}

/* Copies n bytes from src into tx, publishing every CHUNK and before any wait. */
static ts_status put(struct shm_conn *c, const uint8_t *src, size_t n, size_t *unpub,
                     struct ts_err *e)
{
    uint64_t space, off, k;
    ts_status st;

    while (n) {
        if ((space = ready(c, W_SPACE)) == 0) {
            publish_tx(c);
            *unpub = 0;
            if ((st = wait_ready(c, W_SPACE, false, TS_TP_STALL_MS, 1, &space, e)))
                return st;
        }
        off = c->tx_head & (c->size - 1);
        k = n < space ? n : space;
        k = k < c->size - off ? k : c->size - off;
        k = k < CHUNK ? k : CHUNK;
        memcpy(c->txd + off, src, k);
        c->tx_head += k;
        src += k;
        n -= k;
        if ((*unpub += k) >= CHUNK) {
            publish_tx(c);
            *unpub = 0;
        }
    }
    return TS_OK;
}

static ts_status shm_send(struct ts_conn *base, const void *head, size_t hlen, const void *body,
                          size_t blen, struct ts_err *e)
{
    struct shm_conn *c = (struct shm_conn *)base;
    size_t unpub = 0;
    ts_status st;

    if ((st = wait_stop(c, W_SPACE, true, e)))      /* hung up: fail before copying */
        return st;
    if ((st = put(c, head, hlen, &unpub, e)) || (st = put(c, body, blen, &unpub, e)))
        return st;
    publish_tx(c);
    return TS_OK;
}

static ts_status shm_recv(struct ts_conn *base, void *buf, size_t n, int ms, struct ts_err *e)
{
    struct shm_conn *c = (struct shm_conn *)base;
    uint64_t tail = atomic_load_explicit(&c->rx->tail, memory_order_relaxed), avail, off, k;
    size_t got = 0;
    ts_status st;

    if (atomic_load(&c->shut))
        return ts_err_set(e, TS_EUNAVAIL, "shm recv: connection to %s was shut down",
                          c->base.peer);
    while (got < n) {
        if ((st = wait_ready(c, W_DATA, got == 0, got == 0 ? ms : TS_TP_STALL_MS, 1, &avail,
                              e)))
            return st;
        off = tail & (c->size - 1);
        k = n - got < avail ? n - got : avail;
        k = k < c->size - off ? k : c->size - off;
        k = k < CHUNK ? k : CHUNK;
        memcpy((uint8_t *)buf + got, c->rxd + off, k);
        tail += k;
        got += k;
        atomic_store(&c->rx->tail, tail);
        /* Wake a producer waiting for space once a quarter of the ring is free, not after
         * every chunk: one wake-up per few megabytes instead of a ping-pong per chunk. */
        if (avail - k <= c->size - c->size / 4 && atomic_load(&c->rx->space_waiting))
            futex_bump(&c->rx->space_seq);
    }
    /* Done reading for now: whatever space there is, the producer may use it. */
    if (atomic_load(&c->rx->space_waiting))
        futex_bump(&c->rx->space_seq);
    return TS_OK;
}

static ts_status shm_recv_view(struct ts_conn *base, size_t n, const void **p,
                              struct ts_err *e)
{
    struct shm_conn *c = (struct shm_conn *)base;
    uint64_t tail = atomic_load_explicit(&c->rx->tail, memory_order_relaxed), avail;
    ts_status st;

    if (n == 0 || n > c->size)
        return ts_err_set(e, TS_EINVAL, "shm view: %zu bytes, the ring holds 1..%llu", n,
                          (unsigned long long)c->size);
    if (atomic_load(&c->shut))
        return ts_err_set(e, TS_EUNAVAIL, "shm recv: connection to %s was shut down",
                          c->base.peer);
    /* The producer may be blocked on a full ring that our last recv left: let it go on. */
    if (atomic_load(&c->rx->space_waiting))
        futex_bump(&c->rx->space_seq);
    if ((st = wait_ready(c, W_DATA, false, TS_TP_STALL_MS, n, &avail, e)))
        return st;
    /* The second mapping makes [off, off + n) contiguous even across the ring's end. */
    *p = c->rxd + (tail & (c->size - 1));
    return TS_OK;
}

static void shm_release(struct ts_conn *base, size_t n)
{
    struct shm_conn *c = (struct shm_conn *)base;

    atomic_store(&c->rx->tail, atomic_load_explicit(&c->rx->tail, memory_order_relaxed) + n);
    if (atomic_load(&c->rx->space_waiting))
        futex_bump(&c->rx->space_seq);
}

/* ---- descriptors, on the Unix socket beside the rings ---- */

#define FD_MAGIC 0x3144464d48535354ull  /* "TSSHMFD1": what travels with a descriptor */

size_t shm_take_fds(struct msghdr *m, int *fd)
{
    size_t n = 0;

    *fd = -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
            c->cmsg_len < CMSG_LEN(0))
            continue;
        /* Every one the kernel put in our table, however the peer packed them: one
         * SCM_RIGHTS of two fits the control buffer meant for one (CMSG_SPACE pads). */
        for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++, n++) {
            int got;
            memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (*fd < 0)
                *fd = got;
            else
                close(got);
        }
    }
    return n;
}

static ts_status shm_send_fd(struct ts_conn *base, int fd, struct ts_err *e)
{
    struct shm_conn *c = (struct shm_conn *)base;
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cm;
    uint64_t magic = FD_MAGIC;
    struct iovec iov = { &magic, sizeof(magic) };
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
                        .msg_controllen = sizeof(cm.buf) };
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&m);
    int64_t deadline = ts__deadline(TS_TP_STALL_MS);

    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
    for (;;) {
        struct pollfd p = { .fd = c->sock, .events = POLLOUT };
        ssize_t n = sendmsg(c->sock, &m, MSG_NOSIGNAL | MSG_DONTWAIT);

        if (n == (ssize_t)sizeof(magic))
            return TS_OK;
        if (n >= 0 || (errno != EAGAIN && errno != EINTR) || atomic_load(&c->shut))
            return ts_err_set(e, TS_EUNAVAIL, "shm %s: passing a descriptor: %s", base->peer,
                              n >= 0 ? "short send" : strerror(errno));
        if (ts__left_ms(deadline) == 0)
            return ts_err_set(e, TS_EUNAVAIL, "shm %s: the peer takes no descriptors",
                              base->peer);
        poll(&p, 1, SLICE_MS);
    }
}

static ts_status shm_recv_fd(struct ts_conn *base, int ms, int *fd, struct ts_err *e)
{
    struct shm_conn *c = (struct shm_conn *)base;
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cm;
    uint64_t magic = 0;
    struct iovec iov = { &magic, sizeof(magic) };
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
                        .msg_controllen = sizeof(cm.buf) };
    struct pollfd p = { .fd = c->sock, .events = POLLIN };
    ssize_t n;
    size_t nfd;

    *fd = -1;
    while (poll(&p, 1, ms) < 0 && errno == EINTR)
        ;
    n = recvmsg(c->sock, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0 && errno == EAGAIN)
        return ts_err_set(e, TS_ETIMEDOUT, "shm %s: no descriptor came within %d ms",
                          base->peer, ms);
    nfd = n > 0 ? shm_take_fds(&m, fd) : 0;
    if (n != (ssize_t)sizeof(magic) || magic != FD_MAGIC || nfd != 1 ||
        (m.msg_flags & MSG_CTRUNC)) {
        if (*fd >= 0)
            close(*fd);
        *fd = -1;
        return ts_err_set(e, n <= 0 ? TS_EUNAVAIL : TS_ECORRUPT, "shm %s: expected a "
                          "descriptor, got %zd bytes%s", base->peer, n,
                          n < 0 ? " (socket error)" : "");
    }
    return TS_OK;
}

static void shm_interrupt(struct ts_conn *base)
{
    struct shm_conn *c = (struct shm_conn *)base;

    atomic_store(&c->intr, 1);
    futex_bump(&c->rx->data_seq);
}

static void shm_shutdown(struct ts_conn *base)
{
    struct shm_conn *c = (struct shm_conn *)base;

    atomic_store(&c->shut, true);
    atomic_store(&c->tx->writer_closed, 1);
    atomic_store(&c->rx->reader_closed, 1);
    /* Our own sleepers (rx data, tx space) and the peer's (tx data, rx space). */
    futex_bump(&c->rx->data_seq);
    futex_bump(&c->tx->space_seq);
    futex_bump(&c->tx->data_seq);
    futex_bump(&c->rx->space_seq);
    shutdown(c->sock, SHUT_RDWR);
}

static void shm_close(struct ts_conn *base)
{
    struct shm_conn *c = (struct shm_conn *)base;

    shm_shutdown(base);
    close(c->sock);
    shm_unmap_all(c);
    free(c);
}

const struct ts_transport_ops ts_transport_shm = {
    .name = "shm",
    .probe = shm_probe,
    .usable = shm_usable,
    .listen = shm_listen,
    .accept = shm_accept,
    .unlisten = shm_unlisten,
    .connect = shm_connect,
    .send = shm_send,
    .recv = shm_recv,
    .recv_view = shm_recv_view,
    .release = shm_release,
    .send_fd = shm_send_fd,
    .recv_fd = shm_recv_fd,
    .interrupt = shm_interrupt,
    .shutdown = shm_shutdown,
    .close = shm_close,
};

