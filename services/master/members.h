/* members.h - the master's membership table: shards and workers, their leases, the ring.
 *
 * Why: membership is the master's core state and must be testable without gRPC, with a clock
 * the test controls. Every operation takes `now_ms` (monotonic) from the caller.
 *
 * Model: a member registers (an id is assigned; the same `instance` registering again gets the
 * same id back, so a retried RegisterShard is harmless), renews its lease with heartbeats, and
 * is declared dead by ts_members_expire() once silent past its lease (a shard that keeps a
 * redo log may be held away first: cfg.shard_grace_ms). A dead member must
 * register again. A worker is held to the master's default lease until its first heartbeat,
 * whatever lease it asked for: a registration alone, never followed by a heartbeat (our SDK
 * sends one at once), cannot keep its job's slot for ten minutes (issue 41). The shard map
 * epoch moves on whenever the set of alive shards changes, and
 * the ring (lib/placement) is rebuilt for it. Ids are never reused. Departed workers beyond
 * TS_MEMBERS_KEEP_DEPARTED are forgotten, oldest first (their ids are then NOT_FOUND).
 *
 * Validation lives here, so every entry point refuses bad input with TS_EINVAL naming the field
 * and changes nothing.
 * Ownership: ts_members_create() returns a table freed with ts_members_free(); views are copies
 * the caller frees with ts_members_view_free().
 * Threads: all functions are safe to call concurrently (one mutex). */
#ifndef TS_MASTER_MEMBERS_H
#define TS_MASTER_MEMBERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sec/certs.h"
#include "util/err.h"

#define TS_MEMBERS_MIN_LEASE_MS 100
#define TS_MEMBERS_MAX_LEASE_MS 600000
#define TS_MEMBERS_MAX_ADDR 255
#define TS_MEMBERS_MAX_INSTANCE 64
#define TS_MEMBERS_MAX_REASON 256
/* Departed workers kept for ClusterStatus; the oldest beyond are forgotten (members.c). */
#define TS_MEMBERS_KEEP_DEPARTED 512

enum ts_member_kind { TS_MEMBER_SHARD = 1, TS_MEMBER_WORKER = 2 };
enum ts_member_state { TS_MEMBER_ALIVE = 1, TS_MEMBER_DEAD = 2, TS_MEMBER_LEFT = 3 };

#define TS_MEMBERS_MAX_ENDPOINTS 4
#define TS_MEMBERS_MAX_BLOB 192
#define TS_MEMBER_SECRET_HASH 32

/* A data-plane endpoint a shard listens on (tessera.v1.DataPlaneEndpoint). */
struct ts_endpoint {
    char transport[16];
    uint8_t addr[TS_MEMBERS_MAX_BLOB];
    size_t len;
};

struct ts_member {
    uint32_t id;
    enum ts_member_kind kind;
    enum ts_member_state state;
    char addr[TS_MEMBERS_MAX_ADDR + 1];       /* shards: gRPC host:port; workers: host */
    char instance[TS_MEMBERS_MAX_INSTANCE + 1];
    uint32_t pid;
    uint32_t lease_ms;
    int64_t last_heartbeat_ms;                /* monotonic */
    uint64_t registered_epoch;
    uint64_t clock;                           /* workers: last step reported */
    struct ts_member_report {                 /* workers: HeartbeatRequest's report */
        uint64_t staleness_last, staleness_max, steps_skipped;
        float loss_scale;
    } report;
    char role[16];                            /* workers: "" trainer, "verify" */
    char service[TS_MEMBERS_MAX_ADDR + 1];    /* role verify: its gRPC host:port */
    struct ts_endpoint endpoints[TS_MEMBERS_MAX_ENDPOINTS];   /* shards */
    size_t nendpoints;
    char death[200];                          /* DEAD: how it was found dead, for status */
    /* Shards: not on the ring yet, copying the partitions it will hold (docs/replication.md,
     * "Joining"); and its last report of the moves left, under the map of moves_epoch. */
    bool joining;
    uint64_t moves_epoch, moves_pending;
    uint32_t restarts;                        /* see ts_member_cred.restarts */
    int64_t grace_until_ms;                   /* not declared dead before (ts_members_restore,
                                               * a pause of the master: cfg.pause_ms) */
    bool heard;                               /* a heartbeat came since it (re)registered */
    int64_t vouched_ms;                       /* workers: a shard last vouched for it (0 never) */
    int64_t lease_due_ms;                     /* its earliest entry in the lease queue (0:
                                               * none; members_lease.c, leaseq.h) */
    /* The SHA-256 of the secret it registered with (has_secret; see ts_member_cred). */
    uint8_t secret_sha256[TS_MEMBER_SECRET_HASH];
    bool has_secret;
    /* The member its certificate names (sec/certs.h), as it registered: "shard/3"; "": none
     * (no mutual TLS, or a role certificate). See ts_member_cred. */
    char identity[TS_MEMBER_MAX + 1];
    /* Shards: it keeps a redo log (RegisterShardRequest.redo_log, as of its last
     * registration), and when it was marked away (0: it is not; monotonic ms): found gone
     * while the restart grace holds its place (ts_members_cfg.shard_grace_ms). */
    bool redo_log;
    int64_t away_ms;
};

/* Who makes a call about a member (docs/security.md, "Member identity"): the SHA-256 of the
 * secret it sent (has_secret false: none), and whether it may act for any member (an admin,
 * or any caller of a server that checks no credentials). A member registered with a secret
 * answers, to a heartbeat, a deregistration or a registration of its instance again, only a
 * caller that sends the same secret or is an admin: else TS_EAUTH (none sent) or TS_EPERM
 * (another), naming the field `secret`, with nothing changed. A NULL cred is an admin's. */
struct ts_member_cred {
    uint8_t secret_sha256[TS_MEMBER_SECRET_HASH];
    bool has_secret;
    bool admin;
    /* Registrations: the member the caller's certificate names ("" none), kept with the
     * member. A shard's identity is held by one alive shard at a time: a new instance showing
     * it while another alive shard holds it is refused (TS_EPERM naming `identity`), and an
     * instance registering again must show the identity it first showed (TS_EPERM). */
    char identity[TS_MEMBER_MAX + 1];
    /* Registrations too: how many times a supervisor restarted the member this one replaces
     * (Register{Shard,Worker}Request.restarts), kept with the member in the same step as the
     * rest, so that no status shows the member without it. */
    uint32_t restarts;
};

/* What must never go backwards across a master restart: the epoch, and the ids reserved for
 * each kind (an id up to its reserve may have been handed out; a restarted master goes on
 * after it). Ids are reserved TS_MEMBERS_ID_BLOCK at a time, so a registration rarely waits
 * for the disk. */
#define TS_MEMBERS_ID_BLOCK 256
struct ts_members_clock {
    uint64_t epoch;
    uint32_t shard_ids, worker_ids;
};

struct ts_members_cfg {
    uint32_t default_lease_ms;                /* 0: 3000 */
    unsigned vnodes;                          /* 0: TS_RING_DEFAULT_VNODES */
    uint32_t replicas;                        /* shards per chain; 0: 1 */
    /* Whether no shard holds a job's state (no job is resident): a shard that registers then
     * goes on the ring at once, else it joins (ts_members_moves). NULL: always at once.
     * Called without the members' lock. */
    bool (*quiet)(void *ctx);
    void *quiet_ctx;
    /* Whether the shards joining under epoch may go on the ring now that every copy moved
     * (ts_members_moves): the master's snapshots of the jobs whose rows the join re-places
     * (snapper_join_ready). Called with the members' lock held, on each report of the moves
     * until it says yes: it must neither block nor call back into the members. NULL: at
     * once. */
    bool (*join_ready)(void *ctx, uint64_t epoch);
    void *join_ready_ctx;
    /* Durability (services/master/state.h): called with the table's lock held whenever the
     * epoch moves on or ids are reserved, before any reply can carry them; it must make *c
     * durable. A failure refuses the registration that needed the ids (TS_EUNAVAIL) or, for
     * an epoch, is logged. NULL: nothing is durable. */
    ts_status (*durable)(void *ctx, const struct ts_members_clock *c, struct ts_err *err);
    void *durable_ctx;
    /* The master's own pauses (a SIGSTOP, a frozen VM, a swap storm): two calls of
     * ts_members_expire this far apart (ms) mean the master did not run in between, so it
     * cannot tell who was silent; every alive member then gets one lease of grace instead of
     * being declared dead at once (docs/membership.md, "A paused master"). 0: off (callers
     * that drive the clock themselves, the unit tests). */
    int64_t pause_ms;
    /* A master cut off from everyone (its network, not theirs): when two members or more are
     * alive and none was heard for longer than the longest of their leases, the master
     * suspects itself and declares no one dead, for at most this long (ms) since it last
     * heard one; once it hears one again, every alive member gets a lease of grace from then
     * (docs/membership.md, "A master cut off"). 0: off (the unit tests, unless they test
     * it). */
    int64_t deaf_max_ms;
    /* How long a worker the shards vouch for may go without a heartbeat of its own
     * (HeartbeatResponse.rest_ms; at least a third of its lease); 0: workers always beat
     * every interval (tessera-master --worker-rest-ms 0). */
    uint32_t rest_ms;
    /* The restart grace (docs/membership.md, "A shard restarting from its redo log"): a shard
     * that keeps a redo log and is found gone (its lease ran out, or it was reported and its
     * port refuses) is marked away for this long (ms) instead of declared dead: it stays
     * alive, on the ring, and the epoch stays, so that a process restarted on its log can
     * come back as the same member (a registration with resumed). Only with one replica (a
     * chain takes over at once, which is better than waiting). 0: off. */
    uint32_t shard_grace_ms;
};

/* What a register or heartbeat grants. */
struct ts_member_grant {
    uint32_t id;
    uint64_t epoch;
    uint32_t lease_ms;
    bool map_changed;
    bool joined;             /* registrations: the member is new, or was dead (not a retry,
                              * nor a shard back from its redo log while alive) */
    /* Worker heartbeats: above 0, it may rest (HeartbeatResponse.rest_ms): the shards vouched
     * for it lately, and they beat at least as often as it must. */
    uint32_t rest_ms;
};

/* A consistent copy for ClusterStatus and GetShardMap. */
struct ts_members_view {
    uint64_t epoch;
    unsigned vnodes;
    uint32_t replicas;
    uint64_t ring_digest;
    uint32_t default_lease_ms;
    uint32_t shard_failures;                  /* shards declared dead so far */
    uint32_t shard_aways;                     /* shards marked away so far (restart grace) */
    /* leases that ran out since this master began (not kept by ts_members_restore) */
    uint64_t shard_expiries, worker_expiries;
    /* workers' leases renewed so far by their own heartbeats, and by shards vouching */
    uint64_t worker_beats, worker_vouches;
    struct ts_member *shards, *workers;       /* by id */
    size_t nshards, nworkers;
    /* Every worker by state (its enum ts_member_state; [0] unused), whatever was copied, and
     * after a page (ts_members_view_page) that stopped short, its last id (else 0). */
    uint32_t workers_in[4];
    uint32_t workers_next;
};

struct ts_members;

ts_status ts_members_create(const struct ts_members_cfg *cfg, struct ts_members **out,
                            struct ts_err *err) TS_MUST_CHECK;
void ts_members_free(struct ts_members *m);

/* endpoints: the shard's data-plane listeners (n at most TS_MEMBERS_MAX_ENDPOINTS), copied.
 * redo_log: the shard keeps a redo log (kept with the member: the restart grace may hold its
 * place). resumed: this process started from that log. The same instance registering again
 * with resumed while its member is alive (away or not) is the same member: not joining, its
 * registered_epoch kept, no longer away, its lease renewed, and g->joined false; a new
 * address or new endpoints are taken with a new epoch (the ring is the same), else the epoch
 * stays. Without resumed, or once the member was declared dead, it registers as any shard. */
ts_status ts_members_register_shard(struct ts_members *m, const char *addr, const char *instance,
                                    uint32_t lease_ms, const struct ts_endpoint *endpoints,
                                    size_t n, bool redo_log, bool resumed, int64_t now_ms,
                                    struct ts_member_grant *g,
                                    const struct ts_member_cred *cred,
                                    struct ts_err *err) TS_MUST_CHECK;
/* role: "" or "verify" (then service, its gRPC address, is required). */
ts_status ts_members_register_worker(struct ts_members *m, const char *host, uint32_t pid,
                                     const char *role, const char *service,
                                     const char *instance, uint32_t lease_ms, int64_t now_ms,
                                     struct ts_member_grant *g, const struct ts_member_cred *cred,
                                     struct ts_err *err) TS_MUST_CHECK;
/* TS_ENOTFOUND for an id never registered, TS_ESTATE for a dead or departed member. */
ts_status ts_members_heartbeat(struct ts_members *m, enum ts_member_kind kind, uint32_t id,
                               uint64_t known_epoch, uint64_t clock, int64_t now_ms,
                               struct ts_member_grant *g, const struct ts_member_cred *cred,
                               struct ts_err *err) TS_MUST_CHECK;
/* Whether cred speaks for alive member id of kind (its secret, or an admin's): TS_OK, else
 * the refusal of a heartbeat, with nothing changed (no lease renewed). For calls a member
 * makes about its own registration that are not signs of life (JobAccess). */
ts_status ts_members_vouch(struct ts_members *m, enum ts_member_kind kind, uint32_t id,
                           const struct ts_member_cred *cred, struct ts_err *err) TS_MUST_CHECK;
/* A shard's report of the moves left for joining shards (HeartbeatRequest.moves_*), after a
 * heartbeat it was accepted. Once every alive shard reported none under the current epoch
 * (and cfg.join_ready agrees), the joining shards go on the ring with a new epoch. */
void ts_members_moves(struct ts_members *m, uint32_t id, uint64_t epoch, uint64_t pending);
/* Whether an alive shard of another process start than `instance` is registered at addr with a
 * secret (a registration at addr marks it dead, see register); *id is then its id. */
bool ts_members_guarded_addr(struct ts_members *m, const char *addr, const char *instance,
                             uint32_t *id);
/* Whether an alive shard of another process start than `instance` holds identity (its
 * certificate names it; ts_member_cred); *id, addr and holder (its instance) are then its. */
bool ts_members_shard_holding(struct ts_members *m, const char *identity, const char *instance,
                              uint32_t *id, char addr[TS_MEMBERS_MAX_ADDR + 1],
                              char holder[TS_MEMBERS_MAX_INSTANCE + 1]);
/* Records a worker's report (after a heartbeat it was accepted). */
void ts_members_report(struct ts_members *m, uint32_t id, const struct ts_member_report *r);
/* A shard's heartbeat vouched for these workers (HeartbeatRequest.vouched): each alive one
 * among them has its lease renewed at now_ms, as by a heartbeat of its own, and steps[i] (NULL:
 * none) becomes its clock when ahead; ids that are not alive workers are passed over (a worker
 * declared dead is not brought back by its frames). Returns how many were renewed. */
size_t ts_members_vouched(struct ts_members *m, const uint32_t *ids, const uint64_t *steps,
                          size_t n, int64_t now_ms);
/* "alive", "dead" or "left" (static storage). */
const char *ts_member_state_name(enum ts_member_state s);
ts_status ts_members_deregister(struct ts_members *m, enum ts_member_kind kind, uint32_t id,
                                const char *reason, uint64_t *epoch,
                                const struct ts_member_cred *cred,
                                struct ts_err *err) TS_MUST_CHECK;
/* An address in `field`: required, at most TS_MEMBERS_MAX_ADDR bytes, printable; with
 * need_port, host:port with a port of 1..65535. TS_EINVAL naming the field. */
ts_status ts_members_check_addr(const char *field, const char *a, bool need_port,
                                struct ts_err *err) TS_MUST_CHECK;
/* Validates known_epoch against the current epoch (it may not be ahead). */
ts_status ts_members_check_epoch(struct ts_members *m, uint64_t known_epoch,
                                 struct ts_err *err) TS_MUST_CHECK;

/* Declares dead every alive member silent past its lease (a worker not heard since it
 * registered: past the shorter of its lease and the default lease); returns how many. Logs
 * each, and calls dead (may be NULL; with the table's lock held) for each worker. With
 * cfg.pause_ms, call it more often than that: a longer gap is taken for a pause of the
 * master, after which every alive member gets a lease of grace and none is declared dead;
 * with cfg.deaf_max_ms, no member is declared dead while the master hears none (above). */
int ts_members_expire(struct ts_members *m, int64_t now_ms,
                      void (*dead)(void *ctx, uint32_t worker), void *ctx);

/* A shard reported unreachable, to be tried before it is declared dead: its gRPC address and
 * instance (the process start the caller tries). TS_ENOTFOUND for an id never registered;
 * *alive false if it is out of the map already. */
ts_status ts_members_shard_addr(struct ts_members *m, uint32_t id,
                                char addr[TS_MEMBERS_MAX_ADDR + 1],
                                char instance[TS_MEMBERS_MAX_INSTANCE + 1], bool *alive,
                                struct ts_err *err) TS_MUST_CHECK;
/* The map epoch at which shard id registered last, while it is alive; 0 when it is out of the
 * map or unknown. */
uint64_t ts_members_shard_registered(struct ts_members *m, uint32_t id);
/* Declares member id of kind dead for `why` (logged, kept for status) if it is still alive and
 * still the process start `instance` (NULL: any); returns whether it did. The map moves on, or
 * (a worker: the caller tells the job table) its job goes on, as for an expired lease. Shards
 * are reported unreachable and checked first; a worker is reported when a shard saw its
 * data-plane connection hang up without a goodbye (docs/elastic.md). */
bool ts_members_declare_dead(struct ts_members *m, enum ts_member_kind kind, uint32_t id,
                             const char *instance, const char *why);

/* What ts_members_shard_gone did with a shard found gone. */
enum ts_members_gone {
    TS_GONE_NOT = 0,   /* nothing: out of the map already, or another process start */
    TS_GONE_DEAD,      /* declared dead now */
    TS_GONE_AWAY,      /* away: marked now, or already (its grace is not restarted) */
};
/* Shard id, still the process start `instance` (NULL: any), was found gone for `why` (a
 * member reported it unreachable and its port refuses). As ts_members_declare_dead, unless
 * the restart grace holds its place (cfg.shard_grace_ms: it keeps a redo log, one replica):
 * then it is marked away at now_ms, or stays away if it was already, and *left_ms (may be
 * NULL) says how long its place is held still. A shard away past its grace is declared
 * dead. */
enum ts_members_gone ts_members_shard_gone(struct ts_members *m, uint32_t id,
                                           const char *instance, const char *why,
                                           int64_t now_ms, int64_t *left_ms);

/* alive_only: only alive shards and no workers (GetShardMap). */
ts_status ts_members_view(struct ts_members *m, bool alive_only, struct ts_members_view *v,
                          struct ts_err *err) TS_MUST_CHECK;
/* Every shard and a page of the workers: at most max (0: every one) of those with ids above
 * `after`, so that a status of ten thousand workers copies only what it lists
 * (docs/scaling.md). */
ts_status ts_members_view_page(struct ts_members *m, uint32_t after, size_t max,
                               struct ts_members_view *v, struct ts_err *err) TS_MUST_CHECK;
void ts_members_view_free(struct ts_members_view *v);

uint64_t ts_members_epoch(struct ts_members *m);
/* --replicas: the shards in each partition's chain (at least 1). */
uint32_t ts_members_replicas(struct ts_members *m);
/* The longest lease of the alive members of kind (0: none alive). */
uint32_t ts_members_max_lease(struct ts_members *m, enum ts_member_kind kind);

/* A restarted master (services/master/state.h): the empty table takes the members of v
 * (those its state file kept) and ids after c's reserves; every alive member's lease starts
 * again at now_ms, and none is declared dead before now_ms + grace_ms (one that has not
 * heartbeat by then and within its lease is declared dead as usual),
 * and the epoch moves on from the larger of v's and c's, so it never goes backwards.
 * TS_ESTATE if the table is not empty; TS_EINVAL for a record that cannot be (ids not
 * ascending, a field past its limit), with the table left empty. */
ts_status ts_members_restore(struct ts_members *m, const struct ts_members_view *v,
                             const struct ts_members_clock *c, int64_t now_ms, int64_t grace_ms,
                             struct ts_err *err) TS_MUST_CHECK;

#endif
