/* leaseq.h - members by the time their lease runs out: a binary min-heap of (due, kind, id),
 * so that the master's reaper looks only at the members whose lease may have run out, not at
 * every member each tick (members_lease.c).
 *
 * Entries are hints, checked when they come due: a heartbeat does not touch the queue (it
 * moves the member's deadline later, and the entry, once due, is put back at the new one),
 * and an entry for a member that died, left or was forgotten is dropped then. A member has at
 * most one entry (struct ts_member.queued), so the queue holds no more entries than members
 * registered within about one lease of now. Memory: 16 bytes an entry.
 * Ownership: embedded by its owner (struct ts_members); leaseq_free frees the array.
 * Threads: none of its own; the caller serialises (the members' mutex). */
#ifndef TS_MASTER_LEASEQ_H
#define TS_MASTER_LEASEQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

struct leaseq_entry {
    int64_t due_ms;           /* monotonic: the member cannot be declared dead before */
    uint32_t id;
    uint32_t kind;            /* enum ts_member_kind */
};

struct leaseq {
    struct leaseq_entry *v;   /* v[0] the earliest; a heap */
    size_t n, cap;
};

/* Adds an entry; TS_ENOMEM leaves q as it was. */
ts_status leaseq_push(struct leaseq *q, int64_t due_ms, uint32_t kind, uint32_t id,
                      struct ts_err *err) TS_MUST_CHECK;
/* Removes and gives the earliest entry if it is due by now_ms (due_ms <= now_ms); false when
 * none is. */
bool leaseq_pop_due(struct leaseq *q, int64_t now_ms, struct leaseq_entry *out);
void leaseq_free(struct leaseq *q);

#endif
