/* knobs.h - the TESSERA_* environment variables that tune a process, read in one place.
 *
 * A knob is a setting nobody passes as a flag: a log level, where certificates or the shm
 * sockets live, a socket buffer, whether the SDK pipelines. Each is one row of the const table
 * in knobs.c: its variable, its kind (an integer in a range, one of some words, a string), its
 * default and a one-line effect; docs/operations.md, "Environment variables", is that table
 * for readers, and tests/integration/test_docs_map.py fails when the two differ or when code
 * outside this module calls getenv("TESSERA_...") (the launcher's variables, the launch
 * protocol of docs/launch.md, stay with lib/client/sdk_launch.c; test hooks with hook.h).
 *
 * Each value is read once, at the first use of its knob, and kept: a variable changed later
 * in the process has no effect (tests call ts_knob_reread). A variable set to the empty string
 * counts as unset. A value the row does not accept (not a decimal integer in the range, not
 * one of the words, case ignored) is taken as unset, so the default holds; where a row's
 * reader refuses such a value instead, it asks ts_knob_check for the error. No knob turns a
 * security check off: docs/operations.md says what each one may change.
 * Ownership: strings returned are the environment's own; never free them.
 * Threads: every function but ts_knob_reread may be called from any thread. */
#ifndef TS_UTIL_KNOBS_H
#define TS_UTIL_KNOBS_H

#include <stdbool.h>

#include "util/err.h"

enum ts_knob {
    TS_KNOB_LOG,              /* error|warn|info|debug: in the order of enum ts_log_level */
    TS_KNOB_LOG_SUBSYS,
    TS_KNOB_MASTER,
    TS_KNOB_CALL_TIMEOUT_MS,
    TS_KNOB_TLS_DIR,
    TS_KNOB_TLS_CERT,
    TS_KNOB_TLS_KEY,
    TS_KNOB_TLS_CA,
    TS_KNOB_TOKEN_FILE,
    TS_KNOB_TIMEOUT_MS,
    TS_KNOB_PLACEMENT_SALT,   /* -1: auto */
    TS_KNOB_PIPELINE,
    TS_KNOB_COMBINE_SLOTS,
    TS_KNOB_SHM_DIR,
    TS_KNOB_SHM_GROUP,
    TS_KNOB_SHM_RING,
    TS_KNOB_TCP_SOCKBUF,
    TS_KNOB_TCP_LOOPBACK,
    TS_KNOB_FRAME_HASH,
    TS_KNOB_DATA_MAC,
    TS_KNOB_COUNT
};

/* The variable's name: "TESSERA_TCP_SOCKBUF". */
const char *ts_knob_name(enum ts_knob k);

/* Whether the variable is set to something other than the empty string, valid or not. */
bool ts_knob_is_set(enum ts_knob k);

/* The value as set, NULL when unset or empty. */
const char *ts_knob_str(enum ts_knob k);

/* An integer knob's value: the variable's when it is a decimal integer within the row's range
 * (and a power of two where the row wants one), else the row's default. */
long long ts_knob_int(enum ts_knob k);

/* A choice knob's value as the index of its word in the row; the default's when unset or not
 * one of the words. */
int ts_knob_choice(enum ts_knob k);

/* Whether a choice knob's value (the default where unset or not accepted) is word. */
bool ts_knob_is(enum ts_knob k, const char *word);

/* TS_OK when the variable is unset or holds a value its row accepts; else TS_EINVAL with a
 * message naming the variable, its value and what it wants. For the readers that refuse a
 * bad value rather than run with the default. */
ts_status ts_knob_check(enum ts_knob k, struct ts_err *err) TS_MUST_CHECK;

/* For tests only: forgets every value read, so the next use of each knob reads its variable
 * again (after a test's setenv or unsetenv). Not safe while another thread uses a knob, and
 * strings returned before may no longer be the variables' values. */
void ts_knob_reread(void);

#endif
