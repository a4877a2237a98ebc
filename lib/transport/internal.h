/* internal.h - helpers shared by the transport backends (not part of the public interface).
 *
 * Every wait in a backend is bounded by a deadline computed once from the caller's ms, so
 * retries after EINTR or a spurious wake-up never extend it. */
#ifndef TS_TRANSPORT_INTERNAL_H
#define TS_TRANSPORT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "transport/transport.h"
#include "util/proc.h"

/* The monotonic time ms from now; -1 (no deadline) when ms < 0. */
static inline int64_t ts__deadline(int ms)
{
    return ms < 0 ? -1 : ts_now_ms() + ms;
}

/* Milliseconds left until deadline, for poll(2): -1 for none, else 0 .. INT32_MAX. */
static inline int ts__left_ms(int64_t deadline)
{
    int64_t left;

    if (deadline < 0)
        return -1;
    left = deadline - ts_now_ms();
    return left < 0 ? 0 : left > 0x7fffffff ? 0x7fffffff : (int)left;
}

/* addr.c: "HOST:PORT" or "[V6]:PORT" in b split into host and port (without brackets), each
 * NUL-terminated within hn and pn bytes; TS_EINVAL naming `who` (e.g. "tcp connect") if b is
 * not that or a part does not fit. */
ts_status ts__split_addr(const struct ts_blob *b, const char *who, char *host, size_t hn,
                         char *port, size_t pn, struct ts_err *e) TS_MUST_CHECK;

/* addr.c: sa as "HOST:PORT" or "[V6]:PORT" ("?" for another family) into buf of n bytes. */
void ts__addr_text(const struct sockaddr *sa, char *buf, size_t n);

/* pin.c: the backends' side of pinned memory (transport.h). ts__pin_find: the pinned range
 * holding all of [p, p + n), if one does. ts__pin_alive: id is still pinned. ts__pin_gen:
 * moves on at every unpin, so a backend that keeps registrations by id knows when to look
 * for ones to drop. */
struct ts__pin {
    uint64_t id;
    const void *base;
    size_t len;
};
bool ts__pin_find(const void *p, size_t n, struct ts__pin *out);
bool ts__pin_alive(uint64_t id);
uint64_t ts__pin_gen(void);

#endif
