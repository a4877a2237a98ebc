/* members_internal.h - what members.c (the membership table: registration, the ring),
 * members_table.c (its arrays and index, members' states and their queued leases),
 * members_lease.c (leases running out, in time order; the shards' vouches) and
 * members_view.c (the table copied
 * out into views, and back in by a restarted master) share: the table's structs and the
 * table operations members.c keeps for the other two. Not for the rest of the master: members.h is its interface. Every function here
 * runs with the table's mutex (struct ts_members.mu) held.
 * Ownership: a table owns its members and its index (freed by ts_members_free); the member
 * pointers these functions give are borrowed, valid until the table next changes. */
#ifndef TS_MASTER_MEMBERS_INTERNAL_H
#define TS_MASTER_MEMBERS_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "leaseq.h"
#include "members.h"

struct ts_ring;

struct table {
    struct ts_member *v;      /* by id, ascending */
    size_t n, cap;
    uint32_t next_id, reserved;   /* the last id handed out, the last one durably reserved */
    uint32_t *index;          /* slots hold a position + 1, or 0; size a power of two */
    size_t index_cap;
};

struct ts_members {
    pthread_mutex_t mu;
    struct ts_members_cfg cfg;
    struct table shards, workers;
    uint64_t epoch;
    struct ts_ring *ring;
    uint32_t shard_failures;
    uint32_t shard_aways;     /* shards marked away (cfg.shard_grace_ms) since this began */
    uint64_t expired[2];      /* leases that ran out since this process began: shards, workers */
    int64_t last_expire_ms;   /* the last ts_members_expire (0: none yet), for cfg.pause_ms */
    /* cfg.deaf_max_ms: when a member was last heard from (a heartbeat or a registration),
     * whether the master suspects its own network, and since when it heard none. */
    int64_t last_heard_ms, deaf_since_ms;
    bool deaf;
    /* Alive members by when their lease runs out (members_lease.c); lease_rescan: an entry
     * could not be added (no memory), the next expiry pass queues every alive member. */
    struct leaseq leases;
    bool lease_rescan;
    /* Per kind (0: shards, 1: workers): how many members are alive and their shortest and
     * longest lease, counted again only after one of that kind changed state or lease
     * (stale), not on every tick: the deaf check reads both, a worker's rest the shards'
     * alone (a handful, while workers may be thousands that come and go). */
    struct roster {
        size_t alive;
        uint32_t min_lease_ms, max_lease_ms;
        bool stale;
    } roster[2];
    /* Workers' leases renewed so far by their own heartbeats and by shards vouching for them
     * (ts_members_vouched), for /metrics. */
    uint64_t worker_beats, worker_vouches;
};

static inline const char *kind_name(enum ts_member_kind k)
{
    return k == TS_MEMBER_SHARD ? "shard" : "worker";
}

/* The member of t registered as instance, or NULL (t's hash index). */
struct ts_member *members_find_instance(struct table *t, const char *instance);
/* Appends a zeroed member to t with the next id; *out is borrowed. The caller indexes it. */
ts_status members_append(struct table *t, struct ts_member **out, struct ts_err *err);
/* Indexes the member just appended (its instance set), growing the index to stay half empty. */
ts_status members_index_add(struct table *t, const struct ts_member *e, struct ts_err *err);
/* The table of kind's members. */
struct table *members_table_of(struct ts_members *m, enum ts_member_kind k);
/* The member with this id, or NULL (binary search). */
struct ts_member *members_find_id(struct table *t, uint32_t id);
/* Forgets the oldest departed workers past TS_MEMBERS_KEEP_DEPARTED. */
void members_prune(struct table *t);
/* Declares alive member e dead for why (a shard: a new epoch). */
void members_declare_dead(struct ts_members *m, struct ts_member *e, const char *why);
/* Alive shard e was found gone at now_ms for why: whether the restart grace holds its place
 * (cfg.shard_grace_ms, members_lease.c). If so it is away: marked now (logged, counted, its
 * lease queued for the grace's end) or already, and not past its grace. If not, the caller
 * declares it dead. */
bool members_hold_place(struct ts_members *m, struct ts_member *e, int64_t now_ms,
                        const char *why);
/* Sets e's state; an alive member's lease is queued (members_lease.c), again if it may now
 * run out sooner than its queued entry says. Every change of state or lease goes here. */
void members_set_state(struct ts_members *m, struct ts_member *e, enum ts_member_state s);
/* kind's roster, counted again if one of that kind changed since (roster.stale). */
const struct roster *members_roster(struct ts_members *m, enum ts_member_kind kind);
/* Whether worker e, never heard since it registered, is held to the default lease; and the
 * first time e may be declared dead: silent past its lease, and out of any grace. */
bool members_first_lease(const struct ts_members *m, const struct ts_member *e);
int64_t members_lease_due(const struct ts_members *m, const struct ts_member *e);
/* A worker's HeartbeatResponse.rest_ms at now_ms (0: it beats every interval). */
uint32_t members_rest_for(struct ts_members *m, const struct ts_member *e, int64_t now_ms);
/* Queues e's lease unless an entry at or before its due is queued already. */
void members_lease_queue(struct ts_members *m, struct ts_member *e);
/* Queues the lease of every alive member (a restored table, or after lease_rescan). */
void members_lease_queue_all(struct ts_members *m);
/* Rebuilds the ring over the alive shards not joining and moves the epoch on (logged with
 * why); the epoch is made durable through cfg.durable. */
void members_new_epoch(struct ts_members *m, const char *why);

#endif
