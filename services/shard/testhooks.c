/* testhooks.c - see testhooks.h. Empty in a build without test hooks (util/hook.h). */
#include "testhooks.h"

#if TS_TEST_HOOKS

#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport/frame.h"
#include "util/log.h"

static const char *const names[] = { "", "push", "image", "pull", "repair", "step", "torn",
                                      "move" };
static enum hook_point armed = HOOK_NONE;
static atomic_long left;       /* the count to go; at "step", the step */
static long pull_delay_ms, remap_delay_ms;

/* $name as milliseconds (1..10000) into *ms, saying what it does; 0 when unset or bad. */
static void delay_init(const char *name, const char *what, long *ms)
{
    const char *v = ts_hook(name);
    char *end;

    if (!v)
        return;
    *ms = strtol(v, &end, 10);
    if (end == v || *end || *ms <= 0 || *ms > 10000) {
        ts_log(TS_ERROR, "shard", "%s='%s': want milliseconds from 1 to 10000; ignored", name,
               v);
        *ms = 0;
        return;
    }
    ts_log(TS_WARN, "shard", "%s: %s waits %ld ms (a test)", name, what, *ms);
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, ms % 1000 * 1000000L };

    nanosleep(&ts, NULL);
}

void hooks_init(void)
{
    const char *v = ts_hook("TESSERA_TEST_KILL_AT");
    char name[16];
    long n = 0;

    delay_init("TESSERA_TEST_PULL_DELAY_MS", "every pull, before it is sent,", &pull_delay_ms);
    delay_init("TESSERA_TEST_REMAP_DELAY_MS", "a map with fewer shards, fetched, before it is "
               "followed,", &remap_delay_ms);
    if (!v)
        return;
    if (sscanf(v, "%15[a-z]:%ld", name, &n) == 2 && n > 0)
        for (int i = HOOK_PUSH; i <= HOOK_MOVE; i++)
            if (!strcmp(name, names[i]))
                armed = (enum hook_point)i;
    if (armed == HOOK_NONE) {
        ts_log(TS_ERROR, "shard", "TESSERA_TEST_KILL_AT='%s': want push, image, pull, repair, "
               "step, torn or move, ':', and a count (a step) from 1; ignored", v);
        return;
    }
    atomic_store(&left, n);
    ts_log(TS_WARN, "shard", "TESSERA_TEST_KILL_AT: this shard kills itself at %s%s %ld "
           "(a test)", names[armed], armed == HOOK_STEP || armed == HOOK_TORN ? "" : " number",
           n);
}

static void kill_self(enum hook_point p)
{
    ts_log(TS_WARN, "shard", "TESSERA_TEST_KILL_AT: killed at %s", names[p]);
    raise(SIGKILL);
}

void hook_reach(enum hook_point p)
{
    if (p == HOOK_PULL && pull_delay_ms)
        sleep_ms(pull_delay_ms);
    if (p == armed && atomic_fetch_sub(&left, 1) == 1)
        kill_self(p);
}

void hook_applied(uint64_t version)
{
    if (armed == HOOK_STEP && version == (uint64_t)atomic_load(&left)) {
        ts_log(TS_WARN, "shard", "TESSERA_TEST_KILL_AT: a partition reached step %" PRIu64,
               version);
        kill_self(HOOK_STEP);
    }
}

void hook_pulled(uint64_t version)
{
    if (armed == HOOK_TORN && version == (uint64_t)atomic_load(&left)) {
        ts_log(TS_WARN, "shard", "TESSERA_TEST_KILL_AT: a pull of version %" PRIu64 " answered "
               "with half its values, then killed", version);
        ts_frame_test_die_halfway();
    }
}

void hook_ring_shrank(size_t before, size_t after)
{
    if (remap_delay_ms && after < before) {
        ts_log(TS_WARN, "shard", "TESSERA_TEST_REMAP_DELAY_MS: a map of %zu shards, %zu before: "
               "followed in %ld ms", after, before, remap_delay_ms);
        sleep_ms(remap_delay_ms);
    }
}

#endif
