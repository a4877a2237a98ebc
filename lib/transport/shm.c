/* shm.c - the "shm" backend: frames between processes on one host through shared memory.
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
 * The blob is "BOOTID NETNS NAME": the abstract Unix socket NAME is visible only inside one
 * network namespace of one running kernel, so usable() requires both to match ours. */
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

#include "transport/internal.h"

#define SHM_MAGIC 0x314d485354ull      /* "TSHM1" */
#define SHM_VERSION 2                   /* 2: data_need, rings mapped twice */
#define RING_DEFAULT (16u << 20)        /* per direction; TESSERA_SHM_RING overrides */
#define RING_MIN (64u << 10)
#define RING_MAX (1u << 30)
#define CHUNK (256u << 10)              /* bytes copied between publishing the counter */
#define SLICE_MS 50                     /* a sleeper checks the peer is alive this often */
#define SPIN_FIRST_US 2                 /* spinning before sleeping: for a first byte, */
#define SPIN_MID_US 200                 /* and mid-message: the peer is copying a chunk */
#define HELLO_MS 5000                   /* the hello follows connect() at once */

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
               "shared-memory atomics must be lock-free (address-free)");

/* One direction, in shared memory. Each group in its own cache line: head is written only by
 * the producer, tail only by the consumer. */
struct ring_ctl {
    _Alignas(64) _Atomic uint64_t head;
    _Alignas(64) _Atomic uint64_t tail;
    _Alignas(64) _Atomic uint32_t data_seq;    /* futex: the consumer waits for data */
    _Atomic uint32_t data_waiting;
    _Atomic uint64_t data_need;                /* the head the sleeping consumer waits for */
    _Alignas(64) _Atomic uint32_t space_seq;   /* futex: the producer waits for space */
    _Atomic uint32_t space_waiting;
    _Alignas(64) _Atomic uint32_t writer_closed;
    _Atomic uint32_t reader_closed;
};

/* The start of the memfd; the ring data follows at DATA_OFF. Written once by the connector
 * before the fd is passed, then read-only apart from the ring counters. */
struct shm_hdr {
    uint64_t magic, version, ring_size;
    struct ring_ctl ring[2];                    /* [0]: connector -> acceptor; [1]: back */
};

#define DATA_OFF ((sizeof(struct shm_hdr) + 4095) & ~(size_t)4095)

/* Sent with the memfd over the Unix socket; 64-bit fields only, so no padding. */
struct hello {
    uint64_t magic, version, ring_size, map_size;
};

struct shm_listener {
    struct ts_listener base;
    int fd;
};

struct shm_conn {
    struct ts_conn base;
    int sock;                 /* kept open to notice the peer's death (hang-up) */
    uint8_t *map;             /* the header, DATA_OFF bytes */
    uint8_t *ring_map[2];     /* each ring mapped twice in a row: 2 * size bytes of addresses */
    uint64_t size;            /* ring bytes, a power of two */
    struct ring_ctl *tx, *rx;
    uint8_t *txd, *rxd;
    uint64_t tx_head;         /* written but maybe not yet published (sender thread only) */
    atomic_uint intr;         /* an interrupt is pending */
    atomic_bool shut;
};

enum wait_kind { W_DATA, W_SPACE };

/* ---- host identity ---- */

static char my_boot[40], my_netns[24];
static pthread_once_t ident_once = PTHREAD_ONCE_INIT;

static void ident_load(void)
{
    char link[64];
    ssize_t n;
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

    if (f) {
        if (!fgets(my_boot, sizeof(my_boot), f))
            my_boot[0] = '\0';
        my_boot[strcspn(my_boot, "\n")] = '\0';
        fclose(f);
    }
    /* "net:[4026531833]" -> "4026531833" */
    n = readlink("/proc/self/ns/net", link, sizeof(link) - 1);
    link[n > 0 ? n : 0] = '\0';
    snprintf(my_netns, sizeof(my_netns), "%.*s", (int)strspn(link + 5, "0123456789"),
             n > 5 ? link + 5 : "");
}

static bool ident(void)
{
    pthread_once(&ident_once, ident_load);
    return my_boot[0] && my_netns[0];
}

/* Parses "BOOTID NETNS NAME" into its parts (name: without the leading NUL). */
static bool blob_parse(const struct ts_blob *b, char *boot, char *netns, char *name)
{
    char text[TS_BLOB_MAX + 1];

    if (b->len == 0 || b->len > TS_BLOB_MAX)
        return false;
    memcpy(text, b->data, b->len);
    text[b->len] = '\0';
    return sscanf(text, "%39s %23s %107s", boot, netns, name) == 3;
}

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

/* ---- probe, usable ---- */

static ts_status shm_probe(struct ts_err *e)
{
    _Atomic uint32_t word = 0;
    int fd = memfd_create("tessera-probe", MFD_CLOEXEC);

    if (fd < 0)
        return ts_err_set(e, TS_ENODEV, "shm: memfd_create: %s", strerror(errno));
    close(fd);
    if (syscall(SYS_futex, (uint32_t *)&word, FUTEX_WAKE, 1, NULL, NULL, 0) < 0)
        return ts_err_set(e, TS_ENODEV, "shm: futex: %s", strerror(errno));
    if (!ident())
        return ts_err_set(e, TS_ENODEV, "shm: cannot read this host's boot id or network "
                          "namespace from /proc");
    return TS_OK;
}

static bool shm_usable(const struct ts_blob *peer)
{
    char boot[40], netns[24], name[108];

    return ident() && blob_parse(peer, boot, netns, name) && strcmp(boot, my_boot) == 0 &&
           strcmp(netns, my_netns) == 0;
}

/* ---- listen, accept ---- */

static socklen_t abstract_addr(struct sockaddr_un *sa, const char *name)
{
    size_t n = strnlen(name, sizeof(sa->sun_path) - 1);

    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path + 1, name, n);      /* sun_path[0] = '\0': the abstract namespace */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

static ts_status shm_listen(const char *host, struct ts_listener **out, struct ts_blob *addr,
                            struct ts_err *e)
{
    static atomic_uint counter;
    char name[64], id[33], text[TS_BLOB_MAX];
    struct sockaddr_un sa;
    struct shm_listener *l;
    socklen_t sl;
    int fd;

    if (!ident())
        return ts_err_set(e, TS_ENODEV, "shm listen: no boot id or network namespace in /proc");
    /* pid and counter keep names of one process apart; the random part keeps a recycled pid
     * from colliding with a dead process's name still held by a stuck child. */
    ts_proc_instance_id(id, sizeof(id));
    snprintf(name, sizeof(name), "tessera-shm-%d-%u-%.8s", (int)getpid(),
             atomic_fetch_add(&counter, 1), id);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return ts_err_set(e, TS_EIO, "shm listen: socket: %s", strerror(errno));
    sl = abstract_addr(&sa, name);
    if (bind(fd, (struct sockaddr *)&sa, sl) != 0 || listen(fd, 128) != 0) {
        close(fd);
        return ts_err_set(e, TS_EIO, "shm listen on @%s: %s", name, strerror(errno));
    }
    if (!(l = calloc(1, sizeof(*l)))) {
        close(fd);
        return ts_err_set(e, TS_ENOMEM, "shm listen: out of memory");
    }
    l->base.ops = &ts_transport_shm;
    l->fd = fd;
    snprintf(text, sizeof(text), "%s %s %s", my_boot, my_netns, name);
    addr->len = strlen(text);
    memcpy(addr->data, text, addr->len);
    *out = &l->base;
    return TS_OK;
}

static void shm_unlisten(struct ts_listener *base)
{
    struct shm_listener *l = (struct shm_listener *)base;

    close(l->fd);
    free(l);
}

/* Points c's rings into its mapping; tx is ring `mine`, rx the other one. */
static void conn_wire(struct shm_conn *c, int mine)
{
    struct shm_hdr *h = (struct shm_hdr *)c->map;

    c->tx = &h->ring[mine];
    c->rx = &h->ring[!mine];
    c->txd = c->ring_map[mine];
    c->rxd = c->ring_map[!mine];
    c->tx_head = atomic_load(&c->tx->head);
    c->base.local_in = c->base.local_out = true;
    c->base.view_max = (size_t)c->size;
}

static void unmap_all(struct shm_conn *c)
{
    for (int i = 0; i < 2; i++)
        if (c->ring_map[i])
            munmap(c->ring_map[i], 2 * (size_t)c->size);
    if (c->map)
        munmap(c->map, DATA_OFF);
    c->map = c->ring_map[0] = c->ring_map[1] = NULL;
}

/* Maps the header of fd and each ring twice in a row (see the file comment), ring bytes each.
 * On failure nothing stays mapped. */
static ts_status map_all(struct shm_conn *c, int fd, uint64_t ring, struct ts_err *e)
{
    c->size = ring;
    c->map = mmap(NULL, DATA_OFF, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (c->map == MAP_FAILED) {
        c->map = NULL;
        goto out_fail;
    }
    for (int i = 0; i < 2; i++) {
        off_t off = (off_t)(DATA_OFF + (size_t)i * ring);
        uint8_t *r = mmap(NULL, 2 * ring, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                          -1, 0);
        if (r == MAP_FAILED)
            goto out_fail;
        c->ring_map[i] = r;
        /* MAP_FIXED over our own reservation: replaces it, never someone else's mapping. */
        if (mmap(r, ring, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, off) == MAP_FAILED ||
            mmap(r + ring, ring, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, off) ==
                MAP_FAILED)
            goto out_fail;
    }
    return TS_OK;
out_fail:
    {
        ts_status st = ts_err_set(e, TS_ENOMEM, "shm: mapping %llu bytes of rings: %s",
                                  (unsigned long long)(2 * ring), strerror(errno));
        unmap_all(c);
        return st;
    }
}

static void conn_name(struct shm_conn *c)
{
    struct ucred cr;
    socklen_t sl = sizeof(cr);

    if (getsockopt(c->sock, SOL_SOCKET, SO_PEERCRED, &cr, &sl) == 0)
        snprintf(c->base.peer, sizeof(c->base.peer), "shm:pid %d", (int)cr.pid);
    else
        snprintf(c->base.peer, sizeof(c->base.peer), "shm:?");
}

/* Receives the hello and its memfd on sock within ms; *fd is -1 when none came with it. */
static ts_status recv_hello(int sock, int ms, struct hello *h, int *fd, struct ts_err *e)
{
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cm;
    struct iovec iov = { h, sizeof(*h) };
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
                        .msg_controllen = sizeof(cm.buf) };
    struct pollfd p = { .fd = sock, .events = POLLIN };
    struct cmsghdr *cmsg;
    ssize_t n;

    *fd = -1;
    if (poll(&p, 1, ms) <= 0)
        return ts_err_set(e, TS_EUNAVAIL, "shm accept: no hello from the peer in %d ms", ms);
    n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    for (cmsg = CMSG_FIRSTHDR(&m); n >= 0 && cmsg; cmsg = CMSG_NXTHDR(&m, cmsg))
        if (cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS)
            memcpy(fd, CMSG_DATA(cmsg), sizeof(int));
    if (n != (ssize_t)sizeof(*h) || *fd < 0 || (m.msg_flags & MSG_CTRUNC))
        return ts_err_set(e, TS_ECORRUPT, "shm accept: bad hello (%zd bytes, %s)", n,
                          *fd < 0 ? "no memfd" : "memfd");
    return TS_OK;
}

/* Checks what the peer claims against the memfd itself before mapping it: the size must
 * match and be sealed against shrinking, or a later ftruncate would SIGBUS us. */
static ts_status check_memfd(const struct hello *h, int fd, struct ts_err *e)
{
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);

    if (h->magic != SHM_MAGIC || h->version != SHM_VERSION)
        return ts_err_set(e, TS_ECORRUPT, "shm accept: hello magic/version %#llx/%llu, want "
                          "%#llx/%d", (unsigned long long)h->magic,
                          (unsigned long long)h->version, SHM_MAGIC, SHM_VERSION);
    if (h->ring_size < RING_MIN || h->ring_size > RING_MAX ||
        (h->ring_size & (h->ring_size - 1)) || h->map_size != DATA_OFF + 2 * h->ring_size)
        return ts_err_set(e, TS_ECORRUPT, "shm accept: ring size %llu / map size %llu invalid",
                          (unsigned long long)h->ring_size, (unsigned long long)h->map_size);
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != h->map_size)
        return ts_err_set(e, TS_ECORRUPT, "shm accept: memfd size differs from the hello's");
    if (seals < 0 || !(seals & F_SEAL_SHRINK))
        return ts_err_set(e, TS_ECORRUPT, "shm accept: memfd not sealed against shrinking");
    return TS_OK;
}

static ts_status shm_accept(struct ts_listener *base, int ms, struct ts_conn **out,
                            struct ts_err *e)
{
    struct shm_listener *l = (struct shm_listener *)base;
    struct pollfd p = { .fd = l->fd, .events = POLLIN };
    int64_t deadline = ts__deadline(ms);
    struct shm_conn *c;
    struct hello h;
    ts_status st;
    int sock, fd, rc;

    for (;;) {
        rc = poll(&p, 1, ts__left_ms(deadline));
        if (rc > 0 && (sock = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0)
            break;
        if (rc < 0 && errno != EINTR)
            return ts_err_set(e, TS_EIO, "shm accept: poll: %s", strerror(errno));
        if (deadline >= 0 && ts__left_ms(deadline) == 0)
            return ts_err_set(e, TS_ETIMEDOUT, "shm accept: no peer within %d ms", ms);
    }
    if ((st = recv_hello(sock, HELLO_MS, &h, &fd, e)))
        goto out_sock;
    if ((st = check_memfd(&h, fd, e)))
        goto out_fd;
    if (!(c = calloc(1, sizeof(*c)))) {
        st = ts_err_set(e, TS_ENOMEM, "shm accept: out of memory");
        goto out_fd;
    }
    if ((st = map_all(c, fd, h.ring_size, e))) {
        free(c);
        goto out_fd;
    }
    close(fd);
    c->sock = sock;
    c->base.ops = &ts_transport_shm;
    if (((struct shm_hdr *)c->map)->ring_size != h.ring_size) {
        /* The header is the connector's to write; refuse one that disagrees with the hello. */
        unmap_all(c);
        free(c);
        st = ts_err_set(e, TS_ECORRUPT, "shm accept: header ring size differs from hello");
        goto out_sock;
    }
    conn_wire(c, 1);
    conn_name(c);
    *out = &c->base;
    return TS_OK;
out_fd:
    close(fd);
out_sock:
    close(sock);
    return st;
}

/* ---- connect ---- */

static uint64_t ring_bytes(void)
{
    const char *s = getenv("TESSERA_SHM_RING");
    unsigned long long v = s ? strtoull(s, NULL, 10) : 0;

    if (v < RING_MIN || v > RING_MAX || (v & (v - 1)))
        return RING_DEFAULT;
    return v;
}

/* A connected Unix socket to name, or -1 with errno; retries while the backlog is full. */
static int connect_unix(const char *name, int ms)
{
    struct sockaddr_un sa;
    socklen_t sl = abstract_addr(&sa, name);
    int64_t deadline = ts__deadline(ms);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), saved;

    if (fd < 0)
        return -1;
    while (connect(fd, (struct sockaddr *)&sa, sl) != 0) {
        if (errno != EAGAIN && errno != EINTR)
            goto out_close;
        if (deadline >= 0 && ts__left_ms(deadline) == 0) {
            errno = ETIMEDOUT;
            goto out_close;
        }
        ts_sleep_ms(1);
    }
    return fd;
out_close:
    saved = errno;
    close(fd);
    errno = saved;
    return -1;
}

/* Creates the sealed memfd with both rings and maps it into c; *fd is the memfd. */
static ts_status make_rings(struct shm_conn *c, uint64_t ring, int *fd, struct ts_err *e)
{
    struct shm_hdr *h;

    if ((*fd = memfd_create("tessera-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING)) < 0)
        return ts_err_set(e, TS_ENODEV, "shm connect: memfd_create: %s", strerror(errno));
    if (ftruncate(*fd, (off_t)(DATA_OFF + 2 * ring)) != 0 ||
        fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        ts_status st = ts_err_set(e, TS_ENOMEM, "shm connect: %llu bytes of shared memory: %s",
                                  (unsigned long long)(DATA_OFF + 2 * ring), strerror(errno));
        close(*fd);
        return st;
    }
    if (map_all(c, *fd, ring, e)) {
        close(*fd);
        return e ? e->code : TS_ENOMEM;
    }
    h = (struct shm_hdr *)c->map;     /* zero-filled by ftruncate: counters start at 0 */
    h->magic = SHM_MAGIC;
    h->version = SHM_VERSION;
    h->ring_size = ring;
    return TS_OK;
}

static ts_status shm_connect(const struct ts_blob *to, int ms, struct ts_conn **out,
                             struct ts_err *e)
{
    char boot[40], netns[24], name[108];
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cm;
    struct hello h = { SHM_MAGIC, SHM_VERSION, ring_bytes(), 0 };
    struct iovec iov = { &h, sizeof(h) };
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
                        .msg_controllen = sizeof(cm.buf) };
    struct cmsghdr *cmsg;
    struct shm_conn *c;
    ts_status st;
    int fd;

    if (!blob_parse(to, boot, netns, name))
        return ts_err_set(e, TS_EINVAL, "shm connect: address blob is not 'BOOTID NETNS NAME'");
    if (!shm_usable(to))
        return ts_err_set(e, TS_EUNAVAIL, "shm connect: peer is on another host or network "
                          "namespace (boot %.8s netns %s, ours %.8s %s): use tcp", boot, netns,
                          my_boot, my_netns);
    if (!(c = calloc(1, sizeof(*c))))
        return ts_err_set(e, TS_ENOMEM, "shm connect: out of memory");
    if ((c->sock = connect_unix(name, ms)) < 0) {
        st = ts_err_set(e, errno == ETIMEDOUT ? TS_ETIMEDOUT : TS_EUNAVAIL, "shm connect @%s: "
                        "%s", name, strerror(errno));
        goto out_free;
    }
    if ((st = make_rings(c, h.ring_size, &fd, e)))
        goto out_sock;
    h.map_size = DATA_OFF + 2 * h.ring_size;
    cmsg = CMSG_FIRSTHDR(&m);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
    /* A fresh socket's buffer holds the 32-byte hello: this does not block. */
    if (sendmsg(c->sock, &m, MSG_NOSIGNAL) != (ssize_t)sizeof(h)) {
        st = ts_err_set(e, TS_EUNAVAIL, "shm connect @%s: sending the memfd: %s", name,
                        strerror(errno));
        close(fd);
        goto out_unmap;
    }
    close(fd);
    c->base.ops = &ts_transport_shm;
    conn_wire(c, 0);
    conn_name(c);
    *out = &c->base;
    return TS_OK;
out_unmap:
    unmap_all(c);
out_sock:
    close(c->sock);
out_free:
    free(c);
    return st;
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
    unmap_all(c);
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
    .interrupt = shm_interrupt,
    .shutdown = shm_shutdown,
    .close = shm_close,
};
