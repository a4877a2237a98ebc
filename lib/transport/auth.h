/* auth.h - the data plane's handshake: both ends prove they hold the connection's key, which
 * binds the connection to one sender, then key the connection's frame MACs (mac.h).
 * docs/security.md, "The data plane" and "Pushes bound to their sender".
 *
 * Keys. The master makes one cluster data key at its first start (kept in its state) and
 * never hands it out. A job's key is HMAC-SHA256(cluster key, "tessera job key\0" job); the
 * master gives it, under mutual TLS, to the shards that ask for the job (JobAccess). A worker
 * gets only its own key in the job, HMAC-SHA256(job key, "tessera member key\0" worker id),
 * which the shards derive from the job's key and the worker id its HELLO names: the
 * handshake proves that id, and the shard takes from the connection only pushes of the slots
 * that worker owns. The links between the shards of a partition's chain use the job's chain
 * key, HMAC-SHA256(job key, "tessera chain key\0"), which no worker can derive.
 *
 * Handshake, on the HELLO the initiator sends first anyway (its `rank`, and the worker id in
 * its `tensor` field, are the member the key is for):
 *   HELLO  flags TS_HELLO_AUTH (| TS_HELLO_CHAIN); payload: job id, then a fresh 16-byte Nc
 *   ACK    flags TS_ACK_AUTH (| TS_ACK_MAC); payload: a fresh Ns, then
 *          HMAC(key, "A" Nc Ns rank member job)        - the acceptor holds the key
 *   AUTH   payload: HMAC(key, "I" Nc Ns rank member job) - so does the initiator; no reply
 * Both nonces are in both proofs, so a recorded handshake replayed meets a new Ns and fails.
 * From AUTH on, with TS_ACK_MAC (the acceptor's choice, ts_dp_mac_wanted), every frame each
 * way carries a MAC under its own session key, HMAC(key, "i>a" or "a>i", Nc Ns rank member
 * job).
 * Ownership: plain values; keys are wiped by the callers when done. Threads: none shared. */
#ifndef TS_TRANSPORT_AUTH_H
#define TS_TRANSPORT_AUTH_H

#include <stdbool.h>
#include <stdint.h>

#include "transport/frame.h"
#include "transport/mac.h"

#define TS_DP_NONCE_LEN 16
#define TS_DP_TAG_LEN 32
#define TS_DP_ACK_LEN (TS_DP_NONCE_LEN + TS_DP_TAG_LEN)

/* One handshake's facts, the same at both ends. */
struct ts_dp_hs {
    uint8_t key[TS_DP_KEY_LEN];     /* the job's key, or its chain key */
    uint8_t nc[TS_DP_NONCE_LEN], ns[TS_DP_NONCE_LEN];
    const char *job;                /* borrowed */
    uint32_t rank;                  /* the HELLO's */
    uint32_t member;                /* the HELLO's worker id (0 on a chain link) */
};

/* The job's key from the cluster data key (the master's). */
void ts_dp_job_key(const uint8_t cluster[TS_DP_KEY_LEN], const char *job,
                   uint8_t out[TS_DP_KEY_LEN]);
/* Worker `member`'s key in a job, and the job's chain key, from the job's key. */
void ts_dp_member_key(const uint8_t job_key[TS_DP_KEY_LEN], uint32_t member,
                      uint8_t out[TS_DP_KEY_LEN]);
void ts_dp_chain_key(const uint8_t job_key[TS_DP_KEY_LEN], uint8_t out[TS_DP_KEY_LEN]);
/* Fresh random bytes from libcrypto. */
ts_status ts_dp_nonce(uint8_t out[TS_DP_NONCE_LEN], struct ts_err *err) TS_MUST_CHECK;
/* Whether frames on c should carry MACs: $TESSERA_DATA_MAC "always", "never", or "tcp" (the
 * default: on connections that leave the host, not on shm; docs/security.md says why). */
bool ts_dp_mac_wanted(const struct ts_conn *c);

/* The proof an end sends for hs: the initiator's (its AUTH payload) or the acceptor's. */
void ts_dp_proof(const struct ts_dp_hs *hs, bool initiator, uint8_t out[TS_DP_TAG_LEN]);

/* Acceptor, on a HELLO with TS_HELLO_AUTH: picks Ns (into hs) and writes the ACK's payload. */
ts_status ts_dp_accept_hello(struct ts_dp_hs *hs, uint8_t ack[TS_DP_ACK_LEN],
                             struct ts_err *err) TS_MUST_CHECK;
/* Acceptor, on the AUTH frame: checks the initiator's proof (TS_EAUTH if wrong) and keys c
 * (MACs when mac: what its ACK said). */
ts_status ts_dp_accept_auth(struct ts_conn *c, const struct ts_dp_hs *hs, const void *payload,
                            size_t len, bool mac, struct ts_err *err) TS_MUST_CHECK;
/* Initiator, on the ACK of its HELLO: checks the acceptor's proof (TS_EAUTH if wrong or
 * missing), sends AUTH and keys c as the ACK's flags say. */
ts_status ts_dp_initiate_finish(struct ts_conn *c, struct ts_dp_hs *hs,
                                const struct ts_frame_hdr *ack, const void *payload,
                                struct ts_err *err) TS_MUST_CHECK;

#endif
