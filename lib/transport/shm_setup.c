/* shm_setup.c - making shm connections: host identity, accepting, the connector's memfd with
 * its two rings, the hello that passes it, and the mappings (each ring mapped twice, back to
 * back). See shm.c for the design, shm_dir.c for where the socket lives, shm_internal.h for
 * what is shared.
 *
 * Accepting: the acceptor checks who connected (SO_PEERCRED) before reading anything, and
 * never waits on one peer's hello. A real connector sends its hello with connect(), so it is
 * in by the time the socket is accepted; a silent one (a stuck process, or one that means
 * harm) used to hold every connect behind it for HELLO_MS. So accepted sockets wait in the
 * listener, polled together with the listening socket, and accept returns the first whose
 * hello is in; each that sends none within HELLO_MS is closed. */
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
#include "util/knobs.h"

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

/* Parses "BOOTID NETNS PATH" into its parts (path: SHM_PATH_MAX bytes). */
static bool blob_parse(const struct ts_blob *b, char *boot, char *netns, char *path)
{
    char text[TS_BLOB_MAX + 1];

    if (b->len == 0 || b->len > TS_BLOB_MAX)
        return false;
    memcpy(text, b->data, b->len);
    text[b->len] = '\0';
    return sscanf(text, "%39s %23s %107s", boot, netns, path) == 3;
}

/* ---- probe, usable ---- */

ts_status shm_probe(struct ts_err *e)
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

/* Whether boot and netns are ours: same running kernel, same network namespace. */
static bool same_host(const char *boot, const char *netns)
{
    return ident() && strcmp(boot, my_boot) == 0 && strcmp(netns, my_netns) == 0;
}

/* Same host, and the socket reachable from here and ours to use: a peer in another mount
 * namespace, or of a user we would not be let in by, gets tcp. */
bool shm_usable(const struct ts_blob *peer)
{
    char boot[40], netns[24], path[SHM_PATH_MAX];
    uid_t owner;

    return blob_parse(peer, boot, netns, path) && same_host(boot, netns) &&
           shm_dir_check(path, &owner);
}

/* ---- listen ---- */

ts_status shm_listen(const char *host, struct ts_listener **out, struct ts_blob *addr,
                     struct ts_err *e)
{
    char text[TS_BLOB_MAX + 1];
    struct shm_listener *l;
    ts_status st;
    int n;

    if (!ident())
        return ts_err_set(e, TS_ENODEV, "shm listen: no boot id or network namespace in /proc");
    if (!(l = calloc(1, sizeof(*l))))
        return ts_err_set(e, TS_ENOMEM, "shm listen: out of memory");
    l->base.ops = &ts_transport_shm;
    if ((st = shm_dir_make(l->dir, &l->group, e)))
        goto out_free;
    l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (l->fd < 0) {
        st = ts_err_set(e, TS_EIO, "shm listen: socket: %s", strerror(errno));
        goto out_dir;
    }
    if ((st = shm_dir_bind(l->fd, l->dir, l->group, l->path, e)))
        goto out_sock;
    if (listen(l->fd, 128) != 0) {
        st = ts_err_set(e, TS_EIO, "shm listen on %s: %s", l->path, strerror(errno));
        goto out_sock;
    }
    n = snprintf(text, sizeof(text), "%s %s %s", my_boot, my_netns, l->path);
    if (n < 0 || n > TS_BLOB_MAX) {
        st = ts_err_set(e, TS_EINVAL, "shm listen: address '%s' is over %d bytes: set "
                        "TESSERA_SHM_DIR to a shorter directory", text, TS_BLOB_MAX);
        goto out_sock;
    }
    addr->len = (size_t)n;
    memcpy(addr->data, text, addr->len);
    *out = &l->base;
    return TS_OK;
out_sock:
    close(l->fd);
out_dir:
    shm_dir_remove(l->dir);
out_free:
    free(l);
    return st;
}

void shm_unlisten(struct ts_listener *base)
{
    struct shm_listener *l = (struct shm_listener *)base;

    for (size_t i = 0; i < l->npending; i++)
        close(l->pending[i].sock);
    close(l->fd);
    shm_dir_remove(l->dir);
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

void shm_unmap_all(struct shm_conn *c)
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
        /* MAP_FIXED over our own reservation: replaces it, never someone else's mapping.
         * MAP_POPULATE: the pages are faulted in here, once, in one call, instead of one
         * fault at a time during the first lap of the ring, which slowed a job's first tens
         * of steps several-fold (docs/transport.md, "shm"). */
        if (mmap(r, ring, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_POPULATE, fd,
                 off) == MAP_FAILED ||
            mmap(r + ring, ring, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_POPULATE,
                 fd, off) == MAP_FAILED)
            goto out_fail;
    }
    return TS_OK;
out_fail:
    {
        ts_status st = ts_err_set(e, TS_ENOMEM, "shm: mapping %llu bytes of rings: %s",
                                  (unsigned long long)(2 * ring), strerror(errno));
        shm_unmap_all(c);
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

/* ---- accept ---- */

/* Reads the hello and its memfd, already waiting on sock (poll said so): a real connector
 * sends both in one message with connect(). On failure nothing is left open but sock. */
static ts_status read_hello(int sock, pid_t pid, struct hello *h, int *fd, struct ts_err *e)
{
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cm;
    struct iovec iov = { h, sizeof(*h) };
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
                        .msg_controllen = sizeof(cm.buf) };
    ssize_t n;
    size_t nfd;

    *fd = -1;
    n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    nfd = n >= 0 ? shm_take_fds(&m, fd) : 0;
    if (n == (ssize_t)sizeof(*h) && nfd == 1 && !(m.msg_flags & MSG_CTRUNC))
        return TS_OK;
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
    if (n <= 0)
        return ts_err_set(e, TS_EUNAVAIL, "shm accept: pid %d hung up before its hello",
                          (int)pid);
    return ts_err_set(e, TS_ECORRUPT, "shm accept: bad hello from pid %d (%zd bytes, %zu "
                      "descriptors, want one memfd)", (int)pid, n, nfd);
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

/* Maps the rings of a connection whose hello is in; takes sock (closed on failure). */
static ts_status finish(int sock, pid_t pid, struct ts_conn **out, struct ts_err *e)
{
    struct shm_conn *c;
    struct hello h;
    ts_status st;
    int fd;

    if ((st = read_hello(sock, pid, &h, &fd, e)))
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
        shm_unmap_all(c);
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

static _Atomic int hello_ms = HELLO_MS;

void shm_set_hello_ms(int ms)
{
    atomic_store(&hello_ms, ms > 0 ? ms : HELLO_MS);
}

/* Takes pending socket i out of the list, keeping the others in age order. */
static struct shm_pending pending_take(struct shm_listener *l, size_t i)
{
    struct shm_pending p = l->pending[i];

    memmove(&l->pending[i], &l->pending[i + 1], (l->npending - i - 1) * sizeof(p));
    l->npending--;
    return p;
}

/* Who may connect: our own uid, or a process whose group is the one let in. Supplementary
 * groups are not looked at: SO_PEERCRED carries only the primary one. */
static bool allowed(const struct shm_listener *l, const struct ucred *cr)
{
    return cr->uid == geteuid() || (l->group != SHM_NO_GROUP && cr->gid == l->group);
}

/* Makes room for one more pending socket of uid. When full, the OLDEST is closed, never the
 * new one: a real connector's hello comes with its connect, so it is the newest and is read
 * at once, while refusing newcomers would let a few silent sockets lock every connector out
 * for HELLO_MS. The cap per uid keeps one user of the group from pushing the others out.
 * TS_EUNAVAIL names the one closed; TS_OK when there was room. */
static ts_status make_room(struct shm_listener *l, uid_t uid, struct ts_err *e)
{
    size_t same = 0, victim = 0;
    struct shm_pending p;

    for (size_t i = l->npending; i-- > 0;)
        if (l->pending[i].uid == uid) {
            same++;
            victim = i;
        }
    if (same < PENDING_PER_UID && l->npending < PENDING_MAX)
        return TS_OK;
    if (same < PENDING_PER_UID)
        victim = 0;
    p = pending_take(l, victim);
    close(p.sock);
    return ts_err_set(e, TS_EUNAVAIL, "shm accept: closed pid %d (uid %u) before its hello: %s",
                      (int)p.pid, (unsigned)p.uid, same >= PENDING_PER_UID ?
                      "too many connections of its uid wait for theirs" :
                      "too many connections wait for their hello");
}

/* Checks who is at the other end of sock, before anything is read from it: TS_EAUTH naming a
 * peer that may not connect. */
static ts_status check_peer(const struct shm_listener *l, int sock, struct ucred *cr,
                            struct ts_err *e)
{
    socklen_t sl = sizeof(*cr);

    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, cr, &sl) != 0)
        return ts_err_set(e, TS_EIO, "shm accept: SO_PEERCRED: %s", strerror(errno));
    if (allowed(l, cr))
        return TS_OK;
    if (l->group == SHM_NO_GROUP)
        return ts_err_set(e, TS_EAUTH, "shm accept: refused pid %d of uid %u: only uid %u may "
                          "connect", (int)cr->pid, (unsigned)cr->uid, (unsigned)geteuid());
    return ts_err_set(e, TS_EAUTH, "shm accept: refused pid %d of uid %u (gid %u): only uid %u "
                      "or gid %u may connect", (int)cr->pid, (unsigned)cr->uid,
                      (unsigned)cr->gid, (unsigned)geteuid(), (unsigned)l->group);
}

/* Accepts one socket from the backlog into the pending list, once check_peer let it in.
 * TS_OK also when the backlog was empty. */
static ts_status admit(struct shm_listener *l, struct ts_err *e)
{
    struct ucred cr;
    ts_status st;
    int sock = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

    if (sock < 0)
        return errno == EAGAIN || errno == EINTR || errno == ECONNABORTED ? TS_OK :
               ts_err_set(e, TS_EIO, "shm accept: %s", strerror(errno));
    if ((st = check_peer(l, sock, &cr, e))) {
        close(sock);
        return st;
    }
    st = make_room(l, cr.uid, e);
    l->pending[l->npending++] = (struct shm_pending){ sock, cr.uid, cr.pid,
                                                      ts_now_ms() + atomic_load(&hello_ms) };
    return st;
}

/* Closes the first pending socket past its deadline: TS_EUNAVAIL naming it, else TS_OK. */
static ts_status expire(struct shm_listener *l, int64_t now, struct ts_err *e)
{
    for (size_t i = 0; i < l->npending; i++) {
        struct shm_pending p;
        if (l->pending[i].deadline > now)
            continue;
        p = pending_take(l, i);
        close(p.sock);
        return ts_err_set(e, TS_EUNAVAIL, "shm accept: pid %d (uid %u) sent no hello within "
                          "%d ms: closed", (int)p.pid, (unsigned)p.uid,
                          atomic_load(&hello_ms));
    }
    return TS_OK;
}

/* The poll(2) timeout: up to the caller's deadline, and no later than the first pending
 * socket's (expire ran: every one is in the future). */
static int wait_ms(const struct shm_listener *l, int64_t deadline, int64_t now)
{
    int ms = ts__left_ms(deadline);

    for (size_t i = 0; i < l->npending; i++)
        if (ms < 0 || l->pending[i].deadline - now < ms)
            ms = (int)(l->pending[i].deadline - now);
    return ms;
}

ts_status shm_accept(struct ts_listener *base, int ms, struct ts_conn **out,
                     struct ts_err *e)
{
    struct shm_listener *l = (struct shm_listener *)base;
    struct pollfd p[PENDING_MAX + 1];
    int64_t deadline = ts__deadline(ms), now;
    ts_status st;
    size_t n;
    int rc;

    for (;;) {
        now = ts_now_ms();
        if ((st = expire(l, now, e)))
            return st;
        n = l->npending;
        p[0] = (struct pollfd){ .fd = l->fd, .events = POLLIN };
        for (size_t i = 0; i < n; i++)
            p[i + 1] = (struct pollfd){ .fd = l->pending[i].sock, .events = POLLIN };
        rc = poll(p, n + 1, wait_ms(l, deadline, now));
        if (rc < 0 && errno != EINTR)
            return ts_err_set(e, TS_EIO, "shm accept: poll: %s", strerror(errno));
        /* Hellos that are in first (oldest first), so new connections cannot hold them up;
         * a hang-up is the end of that one. */
        for (size_t i = 0; rc > 0 && i < n; i++)
            if (p[i + 1].revents) {
                struct shm_pending q = pending_take(l, i);
                return finish(q.sock, q.pid, out, e);
            }
        if (rc > 0 && (p[0].revents & POLLIN)) {
            if ((st = admit(l, e)))
                return st;
            continue;   /* its hello may be in already: look before giving up */
        }
        if (deadline >= 0 && ts__left_ms(deadline) == 0)
            return ts_err_set(e, TS_ETIMEDOUT, "shm accept: no peer within %d ms", ms);
    }
}

/* ---- connect ---- */

/* TESSERA_SHM_RING: its row's range is RING_MIN..RING_MAX, powers of two. */
static uint64_t ring_bytes(void)
{
    return (uint64_t)ts_knob_int(TS_KNOB_SHM_RING);
}

/* A connected Unix socket to path, or -1 with errno; retries while the backlog is full. */
static int connect_unix(const char *path, int ms)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    int64_t deadline = ts__deadline(ms);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), saved;

    if (fd < 0)
        return -1;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    while (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
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

/* Connects to the socket at path, whose directory belongs to owner, into *sock. The process
 * that listens on it must be owner too (SO_PEERCRED: its credentials when it called listen),
 * so a socket someone else bound there, or a path swapped under us, is refused. */
static ts_status dial(const char *path, uid_t owner, int ms, int *sock, struct ts_err *e)
{
    struct ucred cr;
    socklen_t sl = sizeof(cr);
    int fd = connect_unix(path, ms);

    if (fd < 0)
        return ts_err_set(e, errno == ETIMEDOUT ? TS_ETIMEDOUT : TS_EUNAVAIL, "shm connect %s: "
                          "%s", path, strerror(errno));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &sl) != 0)
        cr.uid = (uid_t)-1;
    if (cr.uid != owner) {
        close(fd);
        return ts_err_set(e, TS_EAUTH, "shm connect %s: the socket is held by uid %d, its "
                          "directory belongs to uid %u: refused", path, (int)cr.uid,
                          (unsigned)owner);
    }
    *sock = fd;
    return TS_OK;
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

ts_status shm_connect(const struct ts_blob *to, int ms, struct ts_conn **out,
                             struct ts_err *e)
{
    char boot[40], netns[24], path[SHM_PATH_MAX];
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
    uid_t owner;
    int fd;

    if (!blob_parse(to, boot, netns, path))
        return ts_err_set(e, TS_EINVAL, "shm connect: address blob is not 'BOOTID NETNS PATH'");
    if (!same_host(boot, netns))
        return ts_err_set(e, TS_EUNAVAIL, "shm connect: peer is on another host or network "
                          "namespace (boot %.8s netns %s, ours %.8s %s): use tcp", boot, netns,
                          my_boot, my_netns);
    if (!shm_dir_check(path, &owner))
        return ts_err_set(e, TS_EUNAVAIL, "shm connect %s: no socket this process may use "
                          "there (the listener is gone, in another mount namespace, or of a "
                          "user that would not let us in): use tcp", path);
    if (!(c = calloc(1, sizeof(*c))))
        return ts_err_set(e, TS_ENOMEM, "shm connect: out of memory");
    if ((st = dial(path, owner, ms, &c->sock, e)))
        goto out_free;
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
        st = ts_err_set(e, TS_EUNAVAIL, "shm connect %s: sending the memfd: %s", path,
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
    shm_unmap_all(c);
out_sock:
    close(c->sock);
out_free:
    free(c);
    return st;
}

