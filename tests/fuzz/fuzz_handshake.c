/* fuzz_handshake.c - libFuzzer target: the data-plane handshake's checks of what a peer sent
 * (transport/auth.h).
 *
 * An initiator reads the shard's ACK (its flags, and a payload that should be Ns and a proof)
 * and an acceptor reads the AUTH payload (a proof); both come off the network. input[0] picks
 * the side; input[1..4] are the ACK's flags (initiator); the rest is the payload. With a
 * fixed key and nonces, a random payload must be refused (TS_EAUTH) and leave the connection
 * unkeyed; a payload that is the right proof (the seeds hold one for each side, made by
 * fuzz_seeds) must be taken and key the connection as the flags say. The connection is a
 * real tcp pair on loopback made once; the initiator's AUTH, sent only after a good proof,
 * lands on its other end, drained each run. Seeds: tests/fuzz/corpus-handshake. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "handshake_facts.h"
#include "transport/auth.h"
#include "transport/frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct ts_conn *near_end, *far_end;

static void pair(void)
{
    const struct ts_transport_ops *t = ts_transport_find("tcp");
    struct ts_listener *l = NULL;
    struct ts_blob addr = { 0 };

    if (ts_tp_listen(t, "127.0.0.1", &l, &addr, NULL) ||
        ts_tp_connect(t, &addr, 5000, &near_end, NULL) ||
        ts_tp_accept(l, 5000, &far_end, NULL))
        abort();
    ts_tp_unlisten(l);
}


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t drain[4096];
    struct ts_frame_hdr ack = { .type = TS_FRAME_ACK }, h;
    struct ts_dp_hs hs;
    ts_status st;

    if (!near_end)
        pair();
    if (size < 5)
        return 0;
    handshake_facts(&hs);
    near_end->authed = false;
    ts_frame_mac_free(near_end);
    if (data[0] & 1) {   /* the acceptor, reading AUTH */
        uint8_t want[TS_DP_TAG_LEN];
        ts_dp_proof(&hs, true, want);
        st = ts_dp_accept_auth(near_end, &hs, data + 5, size - 5, (data[1] & 1) != 0, NULL);
        if ((st == TS_OK) != (size - 5 == TS_DP_TAG_LEN && !memcmp(data + 5, want, sizeof(want))))
            abort();
    } else {             /* the initiator, reading the ACK */
        uint8_t want[TS_DP_TAG_LEN];
        uint32_t flags;
        memcpy(&flags, data + 1, 4);
        ack.flags = flags;
        ack.len = size - 5;
        memcpy(hs.ns, data + 5, size - 5 >= TS_DP_NONCE_LEN ? TS_DP_NONCE_LEN : 0);
        ts_dp_proof(&hs, false, want);
        handshake_facts(&hs);
        st = ts_dp_initiate_finish(near_end, &hs, &ack, data + 5, NULL);
        if ((st == TS_OK) != ((flags & TS_ACK_AUTH) && size - 5 == TS_DP_ACK_LEN &&
                              !memcmp(data + 5 + TS_DP_NONCE_LEN, want, sizeof(want))))
            abort();
        if (st == TS_OK &&   /* its AUTH went out: take it off the other end */
            ts_frame_recv(far_end, &h, drain, sizeof(drain), 1000, NULL))
            abort();
    }
    if (st == TS_OK && (!near_end->authed || (near_end->mac != NULL) !=
                        ((data[0] & 1) ? (data[1] & 1) != 0 : (ack.flags & TS_ACK_MAC) != 0)))
        abort();
    if (st != TS_OK && (near_end->authed || near_end->mac))
        abort();
    return 0;
}
