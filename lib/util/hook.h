/* hook.h - the one door for test hooks (docs/testing.md, "Test hooks").
 *
 * A test hook is a behaviour only a test wants: a shard that kills itself at a named point
 * (TESSERA_TEST_KILL_AT), a replica with a flipped bit (TESSERA_TEST_FLIP_REPLICA), a pull
 * held back (TESSERA_TEST_PULL_DELAY_MS), a worker's link cut after N sends
 * (TESSERA_TEST_LINK_CUT), a join held until a file exists (TESSERA_TEST_HOLD_JOIN). Each is
 * armed by an environment variable read through ts_hook(NAME), which reads it only in a build
 * configured with -DTESSERA_TEST_HOOKS=ON: the sanitizer build (build-asan/), which the tests
 * that need a hook run against. Everywhere else (build/, what `make install`, the packages
 * and the container image ship) ts_hook(NAME) is the constant NULL: the code behind it is
 * dead, the compiler drops it, and no hook's name is in any binary
 * (tests/integration/test_install.py checks the installed ones with `strings`). Code that
 * only a hook reaches is fenced with `#if TS_TEST_HOOKS`. */
#ifndef TS_UTIL_HOOK_H
#define TS_UTIL_HOOK_H

#ifdef TESSERA_TEST_HOOKS
#include <stdlib.h>
#define TS_TEST_HOOKS 1
#define ts_hook(name) ((const char *)getenv(name))
#else
#define TS_TEST_HOOKS 0
#define ts_hook(name) ((const char *)0)
#endif

#endif
