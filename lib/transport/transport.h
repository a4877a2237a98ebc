/* transport.h - the data plane: moving gradient and parameter frames between two processes.
 *
 * Why: gRPC carries control; bulk tensors need a path that can be zero-copy, shared-memory or
 * RDMA. A transport is a const table of operations (docs/architecture.md); callers use the
 * ts_tp_* wrappers.
 * Backends move bytes only. Framing, checksums and validation live above them, in frame.c, so
 * a torn, oversized or corrupted frame is refused the same way on every backend.
 *
 * Backends, in preference order: "shm" (processes on the same host: a shared-memory ring per
 * direction, set up over a Unix socket), "rdma" (hosts with verbs devices: RDMA WRITE into the
 * receiver's registered ring), "tcp" (everywhere). NCCL comes later behind the same table. `listen` yields an opaque address blob that the peer receives over gRPC (the
 * shard map's DataPlaneEndpoint) and passes to `connect`. `probe` returning TS_ENODEV means the
 * backend cannot run here; `usable` says whether a peer's blob can be reached from this
 * process (shm: same boot id and network namespace, and a socket this process can reach and
 * would be let in by).
 *
 * Waits: every blocking call is bounded. recv waits up to the caller's ms for the first byte;
 * once a message has started, the rest must keep coming: a peer that sends nothing for
 * TS_TP_STALL_MS mid-message (or, for send, reads nothing for that long) is treated as gone
 * (TS_EUNAVAIL), so a torn message never hangs a thread forever.
 *
 * Ownership: listen/accept/connect return objects freed by ts_tp_unlisten / ts_tp_close.
 * Buffers passed to send/recv are the caller's and are not kept after the call returns.
 * Threads: one connection is used by one thread at a time for sending and one for receiving;
 * interrupt and shutdown may come from any thread while c is open. Different connections are
 * independent. A listener's accept is called from one thread. The counters in struct ts_conn
 * belong to the thread of their direction (in: the receiver, out: the sender); read them from
 * that thread or after it has been joined. */
#ifndef TS_TRANSPORT_TRANSPORT_H
#define TS_TRANSPORT_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define TS_BLOB_MAX 192
#define TS_TP_STALL_MS 30000       /* longest silence tolerated inside one message */
/* A TCP peer whose host stops answering (a cut that drops packets, no RST; a host gone) is
 * given up after about this long, idle or not: keepalive probes every second after 2 s of
 * silence, and TCP_USER_TIMEOUT on data sent and not acknowledged (tcp.c). Two default
 * leases: a silent link is handled as a broken one (a failover) at about the time the master
 * would declare a silent member dead. A stopped process on a live host is not caught here
 * (its kernel answers): the map's epoch catches it (docs/replication.md, "A hung head"). */
#define TS_TP_LIVENESS_MS 6000

struct ts_blob {
    uint8_t data[TS_BLOB_MAX];
    size_t len;
};

struct ts_transport_ops;

struct ts_conn {
    const struct ts_transport_ops *ops;
    char peer[64];                 /* for logs */
    uint64_t frames_in, frames_refused, bytes_in, bytes_out;   /* kept by frame.c */
    uint64_t bytes_in_place;       /* the backend's: bytes sent from pinned memory where they
                                    * lie, with no copy (rdma; "Pinned memory" below) */
    uint8_t refusal;               /* frame.c: why the last one was refused (frame.h) */
    /* Set by the backend when the connection is made. local_in / local_out: bytes from the
     * peer to us / from us to the peer stay in this host's memory, through no NIC, wire or
     * offload engine (shm, and tcp to a loopback address), so frame.c may leave payloads
     * unhashed (docs/transport.md). Backends set both; a wrapper that alters what it sends
     * (fault.c) clears local_out. view_max: the largest recv_view (0: no views). */
    bool local_in, local_out;
    /* Set by the backend when the connection ended because the peer's host stopped answering
     * (TS_TP_LIVENESS_MS; tcp: ETIMEDOUT), not because the peer closed it: a cut link or a
     * host gone, which says nothing of whether the peer process lives. */
    bool silent;
    size_t view_max;
    size_t view_held;              /* bytes of the view frame.c holds (receiver thread) */
    /* frame.c: zero bytes owed after the last payload sent (sent in front of the next header)
     * and to skip in front of the next header received, so that every header, and so every
     * payload, starts 8-aligned in the byte stream (frame.h, "Alignment"). */
    uint8_t tx_pad, rx_pad;
    /* mac.h: frame MACs once the connection is authenticated; NULL before (and without).
     * authed: the data-plane handshake (auth.h) succeeded on it. */
    struct ts_frame_mac *mac;
    bool authed;
};

struct ts_listener {
    const struct ts_transport_ops *ops;
};

struct ts_transport_ops {
    const char *name;              /* "tcp", "shm": logs, --transport */
    ts_status (*probe)(struct ts_err *e);
    bool (*usable)(const struct ts_blob *peer);
    /* host: the address to listen on ("127.0.0.1", "0.0.0.0"); backends that do not use one
     * ignore it. The blob is what a peer needs to connect. */
    ts_status (*listen)(const char *host, struct ts_listener **l, struct ts_blob *addr,
                        struct ts_err *e);
    /* Waits up to ms (-1 forever) for a peer. TS_ETIMEDOUT when none came. Another error
     * concerns that one peer (refused, hung up, sent a bad or no handshake): the listener
     * stays usable. A peer that connects and then sends nothing never delays another: shm
     * keeps such peers aside, bounded, until their hello or HELLO_MS (shm_setup.c). */
    ts_status (*accept)(struct ts_listener *l, int ms, struct ts_conn **c, struct ts_err *e);
    void (*unlisten)(struct ts_listener *l);
    ts_status (*connect)(const struct ts_blob *to, int ms, struct ts_conn **c, struct ts_err *e);
    /* Sends head then body as one unit, all of it, or fails (TS_EUNAVAIL: peer gone, or it
     * read nothing for TS_TP_STALL_MS). Either pointer may be NULL when its length is 0. */
    ts_status (*send)(struct ts_conn *c, const void *head, size_t hlen, const void *body,
                      size_t blen, struct ts_err *e);
    /* Receives exactly n bytes into buf, waiting up to ms (-1 forever) for the first byte.
     * TS_ETIMEDOUT if nothing arrived (nothing was consumed: c is still in step); TS_EUNAVAIL
     * if the peer closed or went silent for TS_TP_STALL_MS after the first byte (torn). */
    ts_status (*recv)(struct ts_conn *c, void *buf, size_t n, int ms, struct ts_err *e);
    /* Optional (NULL, and view_max 0, where the bytes must be copied out). Like recv of n bytes
     * (1 .. c->view_max), but without a copy: *p points at them where they arrived (the shm
     * ring), valid and unconsumed until release(c, n), which must come before the next recv or
     * recv_view. The wait is mid-message (TS_TP_STALL_MS, not interruptible): frame.c views
     * only payloads whose header has arrived. */
    ts_status (*recv_view)(struct ts_conn *c, size_t n, const void **p, struct ts_err *e);
    void (*release)(struct ts_conn *c, size_t n);
    /* Optional (NULL where the peer cannot map our memory: every connection that leaves the
     * host). Pass a file descriptor (a shared region, region.h) beside the byte stream: the
     * sender calls send_fd before it sends the frame that announces the descriptor, so the
     * peer's recv_fd, called once it has read that frame, finds it waiting. recv_fd waits up
     * to ms; the descriptor it gives is the caller's to close (close-on-exec). The sender
     * keeps its own. Called from the connection's sending / receiving thread. */
    ts_status (*send_fd)(struct ts_conn *c, int fd, struct ts_err *e);
    ts_status (*recv_fd)(struct ts_conn *c, int ms, int *fd, struct ts_err *e);
    /* Makes the recv that is waiting on c for its first byte, or else the next recv that would
     * have to wait, return TS_ECANCELLED (interrupts still pending do not add up). Data that
     * has arrived wins over an interrupt, and a recv that has its first byte finishes
     * undisturbed, so no byte is lost and c stays usable. Any thread. */
    void (*interrupt)(struct ts_conn *c);
    /* Hangs up without freeing c: the peer sees the connection closed; local send and recv,
     * blocked or later, fail with TS_EUNAVAIL. For cutting a connection another thread is
     * using; close it afterwards, once that thread is out. Any thread; idempotent. */
    void (*shutdown)(struct ts_conn *c);
    void (*close)(struct ts_conn *c);   /* cannot fail; frees c */
};

extern const struct ts_transport_ops ts_transport_tcp;
extern const struct ts_transport_ops ts_transport_shm;
/* In a build with libibverbs and librdmacm (TS_HAVE_RDMA; rdma.c says how it works). */
extern const struct ts_transport_ops ts_transport_rdma;

/* Whether nothing listens at hostport ("HOST:PORT", "[V6]:PORT"): true only when every address
 * of the host refused a TCP connection within ms, which is what a process killed on a live
 * host leaves behind. A timeout, a host that does not resolve or a connection accepted is
 * false. why gets what was seen, for logs. For the master's check of a shard reported
 * unreachable (docs/replication.md). */
bool ts_tcp_refused(const char *hostport, int ms, char *why, size_t n);
/* Wraps fd, a connected stream socket the caller made, as a tcp connection (TCP-only options
 * are ignored): one end of a socketpair(AF_UNIX), for the fuzzer and tests that want the tcp
 * backend's receive path without a listener. Takes ownership of fd, closed on failure too;
 * free *c with ts_tp_close. */
ts_status ts_tcp_adopt(int fd, struct ts_conn **c, struct ts_err *err) TS_MUST_CHECK;

/* Pinned memory (pin.c): a range the caller will send from again and again and keeps mapped
 * until ts_tp_unpin (the SDK's gradient buffers of tessera_buffers). A backend that can send
 * from it where it lies does (rdma: registered with a connection's device on the first send
 * from it, kept until the connection ends or the range is unpinned); the others copy as
 * always. A send from pinned memory may return before the device has read it: the caller
 * writes the range again only after a later receive on that connection returned (a receive
 * waits for those reads), or after closing it. The SDK does: a push is answered before the
 * step returns. Bytes changed too early are not delivered as if sent: the frame's hash or MAC
 * no longer matches and the receiver refuses the frame. ts_tp_pin returns the range's id (0:
 * not pinned, the table is full; sends then copy). Unpin before unmapping. Any thread. */
uint64_t ts_tp_pin(const void *p, size_t n);
void ts_tp_unpin(uint64_t id);

/* NULL-terminated, in preference order. */
extern const struct ts_transport_ops *const ts_transports[];
/* By name; NULL if unknown. */
const struct ts_transport_ops *ts_transport_find(const char *name);

/* The wrappers callers use (never c->ops directly). */
TS_MUST_CHECK static inline ts_status ts_tp_probe(const struct ts_transport_ops *t,
                                                  struct ts_err *e)
{
    return t->probe(e);
}
/* Whether a peer that published addr can be reached with t (false: another host's shm). */
static inline bool ts_tp_usable(const struct ts_transport_ops *t, const struct ts_blob *addr)
{
    return t->usable(addr);
}
/* The backend's name ("tcp", "shm") of a connection or a listener: for logs and replies. */
static inline const char *ts_tp_name(const struct ts_conn *c)
{
    return c->ops->name;
}
static inline const char *ts_tp_listener_name(const struct ts_listener *l)
{
    return l->ops->name;
}
TS_MUST_CHECK static inline ts_status ts_tp_listen(const struct ts_transport_ops *t,
                                                   const char *host, struct ts_listener **l,
                                                   struct ts_blob *addr, struct ts_err *e)
{
    return t->listen(host, l, addr, e);
}
TS_MUST_CHECK static inline ts_status ts_tp_accept(struct ts_listener *l, int ms,
                                                   struct ts_conn **c, struct ts_err *e)
{
    return l->ops->accept(l, ms, c, e);
}
TS_MUST_CHECK static inline ts_status ts_tp_connect(const struct ts_transport_ops *t,
                                                    const struct ts_blob *to, int ms,
                                                    struct ts_conn **c, struct ts_err *e)
{
    return t->connect(to, ms, c, e);
}
TS_MUST_CHECK static inline ts_status ts_tp_send(struct ts_conn *c, const void *head,
                                                 size_t hlen, const void *body, size_t blen,
                                                 struct ts_err *e)
{
    return c->ops->send(c, head, hlen, body, blen, e);
}
TS_MUST_CHECK static inline ts_status ts_tp_recv(struct ts_conn *c, void *buf, size_t n, int ms,
                                                 struct ts_err *e)
{
    return c->ops->recv(c, buf, n, ms, e);
}
TS_MUST_CHECK static inline ts_status ts_tp_recv_view(struct ts_conn *c, size_t n,
                                                      const void **p, struct ts_err *e)
{
    return c->ops->recv_view(c, n, p, e);
}
static inline void ts_tp_release(struct ts_conn *c, size_t n)
{
    c->ops->release(c, n);
}
/* Whether c can pass descriptors (and so share regions) with its peer. */
static inline bool ts_tp_can_share(const struct ts_conn *c)
{
    return c->ops->send_fd && c->ops->recv_fd;
}
TS_MUST_CHECK static inline ts_status ts_tp_send_fd(struct ts_conn *c, int fd, struct ts_err *e)
{
    return c->ops->send_fd(c, fd, e);
}
TS_MUST_CHECK static inline ts_status ts_tp_recv_fd(struct ts_conn *c, int ms, int *fd,
                                                    struct ts_err *e)
{
    return c->ops->recv_fd(c, ms, fd, e);
}
static inline void ts_tp_interrupt(struct ts_conn *c)
{
    c->ops->interrupt(c);
}
static inline void ts_tp_shutdown(struct ts_conn *c)
{
    c->ops->shutdown(c);
}
void ts_frame_mac_free(struct ts_conn *c);   /* mac.h */
static inline void ts_tp_close(struct ts_conn *c)
{
    if (c) {
        ts_frame_mac_free(c);
        c->ops->close(c);
    }
}
static inline void ts_tp_unlisten(struct ts_listener *l)
{
    if (l)
        l->ops->unlisten(l);
}

#endif
