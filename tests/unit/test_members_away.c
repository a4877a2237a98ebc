/* test_members_away.c - the restart grace of the master's membership table (docs/membership.md,
 * "A shard restarting from its redo log"): a shard that keeps a redo log, found gone, is held
 * away instead of declared dead, and a process restarted on its log comes back as the same
 * member. The clock is the test's, as in test_members.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "master/members.h"
#include "util/log.h"

#define LEASE 1000
#define GRACE 5000

/* cfg.quiet: whether no job is resident (false: a shard registering again joins). */
static bool quiet(void *ctx)
{
    return !*(bool *)ctx;
}

static struct ts_members *mk(uint32_t grace, uint32_t replicas, bool *busy)
{
    struct ts_members_cfg cfg = { .default_lease_ms = LEASE, .shard_grace_ms = grace,
                                  .replicas = replicas, .quiet = busy ? quiet : NULL,
                                  .quiet_ctx = busy };
    struct ts_members *m;

    assert_int_equal(ts_members_create(&cfg, &m, NULL), TS_OK);
    return m;
}

static uint32_t reg(struct ts_members *m, const char *addr, const char *inst, uint32_t lease,
                    bool redo_log, bool resumed, int64_t now, struct ts_member_grant *g)
{
    assert_int_equal(ts_members_register_shard(m, addr, inst, lease, NULL, 0, redo_log, resumed,
                                               now, g, NULL, NULL), TS_OK);
    return g->id;
}

/* A copy of shard id as the table holds it, and the view's head (epoch, digest, counts). */
static struct ts_member shard(struct ts_members *m, uint32_t id, struct ts_members_view *head)
{
    struct ts_members_view v;
    struct ts_member e = { 0 };

    assert_int_equal(ts_members_view(m, false, &v, NULL), TS_OK);
    for (size_t i = 0; i < v.nshards; i++)
        if (v.shards[i].id == id)
            e = v.shards[i];
    assert_int_equal(e.id, id);
    ts_members_view_free(&v);   /* its member pointers are NULL now */
    if (head)
        *head = v;
    return e;
}

/* Two shards on the ring, then jobs resident (*busy): a (keeps a redo log, the default lease)
 * and b (none, a lease that outlasts the test, so that a has a shard on the ring beside it). */
static struct ts_members *two(uint32_t grace, uint32_t replicas, bool *busy, uint32_t *a,
                              uint32_t *b)
{
    struct ts_members *m = mk(grace, replicas, busy);
    struct ts_member_grant g;

    *busy = false;
    *a = reg(m, "h:1", "a", 0, true, false, 0, &g);
    *b = reg(m, "h:2", "b", 600000, false, false, 0, &g);
    *busy = true;
    return m;
}

/* (a) A redo-log shard whose lease ran out is away: alive, the epoch and the ring as they
 * were; it is declared dead, with a new epoch, only once the grace has passed. */
static void an_expired_redo_shard_is_away_until_the_grace_passes(void **state)
{
    struct ts_members_view h0, h;
    struct ts_member e;
    bool busy;
    uint32_t a, b;
    struct ts_members *m = two(GRACE, 1, &busy, &a, &b);
    uint64_t epoch = ts_members_epoch(m);

    (void)state;
    shard(m, a, &h0);
    assert_int_equal(ts_members_expire(m, LEASE, NULL, NULL), 0);
    assert_int_equal(shard(m, a, NULL).away_ms, 0);           /* its lease has not run out */
    assert_int_equal(ts_members_expire(m, LEASE + 1, NULL, NULL), 0);
    e = shard(m, a, &h);
    assert_int_equal(e.state, TS_MEMBER_ALIVE);
    assert_int_equal(e.away_ms, LEASE + 1);
    assert_true(e.redo_log);
    assert_int_equal(ts_members_epoch(m), epoch);
    assert_int_equal(h.ring_digest, h0.ring_digest);
    assert_int_equal(h.shard_aways, 1);
    assert_int_equal(h.shard_failures, 0);
    assert_int_equal(h.shard_expiries, 0);
    /* held until the grace is over, then declared dead as a lease that ran out */
    for (int64_t t = LEASE + 100; t <= LEASE + 1 + GRACE; t += 100)
        assert_int_equal(ts_members_expire(m, t, NULL, NULL), 0);
    assert_int_equal(ts_members_epoch(m), epoch);
    assert_int_equal(ts_members_expire(m, LEASE + 1 + GRACE + 1, NULL, NULL), 1);
    assert_int_equal(ts_members_epoch(m), epoch + 1);
    e = shard(m, a, &h);
    assert_int_equal(e.state, TS_MEMBER_DEAD);
    assert_int_equal(e.away_ms, 0);
    assert_non_null(strstr(e.death, "restart grace"));
    assert_int_not_equal(h.ring_digest, h0.ring_digest);
    assert_int_equal(h.shard_aways, 1);
    assert_int_equal(h.shard_failures, 1);
    assert_int_equal(h.shard_expiries, 1);
    ts_members_free(m);
}

/* (b) The same instance registering with resumed within the grace is the same member: its
 * id, not joining, its registered_epoch kept, the new address taken with one new epoch (the
 * same ring); again at the same address, no new epoch; new endpoints alone, one. A caller
 * without its secret is refused and changes nothing. */
static void a_resumed_shard_is_the_same_member(void **state)
{
    struct ts_member_cred own = { .has_secret = true }, other = { .has_secret = true };
    struct ts_endpoint ep = { .transport = "tcp", .addr = { 1, 2, 3 }, .len = 3 };
    struct ts_members_view h0, h;
    struct ts_member_grant g;
    struct ts_member e;
    struct ts_err err = { 0 };
    bool busy;
    uint32_t a, b;
    struct ts_members *m = two(GRACE, 1, &busy, &a, &b);
    uint64_t registered = shard(m, a, &h0).registered_epoch, epoch;

    (void)state;
    memset(own.secret_sha256, 7, sizeof(own.secret_sha256));
    memset(other.secret_sha256, 8, sizeof(other.secret_sha256));
    /* a, registered again with a secret (a retry: nothing changes), goes away */
    assert_int_equal(ts_members_register_shard(m, "h:1", "a", 0, NULL, 0, true, false, 10, &g,
                                               &own, NULL), TS_OK);
    assert_false(g.joined);
    assert_int_equal(ts_members_expire(m, LEASE + 11, NULL, NULL), 0);
    assert_int_equal(shard(m, a, NULL).away_ms, LEASE + 11);
    epoch = ts_members_epoch(m);
    assert_int_equal(ts_members_register_shard(m, "h:9", "a", 0, NULL, 0, true, true, 2000, &g,
                                               &other, &err), TS_EPERM);
    e = shard(m, a, NULL);
    assert_string_equal(e.addr, "h:1");
    assert_int_equal(e.away_ms, LEASE + 11);
    /* the process restarted on its log, at another address */
    assert_int_equal(ts_members_register_shard(m, "h:9", "a", 0, NULL, 0, true, true, 2000, &g,
                                               &own, NULL), TS_OK);
    assert_int_equal(g.id, a);
    assert_false(g.joined);
    assert_int_equal(g.epoch, epoch + 1);
    assert_int_equal(ts_members_epoch(m), epoch + 1);
    e = shard(m, a, &h);
    assert_int_equal(e.state, TS_MEMBER_ALIVE);
    assert_string_equal(e.addr, "h:9");
    assert_int_equal(e.registered_epoch, registered);
    assert_false(e.joining);
    assert_int_equal(e.away_ms, 0);
    assert_int_equal(h.ring_digest, h0.ring_digest);
    assert_int_equal(h.shard_failures, 0);
    /* its lease runs from the registration: not away again before it runs out */
    assert_int_equal(ts_members_expire(m, 2000 + LEASE, NULL, NULL), 0);
    assert_int_equal(shard(m, a, NULL).away_ms, 0);
    /* the same address again (not away, even): the same epoch */
    assert_int_equal(ts_members_register_shard(m, "h:9", "a", 0, NULL, 0, true, true, 2500, &g,
                                               &own, NULL), TS_OK);
    assert_false(g.joined);
    assert_int_equal(ts_members_epoch(m), epoch + 1);
    assert_int_equal(shard(m, a, NULL).registered_epoch, registered);
    /* new data-plane endpoints at the same address: taken, with one new epoch */
    assert_int_equal(ts_members_register_shard(m, "h:9", "a", 0, &ep, 1, true, true, 2600, &g,
                                               &own, NULL), TS_OK);
    assert_int_equal(ts_members_epoch(m), epoch + 2);
    e = shard(m, a, NULL);
    assert_int_equal(e.nendpoints, 1);
    assert_memory_equal(e.endpoints[0].addr, ep.addr, 3);
    assert_int_equal(e.registered_epoch, registered);
    /* and without them again: one more */
    assert_int_equal(ts_members_register_shard(m, "h:9", "a", 0, NULL, 0, true, true, 2700, &g,
                                               &own, NULL), TS_OK);
    assert_int_equal(ts_members_epoch(m), epoch + 3);
    assert_int_equal(shard(m, a, NULL).nendpoints, 0);
    ts_members_free(m);
}

/* (c) Without resumed a registration is as before the grace existed: the member moved to a
 * new address rejoins (joining, a new registered_epoch); so does a resumed one declared dead.
 * A shard without a redo log, a joining one, or any with the grace off, dies at once. */
static void without_the_grace_shards_die_and_rejoin_as_before(void **state)
{
    struct ts_member_grant g;
    struct ts_member e;
    bool busy;
    uint32_t a, b, c;
    struct ts_members *m = two(GRACE, 1, &busy, &a, &b);
    uint64_t registered = shard(m, a, NULL).registered_epoch, epoch;

    (void)state;
    assert_int_equal(ts_members_expire(m, LEASE + 1, NULL, NULL), 0);
    assert_int_not_equal(shard(m, a, NULL).away_ms, 0);
    epoch = ts_members_epoch(m);
    assert_int_equal(reg(m, "h:9", "a", 0, true, false, 2000, &g), a);
    assert_true(g.joined);
    assert_int_equal(ts_members_epoch(m), epoch + 1);
    e = shard(m, a, NULL);
    assert_true(e.joining);
    assert_int_equal(e.away_ms, 0);
    assert_int_equal(e.registered_epoch, epoch + 1);
    assert_int_not_equal(e.registered_epoch, registered);
    assert_string_equal(e.addr, "h:9");
    /* a joining shard heads nothing: no place to hold, it dies with its lease */
    assert_int_equal(ts_members_expire(m, 2000 + LEASE + 1, NULL, NULL), 1);
    assert_int_equal(shard(m, a, NULL).state, TS_MEMBER_DEAD);
    /* declared dead, a resumed registration joins as any */
    epoch = ts_members_epoch(m);
    assert_int_equal(reg(m, "h:9", "a", 0, true, true, 4000, &g), a);
    assert_true(g.joined);
    e = shard(m, a, NULL);
    assert_true(e.joining);
    assert_int_equal(e.registered_epoch, epoch + 1);
    /* no redo log: dead at once */
    ts_members_free(m);
    m = mk(GRACE, 1, NULL);
    c = reg(m, "h:3", "c", 0, false, false, 0, &g);
    epoch = ts_members_epoch(m);
    assert_int_equal(ts_members_expire(m, LEASE + 1, NULL, NULL), 1);
    assert_int_equal(ts_members_epoch(m), epoch + 1);
    assert_int_equal(shard(m, c, NULL).state, TS_MEMBER_DEAD);
    ts_members_free(m);
    /* the grace off: a redo-log shard dies at once */
    m = mk(0, 1, NULL);
    a = reg(m, "h:1", "a", 0, true, false, 0, &g);
    assert_int_equal(ts_members_expire(m, LEASE + 1, NULL, NULL), 1);
    assert_int_equal(ts_members_shard_gone(m, a, NULL, "refused", LEASE + 2, NULL), TS_GONE_NOT);
    ts_members_free(m);
}

/* (d) With copies (replicas 2) a chain takes over at once: no grace, by lease or by report. */
static void with_replicas_there_is_no_grace(void **state)
{
    struct ts_member_grant g;
    bool busy;
    uint32_t a, b, c;
    struct ts_members *m = two(GRACE, 2, &busy, &a, &b);
    uint64_t epoch = ts_members_epoch(m);

    (void)state;
    assert_int_equal(ts_members_expire(m, LEASE + 1, NULL, NULL), 1);
    assert_int_equal(ts_members_epoch(m), epoch + 1);
    assert_int_equal(shard(m, a, NULL).state, TS_MEMBER_DEAD);
    busy = false;   /* c goes on the ring at once */
    c = reg(m, "h:3", "c", 0, true, false, 2000, &g);
    assert_false(shard(m, c, NULL).joining);
    assert_int_equal(ts_members_shard_gone(m, c, "c", "refused", 2100, NULL), TS_GONE_DEAD);
    assert_int_equal(shard(m, c, NULL).state, TS_MEMBER_DEAD);
    ts_members_free(m);
}

/* (e) A heartbeat while away is the same process, paused: no longer away, the epoch as it
 * was, its lease from the beat; silent again, it is away again with a grace of its own. A
 * retried registration of the same process is heard as well. */
static void a_heartbeat_while_away_brings_it_back(void **state)
{
    struct ts_members_view h;
    struct ts_member_grant g;
    bool busy;
    uint32_t a, b;
    struct ts_members *m = two(GRACE, 1, &busy, &a, &b);
    uint64_t epoch = ts_members_epoch(m);

    (void)state;
    assert_int_equal(ts_members_expire(m, LEASE + 1, NULL, NULL), 0);
    assert_int_equal(shard(m, a, NULL).away_ms, LEASE + 1);
    assert_int_equal(ts_members_heartbeat(m, TS_MEMBER_SHARD, a, epoch, 0, 2000, &g, NULL, NULL),
                     TS_OK);
    assert_false(g.map_changed);
    assert_int_equal(shard(m, a, NULL).away_ms, 0);
    assert_int_equal(ts_members_epoch(m), epoch);
    /* silent since 2000: away once its lease runs out, not at the old grace's end */
    assert_int_equal(ts_members_expire(m, 2000 + LEASE, NULL, NULL), 0);
    assert_int_equal(shard(m, a, NULL).away_ms, 0);
    assert_int_equal(ts_members_expire(m, 2000 + LEASE + 1, NULL, NULL), 0);
    assert_int_equal(shard(m, a, &h).away_ms, 2000 + LEASE + 1);
    assert_int_equal(h.shard_aways, 2);
    assert_int_equal(ts_members_expire(m, LEASE + 1 + GRACE + 1, NULL, NULL), 0);   /* old */
    assert_int_equal(ts_members_expire(m, 2000 + LEASE + 1 + GRACE, NULL, NULL), 0);
    assert_int_equal(ts_members_expire(m, 2000 + LEASE + 1 + GRACE + 1, NULL, NULL), 1);
    assert_int_equal(ts_members_epoch(m), epoch + 1);
    ts_members_free(m);
    /* a registration of the same process again (a retry, not resumed) is heard as well */
    m = two(GRACE, 1, &busy, &a, &b);
    epoch = ts_members_epoch(m);
    assert_int_equal(ts_members_expire(m, LEASE + 1, NULL, NULL), 0);
    assert_int_not_equal(shard(m, a, NULL).away_ms, 0);
    assert_int_equal(reg(m, "h:1", "a", 0, true, false, 2000, &g), a);
    assert_false(g.joined);
    assert_int_equal(shard(m, a, NULL).away_ms, 0);
    assert_int_equal(ts_members_epoch(m), epoch);
    ts_members_free(m);
}

/* (f) Reported gone (ts_members_shard_gone, as ReportUnreachable after a refused port): a
 * redo-log shard is away, with the time left; a second report does not restart the grace; the
 * reaper declares it dead when the first grace ends; a report past the grace declares it
 * dead; a report of another process start does nothing. */
static void a_report_holds_the_place_once(void **state)
{
    struct ts_member e;
    int64_t left = -1;
    bool busy;
    uint32_t a, b;
    struct ts_members *m = two(GRACE, 1, &busy, &a, &b);
    uint64_t epoch = ts_members_epoch(m);

    (void)state;
    assert_int_equal(ts_members_shard_gone(m, a, "another", "refused", 500, &left),
                     TS_GONE_NOT);
    assert_int_equal(shard(m, a, NULL).away_ms, 0);
    assert_int_equal(ts_members_shard_gone(m, a, "a", "refused", 500, &left), TS_GONE_AWAY);
    assert_int_equal(left, GRACE);
    assert_int_equal(ts_members_shard_gone(m, a, "a", "refused", 2500, &left), TS_GONE_AWAY);
    assert_int_equal(left, GRACE - 2000);
    e = shard(m, a, NULL);
    assert_int_equal(e.state, TS_MEMBER_ALIVE);
    assert_int_equal(e.away_ms, 500);
    assert_int_equal(ts_members_epoch(m), epoch);
    /* its lease ran out at 1001 meanwhile: the grace, not the lease, decides */
    for (int64_t t = 1000; t <= 500 + GRACE; t += 250)
        assert_int_equal(ts_members_expire(m, t, NULL, NULL), 0);
    assert_int_equal(ts_members_expire(m, 500 + GRACE + 1, NULL, NULL), 1);
    assert_int_equal(ts_members_epoch(m), epoch + 1);
    assert_int_equal(ts_members_shard_gone(m, a, "a", "refused", 500 + GRACE + 2, NULL),
                     TS_GONE_NOT);
    ts_members_free(m);
    /* reported again past the grace, before the reaper ran: dead, saying so */
    m = two(GRACE, 1, &busy, &a, &b);
    epoch = ts_members_epoch(m);
    assert_int_equal(ts_members_shard_gone(m, a, NULL, "refused", 100, NULL), TS_GONE_AWAY);
    assert_int_equal(ts_members_shard_gone(m, a, NULL, "refused", 100 + GRACE + 1, NULL),
                     TS_GONE_DEAD);
    assert_int_equal(ts_members_epoch(m), epoch + 1);
    e = shard(m, a, NULL);
    assert_int_equal(e.state, TS_MEMBER_DEAD);
    assert_non_null(strstr(e.death, "restart grace"));
    /* b keeps no redo log: a report declares it dead at once */
    assert_int_equal(ts_members_shard_gone(m, b, "b", "refused", 6000, NULL), TS_GONE_DEAD);
    ts_members_free(m);
}

/* A restarted master keeps redo_log with its members but not away: its leases decide. */
static void a_restore_keeps_the_redo_log_not_the_absence(void **state)
{
    struct ts_members_view v;
    struct ts_members_clock c = { 0 };
    struct ts_members *r;
    bool busy;
    uint32_t a, b;
    struct ts_members *m = two(GRACE, 1, &busy, &a, &b);

    (void)state;
    assert_int_equal(ts_members_expire(m, LEASE + 1, NULL, NULL), 0);
    assert_int_equal(ts_members_view(m, false, &v, NULL), TS_OK);
    r = mk(GRACE, 1, NULL);
    assert_int_equal(ts_members_restore(r, &v, &c, 10000, 0, NULL), TS_OK);
    ts_members_view_free(&v);
    assert_true(shard(r, a, NULL).redo_log);
    assert_int_equal(shard(r, a, NULL).away_ms, 0);
    assert_false(shard(r, b, NULL).redo_log);
    assert_int_equal(ts_members_expire(r, 10000 + LEASE + 1, NULL, NULL), 0);
    assert_int_equal(shard(r, a, NULL).away_ms, 10000 + LEASE + 1);
    ts_members_free(r);
    ts_members_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(an_expired_redo_shard_is_away_until_the_grace_passes),
        cmocka_unit_test(a_resumed_shard_is_the_same_member),
        cmocka_unit_test(without_the_grace_shards_die_and_rejoin_as_before),
        cmocka_unit_test(with_replicas_there_is_no_grace),
        cmocka_unit_test(a_heartbeat_while_away_brings_it_back),
        cmocka_unit_test(a_report_holds_the_place_once),
        cmocka_unit_test(a_restore_keeps_the_redo_log_not_the_absence),
    };
    ts_log_set_level(TS_ERROR);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
