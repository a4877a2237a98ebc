/* harness.h - real tessera-master and tessera-shard processes for C integration tests.
 * One cluster of lib/local at a time, started from the build's bin directory: plaintext, no
 * logs (the children write to the test's stderr), stopped by pid (SIGTERM, wait). */
#ifndef TS_TEST_HARNESS_H
#define TS_TEST_HARNESS_H

#include <stdint.h>
#include <sys/types.h>

struct ts_conn;

/* Starts a master on 127.0.0.1:0; returns its address (static storage) or NULL. */
const char *harness_master(const char *bin);
/* Starts a shard that registers with the master, with one extra flag when extra_flag is not
 * NULL (bin is the master's); returns its pid or -1. */
pid_t harness_shard(const char *bin, const char *extra_flag, const char *extra_value);
/* Waits up to 15 s until the master lists n alive shards; 0 on success, else -1 with the
 * reason on stderr. */
int harness_wait_shards(int n);
/* A raw data-plane connection to the only shard of the master's map (another count fails)
 * over `transport` (tcp, shm), greeted for `job` with HELLO flags `flags` (TS_HELLO_*) and,
 * for TS_HELLO_ELASTIC, the worker's member id `member`; NULL, with the reason on stderr, on
 * failure. The caller closes it (ts_tp_close). */
struct ts_conn *harness_connect(const char *transport, const char *job, uint32_t flags,
                                uint32_t member);
/* Stops everything started, newest first, and removes the temp dir. */
void harness_stop(void);

#endif
