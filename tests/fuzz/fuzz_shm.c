/* fuzz_shm.c - libFuzzer target: the shm backend against a hostile peer on the same host
 * (lib/transport/shm_setup.c, shm.c; shm_internal.h).
 *
 * A local process that may connect (our uid, or the group let in) sends the hello and the
 * memfd that holds both rings, then shares every byte of the rings' control words with us:
 * it can write our ring's head, our tail, its closed flags and the counters of the ring we
 * send on at any time. The acceptor must refuse a bad hello or memfd without mapping anything
 * it would fault on, and a connection must never read or write outside its ring nor wait
 * longer than its bounds, whatever the counters say. input[0] picks the part: odd the rings,
 * 2 mod 4 a peer's address, 0 mod 4 the accept.
 *
 * Accept: then, in order, how (bits 0-1 the hello's length: 32, none, 16, or 40 bytes, whose
 * last 8 are the next message's on a stream; bits 2-3 what goes beside it: a memfd, nothing,
 * a pipe, two memfds; bit 4 its magic and version wrong; bit 5 its map size off by map_off
 * pages; bit 6 the header's ring size not the hello's; bit 7 `silent` connections opened
 * first, against PENDING_MAX and PENDING_PER_UID), the ring size (1 << (16 + b % 5), or past
 * 0xf0 a u64 that follows the bytes below), the memfd's seals (bit 0 shrink, 1 grow, 2 write,
 * 3 future write, 4 seal), its size off by that many pages (signed), map_off (signed),
 * silent, both rings' head and tail in the header (u64 each), then what the accepted
 * connection is asked: a receive, a view and a send (u16 sizes). The peer has closed both
 * directions by then (flags in the header), so that a short ring ends a wait at once.
 *
 * Rings: one connection, made at start, whose peer end the fuzzer plays through its own
 * mapping. Each run sets every counter of both rings to a base (input[1..8]), then ops:
 * 0 write bytes into the ring we receive from; 1 its head, 2 its tail, 3 the tail of the
 * ring we send on (each: near the other counter, or any u64); 4 flags (writer and reader
 * closed, waiters, an interrupt); 5 recv n bytes (waiting 0 ms for the first, 1 ms when the
 * byte after n is 0xff: the futex's timeout, which costs the run that millisecond); 6 a view
 * of n bytes, then its release; 7 a send of n bytes; 8 an interrupt; 9 descriptors passed
 * beside the stream (none, one or two, with the magic or not) and one taken; 10 the peer's
 * data_need. A wait the counters would make last (bytes missing mid-message) is ended the
 * way a peer that hangs up ends it: before the call, the peer's closed flag is set.
 *
 * Address: shm_usable (shm_setup.c's parse, shm_dir.c's checks of the socket's directory) on
 * a blob made of this host's boot id and namespace (byte 1 bit 0), the listener's path (bit
 * 1) and the rest of the input.
 *
 * Checked: every call returns within a second with a status its contract names; what a
 * receive returns, and where a view points, are the ring's bytes at the tail it started
 * from (the fuzzer keeps a copy of what it wrote), inside the ring's double mapping, and the
 * tail moved by exactly n; a send's bytes land in the ring at the head it started from and
 * head moves by exactly n; the listener lets in exactly the hellos shm_setup.c documents, an
 * accepted connection's ring is the hello's size; only a descriptor sent as a real peer sends
 * it is taken, and no descriptor a peer passes, nor one the backend opens, is left open after
 * a run; the listener's own address is usable, and no address that does not name its socket.
 * Seeds: tests/fuzz/corpus-shm (written by fuzz_seeds). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "transport/shm_internal.h"
#include "util/log.h"
#include "util/proc.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define RING (64u << 10)          /* the pair's (TESSERA_SHM_RING) */
#define CALL_MS_MAX 1000          /* a call that takes longer waited past its bounds */

static struct ts_listener *lis;
static struct ts_blob lis_addr;    /* "BOOTID NETNS PATH" of lis */
static struct shm_conn *me, *peer;  /* the pair: accepted (under test), and its connector */
static uint8_t shadow[RING];       /* what the fuzzer wrote into the ring `me` receives from */
static uint8_t pattern[RING];      /* what `me` sends */
static int lowest_fd;              /* the lowest free one at start: leaks show above it */

/* ---- the input ---- */

struct in {
    const uint8_t *p;
    size_t n;
};

static uint64_t take(struct in *in, int bytes)
{
    uint64_t v = 0;

    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)(in->n ? (in->n--, *in->p++) : 0) << (8 * i);
    return v;
}

static int64_t ms_since(int64_t t0)
{
    return ts_now_ms() - t0;
}

static void within(int64_t t0)
{
    if (ms_since(t0) > CALL_MS_MAX)
        abort(); /* a wait past its bounds */
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    struct ts_conn *a = NULL, *c = NULL;
    struct ts_err err = { 0 };
    char ring[16];

    ts_log_set_level(TS_ERROR);
    snprintf(ring, sizeof(ring), "%u", RING);
    setenv("TESSERA_SHM_RING", ring, 1);
    if (ts_tp_listen(&ts_transport_shm, "127.0.0.1", &lis, &lis_addr, &err) ||
        ts_tp_connect(&ts_transport_shm, &lis_addr, 5000, &c, &err) ||
        ts_tp_accept(lis, 5000, &a, &err)) {
        fprintf(stderr, "fuzz_shm: %s\n", err.msg);
        abort();
    }
    me = (struct shm_conn *)a;
    peer = (struct shm_conn *)c;
    if (me->size != RING || peer->size != RING)
        abort();
    for (size_t i = 0; i < RING; i++) {
        shadow[i] = peer->txd[i] = (uint8_t)(i * 131 + 7);
        pattern[i] = (uint8_t)(i * 17 + 3);
    }
    if ((lowest_fd = dup(0)) < 0)
        abort();
    close(lowest_fd);
    return 0;
}

/* ---- what a call may return, and what it must have done ---- */

static void status_ok(ts_status st, bool view)
{
    if (st != TS_OK && st != TS_ETIMEDOUT && st != TS_EUNAVAIL && st != TS_ECORRUPT &&
        st != TS_ECANCELLED && !(view && st == TS_EINVAL))
        abort();
}

/* n bytes received from ring r (its data at d, size bytes) starting at counter tail0. */
static void same_as(const uint8_t *got, size_t n, const uint8_t *ring, uint64_t size,
                    uint64_t tail0)
{
    for (size_t j = 0; j < n; j++)
        if (got[j] != ring[(tail0 + j) & (size - 1)])
            abort(); /* not the ring's bytes: read from somewhere else */
}

/* Before a call of c that needs n bytes (rx) or room for n (tx): where the counters leave it
 * short, the peer has hung up, as a peer that stops writing or reading ends a wait. */
static void no_stall_rx(struct shm_conn *c, uint64_t n)
{
    uint64_t avail = atomic_load(&c->rx->head) - atomic_load(&c->rx->tail);

    if (avail <= c->size && avail < n)
        atomic_store(&c->rx->writer_closed, 1);
}

static void no_stall_tx(struct shm_conn *c, uint64_t n)
{
    uint64_t space = c->size - (c->tx_head - atomic_load(&c->tx->tail));

    if (n > space)
        atomic_store(&c->tx->reader_closed, 1);
}

static void do_recv(struct shm_conn *c, const uint8_t *ring, size_t n, int ms)
{
    uint64_t tail0 = atomic_load(&c->rx->tail);
    uint8_t *buf = malloc(n ? n : 1);   /* exactly n: ASan sees a write past it */
    int64_t t0 = ts_now_ms();
    ts_status st;

    if (!buf)
        abort();
    no_stall_rx(c, n);
    st = ts_tp_recv(&c->base, buf, n, ms, NULL);
    within(t0);
    status_ok(st, false);
    if (st == TS_OK) {
        same_as(buf, n, ring, c->size, tail0);
        if (atomic_load(&c->rx->tail) != tail0 + n)
            abort();
    }
    free(buf);
}

static void do_view(struct shm_conn *c, const uint8_t *ring, size_t n)
{
    uint64_t tail0 = atomic_load(&c->rx->tail);
    const void *p = NULL;
    int64_t t0 = ts_now_ms();
    ts_status st;

    no_stall_rx(c, n);
    st = ts_tp_recv_view(&c->base, n, &p, NULL);
    within(t0);
    status_ok(st, true);
    if (st != TS_OK)
        return;
    if ((const uint8_t *)p < c->rxd || (const uint8_t *)p + n > c->rxd + 2 * c->size)
        abort(); /* a view outside the ring's double mapping */
    same_as(p, n, ring, c->size, tail0);
    ts_tp_release(&c->base, n);
    if (atomic_load(&c->rx->tail) != tail0 + n)
        abort();
}

/* ring: the bytes of c's tx ring as the peer sees them. */
static void do_send(struct shm_conn *c, const uint8_t *ring, size_t n)
{
    uint64_t head0 = c->tx_head;
    int64_t t0 = ts_now_ms();
    ts_status st;

    no_stall_tx(c, n);
    st = ts_tp_send(&c->base, pattern, n, NULL, 0, NULL);
    within(t0);
    status_ok(st, false);
    if (st != TS_OK)
        return;
    if (c->tx_head != head0 + n || atomic_load(&c->tx->head) != head0 + n)
        abort();
    if (n <= c->size)   /* the last size bytes are what a longer send leaves */
        for (size_t j = 0; j < n; j++)
            if (ring[(head0 + j) & (c->size - 1)] != pattern[j])
                abort();
}

/* ---- rings ---- */

static void reset_pair(uint64_t base)
{
    for (int i = 0; i < 2; i++) {
        struct ring_ctl *r = &((struct shm_hdr *)me->map)->ring[i];
        atomic_store(&r->head, base);
        atomic_store(&r->tail, base);
        atomic_store(&r->data_waiting, 0);
        atomic_store(&r->space_waiting, 0);
        atomic_store(&r->data_need, 0);
        atomic_store(&r->writer_closed, 0);
        atomic_store(&r->reader_closed, 0);
    }
    me->tx_head = peer->tx_head = base;
    atomic_store(&me->intr, 0);
}

/* A counter set by the peer: near `other` (u16 forward or back), or any u64. */
static uint64_t counter(struct in *in, uint64_t other)
{
    unsigned how = (unsigned)take(in, 1);

    if (how & 0x80)
        return take(in, 8);
    return how & 1 ? other - take(in, 2) : other + take(in, 2);
}

static void send_msg(int sock, const void *p, size_t len, int fd1, int fd2);

/* The peer passes descriptors beside the stream (what a SHARE announces): bits 0-1 of a byte
 * say how many (0..2) go with the magic (bit 2: a wrong magic, bit 3: 4 bytes of it only),
 * then `me` takes one (ts_tp_recv_fd, waiting 0 ms). */
static void pass_fds(struct in *in)
{
    unsigned how = (unsigned)take(in, 1), nfd = how & 3;
    uint64_t magic = 0x3144464d48535354ull;   /* FD_MAGIC (shm.c) */
    int fds[2] = { -1, -1 }, got = -1;
    int64_t t0;
    ts_status st;

    if (how & 4)
        magic ^= 1;
    for (unsigned i = 0; i < nfd && i < 2; i++)
        if ((fds[i] = memfd_create("fuzz-fd", MFD_CLOEXEC)) < 0)
            abort();
    send_msg(peer->sock, &magic, how & 8 ? 4 : 8, fds[0], fds[1]);
    t0 = ts_now_ms();
    st = ts_tp_recv_fd(&me->base, 0, &got, NULL);
    within(t0);
    if (st == TS_OK) {
        if (got < 0 || nfd != 1 || (how & 0xc))
            abort(); /* only a descriptor sent as shm_send_fd sends it is taken */
        close(got);
    } else if (got != -1 || (st != TS_ETIMEDOUT && st != TS_EUNAVAIL && st != TS_ECORRUPT)) {
        abort();
    }
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    /* What a short magic left on the socket goes with the next pass, as on a real one. */
    while (ts_tp_recv_fd(&me->base, 0, &got, NULL) != TS_ETIMEDOUT)
        if (got >= 0)
            close(got);
}

static void rings(struct in *in)
{
    struct ring_ctl *rx = me->rx, *tx = me->tx;
    /* The ring `me` sends on, through the peer's mapping. */
    const uint8_t *txring = peer->rxd;

    reset_pair(take(in, 8));
    for (int ops = 0; in->n && ops < 64; ops++) {
        unsigned op = (unsigned)take(in, 1) % 11, k;
        size_t n;

        switch (op) {
        case 0:   /* the peer writes bytes into the ring we receive from */
            k = (unsigned)take(in, 2);
            n = (size_t)take(in, 1);
            for (size_t j = 0; j < n && in->n; j++) {
                uint8_t b = (uint8_t)take(in, 1);
                shadow[(k + j) & (RING - 1)] = peer->txd[(k + j) & (RING - 1)] = b;
            }
            break;
        case 1: atomic_store(&rx->head, counter(in, atomic_load(&rx->tail))); break;
        case 2: atomic_store(&rx->tail, counter(in, atomic_load(&rx->head))); break;
        case 3: atomic_store(&tx->tail, counter(in, me->tx_head)); break;
        case 4:
            k = (unsigned)take(in, 1);
            atomic_store(&rx->writer_closed, k & 1);
            atomic_store(&tx->reader_closed, (k >> 1) & 1);
            atomic_store(&rx->space_waiting, (k >> 2) & 1);
            atomic_store(&tx->data_waiting, (k >> 3) & 1);
            atomic_store(&me->intr, (k >> 4) & 1);
            break;
        case 5:
            n = (size_t)take(in, 2);
            do_recv(me, shadow, n, take(in, 1) == 0xff);   /* a 1 ms wait, now and then */
            break;
        case 6: do_view(me, shadow, (size_t)take(in, 2)); break;
        case 7: do_send(me, txring, (size_t)take(in, 2)); break;
        case 8: ts_tp_interrupt(&me->base); break;
        case 9: pass_fds(in); break;
        default: atomic_store(&tx->data_need, take(in, 8)); break;
        }
    }
}

/* ---- accept ---- */

static int dial(void)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", ((struct shm_listener *)lis)->path);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        abort();
    return fd;
}

/* The peer's memfd: `bytes` long, its header as given, sealed with `seals`. */
static int peer_memfd(uint64_t bytes, const struct shm_hdr *h, unsigned seals)
{
    static const int bits[5] = { F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_WRITE,
                                 0x0010 /* F_SEAL_FUTURE_WRITE */, F_SEAL_SEAL };
    int fd = memfd_create("fuzz-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING), s = 0;

    if (fd < 0 || ftruncate(fd, (off_t)bytes))
        abort();
    if (bytes >= sizeof(*h) && pwrite(fd, h, sizeof(*h), 0) != (ssize_t)sizeof(*h))
        abort();
    for (int i = 0; i < 5; i++)
        s |= seals & (1u << i) ? bits[i] : 0;
    if (s)
        (void)fcntl(fd, F_ADD_SEALS, s);
    return fd;
}

/* len bytes of p in one message on sock, with fd1 and fd2 (-1: none) beside them. */
static void send_msg(int sock, const void *p, size_t len, int fd1, int fd2)
{
    union {
        char buf[CMSG_SPACE(2 * sizeof(int))];
        struct cmsghdr align;
    } cm;
    struct iovec iov = { (void *)p, len };
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
    int fds[2] = { fd1, fd2 }, nfd = (fd1 >= 0) + (fd2 >= 0);

    if (nfd) {
        struct cmsghdr *c;
        m.msg_control = cm.buf;
        m.msg_controllen = CMSG_SPACE(nfd * sizeof(int));
        c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(nfd * sizeof(int));
        memcpy(CMSG_DATA(c), fd1 >= 0 ? fds : fds + 1, nfd * sizeof(int));
    }
    if (len || nfd)
        (void)sendmsg(sock, &m, MSG_NOSIGNAL);
}

/* Accepts until nothing is left waiting: every pending socket's peer has hung up. */
static void drain(void)
{
    for (int i = 0; i < 2 * PENDING_MAX + 2; i++) {
        struct ts_conn *c = NULL;
        ts_status st = ts_tp_accept(lis, 0, &c, NULL);
        if (st == TS_OK)
            ts_tp_close(c);
        if (st == TS_ETIMEDOUT)
            return;
    }
    abort(); /* the listener keeps producing: a pending socket never leaves */
}

static void accepted(struct shm_conn *c, int fd, struct in *in, uint64_t ring)
{
    uint8_t *mine;
    size_t n;

    if (c->size != ring || c->base.view_max != ring)
        abort();
    /* The peer's view of the rings, to check what is read and sent against. */
    mine = mmap(NULL, DATA_OFF + 2 * ring, PROT_READ, MAP_SHARED, fd, 0);
    if (mine == MAP_FAILED)
        abort();
    n = (size_t)take(in, 2);
    do_recv(c, mine + DATA_OFF, n, 0);
    do_view(c, mine + DATA_OFF, (size_t)take(in, 2));
    do_send(c, mine + DATA_OFF + ring, (size_t)take(in, 2));
    munmap(mine, DATA_OFF + 2 * ring);
}

static void accept_one(struct in *in)
{
    static const size_t lens[4] = { sizeof(struct hello), 0, 16, 40 };
    unsigned how = (unsigned)take(in, 1), rsel = (unsigned)take(in, 1);
    unsigned seals = (unsigned)take(in, 1);
    int8_t size_off = (int8_t)take(in, 1), map_off = (int8_t)take(in, 1);
    unsigned silent = (unsigned)take(in, 1) % (PENDING_MAX + 8);
    uint64_t ring = rsel >= 0xf0 ? take(in, 8) : (uint64_t)1 << (16 + rsel % 5);
    struct hello h = { SHM_MAGIC, SHM_VERSION, ring, DATA_OFF + 2 * ring };
    struct shm_hdr hdr = { SHM_MAGIC, SHM_VERSION, ring, { { 0 } } };
    unsigned fdkind = (how >> 2) & 3;
    int fd = -1, fd2 = -1, sock, quiet[PENDING_MAX + 8];
    uint8_t hello[40] = { 0 };
    uint64_t bytes;
    struct ts_conn *c = NULL;
    ts_status st;
    int64_t t0;
    bool good;

    if (how & 0x10)
        h.magic ^= 1, h.version++;
    if (how & 0x20)
        h.map_size += (uint64_t)(int64_t)map_off * 4096;
    if (how & 0x40)
        hdr.ring_size = ring * 2;
    for (int i = 0; i < 2; i++) {
        atomic_store(&hdr.ring[i].head, take(in, 8));
        atomic_store(&hdr.ring[i].tail, take(in, 8));
    }
    /* The peer hung up both ways: a short ring ends a wait at once. */
    atomic_store(&hdr.ring[0].writer_closed, 1);
    atomic_store(&hdr.ring[1].reader_closed, 1);
    bytes = h.map_size + (uint64_t)(int64_t)size_off * 4096;
    if (bytes > ((uint64_t)4 << 30))   /* a claim, not a memfd this host could hold */
        bytes = DATA_OFF;
    for (unsigned i = 0; (how & 0x80) && i < silent; i++)
        quiet[i] = dial();
    if (fdkind == 0 || fdkind == 3)
        fd = peer_memfd(bytes, &hdr, seals);
    if (fdkind == 3)
        fd2 = peer_memfd(bytes, &hdr, seals);
    if (fdkind == 2) {
        int p[2];
        if (pipe2(p, O_CLOEXEC))
            abort();
        close(p[1]);
        fd = p[0];
    }
    sock = dial();
    memcpy(hello, &h, sizeof(h));   /* 40 bytes: the hello and 8 more */
    send_msg(sock, hello, lens[how & 3], fd, fd2);
    t0 = ts_now_ms();
    st = ts_tp_accept(lis, 0, &c, NULL);
    within(t0);
    /* What shm_setup.c must let in, and nothing else. The socket is a stream: bytes past
     * the hello are the next message's, not the hello's. */
    good = fdkind == 0 && lens[how & 3] >= sizeof(struct hello) && !(how & 0x50) &&
           !((how & 0x20) && map_off) && !size_off && ring >= RING_MIN && ring <= RING_MAX &&
           !(ring & (ring - 1)) && (seals & 1) && !(seals & 0xc);
    if (st == TS_OK) {
        if (!good)
            abort(); /* a bad hello or memfd let in */
        accepted((struct shm_conn *)c, fd, in, ring);
        ts_tp_close(c);
    } else if (st != TS_ETIMEDOUT && st != TS_ECORRUPT && st != TS_EUNAVAIL &&
               st != TS_ENOMEM) {
        abort();
    } else if (good && !(how & 0x80) && st != TS_ENOMEM) {
        abort(); /* a good one refused (silent connections first may push it out) */
    }
    close(sock);
    for (unsigned i = 0; (how & 0x80) && i < silent; i++)
        close(quiet[i]);
    if (fd >= 0)
        close(fd);
    if (fd2 >= 0)
        close(fd2);
    drain();
}

/* ---- a peer's address (shm_usable: shm_setup.c's parse, shm_dir.c's checks) ---- */

/* byte 1 bit 0: the blob starts with this host's boot id and network namespace; bit 1: its
 * path is the listener's with the rest of the input after it (else the rest is the path, or
 * without bit 0 the whole blob). The listener's own address is usable, and no address that
 * does not name its socket. */
static void usable(struct in *in)
{
    unsigned how = (unsigned)take(in, 1);
    const char *path = ((struct shm_listener *)lis)->path;
    struct ts_blob b = { .len = 0 };
    size_t head = 0;
    bool ok;

    if (how & 1)   /* "BOOTID NETNS " of our own address */
        for (int spaces = 0; head < lis_addr.len && spaces < 2; head++)
            spaces += lis_addr.data[head] == ' ';
    memcpy(b.data, lis_addr.data, head);
    b.len = head;
    if (how & 2) {
        memcpy(b.data + b.len, path, strlen(path));
        b.len += strlen(path);
    }
    while (in->n && b.len < TS_BLOB_MAX)
        b.data[b.len++] = (uint8_t)take(in, 1);
    ok = ts_tp_usable(&ts_transport_shm, &b);
    if (b.len == lis_addr.len && !memcmp(b.data, lis_addr.data, b.len) && !ok)
        abort(); /* our own listener */
    if (ok && !memmem(b.data, b.len, path, strlen(path)))
        abort(); /* a socket no listener of ours made */
}

/* Which of the descriptors from lowest_fd on are open (one poll: POLLNVAL for the others). */
#define FD_WINDOW 256
static void fds_open(bool open[FD_WINDOW])
{
    struct pollfd p[FD_WINDOW];

    for (int i = 0; i < FD_WINDOW; i++)
        p[i] = (struct pollfd){ .fd = lowest_fd + i };
    if (poll(p, FD_WINDOW, 0) < 0)
        abort();
    for (int i = 0; i < FD_WINDOW; i++)
        open[i] = !(p[i].revents & POLLNVAL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct in in = { data + 1, size ? size - 1 : 0 };
    bool before[FD_WINDOW], after[FD_WINDOW];

    if (size == 0)
        return 0;
    fds_open(before);
    if (data[0] & 1)
        rings(&in);
    else if (data[0] & 2)
        usable(&in);
    else
        accept_one(&in);
    fds_open(after);
    if (memcmp(before, after, sizeof(before)))
        abort(); /* a descriptor leaked: the peer's, or one the backend made */
    return 0;
}
