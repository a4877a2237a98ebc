/* testhooks.h - a shard that kills itself at a chosen moment, for the fault tests
 * (docs/testing.md, tests/fault/kill_points.py).
 *
 * $TESSERA_TEST_KILL_AT=POINT:N, read once at start, makes the shard SIGKILL itself the Nth
 * time it reaches POINT:
 *   push    a head applied a step, before its image goes down the chain;
 *   image   a follower loaded an image, before passing it on or acknowledging it (the moment
 *           between head and tail);
 *   pull    a head is about to answer a pull;
 *   repair  the repair thread is about to send an image to a new member of a chain;
 *   step    a head applied a push that brought a partition to version N (N is the step
 *           here, not a count): the shard dies at a step of the schedule;
 *   torn    a head answers the first pull of version N (a step, as above) with the reply's
 *           header and half its values, and dies: the worker is left with part of the new
 *           version over the old one in its buffer (lib/transport ts_frame_test_die_halfway;
 *           tests/integration/test_rollback.py, ReduceSeeded);
 *   move    a MoveTables call came, before this shard moves the job's tables: a shard that
 *           dies in the middle of a join's move (tests/integration/test_ctr.py, Joins).
 * $TESSERA_TEST_PULL_DELAY_MS=MS makes a head sleep MS milliseconds between taking a pull's
 * values and sending them (at the pull point above): the window in which a step completing
 * under the pull must not change what is sent (tests/integration/test_elastic.py).
 * $TESSERA_TEST_REMAP_DELAY_MS=MS makes the shard wait MS milliseconds between fetching a map
 * with fewer shards on its ring than the last and following it: a shard slow to act on a
 * death, which holds the new map but heads what the old one said meanwhile
 * (tests/integration/test_rollback.py).
 * Only in a build with test hooks (util/hook.h); in any other, the functions are empty. */
#ifndef TS_SHARD_TESTHOOKS_H
#define TS_SHARD_TESTHOOKS_H

enum hook_point { HOOK_NONE, HOOK_PUSH, HOOK_IMAGE, HOOK_PULL, HOOK_REPAIR, HOOK_STEP,
                  HOOK_TORN, HOOK_MOVE };

#include <stddef.h>
#include <stdint.h>

#include "util/hook.h"

#if TS_TEST_HOOKS
/* Reads the variables above; a malformed value is logged and ignored. */
void hooks_init(void);
void hook_reach(enum hook_point p);
/* A head applied a push; the partition is at version now. */
void hook_applied(uint64_t version);
/* A head is about to answer a pull with version (the "torn" point). */
void hook_pulled(uint64_t version);
/* A map was fetched: `before` shards on the ring then, `after` now. */
void hook_ring_shrank(size_t before, size_t after);
#else   /* a build without test hooks (util/hook.h): nothing at all */
static inline void hooks_init(void) {}
static inline void hook_reach(enum hook_point p) { (void)p; }
static inline void hook_applied(uint64_t version) { (void)version; }
static inline void hook_pulled(uint64_t version) { (void)version; }
static inline void hook_ring_shrank(size_t before, size_t after) { (void)before; (void)after; }
#endif

#endif
