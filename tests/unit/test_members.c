/* test_members.c - the master's membership table with a clock the test controls. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>

#include "master/members.h"
#include "util/log.h"

static struct ts_members *mk(uint32_t lease)
{
    struct ts_members_cfg cfg = { .default_lease_ms = lease };
    struct ts_members *m;
    assert_int_equal(ts_members_create(&cfg, &m, NULL), TS_OK);
    return m;
}

static uint32_t add_shard(struct ts_members *m, const char *addr, const char *inst, int64_t now)
{
    struct ts_member_grant g;
    assert_int_equal(ts_members_register_shard(m, addr, inst, 0, NULL, 0, false, false, now, &g,
                                               NULL, NULL), TS_OK);
    return g.id;
}

/* A master paused past the leases (cfg.pause_ms): nobody is declared dead when it resumes;
 * each member gets a lease from then, and one still silent after it is declared dead. */
static void a_paused_master_pardons_the_silence(void **state)
{
    struct ts_members_cfg cfg = { .default_lease_ms = 1000, .pause_ms = 500 };
    struct ts_members *m;
    struct ts_member_grant g;
    uint32_t a, b, w;
    uint64_t epoch;

    assert_int_equal(ts_members_create(&cfg, &m, NULL), TS_OK);
    a = add_shard(m, "h:1", "a", 0);
    b = add_shard(m, "h:2", "b", 0);
    assert_int_equal(ts_members_register_worker(m, "h", 1, "", NULL, "w", 0, 0, &g, NULL, NULL),
                     TS_OK);
    w = g.id;
    epoch = ts_members_epoch(m);
    for (int64_t t = 100; t <= 900; t += 100)   /* the reaper, running */
        assert_int_equal(ts_members_expire(m, t, NULL, NULL), 0);
    /* paused from 900 to 7000: everyone's silence is the master's own */
    assert_int_equal(ts_members_expire(m, 7000, NULL, NULL), 0);
    assert_int_equal(ts_members_epoch(m), epoch);
    /* a and the worker are heard within the grace; b is not */
    assert_int_equal(ts_members_heartbeat(m, TS_MEMBER_SHARD, a, epoch, 0, 7100, &g, NULL,
                                          NULL), TS_OK);
    assert_int_equal(ts_members_heartbeat(m, TS_MEMBER_WORKER, w, epoch, 0, 7200, &g, NULL,
                                          NULL), TS_OK);
    for (int64_t t = 7100; t < 8000; t += 100)   /* the grace ends at 7000 + the lease */
        assert_int_equal(ts_members_expire(m, t, NULL, NULL), 0);
    assert_int_equal(ts_members_expire(m, 8000, NULL, NULL), 1);   /* b: past its grace */
    assert_int_equal(ts_members_epoch(m), epoch + 1);
    assert_int_equal(ts_members_heartbeat(m, TS_MEMBER_SHARD, b, epoch, 0, 8150, &g, NULL,
                                          NULL), TS_ESTATE);
    /* without pause_ms the same gap is silence: both shards and the worker die at once */
    ts_members_free(m);
    m = mk(1000);
    add_shard(m, "h:1", "a", 0);
    add_shard(m, "h:2", "b", 0);
    assert_int_equal(ts_members_register_worker(m, "h", 1, "", NULL, "w", 0, 0, &g, NULL, NULL),
                     TS_OK);
    assert_int_equal(ts_members_expire(m, 900, NULL, NULL), 0);
    assert_int_equal(ts_members_expire(m, 7000, NULL, NULL), 3);
    ts_members_free(m);
}

/* A master cut off from everyone (cfg.deaf_max_ms): the master, running, hears no member for
 * longer than the leases; it declares none dead, and once one is heard again the others get a
 * lease of grace. Past deaf_max_ms, or with one member alive, leases decide as before. */
static void a_master_that_hears_no_one_suspects_itself(void **state)
{
    struct ts_members_cfg cfg = { .default_lease_ms = 1000, .deaf_max_ms = 10000 };
    struct ts_members *m;
    struct ts_member_grant g;
    uint32_t a, b, w;
    uint64_t epoch;

    (void)state;
    assert_int_equal(ts_members_create(&cfg, &m, NULL), TS_OK);
    a = add_shard(m, "h:1", "a", 0);
    b = add_shard(m, "h:2", "b", 0);
    assert_int_equal(ts_members_register_worker(m, "h", 1, "", NULL, "w", 0, 0, &g, NULL, NULL),
                     TS_OK);
    w = g.id;
    epoch = ts_members_epoch(m);
    /* cut from 0 to 6000, the reaper running all along: no verdict */
    for (int64_t t = 100; t <= 6000; t += 100)
        assert_int_equal(ts_members_expire(m, t, NULL, NULL), 0);
    assert_int_equal(ts_members_epoch(m), epoch);
    /* healed: a is heard at 6050; the worker within its grace, b never */
    assert_int_equal(ts_members_heartbeat(m, TS_MEMBER_SHARD, a, epoch, 0, 6050, &g, NULL,
                                          NULL), TS_OK);
    assert_int_equal(ts_members_expire(m, 6100, NULL, NULL), 0);   /* the grace: to 7100 */
    assert_int_equal(ts_members_heartbeat(m, TS_MEMBER_WORKER, w, epoch, 0, 6500, &g, NULL,
                                          NULL), TS_OK);
    assert_int_equal(ts_members_heartbeat(m, TS_MEMBER_SHARD, a, epoch, 0, 6900, &g, NULL,
                                          NULL), TS_OK);
    assert_int_equal(ts_members_expire(m, 7000, NULL, NULL), 0);
    assert_int_equal(ts_members_expire(m, 7200, NULL, NULL), 1);   /* b */
    assert_int_equal(ts_members_heartbeat(m, TS_MEMBER_SHARD, b, epoch, 0, 7250, &g, NULL,
                                          NULL), TS_ESTATE);
    ts_members_free(m);
    /* heard by no one for longer than deaf_max_ms: they are dead after all */
    assert_int_equal(ts_members_create(&cfg, &m, NULL), TS_OK);
    add_shard(m, "h:1", "a", 0);
    add_shard(m, "h:2", "b", 0);
    assert_int_equal(ts_members_expire(m, 9000, NULL, NULL), 0);
    assert_int_equal(ts_members_expire(m, 10001, NULL, NULL), 2);
    ts_members_free(m);
    /* one member alive: its silence is its own */
    assert_int_equal(ts_members_create(&cfg, &m, NULL), TS_OK);
    add_shard(m, "h:1", "a", 0);
    assert_int_equal(ts_members_expire(m, 1001, NULL, NULL), 1);
    ts_members_free(m);
}

static void assert_einval(ts_status st, const struct ts_err *e, const char *field)
{
    assert_int_equal(st, TS_EINVAL);
    assert_true(strncmp(e->msg, field, strlen(field)) == 0);
}

static void register_validates_each_field(void **state)
{
    struct ts_members *m = mk(3000);
    struct ts_member_grant g;
    char big[400];
    struct {
        const char *addr, *inst;
        uint32_t lease;
        const char *field;
    } bad[] = {
        { "", "a", 0, "addr" },          { big, "a", 0, "addr" },
        { "no-port", "a", 0, "addr" },   { "h:0", "a", 0, "addr" },
        { "h:70000", "a", 0, "addr" },   { "h :1", "a", 0, "addr" },
        { ":1", "a", 0, "addr" },        { "h:1", "", 0, "instance" },
        { "h:1", "a b", 0, "instance" }, { "h:1", big, 0, "instance" },
        { "h:1", "a", 99, "lease_ms" },  { "h:1", "a", 600001, "lease_ms" },
    };

    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct ts_err e = { 0 };
        assert_einval(ts_members_register_shard(m, bad[i].addr, bad[i].inst, bad[i].lease, NULL,
                                                0, false, false, 0, &g, NULL, &e), &e,
                      bad[i].field);
    }
    struct ts_err e = { 0 };
    assert_einval(ts_members_register_worker(m, "", 1, "", NULL, "w", 0, 0, &g, NULL, &e), &e,
                  "host");
    e = (struct ts_err){ 0 };
    assert_einval(ts_members_register_worker(m, "h", 1, "judge", NULL, "w", 0, 0, &g, NULL, &e), &e,
                  "role");
    e = (struct ts_err){ 0 };
    assert_einval(
        ts_members_register_worker(m, "h", 1, "verify", "nohost", "w", 0, 0, &g, NULL, &e), &e,
        "addr");
    assert_int_equal(ts_members_epoch(m), 1); /* nothing changed */
    struct ts_members_view v;
    assert_int_equal(ts_members_view(m, false, &v, NULL), TS_OK);
    assert_int_equal(v.nshards + v.nworkers, 0);
    ts_members_view_free(&v);
    ts_members_free(m);
}

static void register_is_idempotent_per_instance(void **state)
{
    struct ts_members *m = mk(3000);
    struct ts_member_grant g;
    uint32_t a = add_shard(m, "127.0.0.1:7101", "i1", 0);
    uint64_t epoch = ts_members_epoch(m);

    assert_int_equal(
        ts_members_register_shard(m, "127.0.0.1:7101", "i1", 0, NULL, 0, false, false, 10, &g,
                                  NULL, NULL), TS_OK);
    assert_int_equal(g.id, a);
    assert_int_equal(ts_members_epoch(m), epoch);
    assert_int_equal(add_shard(m, "127.0.0.1:7102", "i2", 20), a + 1);
    assert_int_equal(ts_members_epoch(m), epoch + 1);
    ts_members_free(m);
}

static void lease_expiry_marks_dead_and_moves_epoch(void **state)
{
    struct ts_members *m = mk(1000);
    struct ts_member_grant g;
    struct ts_err e = { 0 };
    uint32_t a = add_shard(m, "h:1", "a", 0), b = add_shard(m, "h:2", "b", 0);
    uint64_t epoch = ts_members_epoch(m);

    assert_int_equal(ts_members_heartbeat(m, TS_MEMBER_SHARD, b, epoch, 0, 900, &g, NULL, NULL),
                     TS_OK);
    assert_false(g.map_changed);
    /* exactly at the lease: still alive */
    assert_int_equal(ts_members_expire(m, 1000, NULL, NULL), 0);
    assert_int_equal(ts_members_expire(m, 1001, NULL, NULL), 1); /* a is silent past it */
    assert_int_equal(ts_members_epoch(m), epoch + 1);
    assert_int_equal(ts_members_heartbeat(m, TS_MEMBER_SHARD, a, 0, 0, 1002, &g, NULL, &e),
                     TS_ESTATE);
    assert_non_null(strstr(e.msg, "register again"));
    assert_int_equal(ts_members_heartbeat(m, TS_MEMBER_SHARD, b, epoch, 0, 1002, &g, NULL, NULL),
                     TS_OK);
    assert_true(g.map_changed);

    struct ts_members_view v;
    assert_int_equal(ts_members_view(m, true, &v, NULL), TS_OK);
    assert_int_equal(v.nshards, 1);
    assert_int_equal(v.shards[0].id, b);
    assert_int_equal(v.shard_expiries, 1);   /* tessera_lease_expiries_total{kind="shard"} */
    assert_int_equal(v.worker_expiries, 0);
    ts_members_view_free(&v);

    /* The dead member comes back with the same instance: same id, alive, new epoch. */
    assert_int_equal(ts_members_register_shard(m, "h:1", "a", 0, NULL, 0, false, false, 1100, &g,
                                               NULL, NULL), TS_OK);
    assert_int_equal(g.id, a);
    assert_int_equal(g.epoch, epoch + 2);
    ts_members_free(m);
}

/* A shard reported unreachable and checked: declared dead at once, for that process start
 * only, with the reason kept for status; the same instance registering again is alive. */
static void declared_dead_on_report(void **state)
{
    struct ts_members *m = mk(1000);
    struct ts_member_grant g;
    struct ts_err e = { 0 };
    char addr[TS_MEMBERS_MAX_ADDR + 1], inst[TS_MEMBERS_MAX_INSTANCE + 1];
    bool alive = false;
    uint32_t a = add_shard(m, "h:1", "a", 0);
    uint64_t epoch = ts_members_epoch(m);
    struct ts_members_view v;

    (void)state;
    assert_int_equal(ts_members_shard_addr(m, 0, addr, inst, &alive, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "shard_id"));
    assert_int_equal(ts_members_shard_addr(m, a + 7, addr, inst, &alive, &e), TS_ENOTFOUND);
    assert_int_equal(ts_members_shard_addr(m, a, addr, inst, &alive, NULL), TS_OK);
    assert_true(alive);
    assert_string_equal(addr, "h:1");
    assert_string_equal(inst, "a");
    assert_false(ts_members_declare_dead(m, TS_MEMBER_SHARD, a, "another-start", "refused"));
    assert_int_equal(ts_members_epoch(m), epoch);
    assert_true(ts_members_declare_dead(m, TS_MEMBER_SHARD, a, "a",
                                        "reported unreachable, and refused"));
    assert_false(ts_members_declare_dead(m, TS_MEMBER_SHARD, a, "a", "again"));   /* once */
    assert_int_equal(ts_members_epoch(m), epoch + 1);
    assert_int_equal(ts_members_shard_addr(m, a, addr, inst, &alive, NULL), TS_OK);
    assert_false(alive);
    assert_int_equal(ts_members_view(m, false, &v, NULL), TS_OK);
    assert_int_equal(v.shard_failures, 1);
    assert_int_equal(v.shards[0].state, TS_MEMBER_DEAD);
    assert_string_equal(v.shards[0].death, "reported unreachable, and refused");
    ts_members_view_free(&v);
    memset(&e, 0, sizeof(e));
    assert_int_equal(ts_members_heartbeat(m, TS_MEMBER_SHARD, a, 0, 0, 10, &g, NULL, &e),
                     TS_ESTATE);
    assert_non_null(strstr(e.msg, "reported unreachable"));
    assert_int_equal(add_shard(m, "h:1", "a", 20), a);   /* back: alive, no death */
    assert_int_equal(ts_members_view(m, false, &v, NULL), TS_OK);
    assert_int_equal(v.shards[0].state, TS_MEMBER_ALIVE);
    assert_string_equal(v.shards[0].death, "");
    ts_members_view_free(&v);
    ts_members_free(m);
}

static void heartbeat_errors(void **state)
{
    struct ts_members *m = mk(3000);
    struct ts_member_grant g;
    struct ts_err e = { 0 };

    add_shard(m, "h:1", "a", 0);
    assert_einval(ts_members_heartbeat(m, 0, 1, 0, 0, 1, &g, NULL, &e), &e, "kind");
    ts_err_clear(&e);
    assert_einval(ts_members_heartbeat(m, TS_MEMBER_SHARD, 0, 0, 0, 1, &g, NULL, &e), &e, "id");
    ts_err_clear(&e);
    assert_einval(ts_members_heartbeat(m, TS_MEMBER_SHARD, 1, 99, 0, 1, &g, NULL, &e), &e,
                  "known_epoch");
    ts_err_clear(&e);
    assert_int_equal(ts_members_heartbeat(m, TS_MEMBER_SHARD, 7, 0, 0, 1, &g, NULL, &e),
                     TS_ENOTFOUND);
    ts_err_clear(&e);
    assert_int_equal(ts_members_heartbeat(m, TS_MEMBER_WORKER, 1, 0, 0, 1, &g, NULL, &e),
                     TS_ENOTFOUND);
    ts_members_free(m);
}

/* A worker declared dead (its lease ran out while it finished) still leaves with its outcome:
 * the master takes the Deregister of its own registration, with no new epoch; a stranger's
 * credential is refused, and a second Deregister finds it gone. */
static void a_member_declared_dead_may_still_leave(void **state)
{
    struct ts_members *m = mk(1000);
    struct ts_member_cred own = { .secret_sha256 = { 1 }, .has_secret = true };
    struct ts_member_cred other = { .secret_sha256 = { 2 }, .has_secret = true };
    struct ts_member_grant g;
    struct ts_members_view v;
    struct ts_err e = { 0 };
    uint64_t epoch, before;

    (void)state;
    add_shard(m, "h:1", "a", 0);
    assert_int_equal(ts_members_register_worker(m, "h", 1, "", NULL, "w", 0, 0, &g, &own, NULL),
                     TS_OK);
    assert_int_equal(ts_members_expire(m, 5000, NULL, NULL), 2);
    before = ts_members_epoch(m);
    assert_int_equal(ts_members_deregister(m, TS_MEMBER_WORKER, g.id, "done", &epoch, &other,
                                           &e), TS_EPERM);
    assert_int_equal(ts_members_deregister(m, TS_MEMBER_WORKER, g.id, "done", &epoch, &own,
                                           NULL), TS_OK);
    assert_int_equal(epoch, before);
    assert_int_equal(ts_members_epoch(m), before);
    assert_int_equal(ts_members_view(m, false, &v, NULL), TS_OK);
    assert_int_equal(v.workers[0].state, TS_MEMBER_LEFT);
    ts_members_view_free(&v);
    ts_err_clear(&e);
    assert_int_equal(ts_members_deregister(m, TS_MEMBER_WORKER, g.id, "", &epoch, &own, &e),
                     TS_ESTATE);
    ts_members_free(m);
}

static void deregister_and_replacement(void **state)
{
    struct ts_members *m = mk(3000);
    struct ts_member_grant g;
    struct ts_err e = { 0 };
    char reason[300];
    uint64_t epoch;
    uint32_t a = add_shard(m, "h:1", "a", 0);

    memset(reason, 'r', sizeof(reason) - 1);
    reason[sizeof(reason) - 1] = '\0';
    assert_einval(ts_members_deregister(m, TS_MEMBER_SHARD, a, reason, &epoch, NULL, &e), &e,
                  "reason");
    assert_int_equal(ts_members_deregister(m, TS_MEMBER_SHARD, a, "bye", &epoch, NULL, NULL),
                     TS_OK);
    assert_int_equal(epoch, 3);
    ts_err_clear(&e);
    assert_int_equal(ts_members_deregister(m, TS_MEMBER_SHARD, a, "", &epoch, NULL, &e), TS_ESTATE);

    /* A new process at the address of an alive shard: the old one is gone. */
    uint32_t b = add_shard(m, "h:2", "b", 0);
    uint32_t c = add_shard(m, "h:2", "c", 5);
    struct ts_members_view v;
    assert_int_equal(ts_members_view(m, false, &v, NULL), TS_OK);
    assert_int_equal(v.nshards, 3);
    assert_int_equal(v.shards[b - 1].state, TS_MEMBER_DEAD);
    assert_int_equal(v.shards[c - 1].state, TS_MEMBER_ALIVE);
    assert_int_equal(v.shards[a - 1].state, TS_MEMBER_LEFT);
    ts_members_view_free(&v);

    /* Workers do not move the shard map epoch. */
    epoch = ts_members_epoch(m);
    assert_int_equal(
        ts_members_register_worker(m, "host", 42, "", NULL, "w1", 0, 0, &g, NULL, NULL), TS_OK);
    assert_int_equal(ts_members_heartbeat(m, TS_MEMBER_WORKER, g.id, 0, 17, 1, &g, NULL, NULL),
                     TS_OK);
    assert_int_equal(ts_members_expire(m, 4000, NULL, NULL), 2); /* the worker and shard c */
    assert_int_equal(ts_members_view(m, false, &v, NULL), TS_OK);
    assert_int_equal(v.workers[0].clock, 17);
    assert_int_equal(v.workers[0].state, TS_MEMBER_DEAD);
    assert_int_equal(v.worker_expiries, 1);
    assert_int_equal(v.shard_expiries, 1);   /* c; b was replaced, a left: no lease ran out */
    ts_members_view_free(&v);
    assert_int_equal(ts_members_epoch(m), epoch + 1);
    ts_members_free(m);
}

/* A worker that asked for a long lease is held to the default one until its first heartbeat
 * (issue 41: a registration alone kept its job's slot for its lease); once heard, it has the
 * lease it asked for. Shards keep theirs. Registering again starts the count afresh. */
static void first_heartbeat_within_the_default_lease(void **state)
{
    struct ts_members *m = mk(1000);
    struct ts_member_grant g;
    struct ts_members_view v;
    uint32_t quiet, beats, shard;

    (void)state;
    assert_int_equal(ts_members_register_worker(m, "h", 1, "", NULL, "quiet", 600000, 0, &g,
                                                NULL, NULL), TS_OK);
    quiet = g.id;
    assert_int_equal(g.lease_ms, 600000);
    assert_int_equal(ts_members_register_worker(m, "h", 2, "", NULL, "beats", 600000, 0, &g,
                                                NULL, NULL), TS_OK);
    beats = g.id;
    assert_int_equal(ts_members_register_shard(m, "h:1", "s", 600000, NULL, 0, false, false, 0,
                                               &g, NULL, NULL), TS_OK);
    shard = g.id;
    assert_int_equal(ts_members_heartbeat(m, TS_MEMBER_WORKER, beats, 0, 0, 500, &g, NULL, NULL),
                     TS_OK);
    assert_int_equal(ts_members_expire(m, 1000, NULL, NULL), 0);
    assert_int_equal(ts_members_expire(m, 1001, NULL, NULL), 1);   /* quiet, at the default */
    assert_int_equal(ts_members_expire(m, 500000, NULL, NULL), 0); /* beats and the shard: theirs */
    assert_int_equal(ts_members_view(m, false, &v, NULL), TS_OK);
    assert_int_equal(v.workers[quiet - 1].state, TS_MEMBER_DEAD);
    assert_non_null(strstr(v.workers[quiet - 1].death, "no heartbeat within 1000 ms"));
    assert_int_equal(v.workers[beats - 1].state, TS_MEMBER_ALIVE);
    assert_int_equal(v.shards[shard - 1].state, TS_MEMBER_ALIVE);
    ts_members_view_free(&v);
    /* Back with the same instance: not heard again until it beats. */
    assert_int_equal(ts_members_register_worker(m, "h", 1, "", NULL, "quiet", 600000, 500000, &g,
                                                NULL, NULL), TS_OK);
    assert_int_equal(g.id, quiet);
    assert_int_equal(ts_members_expire(m, 501000, NULL, NULL), 0);
    assert_int_equal(ts_members_expire(m, 501001, NULL, NULL), 1);
    ts_members_free(m);
}

/* Many registrations: each instance found again through the index as the table grows. */
static void many_workers_keep_their_ids(void **state)
{
    struct ts_members *m = mk(3000);
    struct ts_member_grant g;
    char inst[32];

    for (uint32_t i = 1; i <= 20000; i++) {
        snprintf(inst, sizeof(inst), "w%u", i);
        assert_int_equal(
            ts_members_register_worker(m, "h", i, "", NULL, inst, 0, 0, &g, NULL, NULL), TS_OK);
        assert_int_equal(g.id, i);
    }
    for (uint32_t i = 1; i <= 20000; i += 7) {
        snprintf(inst, sizeof(inst), "w%u", i);
        assert_int_equal(
            ts_members_register_worker(m, "h", i, "", NULL, inst, 0, 1, &g, NULL, NULL), TS_OK);
        assert_int_equal(g.id, i);
    }
    ts_members_free(m);
}

static void create_validates_lease(void **state)
{
    struct ts_members_cfg cfg = { .default_lease_ms = 50 };
    struct ts_members *m = NULL;
    struct ts_err e = { 0 };

    assert_int_equal(ts_members_create(&cfg, &m, &e), TS_EINVAL);
    assert_null(m);
}

/* A master that serves jobs for months: departed workers beyond TS_MEMBERS_KEEP_DEPARTED are
 * forgotten, oldest first, while the living keep their ids, heartbeats and instances. */
static void departed_workers_are_forgotten(void **state)
{
    struct ts_members *m = mk(3000);
    struct ts_member_grant g, again;
    struct ts_members_view v;
    uint32_t first = 0, keeper;
    uint64_t epoch;
    char inst[32];
    struct ts_err e = { 0 };

    (void)state;
    assert_int_equal(
        ts_members_register_worker(m, "h", 1, "", NULL, "keeper", 0, 0, &g, NULL, NULL), TS_OK);
    keeper = g.id;
    for (int i = 0; i < 3000; i++) {
        snprintf(inst, sizeof(inst), "w%d", i);
        assert_int_equal(
            ts_members_register_worker(m, "h", 1, "", NULL, inst, 0, 0, &g, NULL, NULL), TS_OK);
        if (i == 0)
            first = g.id;
        assert_int_equal(
            ts_members_deregister(m, TS_MEMBER_WORKER, g.id, "done", &epoch, NULL, NULL), TS_OK);
    }
    assert_int_equal(ts_members_view(m, false, &v, NULL), TS_OK);
    assert_true(v.nworkers <= TS_MEMBERS_KEEP_DEPARTED + 1);
    assert_true(v.nworkers > TS_MEMBERS_KEEP_DEPARTED / 2);
    for (size_t i = 1; i < v.nworkers; i++)
        assert_true(v.workers[i].id > v.workers[i - 1].id);
    ts_members_view_free(&v);
    assert_int_equal(ts_members_heartbeat(m, TS_MEMBER_WORKER, keeper, 0, 0, 10, &g, NULL, NULL),
                     TS_OK);
    assert_int_equal(ts_members_heartbeat(m, TS_MEMBER_WORKER, first, 0, 0, 10, &g, NULL, &e),
                     TS_ENOTFOUND);
    /* The living instance registering again gets its id back; a new one gets a new id. */
    assert_int_equal(ts_members_register_worker(m, "h", 1, "", NULL, "keeper", 0, 20, &again, NULL,
                                                NULL), TS_OK);
    assert_int_equal(again.id, keeper);
    assert_int_equal(ts_members_register_worker(m, "h", 1, "", NULL, "new", 0, 20, &again, NULL,
                                                NULL), TS_OK);
    assert_int_equal(again.id, first + 3000);
    ts_members_free(m);
}

/* A job of 10,000 workers that all leave: the table gives their room back, down to the
 * departed it keeps, instead of holding it for the master's life (it held 31 MB). The heap is
 * read with mallinfo2, which the sanitizers' allocator does not fill: there the figure is 0
 * and only the rest is checked. */
static size_t heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();

    return mi.uordblks + mi.hblkhd;
}

static void departed_workers_hold_bounded_memory(void **state)
{
    enum { N = 10000 };
    struct ts_members *m = mk(3000);
    static uint32_t ids[N];
    struct ts_member_grant g;
    struct ts_members_view v;
    size_t before, peak, after;
    uint64_t epoch;
    char inst[32];

    (void)state;
    before = heap_in_use();
    for (int i = 0; i < N; i++) {
        snprintf(inst, sizeof(inst), "w%d", i);
        assert_int_equal(
            ts_members_register_worker(m, "h", 1, "", NULL, inst, 0, 0, &g, NULL, NULL), TS_OK);
        ids[i] = g.id;
    }
    peak = heap_in_use();
    for (int i = 0; i < N; i++)
        assert_int_equal(
            ts_members_deregister(m, TS_MEMBER_WORKER, ids[i], "done", &epoch, NULL, NULL),
            TS_OK);
    after = heap_in_use();
    assert_int_equal(ts_members_view(m, false, &v, NULL), TS_OK);
    assert_true(v.nworkers <= TS_MEMBERS_KEEP_DEPARTED);
    ts_members_view_free(&v);
    print_message("heap in use: %zu KiB before, %zu with %d workers, %zu after they left\n",
                  before / 1024, peak / 1024, N, after / 1024);
    /* What is kept: at most TS_MEMBERS_KEEP_DEPARTED members, in a table under 4 times that. */
    assert_true(after <= before + 4 * TS_MEMBERS_KEEP_DEPARTED * sizeof(struct ts_member) +
                              (256 << 10));
    ts_members_free(m);
}

static bool is_quiet(void *ctx)
{
    return *(bool *)ctx;
}

/* With jobs resident, a shard joins: off the ring until every alive shard reports no moves
 * left under the current epoch; then one epoch puts it on. Quiet, it goes on at once. */
static void joining_shard_goes_on_the_ring_once_moves_are_done(void **state)
{
    bool quiet = true;
    struct ts_members_cfg cfg = { .default_lease_ms = 3000, .quiet = is_quiet,
                                  .quiet_ctx = &quiet };
    struct ts_members *m;
    struct ts_members_view v;
    uint32_t a, b, c;
    uint64_t e0, digest;

    (void)state;
    assert_int_equal(ts_members_create(&cfg, &m, NULL), TS_OK);
    a = add_shard(m, "h:1", "a", 0);         /* no job resident: on the ring at once */
    quiet = false;   /* a job: now shards join */
    b = add_shard(m, "h:2", "b", 0);
    e0 = ts_members_epoch(m);
    assert_int_equal(ts_members_view(m, true, &v, NULL), TS_OK);
    assert_int_equal(v.nshards, 2);
    assert_false(v.shards[0].joining);
    assert_true(v.shards[1].joining);
    digest = v.ring_digest;
    ts_members_view_free(&v);
    ts_members_moves(m, a, e0, 3);           /* copies still to send */
    ts_members_moves(m, b, e0, 0);
    assert_int_equal(ts_members_epoch(m), e0);
    ts_members_moves(m, a, e0 - 1, 0);       /* counted under an older map: not enough */
    assert_int_equal(ts_members_epoch(m), e0);
    c = add_shard(m, "h:3", "c", 0);         /* a new epoch: every report must come again */
    ts_members_moves(m, a, e0, 0);
    assert_int_equal(ts_members_epoch(m), e0 + 1);
    ts_members_moves(m, a, e0 + 1, 0);
    ts_members_moves(m, b, e0 + 1, 0);
    assert_int_equal(ts_members_epoch(m), e0 + 1);
    ts_members_moves(m, c, e0 + 1, 0);       /* the last one: both go on the ring */
    assert_int_equal(ts_members_epoch(m), e0 + 2);
    assert_int_equal(ts_members_view(m, true, &v, NULL), TS_OK);
    for (size_t i = 0; i < v.nshards; i++)
        assert_false(v.shards[i].joining);
    assert_true(v.ring_digest != digest);
    ts_members_view_free(&v);
    ts_members_moves(m, a, e0 + 2, 0);       /* nothing joins: no new epoch */
    assert_int_equal(ts_members_epoch(m), e0 + 2);
    /* The only shard on the ring dies: the joining one goes on at once. */
    quiet = false;
    assert_true(ts_members_declare_dead(m, TS_MEMBER_SHARD, a, "a", "gone"));
    assert_true(ts_members_declare_dead(m, TS_MEMBER_SHARD, b, "b", "gone"));
    uint32_t d = add_shard(m, "h:4", "d", 0);
    assert_int_equal(ts_members_view(m, true, &v, NULL), TS_OK);
    for (size_t i = 0; i < v.nshards; i++)
        assert_true(v.shards[i].id != d || v.shards[i].joining);
    ts_members_view_free(&v);
    assert_true(ts_members_declare_dead(m, TS_MEMBER_SHARD, c, "c", "gone"));
    assert_int_equal(ts_members_view(m, true, &v, NULL), TS_OK);
    assert_int_equal(v.nshards, 1);
    assert_false(v.shards[0].joining);
    ts_members_view_free(&v);
    ts_members_free(m);
}

/* A join gate (ts_members_cfg.join_ready): says yes once *open, and notes the epochs asked. */
struct gate {
    bool open;
    uint64_t asked;
    int calls;
};

static bool gate_ready(void *ctx, uint64_t epoch)
{
    struct gate *g = ctx;

    g->asked = epoch;
    g->calls++;
    return g->open;
}

/* The moves are done, but the join gate (the master's snapshots of jobs with tables) says
 * not yet: the shard stays off the ring, asked again at each report, until it says yes. */
static void join_waits_for_its_gate(void **state)
{
    bool quiet = true;
    struct gate g = { 0 };
    struct ts_members_cfg cfg = { .default_lease_ms = 3000, .quiet = is_quiet,
                                  .quiet_ctx = &quiet, .join_ready = gate_ready,
                                  .join_ready_ctx = &g };
    struct ts_members *m;
    struct ts_members_view v;
    uint32_t a, b;
    uint64_t e0;

    (void)state;
    assert_int_equal(ts_members_create(&cfg, &m, NULL), TS_OK);
    a = add_shard(m, "h:1", "a", 0);
    quiet = false;
    b = add_shard(m, "h:2", "b", 0);
    e0 = ts_members_epoch(m);
    ts_members_moves(m, a, e0, 2);           /* copies to send: the gate is not asked */
    assert_int_equal(g.calls, 0);
    ts_members_moves(m, a, e0, 0);
    ts_members_moves(m, b, e0, 0);
    assert_int_equal(ts_members_epoch(m), e0);
    assert_true(g.calls >= 1);
    assert_int_equal(g.asked, e0);           /* the joining epoch */
    ts_members_moves(m, a, e0, 0);           /* still shut */
    assert_int_equal(ts_members_epoch(m), e0);
    g.open = true;
    ts_members_moves(m, a, e0, 0);
    assert_int_equal(ts_members_epoch(m), e0 + 1);
    assert_int_equal(ts_members_view(m, true, &v, NULL), TS_OK);
    for (size_t i = 0; i < v.nshards; i++)
        assert_false(v.shards[i].joining);
    ts_members_view_free(&v);
    ts_members_free(m);
}

/* What a durable hook was last told, and whether it fails. */
struct durable_log {
    struct ts_members_clock last;
    int calls;
    bool fail;
};

static ts_status note_durable(void *ctx, const struct ts_members_clock *c, struct ts_err *err)
{
    struct durable_log *d = ctx;

    if (d->fail)
        return ts_err_set(err, TS_EIO, "disk full");
    d->last = *c;
    d->calls++;
    return TS_OK;
}

/* The epoch and the ids are made durable before anyone is told them; a table restored from a
 * view and a clock goes on after both, never reusing an id or an epoch; restored members get a
 * fresh lease from the restore's time; a bad view is refused with the table left empty. */
static void restore_goes_on_after_the_durable_clock(void **state)
{
    struct durable_log d = { 0 };
    struct ts_members_cfg cfg = { .default_lease_ms = 1000, .durable = note_durable,
                                  .durable_ctx = &d };
    struct ts_members *m, *r;
    struct ts_members_view v;
    struct ts_member_grant g;
    struct ts_err e = { 0 };
    uint32_t a, w;

    (void)state;
    assert_int_equal(ts_members_create(&cfg, &m, NULL), TS_OK);
    a = add_shard(m, "h:1", "a", 0);
    assert_int_equal(d.last.epoch, ts_members_epoch(m));
    assert_int_equal(d.last.shard_ids, TS_MEMBERS_ID_BLOCK);   /* reserved before id 1 */
    assert_int_equal(ts_members_register_worker(m, "h", 7, "", "", "w1", 0, 0, &g, NULL, NULL),
                     TS_OK);
    w = g.id;
    assert_int_equal(d.last.worker_ids, TS_MEMBERS_ID_BLOCK);
    /* A reservation that cannot be made durable refuses the registration, nothing changed. */
    d.fail = true;
    struct ts_members *f;
    assert_int_equal(ts_members_create(&cfg, &f, NULL), TS_OK);
    assert_int_equal(ts_members_register_worker(f, "h", 8, "", "", "w9", 0, 0, &g, NULL, &e),
                     TS_EUNAVAIL);
    assert_non_null(strstr(e.msg, "disk full"));
    assert_int_equal(ts_members_view(f, false, &v, NULL), TS_OK);
    assert_int_equal(v.nworkers, 0);
    ts_members_view_free(&v);
    ts_members_free(f);
    d.fail = false;

    /* A restart: the view as the state file kept it, the clock as the hook last saw it. */
    assert_int_equal(ts_members_view(m, false, &v, NULL), TS_OK);
    struct ts_members_clock c = d.last;
    assert_int_equal(ts_members_create(&cfg, &r, NULL), TS_OK);
    assert_int_equal(ts_members_restore(r, &v, &c, 5000, 0, NULL), TS_OK);
    assert_int_equal(ts_members_restore(r, &v, &c, 5000, 0, &e), TS_ESTATE);   /* not twice */
    assert_true(ts_members_epoch(r) > c.epoch);
    assert_int_equal(d.last.epoch, ts_members_epoch(r));
    /* The same members, alive, heartbeating under their ids; new ids come after the reserve. */
    assert_int_equal(ts_members_heartbeat(r, TS_MEMBER_SHARD, a, c.epoch, 0, 5100, &g, NULL, NULL),
                     TS_OK);
    assert_true(g.map_changed);
    assert_int_equal(ts_members_heartbeat(r, TS_MEMBER_WORKER, w, 0, 0, 5100, &g, NULL, NULL),
                     TS_OK);
    assert_int_equal(add_shard(r, "h:2", "b", 5200), TS_MEMBERS_ID_BLOCK + 1);
    assert_int_equal(ts_members_register_worker(r, "h", 9, "", "", "w2", 0, 5200, &g, NULL, NULL),
                     TS_OK);
    assert_int_equal(g.id, TS_MEMBERS_ID_BLOCK + 1);
    /* Leases run from the restore's time on: a and w beat at 5100, b and w2 came at 5200. */
    assert_int_equal(ts_members_expire(r, 6000, NULL, NULL), 0);
    assert_int_equal(ts_members_expire(r, 6150, NULL, NULL), 2);
    ts_members_free(r);
    /* With a grace, silence past the lease is not death until the grace is over. */
    assert_int_equal(ts_members_create(&cfg, &r, NULL), TS_OK);
    assert_int_equal(ts_members_restore(r, &v, &c, 5000, 3000, NULL), TS_OK);
    assert_int_equal(ts_members_expire(r, 7999, NULL, NULL), 0);
    assert_int_equal(ts_members_expire(r, 8000, NULL, NULL), 2);   /* a and w */
    ts_members_free(r);

    /* Ids not ascending: refused, the table empty. */
    v.shards[0].id = 0;
    assert_int_equal(ts_members_create(&cfg, &r, NULL), TS_OK);
    assert_int_equal(ts_members_restore(r, &v, &c, 0, 0, &e), TS_EINVAL);
    ts_members_view_free(&v);
    assert_int_equal(ts_members_view(r, false, &v, NULL), TS_OK);
    assert_int_equal(v.nshards + v.nworkers, 0);
    ts_members_view_free(&v);
    ts_members_free(r);
    ts_members_free(m);
}

/* A member registered with a secret answers only to it, or to an admin; a refusal changes
 * nothing; a retried registration with the secret is still harmless. */
static void secret_guards_the_registration(void **state)
{
    (void)state;
    struct ts_members *m = mk(1000);
    struct ts_member_cred own = { .has_secret = true }, other = { .has_secret = true };
    struct ts_member_cred none = { 0 }, admin = { .admin = true };
    struct ts_member_grant g;
    struct ts_members_view v;
    uint64_t epoch;

    memset(own.secret_sha256, 0xa5, sizeof(own.secret_sha256));
    memset(other.secret_sha256, 0x5a, sizeof(other.secret_sha256));
    assert_int_equal(ts_members_register_shard(m, "h:1", "s1", 0, NULL, 0, false, false, 0, &g,
                                               &own, NULL), TS_OK);
    uint32_t s = g.id;
    assert_int_equal(ts_members_register_worker(m, "h", 1, "", NULL, "w1", 0, 0, &g, &own, NULL),
                     TS_OK);
    uint32_t w = g.id;
    epoch = ts_members_epoch(m);

    const struct { const struct ts_member_cred *cred; ts_status want; } who[] = {
        { &none, TS_EAUTH }, { &other, TS_EPERM },
    };
    for (size_t i = 0; i < 2; i++) {
        struct ts_err e = { 0 };
        assert_int_equal(ts_members_heartbeat(m, TS_MEMBER_SHARD, s, 0, 0, 900, &g, who[i].cred,
                                              &e), who[i].want);
        assert_non_null(strstr(e.msg, "secret"));
        e = (struct ts_err){ 0 };
        assert_int_equal(ts_members_deregister(m, TS_MEMBER_WORKER, w, "x", &epoch, who[i].cred,
                                               &e), who[i].want);
        e = (struct ts_err){ 0 };
        assert_int_equal(ts_members_register_shard(m, "h:1", "s1", 0, NULL, 0, false, false,
                                                   900, &g, who[i].cred, &e), who[i].want);
        e = (struct ts_err){ 0 };
        assert_int_equal(ts_members_register_worker(m, "h", 1, "", NULL, "w1", 0, 900, &g,
                                                    who[i].cred, &e), who[i].want);
    }
    /* nothing changed: the refused calls renewed no lease */
    assert_int_equal(ts_members_epoch(m), epoch);
    assert_int_equal(ts_members_view(m, false, &v, NULL), TS_OK);
    assert_int_equal(v.shards[0].state, TS_MEMBER_ALIVE);
    assert_int_equal(v.workers[0].state, TS_MEMBER_ALIVE);
    assert_int_equal(v.shards[0].last_heartbeat_ms, 0);
    assert_int_equal(v.workers[0].last_heartbeat_ms, 0);
    assert_memory_equal(v.shards[0].secret_sha256, own.secret_sha256, sizeof(own.secret_sha256));
    ts_members_view_free(&v);

    /* the owner, and a retry of its registration, are let in */
    assert_int_equal(ts_members_heartbeat(m, TS_MEMBER_SHARD, s, 0, 0, 900, &g, &own, NULL),
                     TS_OK);
    assert_int_equal(ts_members_register_worker(m, "h", 1, "", NULL, "w1", 0, 900, &g, &own, NULL),
                     TS_OK);
    assert_int_equal(g.id, w);
    assert_false(g.joined);
    /* an admin may deregister another member's registration */
    assert_int_equal(ts_members_deregister(m, TS_MEMBER_SHARD, s, "drained", &epoch, &admin,
                                           NULL), TS_OK);
    /* a member registered without a secret answers to anyone, as before */
    assert_int_equal(ts_members_register_worker(m, "h", 2, "", NULL, "w2", 0, 0, &g, &none, NULL),
                     TS_OK);
    assert_int_equal(ts_members_heartbeat(m, TS_MEMBER_WORKER, g.id, 0, 0, 10, &g, &other,
                                          NULL), TS_OK);
    ts_members_free(m);
}

/* A shard's identity (the member its certificate names) is held by one alive shard at a
 * time; a registration of the same instance again shows the same one; workers share theirs. */
static void one_alive_shard_per_identity(void **state)
{
    (void)state;
    struct ts_members *m = mk(1000);
    struct ts_member_cred s0 = { .has_secret = true }, s1 = { .has_secret = true };
    struct ts_member_cred w = { .has_secret = true };
    struct ts_member_grant g;
    struct ts_members_view v;
    char addr[TS_MEMBERS_MAX_ADDR + 1], holder[TS_MEMBERS_MAX_INSTANCE + 1];
    struct ts_err e = { 0 };
    uint32_t id, held;
    uint64_t epoch;

    snprintf(s0.identity, sizeof(s0.identity), "shard/0");
    snprintf(s1.identity, sizeof(s1.identity), "shard/1");
    snprintf(w.identity, sizeof(w.identity), "worker/*");
    assert_int_equal(ts_members_register_shard(m, "h:1", "a", 0, NULL, 0, false, false, 0, &g,
                                               &s0, NULL), TS_OK);
    id = g.id;
    epoch = ts_members_epoch(m);
    assert_true(ts_members_shard_holding(m, "shard/0", "b", &held, addr, holder));
    assert_int_equal(held, id);
    assert_string_equal(addr, "h:1");
    assert_string_equal(holder, "a");
    assert_false(ts_members_shard_holding(m, "shard/0", "a", &held, addr, holder));
    assert_false(ts_members_shard_holding(m, "shard/1", "b", &held, addr, holder));
    assert_false(ts_members_shard_holding(m, "", "b", &held, addr, holder));
    /* another process with the same certificate, at another address: refused */
    assert_int_equal(ts_members_register_shard(m, "h:2", "b", 0, NULL, 0, false, false, 10, &g,
                                               &s0, &e), TS_EPERM);
    assert_non_null(strstr(e.msg, "identity: shard/0"));
    /* the same instance showing another member's certificate: refused */
    s1.has_secret = true;
    memcpy(s1.secret_sha256, s0.secret_sha256, sizeof(s1.secret_sha256));
    e = (struct ts_err){ 0 };
    assert_int_equal(ts_members_register_shard(m, "h:1", "a", 0, NULL, 0, false, false, 10, &g,
                                               &s1, &e), TS_EPERM);
    assert_non_null(strstr(e.msg, "identity"));
    assert_int_equal(ts_members_epoch(m), epoch);
    /* once the holder is dead, a new process takes the identity */
    assert_true(ts_members_declare_dead(m, TS_MEMBER_SHARD, id, "a", "gone"));
    assert_int_equal(ts_members_register_shard(m, "h:2", "b", 0, NULL, 0, false, false, 20, &g,
                                               &s0, NULL), TS_OK);
    assert_int_not_equal(g.id, id);
    /* workers of one certificate are many */
    assert_int_equal(ts_members_register_worker(m, "h", 1, "", NULL, "w1", 0, 0, &g, &w, NULL),
                     TS_OK);
    assert_int_equal(ts_members_register_worker(m, "h", 2, "", NULL, "w2", 0, 0, &g, &w, NULL),
                     TS_OK);
    assert_int_equal(ts_members_view(m, false, &v, NULL), TS_OK);
    assert_string_equal(v.shards[1].identity, "shard/0");
    assert_string_equal(v.workers[1].identity, "worker/*");
    ts_members_view_free(&v);
    ts_members_free(m);
}

/* Leases run out in time order (members_lease.c, a queue of deadlines), checked against a
 * reference model of the rule (silent past its lease; a worker never heard: past the default
 * at most) under random registrations, heartbeats, departures, registrations again with a
 * shorter or longer lease, and reaper ticks: the same members die at the same tick. */
static void leases_run_out_as_the_reference_model_says(void **state)
{
    enum { N = 150 };
    static const uint32_t leases[] = { 0, 100, 300, 2000, 5000 };
    struct model { uint32_t id; bool alive, heard; int64_t last; uint32_t lease; } w[N];
    struct ts_members *m = mk(1000);
    struct ts_member_grant g;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    int64_t t = 0;
    int died = 0;

    (void)state;
    memset(w, 0, sizeof(w));
    for (int it = 0; it < 40000; it++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(rng >> 33), k = r % N, op = (r >> 8) % 100;
        t += (r >> 16) % 23;
        if (op < 50 && w[k].alive) {
            assert_int_equal(ts_members_heartbeat(m, TS_MEMBER_WORKER, w[k].id, 0, 0, t, &g,
                                                  NULL, NULL), TS_OK);
            w[k].last = t;
            w[k].heard = true;
        } else if (op < 60) {
            char inst[16];
            uint32_t lease = leases[(r >> 20) % 5];
            snprintf(inst, sizeof(inst), "w%u", k);
            assert_int_equal(ts_members_register_worker(m, "h", 1, "", NULL, inst, lease, t, &g,
                                                        NULL, NULL), TS_OK);
            assert_true(!w[k].id || g.id == w[k].id);
            w[k] = (struct model){ g.id, true, false, t, lease ? lease : 1000 };
        } else if (op < 63 && w[k].alive) {
            uint64_t epoch;
            assert_int_equal(ts_members_deregister(m, TS_MEMBER_WORKER, w[k].id, "done", &epoch,
                                                   NULL, NULL), TS_OK);
            w[k].alive = false;
        }
        int want = 0;
        for (int i = 0; i < N; i++) {
            uint32_t lease = !w[i].heard && w[i].lease > 1000 ? 1000 : w[i].lease;
            if (w[i].alive && t - w[i].last > (int64_t)lease) {
                w[i].alive = false;
                want++;
            }
        }
        assert_int_equal(ts_members_expire(m, t, NULL, NULL), want);
        died += want;
        if (it % 1000 == 0) {   /* and each one's state, by id */
            struct ts_members_view v;
            assert_int_equal(ts_members_view(m, false, &v, NULL), TS_OK);
            for (int i = 0; i < N; i++)
                for (size_t j = 0; w[i].id && j < v.nworkers; j++)
                    if (v.workers[j].id == w[i].id)
                        assert_int_equal(v.workers[j].state == TS_MEMBER_ALIVE, w[i].alive);
            ts_members_view_free(&v);
        }
    }
    assert_true(died > 500);   /* the model was exercised, not only kept alive */
    ts_members_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(register_validates_each_field),
        cmocka_unit_test(register_is_idempotent_per_instance),
        cmocka_unit_test(lease_expiry_marks_dead_and_moves_epoch),
        cmocka_unit_test(declared_dead_on_report),
        cmocka_unit_test(joining_shard_goes_on_the_ring_once_moves_are_done),
        cmocka_unit_test(join_waits_for_its_gate),
        cmocka_unit_test(heartbeat_errors),
        cmocka_unit_test(a_member_declared_dead_may_still_leave),
        cmocka_unit_test(deregister_and_replacement),
        cmocka_unit_test(first_heartbeat_within_the_default_lease),
        cmocka_unit_test(many_workers_keep_their_ids),
        cmocka_unit_test(create_validates_lease),
        cmocka_unit_test(departed_workers_are_forgotten),
        cmocka_unit_test(departed_workers_hold_bounded_memory),
        cmocka_unit_test(restore_goes_on_after_the_durable_clock),
        cmocka_unit_test(secret_guards_the_registration),
        cmocka_unit_test(one_alive_shard_per_identity),
        cmocka_unit_test(a_paused_master_pardons_the_silence),
        cmocka_unit_test(a_master_that_hears_no_one_suspects_itself),
        cmocka_unit_test(leases_run_out_as_the_reference_model_says),
    };
    ts_log_set_level(TS_ERROR);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
