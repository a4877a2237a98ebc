/* members.c - see members.h. The table's arrays and index are members_table.c's, leases
 * running out members_lease.c's, the views of the table and the restore from one
 * members_view.c's; what they share is members_internal.h.
 *
 * Members live in two arrays, shards and workers, in id order: heartbeats (the hot path:
 * thousands a second from large jobs) find their member by binary search. Registration finds an
 * instance through a hash index (open addressing, at most half full, holding positions), so
 * registering N workers costs O(N), not O(N^2) (a scan took 11.5 s for 50,000 workers).
 * Departed workers are forgotten, oldest first, once more than TS_MEMBERS_KEEP_DEPARTED of
 * them are kept: a master that serves jobs for months holds the living, not every worker it
 * ever saw. What a member says about itself is checked before the table changes, each check
 * naming the field it refuses. */
#include "members.h"

#include <ctype.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "members_internal.h"
#include "placement/ring.h"
#include "util/log.h"

/* ---- what a member says about itself: each check refuses with TS_EINVAL naming the field,
 * so that a bad request changes nothing ---- */

/* Printable characters, no spaces. */
static bool printable(const char *s)
{
    for (; *s; s++)
        if (!isgraph((unsigned char)*s))
            return false;
    return true;
}

ts_status ts_members_check_addr(const char *field, const char *a, bool need_port,
                                struct ts_err *err)
{
    const char *colon;
    char *end;
    long port;

    if (!a || !a[0])
        return ts_err_set(err, TS_EINVAL, "%s: required", field);
    if (strlen(a) > TS_MEMBERS_MAX_ADDR)
        return ts_err_set(err, TS_EINVAL, "%s: %zu bytes, at most %d", field, strlen(a),
                          TS_MEMBERS_MAX_ADDR);
    if (!printable(a))
        return ts_err_set(err, TS_EINVAL, "%s: must be printable with no spaces", field);
    if (!need_port)
        return TS_OK;
    colon = strrchr(a, ':');
    if (!colon || colon == a)
        return ts_err_set(err, TS_EINVAL, "%s: '%.64s' is not host:port", field, a);
    port = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || !isdigit((unsigned char)colon[1]) || port < 1 || port > 65535)
        return ts_err_set(err, TS_EINVAL, "%s: port of '%.64s' must be 1..65535", field, a);
    return TS_OK;
}

/* A process start's id: 1..TS_MEMBERS_MAX_INSTANCE of [A-Za-z0-9._-]. */
static ts_status check_instance(const char *s, struct ts_err *err)
{
    if (!s || !s[0])
        return ts_err_set(err, TS_EINVAL, "instance: required (a unique id per process start)");
    if (strlen(s) > TS_MEMBERS_MAX_INSTANCE)
        return ts_err_set(err, TS_EINVAL, "instance: %zu bytes, at most %d", strlen(s),
                          TS_MEMBERS_MAX_INSTANCE);
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("._-", *p))
            return ts_err_set(err, TS_EINVAL, "instance: only letters, digits, '.', '_', '-'");
    return TS_OK;
}

/* 0 (the default) or TS_MEMBERS_MIN_LEASE_MS..TS_MEMBERS_MAX_LEASE_MS. */
static ts_status check_lease(uint32_t lease_ms, struct ts_err *err)
{
    if (lease_ms && (lease_ms < TS_MEMBERS_MIN_LEASE_MS || lease_ms > TS_MEMBERS_MAX_LEASE_MS))
        return ts_err_set(err, TS_EINVAL, "lease_ms: %u is outside %u..%u (0: the default)",
                          lease_ms, TS_MEMBERS_MIN_LEASE_MS, TS_MEMBERS_MAX_LEASE_MS);
    return TS_OK;
}

/* SHARD or WORKER. */
static ts_status check_kind(enum ts_member_kind kind, struct ts_err *err)
{
    if (kind != TS_MEMBER_SHARD && kind != TS_MEMBER_WORKER)
        return ts_err_set(err, TS_EINVAL, "kind: %d is not SHARD (1) or WORKER (2)", (int)kind);
    return TS_OK;
}

/* A shard's data-plane endpoints: at most TS_MEMBERS_MAX_ENDPOINTS, each a transport name
 * and an address of 1..TS_MEMBERS_MAX_BLOB bytes. */
static ts_status check_endpoints(const struct ts_endpoint *ep, size_t n, struct ts_err *err)
{
    if (n > TS_MEMBERS_MAX_ENDPOINTS)
        return ts_err_set(err, TS_EINVAL, "data_planes: %zu endpoints, at most %d", n,
                          TS_MEMBERS_MAX_ENDPOINTS);
    for (size_t i = 0; i < n; i++) {
        if (!ep[i].transport[0] || !printable(ep[i].transport))
            return ts_err_set(err, TS_EINVAL, "data_planes[%zu].transport: a name like tcp or "
                              "shm is required", i);
        if (!ep[i].len || ep[i].len > TS_MEMBERS_MAX_BLOB)
            return ts_err_set(err, TS_EINVAL, "data_planes[%zu].address: 1..%d bytes", i,
                              TS_MEMBERS_MAX_BLOB);
    }
    return TS_OK;
}

const char *ts_member_state_name(enum ts_member_state s)
{
    return s == TS_MEMBER_ALIVE ? "alive" : s == TS_MEMBER_DEAD ? "dead" : "left";
}

ts_status ts_members_create(const struct ts_members_cfg *cfg, struct ts_members **out,
                            struct ts_err *err)
{
    struct ts_members *m = calloc(1, sizeof(*m));
    ts_status st;

    if (!m)
        return ts_err_set(err, TS_ENOMEM, "members: out of memory");
    if (cfg)
        m->cfg = *cfg;
    if (!m->cfg.default_lease_ms)
        m->cfg.default_lease_ms = 3000;
    if (!m->cfg.vnodes)
        m->cfg.vnodes = TS_RING_DEFAULT_VNODES;
    if (m->cfg.default_lease_ms < TS_MEMBERS_MIN_LEASE_MS ||
        m->cfg.default_lease_ms > TS_MEMBERS_MAX_LEASE_MS) {
        st = ts_err_set(err, TS_EINVAL, "lease: %u ms is outside %u..%u ms",
                        m->cfg.default_lease_ms, TS_MEMBERS_MIN_LEASE_MS,
                        TS_MEMBERS_MAX_LEASE_MS);
        free(m);
        return st;
    }
    if ((st = ts_ring_create(NULL, 0, m->cfg.vnodes, &m->ring, err))) {
        free(m);
        return st;
    }
    m->epoch = 1;
    m->roster[0].stale = m->roster[1].stale = true;   /* counted at the first read */
    pthread_mutex_init(&m->mu, NULL);
    *out = m;
    return TS_OK;
}

void ts_members_free(struct ts_members *m)
{
    if (!m)
        return;
    ts_ring_free(m->ring);
    leaseq_free(&m->leases);
    free(m->shards.v);
    free(m->workers.v);
    free(m->shards.index);
    free(m->workers.index);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static ts_status make_durable(struct ts_members *m, struct ts_err *err)
{
    struct ts_members_clock c = { m->epoch, m->shards.reserved, m->workers.reserved };

    return m->cfg.durable ? m->cfg.durable(m->cfg.durable_ctx, &c, err) : TS_OK;
}

/* Appends a new alive member with its common fields set and indexes it; on failure the table
 * is as it was. Called with mu held. */
static ts_status new_member(struct ts_members *m, struct table *t, enum ts_member_kind kind,
                            const char *addr, const char *instance, uint32_t lease_ms,
                            int64_t now_ms, struct ts_member **out, struct ts_err *err)
{
    struct ts_member *e = NULL;
    ts_status st;

    if (t->next_id == t->reserved) {
        t->reserved += TS_MEMBERS_ID_BLOCK;
        if ((st = make_durable(m, err))) {
            t->reserved -= TS_MEMBERS_ID_BLOCK;
            return ts_err_set(err, TS_EUNAVAIL, "the master cannot keep its state (%s); "
                              "register again later", err->msg);
        }
    }
    if ((st = members_append(t, &e, err)))
        return st;
    e->kind = kind;
    snprintf(e->addr, sizeof(e->addr), "%s", addr);
    snprintf(e->instance, sizeof(e->instance), "%s", instance);
    e->lease_ms = lease_ms;
    e->last_heartbeat_ms = m->last_heard_ms = now_ms;
    e->heard = false;
    if ((st = members_index_add(t, e, err))) {
        t->n--;
        t->next_id--;
        return st;
    }
    members_set_state(m, e, TS_MEMBER_ALIVE);
    *out = e;
    return TS_OK;
}

/* Whether an alive shard is on the ring; called with mu held. */
static bool has_active(const struct ts_members *m)
{
    for (size_t i = 0; i < m->shards.n; i++)
        if (m->shards.v[i].state == TS_MEMBER_ALIVE && !m->shards.v[i].joining)
            return true;
    return false;
}

/* Rebuilds the ring over the alive shards not joining and moves the epoch on. With none on
 * the ring, joining shards go on it at once: there is nothing left to copy from. Called with
 * mu held. */
void members_new_epoch(struct ts_members *m, const char *why)
{
    uint32_t *ids = malloc((m->shards.n + 1) * sizeof(*ids));
    struct ts_ring *ring;
    struct ts_err err = { 0 };
    bool none = !has_active(m);
    size_t n = 0;

    for (size_t i = 0; ids && i < m->shards.n; i++) {
        struct ts_member *e = &m->shards.v[i];
        e->joining &= !none;
        if (e->state == TS_MEMBER_ALIVE && !e->joining)
            ids[n++] = e->id;
    }
    if (!ids || ts_ring_create(ids, n, m->cfg.vnodes, &ring, &err)) {
        /* The old ring stays; the epoch still moves so clients refetch and see the members. */
        ts_log(TS_ERROR, "master", "cannot rebuild the ring: %s", ids ? err.msg : "no memory");
        ring = NULL;
    }
    free(ids);
    if (ring) {
        ts_ring_free(m->ring);
        m->ring = ring;
    }
    m->epoch++;
    if (make_durable(m, &err))
        ts_log(TS_ERROR, "master", "epoch %" PRIu64 " is not durable: %s", m->epoch, err.msg);
    ts_log(TS_INFO, "master", "epoch %" PRIu64 ": %s; %zu shards alive", m->epoch, why, n);
}

static void grant(struct ts_members *m, const struct ts_member *e, uint64_t known_epoch,
                  bool joined, struct ts_member_grant *g)
{
    g->id = e->id;
    g->epoch = m->epoch;
    g->lease_ms = e->lease_ms;
    g->map_changed = known_epoch != m->epoch;
    g->joined = joined;
    g->rest_ms = 0;
}

/* Whether cred may act for e (members.h, struct ts_member_cred): `what` names the act for the
 * error. Called with mu held. */
static ts_status check_cred(const struct ts_member *e, const struct ts_member_cred *cred,
                            const char *what, struct ts_err *err)
{
    if (!cred || cred->admin || !e->has_secret)
        return TS_OK;
    if (!cred->has_secret)
        return ts_err_set(err, TS_EAUTH, "secret: %s %u registered with a secret and %s needs "
                          "it (or an admin's credential)", kind_name(e->kind), e->id, what);
    if (CRYPTO_memcmp(cred->secret_sha256, e->secret_sha256, sizeof(e->secret_sha256)))
        return ts_err_set(err, TS_EPERM, "secret: not the one %s %u registered with; only that "
                          "process (or an admin) may %s", kind_name(e->kind), e->id, what);
    return TS_OK;
}

/* A member registering again shows the identity it first showed: knowing the secret does
 * not carry a registration over to another member's certificate. Called with mu held. */
static ts_status check_identity(const struct ts_member *e, const struct ts_member_cred *cred,
                                struct ts_err *err)
{
    if (!cred || !e->identity[0] || strcmp(e->identity, cred->identity) == 0)
        return TS_OK;
    return ts_err_set(err, TS_EPERM, "identity: %s %u registered with the certificate of %s; "
                      "this one names %s", kind_name(e->kind), e->id, e->identity,
                      cred->identity[0] ? cred->identity : "no member");
}

/* Gives e cred's secret and identity if it has none yet (a new member, or one registered
 * without), and its count of restarts. */
static void keep_cred(struct ts_member *e, const struct ts_member_cred *cred)
{
    if (!cred)
        return;
    e->restarts = cred->restarts;
    if (!e->identity[0])
        memcpy(e->identity, cred->identity, sizeof(e->identity));
    if (!cred->has_secret || e->has_secret)
        return;
    memcpy(e->secret_sha256, cred->secret_sha256, sizeof(e->secret_sha256));
    e->has_secret = true;
}

/* The alive shard of another instance that holds identity, or NULL; called with mu held. */
static struct ts_member *holder_of(struct ts_members *m, const char *identity,
                                   const char *instance)
{
    for (size_t i = 0; identity[0] && i < m->shards.n; i++) {
        struct ts_member *e = &m->shards.v[i];
        if (e->state == TS_MEMBER_ALIVE && strcmp(e->identity, identity) == 0 &&
            strcmp(e->instance, instance) != 0)
            return e;
    }
    return NULL;
}

/* The same instance again: a retried register, or a member declared dead coming back (a shard
 * then joins, unless quiet: its copies are stale); returns whether it came back. */
static bool reregister(struct ts_members *m, struct ts_member *e, uint32_t lease_ms, int64_t now,
                       bool quiet)
{
    char why[96];

    e->lease_ms = lease_ms;
    e->last_heartbeat_ms = m->last_heard_ms = now;
    e->heard = false;
    if (e->state == TS_MEMBER_ALIVE) {
        e->away_ms = 0;                             /* heard: not gone after all */
        members_set_state(m, e, TS_MEMBER_ALIVE);   /* its lease may be shorter now */
        return false;
    }
    e->joining = e->kind == TS_MEMBER_SHARD && !quiet && has_active(m);
    e->moves_epoch = e->moves_pending = 0;
    members_set_state(m, e, TS_MEMBER_ALIVE);
    e->death[0] = '\0';
    if (e->kind == TS_MEMBER_SHARD) {
        snprintf(why, sizeof(why), "shard %u (%s) is back%s", e->id, e->addr,
                 e->joining ? ", joining" : "");
        members_new_epoch(m, why);
        e->registered_epoch = m->epoch;
    }
    return true;
}

/* The same instance again from another address: a new process of the member (a shard that
 * keeps its identity in its --redo-dir, which one process alone may hold), so the old one is
 * gone: marked dead if it was not yet (its lease, a worker's report), and the member takes
 * the new address and endpoints; reregister brings it back. mu held. */
static void moved_to(struct ts_members *m, struct ts_member *e, const char *addr,
                     const struct ts_endpoint *endpoints, size_t n)
{
    if (e->state == TS_MEMBER_ALIVE) {
        members_set_state(m, e, TS_MEMBER_DEAD);
        ts_log(TS_WARN, "master", "shard %u (%s) registered again from %s by a new process: "
               "the old one is gone, marked dead", e->id, e->addr, addr);
    }
    snprintf(e->addr, sizeof(e->addr), "%s", addr);
    if (n)
        memcpy(e->endpoints, endpoints, n * sizeof(*endpoints));
    e->nendpoints = n;
}

/* Whether a and b (n of each) are the same endpoints. */
static bool same_endpoints(const struct ts_endpoint *a, const struct ts_endpoint *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(a[i].transport, b[i].transport) || a[i].len != b[i].len ||
            memcmp(a[i].addr, b[i].addr, a[i].len))
            return false;
    return true;
}

/* The same instance again with resumed while its member is alive: a process restarted on the
 * member's redo log, which holds what the member held, so it is the same member. It does not
 * join and keeps its registered_epoch; it is no longer away and its lease starts again. A new
 * address or new endpoints are taken with a new epoch, so that clients fetch them (the ring,
 * built from the same ids, is the same); with nothing new the epoch stays. mu held. */
static void resume(struct ts_members *m, struct ts_member *e, const char *addr,
                   const struct ts_endpoint *endpoints, size_t n, uint32_t lease_ms,
                   int64_t now)
{
    bool moved = strcmp(e->addr, addr) != 0 || n != e->nendpoints ||
                 !same_endpoints(e->endpoints, endpoints, n);
    char away[64], why[TS_MEMBERS_MAX_ADDR + 80];

    if (e->away_ms)
        snprintf(away, sizeof(away), "away for %" PRId64 " ms", now - e->away_ms);
    else
        snprintf(away, sizeof(away), "before its lease ran out");
    e->lease_ms = lease_ms;
    e->last_heartbeat_ms = m->last_heard_ms = now;
    e->heard = false;
    e->away_ms = 0;
    members_set_state(m, e, TS_MEMBER_ALIVE);   /* its lease, from now */
    ts_log(TS_WARN, "master", "shard %u is back from its redo log at %s (%s): the same member, "
           "its place kept%s%s", e->id, addr, away, moved ? "; it was at " : "",
           moved ? e->addr : "");
    if (!moved)
        return;
    snprintf(e->addr, sizeof(e->addr), "%s", addr);
    if (n)
        memcpy(e->endpoints, endpoints, n * sizeof(*endpoints));
    e->nendpoints = n;
    snprintf(why, sizeof(why), "shard %u is back from its redo log at %s", e->id, addr);
    members_new_epoch(m, why);
}

ts_status ts_members_register_shard(struct ts_members *m, const char *addr, const char *instance,
                                    uint32_t lease_ms, const struct ts_endpoint *endpoints,
                                    size_t n, bool redo_log, bool resumed, int64_t now_ms,
                                    struct ts_member_grant *g,
                                    const struct ts_member_cred *cred, struct ts_err *err)
{
    struct ts_member *e;
    char why[320];
    bool quiet;
    ts_status st;

    if ((st = ts_members_check_addr("addr", addr, true, err)) ||
        (st = check_instance(instance, err)) ||
        (st = check_lease(lease_ms, err)) ||
        (st = check_endpoints(endpoints, n, err)))
        return st;
    lease_ms = lease_ms ? lease_ms : m->cfg.default_lease_ms;
    quiet = !m->cfg.quiet || m->cfg.quiet(m->cfg.quiet_ctx);
    pthread_mutex_lock(&m->mu);
    if ((e = members_find_instance(&m->shards, instance))) {
        if (!(st = check_cred(e, cred, "register this instance again", err)) &&
            !(st = check_identity(e, cred, err))) {
            keep_cred(e, cred);
            e->redo_log = redo_log;
            if (resumed && e->state == TS_MEMBER_ALIVE) {
                resume(m, e, addr, endpoints, n, lease_ms, now_ms);
                grant(m, e, 0, false, g);   /* it never left */
            } else {
                if (strcmp(e->addr, addr))
                    moved_to(m, e, addr, endpoints, n);
                grant(m, e, 0, reregister(m, e, lease_ms, now_ms, quiet), g);
            }
        }
        pthread_mutex_unlock(&m->mu);
        return st;
    }
    if (cred && (e = holder_of(m, cred->identity, instance)))
        st = ts_err_set(err, TS_EPERM, "identity: %s is shard %u's (at %s, alive): one live "
                        "registration per member certificate; a shard restarted with it "
                        "registers once the old process is gone", e->identity, e->id, e->addr);
    if (st || (st = new_member(m, &m->shards, TS_MEMBER_SHARD, addr, instance, lease_ms, now_ms,
                               &e, err))) {
        pthread_mutex_unlock(&m->mu);
        return st;
    }
    if (n) /* endpoints may be NULL when n is 0 */
        memcpy(e->endpoints, endpoints, n * sizeof(*endpoints));
    e->nendpoints = n;
    keep_cred(e, cred);
    e->redo_log = redo_log;
    e->joining = !quiet;   /* new_epoch puts it on the ring if it is the only one */
    /* Only one process can listen on an address, so an alive shard there has gone away. */
    for (size_t i = 0; i + 1 < m->shards.n; i++) {
        struct ts_member *old = &m->shards.v[i];
        if (old->state == TS_MEMBER_ALIVE && strcmp(old->addr, addr) == 0) {
            members_set_state(m, old, TS_MEMBER_DEAD);
            ts_log(TS_WARN, "master", "shard %u at %s replaced by a new process: marked dead",
                   old->id, addr);
        }
    }
    snprintf(why, sizeof(why), "shard %u (%s) registered%s", e->id, addr,
             !quiet && has_active(m) ? ", joining: the shards copy it their partitions" : "");
    members_new_epoch(m, why);
    e->registered_epoch = m->epoch;
    grant(m, e, 0, true, g);
    pthread_mutex_unlock(&m->mu);
    return TS_OK;
}

ts_status ts_members_register_worker(struct ts_members *m, const char *host, uint32_t pid,
                                     const char *role, const char *service,
                                     const char *instance, uint32_t lease_ms, int64_t now_ms,
                                     struct ts_member_grant *g, const struct ts_member_cred *cred,
                                     struct ts_err *err)
{
    struct ts_member *e;
    bool joined = true;
    ts_status st;

    if ((st = ts_members_check_addr("host", host, false, err)) ||
        (st = check_instance(instance, err)) || (st = check_lease(lease_ms, err)))
        return st;
    if (role && role[0] && strcmp(role, "verify") != 0)
        return ts_err_set(err, TS_EINVAL, "role: '%.32s'; \"\" (a trainer) or \"verify\"", role);
    if (role && role[0] && (st = ts_members_check_addr("addr", service, true, err)))
        return st;
    lease_ms = lease_ms ? lease_ms : m->cfg.default_lease_ms;
    pthread_mutex_lock(&m->mu);
    if ((e = members_find_instance(&m->workers, instance))) {
        if (!(st = check_cred(e, cred, "register this instance again", err)) &&
            !(st = check_identity(e, cred, err)))
            joined = reregister(m, e, lease_ms, now_ms, true);
    } else if (!(st = new_member(m, &m->workers, TS_MEMBER_WORKER, host, instance, lease_ms,
                                 now_ms, &e, err))) {
        e->pid = pid;
        snprintf(e->role, sizeof(e->role), "%s", role ? role : "");
        snprintf(e->service, sizeof(e->service), "%s", role && role[0] ? service : "");
        e->registered_epoch = m->epoch;
        ts_log(TS_DEBUG, "master", "worker %u (%s pid %u) registered", e->id, host, pid);
    }
    if (!st) {
        keep_cred(e, cred);
        grant(m, e, 0, joined, g);
    }
    pthread_mutex_unlock(&m->mu);
    return st;
}

/* Finds an alive member; called with mu held. */
static ts_status find_alive(struct ts_members *m, enum ts_member_kind kind, uint32_t id,
                            struct ts_member **out, struct ts_err *err)
{
    struct table *t = members_table_of(m, kind);
    struct ts_member *e;

    *out = NULL;
    if (id == 0)
        return ts_err_set(err, TS_EINVAL, "id: required (the id RegisterShard/Worker returned)");
    if (!(e = members_find_id(t, id)))
        return ts_err_set(err, TS_ENOTFOUND, "id: %s %u is not registered (or left long ago); "
                          "register first", kind_name(kind), id);
    if (e->state == TS_MEMBER_DEAD)
        return ts_err_set(err, TS_ESTATE, "%s %u was declared dead (%s); register again",
                          kind_name(kind), id, e->death);
    if (e->state == TS_MEMBER_LEFT)
        return ts_err_set(err, TS_ESTATE, "%s %u deregistered; register again",
                          kind_name(kind), id);
    *out = e;
    return TS_OK;
}

ts_status ts_members_check_epoch(struct ts_members *m, uint64_t known_epoch, struct ts_err *err)
{
    uint64_t epoch = ts_members_epoch(m);

    if (known_epoch > epoch)
        return ts_err_set(err, TS_EINVAL,
                          "known_epoch: %" PRIu64 " is ahead of the master's epoch %" PRIu64,
                          known_epoch, epoch);
    return TS_OK;
}

/* Shard e, away, heartbeat at now: the process that was found gone was paused (stopped, or
 * cut off), not dead. No longer away; its lease runs from now. mu held. */
static void heard_again(struct ts_members *m, struct ts_member *e, int64_t now)
{
    ts_log(TS_WARN, "master", "shard %u (%s) is heard again after %" PRId64 " ms away: the same "
           "process (it was paused, not gone); its place was kept", e->id, e->addr,
           now - e->away_ms);
    e->away_ms = 0;
    members_lease_queue(m, e);   /* its lease may run out before the grace would have */
}

ts_status ts_members_heartbeat(struct ts_members *m, enum ts_member_kind kind, uint32_t id,
                               uint64_t known_epoch, uint64_t clock, int64_t now_ms,
                               struct ts_member_grant *g, const struct ts_member_cred *cred,
                               struct ts_err *err)
{
    struct ts_member *e;
    ts_status st;

    if ((st = check_kind(kind, err)) || (st = ts_members_check_epoch(m, known_epoch, err)))
        return st;
    pthread_mutex_lock(&m->mu);
    if (!(st = find_alive(m, kind, id, &e, err)) &&
        !(st = check_cred(e, cred, "renew its lease", err))) {
        e->last_heartbeat_ms = m->last_heard_ms = now_ms;
        e->heard = true;
        if (e->away_ms)
            heard_again(m, e, now_ms);
        if (clock > e->clock)
            e->clock = clock;
        grant(m, e, known_epoch, false, g);
        if (kind == TS_MEMBER_WORKER) {
            m->worker_beats++;
            g->rest_ms = members_rest_for(m, e, now_ms);
        }
    }
    pthread_mutex_unlock(&m->mu);
    return st;
}

ts_status ts_members_vouch(struct ts_members *m, enum ts_member_kind kind, uint32_t id,
                           const struct ts_member_cred *cred, struct ts_err *err)
{
    struct ts_member *e;
    ts_status st;

    if ((st = check_kind(kind, err)))
        return st;
    pthread_mutex_lock(&m->mu);
    if (!(st = find_alive(m, kind, id, &e, err)))
        st = check_cred(e, cred, "speak for it", err);
    pthread_mutex_unlock(&m->mu);
    return st;
}

bool ts_members_guarded_addr(struct ts_members *m, const char *addr, const char *instance,
                             uint32_t *id)
{
    bool found = false;

    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; !found && i < m->shards.n; i++) {
        const struct ts_member *e = &m->shards.v[i];
        if (e->state == TS_MEMBER_ALIVE && e->has_secret && strcmp(e->addr, addr) == 0 &&
            strcmp(e->instance, instance) != 0) {
            *id = e->id;
            found = true;
        }
    }
    pthread_mutex_unlock(&m->mu);
    return found;
}

bool ts_members_shard_holding(struct ts_members *m, const char *identity, const char *instance,
                              uint32_t *id, char addr[TS_MEMBERS_MAX_ADDR + 1],
                              char holder[TS_MEMBERS_MAX_INSTANCE + 1])
{
    struct ts_member *e;

    pthread_mutex_lock(&m->mu);
    if ((e = holder_of(m, identity, instance))) {
        *id = e->id;
        memcpy(addr, e->addr, sizeof(e->addr));
        memcpy(holder, e->instance, sizeof(e->instance));
    }
    pthread_mutex_unlock(&m->mu);
    return e != NULL;
}

void ts_members_moves(struct ts_members *m, uint32_t id, uint64_t epoch, uint64_t pending)
{
    struct ts_member *e;
    struct ts_err ignore = { 0 };
    char why[160];
    size_t at = 0, n = 0;
    bool ready = true;

    pthread_mutex_lock(&m->mu);
    if (find_alive(m, TS_MEMBER_SHARD, id, &e, &ignore) == TS_OK) {
        e->moves_epoch = epoch;
        e->moves_pending = pending;
    }
    for (size_t i = 0; i < m->shards.n; i++) {
        const struct ts_member *s = &m->shards.v[i];
        if (s->state != TS_MEMBER_ALIVE)
            continue;
        n += s->joining;
        ready &= s->moves_epoch == m->epoch && !s->moves_pending;
    }
    if (n && ready &&
        (!m->cfg.join_ready || m->cfg.join_ready(m->cfg.join_ready_ctx, m->epoch))) {
        at = (size_t)snprintf(why, sizeof(why), "shard%s", n > 1 ? "s" : "");
        for (size_t i = 0; i < m->shards.n; i++) {
            struct ts_member *s = &m->shards.v[i];
            if (s->state == TS_MEMBER_ALIVE && s->joining && at < sizeof(why))
                at += (size_t)snprintf(why + at, sizeof(why) - at, " %u", s->id);
            s->joining = false;
        }
        if (at < sizeof(why))
            snprintf(why + at, sizeof(why) - at, " joined the ring (every copy moved)");
        members_new_epoch(m, why);
    }
    pthread_mutex_unlock(&m->mu);
}

void ts_members_report(struct ts_members *m, uint32_t id, const struct ts_member_report *r)
{
    struct ts_member *e;
    struct ts_err ignore = { 0 };

    pthread_mutex_lock(&m->mu);
    if (find_alive(m, TS_MEMBER_WORKER, id, &e, &ignore) == TS_OK)
        e->report = *r;
    pthread_mutex_unlock(&m->mu);
}

ts_status ts_members_deregister(struct ts_members *m, enum ts_member_kind kind, uint32_t id,
                                const char *reason, uint64_t *epoch,
                                const struct ts_member_cred *cred, struct ts_err *err)
{
    struct ts_member *e;
    char why[400];
    ts_status st;

    if ((st = check_kind(kind, err)))
        return st;
    if (reason && strlen(reason) > TS_MEMBERS_MAX_REASON)
        return ts_err_set(err, TS_EINVAL, "reason: %zu bytes, at most %d", strlen(reason),
                          TS_MEMBERS_MAX_REASON);
    pthread_mutex_lock(&m->mu);
    /* A member declared dead may still leave: a worker whose lease ran out (stopped, or
     * starved on a loaded machine) while it finished its last step tells its outcome (its
     * fingerprint, the job's when it is rank 0) this way, before it heartbeats again. It
     * is out of the map already: no new epoch. */
    if ((e = members_find_id(members_table_of(m, kind), id)) && e->state == TS_MEMBER_DEAD && id) {
        if (!(st = check_cred(e, cred, "deregister it", err))) {
            members_set_state(m, e, TS_MEMBER_LEFT);
            ts_log(TS_INFO, "master", "%s %u, declared dead (%s), left (%s)", kind_name(kind),
                   id, e->death, reason && reason[0] ? reason : "no reason given");
            *epoch = m->epoch;
        }
    } else if (!(st = find_alive(m, kind, id, &e, err)) &&
        !(st = check_cred(e, cred, "deregister it", err))) {
        members_set_state(m, e, TS_MEMBER_LEFT);
        snprintf(why, sizeof(why), "%s %u left (%s)", kind_name(kind), id,
                 reason && reason[0] ? reason : "no reason given");
        if (kind == TS_MEMBER_SHARD)
            members_new_epoch(m, why);
        else
            ts_log(TS_INFO, "master", "%s", why);
        *epoch = m->epoch;
        if (kind == TS_MEMBER_WORKER)
            members_prune(&m->workers);
    }
    pthread_mutex_unlock(&m->mu);
    return st;
}

/* Declares alive member e dead for why; called with mu held. */
void members_declare_dead(struct ts_members *m, struct ts_member *e, const char *why)
{
    members_set_state(m, e, TS_MEMBER_DEAD);
    snprintf(e->death, sizeof(e->death), "%s", why);
    ts_log(TS_WARN, "master", "%s %u (%s): %s: dead", kind_name(e->kind), e->id, e->addr, why);
    if (e->kind == TS_MEMBER_SHARD) {
        m->shard_failures++;
        members_new_epoch(m, "a shard died");
    }
}

uint32_t ts_members_max_lease(struct ts_members *m, enum ts_member_kind kind)
{
    const struct table *t = kind == TS_MEMBER_SHARD ? &m->shards : &m->workers;
    uint32_t most = 0;

    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i].state == TS_MEMBER_ALIVE && t->v[i].lease_ms > most)
            most = t->v[i].lease_ms;
    pthread_mutex_unlock(&m->mu);
    return most;
}

uint64_t ts_members_epoch(struct ts_members *m)
{
    uint64_t e;

    pthread_mutex_lock(&m->mu);
    e = m->epoch;
    pthread_mutex_unlock(&m->mu);
    return e;
}

uint32_t ts_members_replicas(struct ts_members *m)
{
    /* cfg is set at create and never changes: no lock. */
    return m->cfg.replicas ? m->cfg.replicas : 1;
}
