/* state_fake.h - the master's state directory faked in memory, for the unit tests of a module
 * that keeps one file there (services/master/state.h's functions for other modules' files:
 * workq.c's "work", tasks.c's "tasks").
 *
 * Define STATE_FAKE_FILE as the file's name, then include this once, in the test's one C file
 * (after cmocka.h): it defines those functions for the test's executable. The file's bytes
 * are `saved` (NULL: no file); fail_puts makes every write fail as a full disk would, and
 * puts_done counts the writes. state_fake_reset forgets everything. */
#ifndef TS_TEST_STATE_FAKE_H
#define TS_TEST_STATE_FAKE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "master/state.h"

static uint8_t *saved;
static size_t saved_len;
static int puts_done;
static bool fail_puts;

bool master_state_durable_dir(const struct master_state *s)
{
    (void)s;
    return true;
}

ts_status master_state_put(struct master_state *s, const char *name, const void *p, size_t n,
                           struct ts_err *err)
{
    (void)s;
    assert_string_equal(name, STATE_FAKE_FILE);
    if (fail_puts)
        return ts_err_set(err, TS_EIO, "cannot write " STATE_FAKE_FILE ": disk full");
    free(saved);
    saved = malloc(n + 1);
    memcpy(saved, p, n);
    saved_len = n;
    puts_done++;
    return TS_OK;
}

ts_status master_state_get(struct master_state *s, const char *name, uint8_t **out, size_t *n,
                           struct ts_err *err)
{
    (void)s;
    (void)err;
    assert_string_equal(name, STATE_FAKE_FILE);
    *out = saved ? malloc(saved_len + 1) : NULL;
    if (saved)
        memcpy(*out, saved, saved_len);
    *n = saved_len;
    return TS_OK;
}

static void state_fake_reset(void)
{
    free(saved);
    saved = NULL;
    saved_len = 0;
    puts_done = 0;
    fail_puts = false;
}

#endif
