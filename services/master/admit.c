/* admit.c - who may register what: a shard's registration checked before it reaches the ring,
 * a worker's job checked against its certificate (docs/security.md, "The unit of trust").
 *
 * Under mutual TLS a certificate names one member (sec/certs.h). A shard registers with its
 * own: the master refuses a certificate that names no member (a shared shard.pem) unless
 * started with --allow-shared-certs, refuses an identity an alive shard holds, and asks the
 * address it registers which process serves there and with which certificate (ShardStatus):
 * the registering instance and the caller's identity, or the registration is refused. A shard
 * serves before it registers (services/shard/main.c), so its own registration passes; one that
 * names an address nobody serves gets UNAVAILABLE, which our shards retry. Without mutual TLS
 * no certificate names anyone: an address an alive shard holds is still asked, as before. */
#include <stdio.h>
#include <string.h>

#include "master.h"
#include "cluster/shard.h"
#include "tessera/v1/shard.pb-c.h"
#include "transport/transport.h"
#include "util/log.h"

/* How long the master waits for an address to say which process serves there. */
#define ADDR_PROBE_MS 2000

/* Asks addr which process serves there: its instance into instance, the certificate it showed
 * into peer. TS_EUNAVAIL when nothing answers (refused, no handshake, past the deadline); the
 * call's error else. */
static ts_status probe(const char *addr, char instance[TS_MEMBERS_MAX_INSTANCE + 1],
                       struct ts_rpc_peer *peer, struct ts_err *err)
{
    Tessera__V1__ShardStatusResponse *r = NULL;
    struct ts_rpc_channel *ch = NULL;
    ts_status st;

    /* A channel of its own: a fresh connection, whose certificate is the server's now. */
    if (!(st = ts_rpc_channel_create(addr, NULL, &ch, err)) &&
        !(st = ts_shard_status_peer(ch, ADDR_PROBE_MS, peer, &r, err))) {
        snprintf(instance, TS_MEMBERS_MAX_INSTANCE + 1, "%s", r->instance);
        protobuf_c_message_free_unpacked(&r->base, NULL);
    }
    ts_rpc_channel_free(ch);
    return st == TS_ETIMEDOUT ? TS_EUNAVAIL : st;
}

/* Without mutual TLS: a registration at an alive shard's address marks it dead, so from anyone
 * but an admin it needs proof that the caller's process is the one serving there now. */
static ts_status check_addr_claim(const struct master *m,
                                  const Tessera__V1__RegisterShardRequest *req,
                                  const struct ts_member_cred *cred, struct ts_err *err)
{
    char instance[TS_MEMBERS_MAX_INSTANCE + 1];
    struct ts_rpc_peer peer;
    struct ts_err why = { 0 };
    uint32_t old;

    if (cred->admin || !ts_members_guarded_addr(m->members, req->addr, req->instance, &old))
        return TS_OK;
    if (probe(req->addr, instance, &peer, &why))
        return ts_err_set(err, TS_EUNAVAIL, "addr: shard %u is registered at %s, and asked which "
                          "process listens there, the address did not answer (%s); register "
                          "again once this process serves there", old, req->addr, why.msg);
    if (strcmp(instance, req->instance) != 0)
        return ts_err_set(err, TS_EPERM, "addr: shard %u is registered at %s, and the process "
                          "answering there is not instance %s; only the process listening on "
                          "an address (or an admin) may register it", old, req->addr,
                          req->instance);
    return TS_OK;
}

/* The identity an alive shard of another instance holds is free only once that shard is gone:
 * asked at its address, it does not answer as itself. Gone (refused, or another process
 * there now): declared dead, so the new one takes its place at once, as a restarted shard does
 * on its address. Still answering: the identity is taken. No answer either way: UNAVAILABLE,
 * and its lease decides. */
static ts_status free_identity(struct master *m, const Tessera__V1__RegisterShardRequest *req,
                               const struct ts_member_cred *cred, struct ts_err *err)
{
    char addr[TS_MEMBERS_MAX_ADDR + 1], held[TS_MEMBERS_MAX_INSTANCE + 1];
    char got[TS_MEMBERS_MAX_INSTANCE + 1], seen[160], why[300];
    struct ts_rpc_peer peer;
    struct ts_err e = { 0 };
    uint32_t old;
    ts_status st;

    if (!ts_members_shard_holding(m->members, cred->identity, req->instance, &old, addr, held))
        return TS_OK;
    st = probe(addr, got, &peer, &e);
    if (!st && strcmp(got, held) == 0)
        return ts_err_set(err, TS_EPERM, "identity: %s is shard %u's, alive at %s: one live "
                          "registration per member certificate (stop shard %u first, or give "
                          "this process its own: tessera certs issue DIR --member shard/NAME)",
                          cred->identity, old, addr, old);
    if (st && !ts_tcp_refused(addr, ADDR_PROBE_MS, seen, sizeof(seen)))
        return ts_err_set(err, TS_EUNAVAIL, "identity: %s is shard %u's, at %s, which did not "
                          "answer: register again once its lease has run out (%s)",
                          cred->identity, old, addr, e.msg);
    snprintf(why, sizeof(why), "its identity %.80s registered again by instance %.64s, and "
             "%.120s", cred->identity, req->instance, st ? seen : "another process serves at "
             "its address");
    ts_members_declare_dead(m->members, TS_MEMBER_SHARD, old, held, why);
    return TS_OK;
}

/* The address a new shard registers answers as that shard: the registering instance, showing
 * a shard certificate of the caller's identity. */
static ts_status check_addr(const Tessera__V1__RegisterShardRequest *req,
                            const struct ts_member_cred *cred, struct ts_err *err)
{
    char got[TS_MEMBERS_MAX_INSTANCE + 1];
    struct ts_rpc_peer peer;
    struct ts_err e = { 0 };
    ts_status st = probe(req->addr, got, &peer, &e);

    if (st == TS_EUNAVAIL)
        return ts_err_set(err, TS_EUNAVAIL, "addr: nothing answered at %s: a shard serves there "
                          "before it registers, so register again once it does (%s)", req->addr,
                          e.msg);
    if (st)
        return ts_err_set(err, TS_EPERM, "addr: %s did not answer as a shard (%s)", req->addr,
                          e.msg);
    if (strcmp(got, req->instance) != 0)
        return ts_err_set(err, TS_EPERM, "addr: the process serving at %s is not instance %s; "
                          "only the process listening at an address may register it",
                          req->addr, req->instance);
    if (!(peer.roles & TS_ROLE_SHARD) || strcmp(peer.identity, cred->identity) != 0)
        return ts_err_set(err, TS_EPERM, "addr: the server at %s shows the certificate of %s, "
                          "the caller's names %s: a shard registers with the certificate it "
                          "serves with", req->addr, peer.identity[0] ? peer.identity : "no member",
                          cred->identity[0] ? cred->identity : "no member");
    return TS_OK;
}

ts_status master_admit_shard(struct master *m, const Tessera__V1__RegisterShardRequest *req,
                             const struct ts_member_cred *cred, struct ts_err *err)
{
    ts_status st;

    if (!ts_rpc_tls_mutual())
        return check_addr_claim(m, req, cred, err);
    if (!cred->identity[0] && !m->allow_shared_certs)
        return ts_err_set(err, TS_EPERM, "identity: the caller's certificate names no member "
                          "(a shared role certificate, shard.pem of an older `tessera certs "
                          "init`): give each shard its own (tessera certs issue DIR --member "
                          "shard/NAME), or start the master with --allow-shared-certs");
    if (cred->identity[0] && !ts_member_name(cred->identity, "shard"))
        return ts_err_set(err, TS_EPERM, "identity: the caller's certificate is %s's, not a "
                          "shard's (shard/NAME)", cred->identity);
    if ((st = free_identity(m, req, cred, err)))
        return st;
    return check_addr(req, cred, err);
}

ts_status master_admit_worker(const Tessera__V1__RegisterWorkerRequest *req,
                              const struct ts_member_cred *cred, struct ts_err *err)
{
    const char *job = ts_member_name(cred->identity, "worker");

    if (!job || strcmp(job, "*") == 0 || strcmp(job, req->job) == 0)
        return TS_OK;
    return ts_err_set(err, TS_EPERM, "job: the caller's certificate is %s's, a worker of job %s "
                      "only; this registration is for %s%s%s", cred->identity, job,
                      req->job[0] ? "job " : "no job", req->job, req->job[0] ? "" : " (name it)");
}
