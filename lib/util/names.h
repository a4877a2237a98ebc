/* names.h - the rule for names that travel between processes: job ids.
 *
 * A job id is written by users (--job), sent in gRPC requests and data-plane HELLOs, used in
 * log lines and snapshot manifests, so every process must accept exactly the same ids: 1 to
 * TS_JOB_ID_MAX bytes of ASCII letters, digits, '.', '_' and '-'. Each place that takes one
 * calls ts_job_id_check, and buffers for one are TS_JOB_ID_MAX + 1 bytes.
 * Threads: no state. */
#ifndef TS_UTIL_NAMES_H
#define TS_UTIL_NAMES_H

#include "util/err.h"

#define TS_JOB_ID_MAX 64

/* TS_OK if id is a valid job id; else TS_EINVAL with a message that starts with field (the
 * name the caller knows it by: "job", "job.id") and says what is wrong. id may be NULL. */
ts_status ts_job_id_check(const char *field, const char *id, struct ts_err *err) TS_MUST_CHECK;

#endif
