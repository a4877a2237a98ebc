/* launcher.c - what `tessera up`, `tessera demo` and `tessera run --local-cluster` say about
 * the processes of their local cluster. lib/local starts, watches, restarts and stops them;
 * this file turns each of its events into the line an operator reads: a death or a restart
 * on stderr, a restarted shard's new name on stdout. */
#include <stdio.h>

#include "cli.h"
#include "local/local.h"
#include "util/launch.h"

/* "shard 3" once the master named it, else "shard process 2" (its slot, from 1). */
static void shard_name(const struct ts_local_event *ev, char *buf, size_t n)
{
    if (ev->id)
        snprintf(buf, n, "shard %u", ev->id);
    else
        snprintf(buf, n, "shard process %d", ev->slot + 1);
}

void cli_local_event(void *arg, const struct ts_local_event *ev)
{
    char how[96], who[48];

    (void)arg;
    ts_launch_describe(ev->status, how, sizeof(how));
    switch (ev->kind) {
    case TS_LOCAL_SHARD_EXITED:
        shard_name(ev, who, sizeof(who));
        if (ev->delay_ms < 0)
            fprintf(stderr, "%s (pid %d) %s: see %s\n", who, (int)ev->pid, how, ev->log);
        else
            fprintf(stderr, "%s (pid %d) %s: see %s; restarting it in %.1f s (restart %u)\n",
                    who, (int)ev->pid, how, ev->log, ev->delay_ms / 1000.0, ev->restart);
        break;
    case TS_LOCAL_SHARD_RESTARTED:
        fprintf(stderr, "shard process %d restarted (pid %d, restart %u): it joins the "
                "cluster; log %s\n", ev->slot + 1, (int)ev->pid, ev->restart, ev->log);
        break;
    case TS_LOCAL_SHARD_RESTART_FAILED:
        fprintf(stderr, "restart %u of shard process %d failed: %s\n", ev->restart,
                ev->slot + 1, ev->msg);
        break;
    case TS_LOCAL_SHARD_NAMED:
        printf("shard process %d registered as shard %u (log %s)\n", ev->slot + 1, ev->id,
               ev->log);
        fflush(stdout);
        break;
    case TS_LOCAL_MASTER_EXITED:
        fprintf(stderr, "the master (pid %d) %s: see %s; restarting it in %.1f s (restart %u) "
                "with its state; training goes on meanwhile\n", (int)ev->pid, how, ev->log,
                ev->delay_ms / 1000.0, ev->restart);
        break;
    case TS_LOCAL_MASTER_RESTARTED:
        fprintf(stderr, "the master restarted (pid %d, restart %u) at %s with its state; log "
                "%s\n", (int)ev->pid, ev->restart, ev->addr, ev->log);
        break;
    case TS_LOCAL_MASTER_RESTART_FAILED:
        fprintf(stderr, "restart %u of the master failed: %s; trying again in %.1f s\n",
                ev->restart, ev->msg, ev->delay_ms / 1000.0);
        break;
    case TS_LOCAL_LOG_RENAME_FAILED:
        fprintf(stderr, "tessera: %s\n", ev->msg);
        break;
    }
}
