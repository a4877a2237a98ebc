/* tcp.c - the "tcp" backend: frames over one TCP connection, usable between any two hosts.
 *
 * The socket stays blocking for bulk transfer, so one recv(MSG_WAITALL) or sendmsg moves many
 * megabytes per system call, and SO_RCVTIMEO/SO_SNDTIMEO (TS_TP_STALL_MS) bound every wait
 * once a message has started. Only the wait for a message's first byte goes through poll(2),
 * over the socket and a per-connection eventfd: that is what lets interrupt() wake a blocked
 * recv without disturbing the stream (shutdown(SHUT_RD) would have ended it).
 *
 * The address blob is the text "HOST:PORT" ("[V6]:PORT"), HOST being the numeric address the
 * listener is bound to: listen on the address peers should dial. TCP_NODELAY is set because a
 * frame is handed to the kernel whole (header and payload in one sendmsg); Nagle would only
 * delay the last segment of each frame, and set again after each frame it pushes out the
 * segment that autocorking would hold (push_tail). A connection whose peer is a loopback address
 * (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104) is host-local (transport.h): the kernel copies
 * the bytes from one process's memory to the other's, through no NIC or wire, as shm does, so
 * frames skip the payload hash and MAC there (docs/transport.md, "Integrity on one host").
 * Every other peer, a socketpair given to ts_tcp_adopt included, is hashed, and so is every
 * peer with TESSERA_TCP_LOOPBACK=remote (tests of the cross-host path on one host). Socket buffers
 * are left to the kernel's autotuning unless TESSERA_TCP_SOCKBUF=BYTES asks for fixed ones
 * (bench/transport_raw measures both). */
#include "transport/transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "transport/internal.h"
#include "util/knobs.h"

struct tcp_listener {
    struct ts_listener base;
    int fd;
};

struct tcp_conn {
    struct ts_conn base;
    int fd;
    int efd;                    /* interrupt(): readable while an interrupt is pending */
    atomic_bool shut;           /* shutdown() was called: say so in errors */
};

/* Fixed socket buffers, from TESSERA_TCP_SOCKBUF; 0 leaves them to autotuning. */
static int sockbuf_bytes(void)
{
    return (int)ts_knob_int(TS_KNOB_TCP_SOCKBUF);
}

/* Settings that must precede listen()/connect() to take effect (the window scale is agreed
 * in the handshake, so a big receive buffer set later cannot be fully used). */
static void tune_before(int fd)
{
    int one = 1, buf = sockbuf_bytes();

    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (buf) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
    }
}

/* Whether sa is a loopback address: the peer is this host, reached through no device (unless
 * TESSERA_TCP_LOOPBACK=remote says to treat it as another host). */
static bool loopback(const struct sockaddr *sa)
{
    static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    if (ts_knob_is(TS_KNOB_TCP_LOOPBACK, "remote"))
        return false;
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (memcmp(a->s6_addr, mapped, 12) == 0 &&
                                           a->s6_addr[12] == 127);
    }
    return false;
}

static ts_status tcp_probe(struct ts_err *e)
{
    return TS_OK;
}

static bool tcp_usable(const struct ts_blob *peer)
{
    return true;
}

static ts_status tcp_listen(const char *host, struct ts_listener **out, struct ts_blob *addr,
                            struct ts_err *e)
{
    struct addrinfo hints = { .ai_flags = AI_PASSIVE | AI_NUMERICSERV,
                              .ai_socktype = SOCK_STREAM }, *res, *ai;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    struct tcp_listener *l;
    int fd = -1, rc, one = 1, saved = EADDRNOTAVAIL;
    char text[TS_BLOB_MAX];

    host = host && *host ? host : "127.0.0.1";
    if ((rc = getaddrinfo(host, "0", &hints, &res)))
        return ts_err_set(e, TS_EINVAL, "tcp listen: host '%s': %s", host, gai_strerror(rc));
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0)
            continue;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        tune_before(fd);     /* accepted sockets inherit these */
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 128) == 0)
            break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return ts_err_set(e, TS_EIO, "tcp listen on %s: %s", host, strerror(saved));
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0 || !(l = calloc(1, sizeof(*l)))) {
        close(fd);
        return ts_err_set(e, TS_ENOMEM, "tcp listen on %s: out of memory", host);
    }
    ts__addr_text((struct sockaddr *)&ss, text, sizeof(text));
    l->base.ops = &ts_transport_tcp;
    l->fd = fd;
    addr->len = strlen(text);
    memcpy(addr->data, text, addr->len);
    *out = &l->base;
    return TS_OK;
}

static void tcp_unlisten(struct ts_listener *base)
{
    struct tcp_listener *l = (struct tcp_listener *)base;

    close(l->fd);
    free(l);
}

/* Wraps a connected blocking socket; takes ownership of fd (closed on failure). */
/* TS_TP_LIVENESS_MS: a peer whose host went silent ends the connection (ETIMEDOUT on the next
 * wait) instead of leaving it to TCP's backoff, minutes long. Keepalive covers a connection
 * waiting for a reply with nothing of its own in flight; the user timeout one whose bytes are
 * not acknowledged (it also bounds the keepalive probes once set). */
static void liveness(int fd)
{
    int one = 1, idle = 2, intvl = 1, cnt = TS_TP_LIVENESS_MS / 1000 - 2;
    unsigned user = TS_TP_LIVENESS_MS;

    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user, sizeof(user));
}

static ts_status conn_new(int fd, struct ts_conn **out, struct ts_err *e)
{
    struct timeval tv = { .tv_sec = TS_TP_STALL_MS / 1000 };
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    struct tcp_conn *c = calloc(1, sizeof(*c));
    int one = 1;

    if (!c || (c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        free(c);
        close(fd);
        return ts_err_set(e, TS_ENOMEM, "tcp: eventfd: %s", strerror(errno));
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    liveness(fd);
    c->base.ops = &ts_transport_tcp;
    c->fd = fd;
    strcpy(c->base.peer, "tcp:");
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
        ts__addr_text((struct sockaddr *)&ss, c->base.peer + 4, sizeof(c->base.peer) - 4);
        c->base.local_in = c->base.local_out = loopback((struct sockaddr *)&ss);
    }
    *out = &c->base;
    return TS_OK;
}

ts_status ts_tcp_adopt(int fd, struct ts_conn **out, struct ts_err *e)
{
    int fl = fcntl(fd, F_GETFL);

    /* conn_new wants a blocking socket: poll and SO_RCVTIMEO bound its waits. */
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        int saved = errno;
        close(fd);
        return ts_err_set(e, TS_EINVAL, "tcp: adopt fd %d: %s", fd, strerror(saved));
    }
    return conn_new(fd, out, e);
}

static ts_status tcp_accept(struct ts_listener *base, int ms, struct ts_conn **out,
                            struct ts_err *e)
{
    struct tcp_listener *l = (struct tcp_listener *)base;
    struct pollfd p = { .fd = l->fd, .events = POLLIN };
    int64_t deadline = ts__deadline(ms);
    int fd, rc;

    for (;;) {
        rc = poll(&p, 1, ts__left_ms(deadline));
        if (rc < 0 && errno != EINTR)
            return ts_err_set(e, TS_EIO, "tcp accept: poll: %s", strerror(errno));
        if (rc > 0) {
            fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd >= 0)
                break;
            /* A peer that gave up between poll and accept is not the listener's failure. */
            if (errno != EAGAIN && errno != ECONNABORTED && errno != EINTR)
                return ts_err_set(e, TS_EIO, "tcp accept: %s", strerror(errno));
        }
        if (deadline >= 0 && ts__left_ms(deadline) == 0)
            return ts_err_set(e, TS_ETIMEDOUT, "tcp accept: no peer within %d ms", ms);
    }
    /* Blocking from here on (see the file comment). */
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return conn_new(fd, out, e);
}

/* One non-blocking connect bounded by the deadline; returns the socket or -1 with errno. */
static int connect_one(const struct addrinfo *ai, int64_t deadline)
{
    struct pollfd p = { .events = POLLOUT };
    int fd, rc, soerr = 0;
    socklen_t sl = sizeof(soerr);

    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0)
        return -1;
    tune_before(fd);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
        goto connected;
    if (errno != EINPROGRESS)
        goto out_close;
    p.fd = fd;
    while ((rc = poll(&p, 1, ts__left_ms(deadline))) < 0 && errno == EINTR)
        ;
    if (rc == 0) {
        errno = ETIMEDOUT;
        goto out_close;
    }
    if (rc < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
        goto out_close;
    if (soerr) {
        errno = soerr;
        goto out_close;
    }
connected:
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
out_close:
    rc = errno;
    close(fd);
    errno = rc;
    return -1;
}

/* Connects to host:port, trying each of its addresses until the deadline; returns the socket,
 * or -1 with *saved the errno of the last try. */
static int dial(const char *host, const char *port, int64_t deadline, int *saved,
                struct ts_err *e)
{
    struct addrinfo hints = { .ai_flags = AI_NUMERICSERV, .ai_socktype = SOCK_STREAM }, *res,
                    *ai;
    int fd = -1, rc;

    *saved = ECONNREFUSED;
    if ((rc = getaddrinfo(host, port, &hints, &res))) {
        ts_err_set(e, TS_EUNAVAIL, "tcp connect %s:%s: %s", host, port, gai_strerror(rc));
        *saved = 0;
        return -1;
    }
    for (ai = res; ai && fd < 0; ai = ai->ai_next)
        if ((fd = connect_one(ai, deadline)) < 0)
            *saved = errno;
    freeaddrinfo(res);
    return fd;
}

static ts_status tcp_connect(const struct ts_blob *to, int ms, struct ts_conn **out,
                             struct ts_err *e)
{
    char host[TS_BLOB_MAX + 1], port[16];
    int fd, saved;
    ts_status st;

    if ((st = ts__split_addr(to, "tcp connect", host, sizeof(host), port, sizeof(port), e)))
        return st;
    fd = dial(host, port, ts__deadline(ms), &saved, e);
    if (fd < 0 && !saved)
        return e->code;
    if (fd < 0 && saved == ETIMEDOUT)
        return ts_err_set(e, TS_ETIMEDOUT, "tcp connect %s:%s: no answer within %d ms", host,
                          port, ms);
    if (fd < 0)
        return ts_err_set(e, TS_EUNAVAIL, "tcp connect %s:%s: %s", host, port,
                          strerror(saved));
    return conn_new(fd, out, e);
}

bool ts_tcp_refused(const char *hostport, int ms, char *why, size_t n)
{
    struct ts_blob b = { .len = hostport ? strlen(hostport) : 0 };
    char host[TS_BLOB_MAX + 1], port[16];
    struct ts_err e = { 0 };
    int fd, saved;

    if (b.len == 0 || b.len > TS_BLOB_MAX) {
        snprintf(why, n, "address of %zu bytes", b.len);
        return false;
    }
    memcpy(b.data, hostport, b.len);
    if (ts__split_addr(&b, "tcp connect", host, sizeof(host), port, sizeof(port), &e)) {
        snprintf(why, n, "%s", e.msg);
        return false;
    }
    if ((fd = dial(host, port, ts__deadline(ms), &saved, &e)) >= 0) {
        close(fd);
        snprintf(why, n, "%s accepts connections", hostport);
        return false;
    }
    if (!saved)
        snprintf(why, n, "%s", e.msg);
    else
        snprintf(why, n, "%s: %s", hostport, saved == ETIMEDOUT ? "no answer" : strerror(saved));
    return saved == ECONNREFUSED;
}

static ts_status gone(struct tcp_conn *c, const char *what, size_t done, size_t n, int err,
                      struct ts_err *e)
{
    if (atomic_load(&c->shut))
        return ts_err_set(e, TS_EUNAVAIL, "tcp %s: connection to %s was shut down", what,
                          c->base.peer);
    c->base.silent |= err == ETIMEDOUT;   /* the liveness timeout (keepalive, user timeout) */
    if (err == EAGAIN || err == EWOULDBLOCK)
        return ts_err_set(e, TS_EUNAVAIL, "tcp %s: peer %s stalled for %d ms after %zu of %zu "
                          "bytes", what, c->base.peer, TS_TP_STALL_MS, done, n);
    return ts_err_set(e, TS_EUNAVAIL, "tcp %s: peer %s: %s after %zu of %zu bytes%s", what,
                      c->base.peer, err ? strerror(err) : "closed", done, n,
                      done ? " (torn)" : "");
}

/* Sends now whatever of the frame the kernel still holds. A frame whose size is just above a
 * multiple of 64 KiB (a partition of 2^k bytes plus its header) ends in a segment of a few
 * dozen bytes, and Linux's autocorking (net.ipv4.tcp_autocorking) keeps such a segment back
 * until the segments before it have left the host: the peer cannot use the frame meanwhile.
 * Setting TCP_NODELAY again pushes the pending segments (tcp(7)). Measured (bench/multihost,
 * 1 Gbit/s, 4 MiB in 64 KiB partitions): 0.37-0.61 R without (8 runs), 0.62-0.72 R with (4). */
static void push_tail(int fd)
{
    int one = 1;

    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static ts_status tcp_send(struct ts_conn *base, const void *head, size_t hlen, const void *body,
                          size_t blen, struct ts_err *e)
{
    struct tcp_conn *c = (struct tcp_conn *)base;
    struct iovec iov[2] = { { (void *)head, hlen }, { (void *)body, blen } };
    struct msghdr m = { .msg_iov = iov, .msg_iovlen = 2 };
    size_t done = 0, n = hlen + blen;
    ssize_t r;

    while (done < n) {
        r = sendmsg(c->fd, &m, MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return gone(c, "send", done, n, r < 0 ? errno : 0, e);
        done += (size_t)r;
        /* Step the iovec past what went out (a partial write on a full socket buffer). */
        while (m.msg_iovlen && (size_t)r >= m.msg_iov->iov_len) {
            r -= (ssize_t)m.msg_iov->iov_len;
            m.msg_iov++;
            m.msg_iovlen--;
        }
        if (m.msg_iovlen) {
            m.msg_iov->iov_base = (char *)m.msg_iov->iov_base + r;
            m.msg_iov->iov_len -= (size_t)r;
        }
    }
    push_tail(c->fd);
    return TS_OK;
}

/* Waits for the first byte or an interrupt. Data wins: an interrupt is consumed only when
 * nothing is readable, so it never costs a byte. */
static ts_status wait_first(struct tcp_conn *c, int ms, struct ts_err *e)
{
    struct pollfd p[2] = { { .fd = c->fd, .events = POLLIN }, { .fd = c->efd, .events = POLLIN } };
    int64_t deadline = ts__deadline(ms);
    uint64_t v;
    int rc;

    for (;;) {
        rc = poll(p, 2, ts__left_ms(deadline));
        if (rc < 0 && errno != EINTR)
            return ts_err_set(e, TS_EIO, "tcp recv: poll: %s", strerror(errno));
        if (rc > 0 && p[0].revents)
            return TS_OK;    /* data, or an error/hang-up that recv will report */
        if (rc > 0 && p[1].revents && read(c->efd, &v, sizeof(v)) == sizeof(v))
            return ts_err_set(e, TS_ECANCELLED, "tcp recv from %s: interrupted", c->base.peer);
        if (deadline >= 0 && ts__left_ms(deadline) == 0)
            return ts_err_set(e, TS_ETIMEDOUT, "tcp recv from %s: nothing within %d ms",
                              c->base.peer, ms);
    }
}

static ts_status tcp_recv(struct ts_conn *base, void *buf, size_t n, int ms, struct ts_err *e)
{
    struct tcp_conn *c = (struct tcp_conn *)base;
    size_t got = 0;
    ts_status st;
    ssize_t r;

    if (n == 0)
        return TS_OK;
    /* Most often the bytes are there already (a payload behind its header): take them
     * without the poll. */
    r = recv(c->fd, buf, n, MSG_DONTWAIT);
    if (r > 0)
        got = (size_t)r;
    else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        return gone(c, "recv", 0, n, r < 0 ? errno : 0, e);
    else if ((st = wait_first(c, ms, e)))
        return st;
    while (got < n) {
        /* Blocking; SO_RCVTIMEO bounds a stall (EAGAIN with nothing read in that time). */
        r = recv(c->fd, (char *)buf + got, n - got, MSG_WAITALL);
        if (r > 0)
            got += (size_t)r;
        else if (r < 0 && errno == EINTR)
            continue;
        else
            return gone(c, "recv", got, n, r < 0 ? errno : 0, e);
    }
    return TS_OK;
}

static void tcp_interrupt(struct ts_conn *base)
{
    struct tcp_conn *c = (struct tcp_conn *)base;
    uint64_t one = 1;

    /* Cannot fail short of the counter overflowing, which would still leave it readable. */
    if (write(c->efd, &one, sizeof(one)) < 0)
        return;
}

static void tcp_shutdown(struct ts_conn *base)
{
    struct tcp_conn *c = (struct tcp_conn *)base;

    atomic_store(&c->shut, true);
    shutdown(c->fd, SHUT_RDWR);    /* wakes a blocked recv or send; the peer sees EOF */
}

static void tcp_close(struct ts_conn *base)
{
    struct tcp_conn *c = (struct tcp_conn *)base;

    close(c->fd);
    close(c->efd);
    free(c);
}

const struct ts_transport_ops ts_transport_tcp = {
    .name = "tcp",
    .probe = tcp_probe,
    .usable = tcp_usable,
    .listen = tcp_listen,
    .accept = tcp_accept,
    .unlisten = tcp_unlisten,
    .connect = tcp_connect,
    .send = tcp_send,
    .recv = tcp_recv,
    .interrupt = tcp_interrupt,
    .shutdown = tcp_shutdown,
    .close = tcp_close,
};
