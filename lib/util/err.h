/* err.h - the one error vocabulary of Tessera.
 *
 * Every function that can fail returns a ts_status and takes a `struct ts_err *err` last
 * (NULL allowed). The message names the field or the state and, where there is one, the fix.
 * The first message set wins, so the root cause survives as the error travels up; only the
 * service edge (lib/rpc/status.c) translates a status into a gRPC status code.
 *
 * Ownership: struct ts_err is a plain value the caller embeds; nothing here allocates.
 * Threads: no shared state. */
#ifndef TS_UTIL_ERR_H
#define TS_UTIL_ERR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>

#define TS_MUST_CHECK __attribute__((warn_unused_result))
#define TS_PRINTF(a, b) __attribute__((format(printf, a, b)))

typedef enum ts_status {
    TS_OK = 0,
    TS_EINVAL,     /* bad input: a field is missing, too large or malformed */
    TS_ENOTFOUND,  /* the named object does not exist */
    TS_EEXIST,     /* it exists already */
    TS_ESTATE,     /* the request is valid but the state does not allow it */
    TS_ESTALE,     /* made against an old shard map: refresh the map and retry */
    TS_ETIMEDOUT,  /* the deadline passed */
    TS_EUNAVAIL,   /* a peer is down or unreachable; retrying later may work */
    TS_ENOMEM,     /* out of memory or over a configured limit */
    TS_ECORRUPT,   /* data failed a checksum or could not be parsed */
    TS_EIO,        /* the operating system said no */
    TS_EAUTH,      /* not authenticated */
    TS_ENOTSUP,    /* not implemented or not supported here */
    TS_ENODEV,     /* no such device (a transport that cannot run here) */
    TS_ECANCELLED, /* the caller or a shutdown cancelled it */
    TS_EINTERNAL,  /* a bug: an invariant did not hold */
    TS_EROLLBACK,  /* the job lost state and goes back to its last snapshot: continue from the
                    * step it names (docs/replication.md, "Rollback") */
    TS_ESLOTS,     /* the job's slots changed hands (a worker died or came back): ask the
                    * master for this worker's slots and do the step again (docs/elastic.md) */
    TS_EPERM,      /* authenticated, but not allowed: the caller's certificate or token lacks
                    * the right (docs/security.md) */
} ts_status;

struct ts_err {
    ts_status code;
    char msg[512];
};

/* src into dst (n bytes), whole when it fits, else with its middle replaced by "...": the
 * start (where it happened) and the end (the root cause: strerror text, a gRPC status) both
 * stay, the end with two thirds of the room. The cut falls where a word or a path component
 * begins when one is near, else inside the word (a long path), never inside a UTF-8
 * character. */
void ts_str_fit(char *dst, size_t n, const char *src);

/* Sets err (when err is not NULL and holds no error yet) and returns code, so that
 * `return ts_err_set(err, TS_EINVAL, "addr: required");` reads naturally. */
ts_status ts_err_set(struct ts_err *err, ts_status code, const char *fmt, ...) TS_PRINTF(3, 4);
ts_status ts_err_vset(struct ts_err *err, ts_status code, const char *fmt, va_list ap);

/* Clears err to TS_OK with an empty message. */
void ts_err_clear(struct ts_err *err);

/* Adds "what: " in front of an error already set, to say where it happened; when the whole
 * no longer fits, the middle gives way (ts_str_fit), so the cause at the end survives any
 * number of prefixes. */
void ts_err_prefix(struct ts_err *err, const char *fmt, ...) TS_PRINTF(2, 3);

/* The status's name, e.g. "EINVAL"; static storage. */
const char *ts_status_name(ts_status s);

#endif
