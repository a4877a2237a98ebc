/* mac.h - frame MACs on an authenticated data-plane connection (docs/security.md).
 *
 * Once a connection's handshake (auth.h) is done, ts_frame_mac_start gives it one key per
 * direction; from then on frame.c sends every frame with a 16-byte GMAC (AES-256-GCM with no
 * plaintext: the frame's 64 header bytes and its payload as additional data) right behind the
 * header, and refuses a received frame whose tag is missing or wrong. The IV is the frame's
 * number in its direction (never reused under a key: each connection's keys are fresh), so a
 * frame replayed, dropped or reordered fails too. A MAC'd frame carries no XXH3 payload hash:
 * the MAC covers more.
 * Ownership: the state belongs to the connection; ts_tp_close frees it.
 * Threads: the sending and the receiving thread each use their own direction's half. */
#ifndef TS_TRANSPORT_MAC_H
#define TS_TRANSPORT_MAC_H

#include <stddef.h>
#include <stdint.h>

#include "transport/transport.h"

#define TS_FRAME_MAC_LEN 16
#define TS_DP_KEY_LEN 32

/* Frames sent on c from now on carry a MAC under tx; frames received must carry one under
 * rx. TS_ENOMEM, TS_EINTERNAL (libcrypto refused), TS_ESTATE if c has MACs already. */
ts_status ts_frame_mac_start(struct ts_conn *c, const uint8_t tx[TS_DP_KEY_LEN],
                             const uint8_t rx[TS_DP_KEY_LEN], struct ts_err *err) TS_MUST_CHECK;
void ts_frame_mac_free(struct ts_conn *c);

/* frame.c's use: a MAC over pieces of one frame, in order. */
struct ts_mac_dir;
struct ts_mac_dir *ts__mac_tx(struct ts_conn *c);   /* NULL: no MACs on c */
struct ts_mac_dir *ts__mac_rx(struct ts_conn *c);
void ts__mac_begin(struct ts_mac_dir *d);            /* the next frame's number as IV */
void ts__mac_add(struct ts_mac_dir *d, const void *p, size_t n);
/* The tag of the frame begun; false if libcrypto failed (then the frame is refused). */
bool ts__mac_end(struct ts_mac_dir *d, uint8_t tag[TS_FRAME_MAC_LEN]);

#endif
