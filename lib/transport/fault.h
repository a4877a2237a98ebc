/* fault.h - a transport that wraps a real connection and misbehaves on purpose.
 *
 * Why: the frame layer's promises (a corrupted, torn or dropped frame is refused, never
 * applied; nothing hangs) are only worth what their tests exercise, and real networks fail
 * rarely and not on demand. Like SQLite's crash VFS, the wrapper has the same interface as the
 * backend it wraps, so the code under test cannot tell it apart: tests use it for corruption,
 * torn frames and hang-ups, benchmarks for added latency (delay).
 *
 * Faults act on the bytes of one send (head then body, as the caller passed them) and leave
 * the caller's buffers untouched. Receiving (views too), interrupt and shutdown pass straight
 * through. A CORRUPT wrapper clears local_out (transport.h), so frames sent through it carry
 * payload hashes even over shm or loopback; the other kinds keep the inner connection's.
 * Ownership: ts_fault_wrap takes ownership of inner on success only; closing the wrapper
 * closes inner. Threads: as the wrapped connection's. */
#ifndef TS_TRANSPORT_FAULT_H
#define TS_TRANSPORT_FAULT_H

#include <stdint.h>

#include "transport/transport.h"

enum ts_fault_kind {
    TS_FAULT_NONE = 0,     /* only the delay, if any */
    TS_FAULT_CORRUPT,      /* XOR `mask` into byte `offset` of send `nth` (past its end: none) */
    TS_FAULT_TRUNCATE,     /* send the first `keep` bytes of send `nth`, then hang up */
    TS_FAULT_DROP,         /* hang up instead of send `nth` */
};

struct ts_fault_cfg {
    enum ts_fault_kind kind;
    uint64_t nth;          /* the send it hits, counting from 1 (0 means 1) */
    uint64_t offset;       /* CORRUPT: byte of that send, 0 = its first (frame.c may put up to
                            * 7 bytes of padding in front of a header: frame.h) */
    uint8_t mask;          /* CORRUPT: XORed into the byte (0 means 0x01, one bit) */
    uint64_t keep;         /* TRUNCATE: bytes that still go out */
    int delay_ms;          /* every send sleeps this long first, whatever the kind */
};

/* Wraps inner. After a TRUNCATE or DROP fired, that send and every later one fail with
 * TS_EUNAVAIL, and the peer sees the connection closed (inner is shut down, not freed). */
ts_status ts_fault_wrap(struct ts_conn *inner, const struct ts_fault_cfg *cfg,
                        struct ts_conn **out, struct ts_err *err) TS_MUST_CHECK;

#endif
