/* testhooks.c - see testhooks.h. Empty in a build without test hooks (util/hook.h). */
#include "testhooks.h"

#if TS_TEST_HOOKS

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/log.h"

static const char *const names[] = { "", "push", "image", "pull", "repair" };
static enum hook_point armed = HOOK_NONE;
static atomic_long left;
static long pull_delay_ms;

static void delay_init(void)
{
    const char *v = ts_hook("TESSERA_TEST_PULL_DELAY_MS");
    char *end;

    if (!v)
        return;
    pull_delay_ms = strtol(v, &end, 10);
    if (end == v || *end || pull_delay_ms <= 0 || pull_delay_ms > 10000) {
        ts_log(TS_ERROR, "shard", "TESSERA_TEST_PULL_DELAY_MS='%s': want milliseconds from 1 "
               "to 10000; ignored", v);
        pull_delay_ms = 0;
        return;
    }
    ts_log(TS_WARN, "shard", "TESSERA_TEST_PULL_DELAY_MS: every pull waits %ld ms before it "
           "is sent (a test)", pull_delay_ms);
}

void hooks_init(void)
{
    const char *v = ts_hook("TESSERA_TEST_KILL_AT");
    char name[16];
    long n = 0;

    delay_init();
    if (!v)
        return;
    if (sscanf(v, "%15[a-z]:%ld", name, &n) == 2 && n > 0)
        for (int i = HOOK_PUSH; i <= HOOK_REPAIR; i++)
            if (!strcmp(name, names[i]))
                armed = (enum hook_point)i;
    if (armed == HOOK_NONE) {
        ts_log(TS_ERROR, "shard", "TESSERA_TEST_KILL_AT='%s': want push, image, pull or "
               "repair, ':', and a count from 1; ignored", v);
        return;
    }
    atomic_store(&left, n);
    ts_log(TS_WARN, "shard", "TESSERA_TEST_KILL_AT: this shard kills itself at %s number %ld "
           "(a test)", names[armed], n);
}

void hook_reach(enum hook_point p)
{
    if (p == HOOK_PULL && pull_delay_ms) {
        struct timespec ts = { pull_delay_ms / 1000, pull_delay_ms % 1000 * 1000000L };

        nanosleep(&ts, NULL);
    }
    if (p != armed || atomic_fetch_sub(&left, 1) != 1)
        return;
    ts_log(TS_WARN, "shard", "TESSERA_TEST_KILL_AT: killed at %s", names[p]);
    raise(SIGKILL);
}

#endif
