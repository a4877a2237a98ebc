/* log.h - one line per event, to stderr, filtered before formatting.
 *
 * TESSERA_LOG=error|warn|info|debug sets the level (default info); TESSERA_LOG_SUBSYS=rpc,master
 * keeps only those subsystems (knobs.h reads them). Lines look like
 *   2026-11-22T14:03:05.123Z INFO  master: shard 2 (127.0.0.1:7101) registered, epoch 3
 * Log a failure once, where it is decided (usually the service edge); lower layers return it.
 * Threads: safe; each line is written with one write(2). */
#ifndef TS_UTIL_LOG_H
#define TS_UTIL_LOG_H

#include <stdbool.h>

#include "util/err.h"

enum ts_log_level { TS_ERROR = 0, TS_WARN, TS_INFO, TS_DEBUG };

/* Reads TESSERA_LOG and TESSERA_LOG_SUBSYS; called by the first ts_log, or explicitly. */
void ts_log_init(void);
/* Overrides the level (tests, --verbose). */
void ts_log_set_level(enum ts_log_level lvl);
bool ts_log_enabled(enum ts_log_level lvl, const char *subsys);
void ts_log_emit(enum ts_log_level lvl, const char *subsys, const char *fmt, ...) TS_PRINTF(3, 4);

#define ts_log(lvl, subsys, ...)                                                                   \
    do {                                                                                           \
        if (ts_log_enabled((lvl), (subsys)))                                                       \
            ts_log_emit((lvl), (subsys), __VA_ARGS__);                                             \
    } while (0)

#endif
