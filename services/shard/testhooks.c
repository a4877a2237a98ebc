/* testhooks.c - see testhooks.h. */
#include "testhooks.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

static const char *const names[] = { "", "push", "image", "pull", "repair" };
static enum hook_point armed = HOOK_NONE;
static atomic_long left;

void hooks_init(void)
{
    const char *v = getenv("TESSERA_TEST_KILL_AT");
    char name[16];
    long n = 0;

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
    if (p != armed || atomic_fetch_sub(&left, 1) != 1)
        return;
    ts_log(TS_WARN, "shard", "TESSERA_TEST_KILL_AT: killed at %s", names[p]);
    raise(SIGKILL);
}
