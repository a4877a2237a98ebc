/* respawn.c - keeping a local cluster up while it runs (ts_local_check): children reaped as
 * they exit, the master (always) and shards (with respawn) started again after a backoff, and
 * restarted shards named once the master lists them. See local.h. */
#include "local/internal.h"

#include <stdint.h>
#include <stdio.h>

#include "util/launch.h"
#include "util/proc.h"

#define RESPAWN_FIRST_MS 500      /* the first restart's delay; doubled per restart in a row */
#define RESPAWN_MAX_MS 30000      /* the longest delay */
#define RESPAWN_STEADY_MS 60000   /* up this long: the next death starts the backoff afresh */
#define NAME_POLL_MS 500          /* how often to look for restarted shards' ids */

/* The delay before the next restart of a process that started at started_ms, with *backoff
 * restarts in a row before it (counted on). */
static int64_t restart_delay(int *backoff, int64_t started_ms)
{
    int64_t delay;

    if (ts_now_ms() - started_ms >= RESPAWN_STEADY_MS)
        *backoff = 0;
    delay = (int64_t)RESPAWN_FIRST_MS << (*backoff < 6 ? *backoff : 6);
    ++*backoff;
    return delay < RESPAWN_MAX_MS ? delay : RESPAWN_MAX_MS;
}

/* Shard slot i's process exited with status: an event, and with respawn a restart
 * scheduled. */
static void shard_exited(struct ts_local *c, int i, int status)
{
    struct ts__local_slot *sh = &c->shards[i];
    struct ts_local_event ev = { .kind = TS_LOCAL_SHARD_EXITED, .slot = i, .pid = sh->pid,
                                 .id = sh->id, .status = status, .delay_ms = -1 };
    char log[TS__LOCAL_PATH];

    ts__local_shard_file(c, i, "log", log, sizeof(log));
    ev.log = c->opts.no_logs ? NULL : log;
    if (c->opts.respawn) {
        ev.delay_ms = restart_delay(&sh->backoff, sh->started_ms);
        ev.restart = sh->restarts + 1;
        sh->restart_at = ts_now_ms() + ev.delay_ms;
    }
    sh->pid = 0;
    ts__local_say(c, &ev);
}

/* Starts the shards whose restart is due. */
static void restart_due(struct ts_local *c)
{
    for (int i = 0; i < c->nshards; i++) {
        struct ts__local_slot *sh = &c->shards[i];
        struct ts_local_event ev = { .kind = TS_LOCAL_SHARD_RESTARTED, .slot = i };
        struct ts_err err = { 0 };
        char log[TS__LOCAL_PATH];

        if (!sh->restart_at || ts_now_ms() < sh->restart_at)
            continue;
        sh->restart_at = 0;
        ev.restart = ++sh->restarts;
        if (ts__local_start_shard(c, i, &err)) {
            ev.kind = TS_LOCAL_SHARD_RESTART_FAILED;
            ev.msg = err.msg;
            ts__local_say(c, &ev);
            shard_exited(c, i, 127 << 8);   /* try again, later */
            continue;
        }
        ts__local_shard_file(c, i, "log", log, sizeof(log));
        ev.pid = sh->pid;
        ev.log = c->opts.no_logs ? NULL : log;
        ts__local_say(c, &ev);
    }
}

/* Names restarted shards once the master lists them (their logs become shard-<id>.log). */
static void name_restarted(struct ts_local *c)
{
    Tessera__V1__ClusterStatusResponse *cs;
    struct ts_master *m;
    bool unnamed = false;

    for (int i = 0; i < c->nshards; i++)
        unnamed |= c->shards[i].pid && !c->shards[i].id;
    if (!unnamed || ts_now_ms() - c->named_ms < NAME_POLL_MS)
        return;
    c->named_ms = ts_now_ms();
    if (ts_master_open(c->master_addr, &m, NULL))
        return;
    if (!ts_master_status(m, 1000, &cs, NULL)) {
        ts__local_name_shards(c, cs, true);
        tessera__v1__cluster_status_response__free_unpacked(cs, NULL);
    }
    ts_master_close(m);
}

/* The master exited with status: an event, and its restart scheduled. */
static void master_exited(struct ts_local *c, int status)
{
    struct ts_local_event ev = { .kind = TS_LOCAL_MASTER_EXITED, .pid = c->master,
                                 .status = status, .restart = c->master_restarts + 1 };
    char log[TS__LOCAL_PATH];

    ev.delay_ms = restart_delay(&c->master_backoff, c->master_started_ms);
    snprintf(log, sizeof(log), "%s/master.log", c->dir);
    ev.log = c->opts.no_logs ? NULL : log;
    ts__local_say(c, &ev);
    c->master = 0;
    c->master_restart_at = ts_now_ms() + ev.delay_ms;
}

/* Starts the master again when its restart is due; false if it cannot be. */
static bool restart_master(struct ts_local *c)
{
    struct ts_local_event ev = { .kind = TS_LOCAL_MASTER_RESTARTED };
    struct ts_err err = { 0 };
    char log[TS__LOCAL_PATH];

    if (!c->master_restart_at || ts_now_ms() < c->master_restart_at)
        return true;
    c->master_restart_at = 0;
    ev.restart = ++c->master_restarts;
    if (ts__local_start_master(c, &err)) {
        ev.kind = TS_LOCAL_MASTER_RESTART_FAILED;
        ev.msg = err.msg;
        ev.delay_ms = restart_delay(&c->master_backoff, c->master_started_ms);
        if (c->master)   /* started but not listening: stop it, try again later */
            ts_launch_stop(c->master, 2000);
        c->master = 0;
        c->master_restart_at = ts_now_ms() + ev.delay_ms;
        ts__local_say(c, &ev);
        return c->master_restarts < 1000;
    }
    snprintf(log, sizeof(log), "%s/master.log", c->dir);
    ev.pid = c->master;
    ev.addr = c->master_addr;
    ev.log = c->opts.no_logs ? NULL : log;
    ts__local_say(c, &ev);
    return true;
}

bool ts_local_check(struct ts_local *c)
{
    int status;

    for (int i = 0; i < c->nshards; i++)
        if (ts_launch_exited(c->shards[i].pid, &status))
            shard_exited(c, i, status);
    if (ts_launch_exited(c->master, &status))
        master_exited(c, status);
    if (!restart_master(c))
        return false;
    restart_due(c);
    if (c->master)
        name_restarted(c);
    return true;
}
