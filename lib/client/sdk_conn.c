/* sdk_conn.c - the SDK's data-plane connections, the bottom of lib/client: one per alive shard
 * of the cached map, over the transport both ends can use, and their closing with a goodbye.
 * It calls no other file of lib/client; the handshake over them is sdk_reply.c's, what a
 * failover redoes on new ones sdk_failover.c's. */
#include "client/sdk_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/fault.h"
#include "transport/frame.h"
#include "util/hook.h"
#include "util/log.h"

ts_status sdk_connect_shards(struct tessera *t, const char *want, int delay_ms,
                             struct ts_err *err)
{
    uint32_t ids[MAX_SHARDS + 1];
    size_t n = ts_cluster_shard_ids(t->cl, ids, MAX_SHARDS + 1);
    ts_status st = TS_OK;

    /* The cached map: the one every partition's head is then located in. */
    if (!n || n > MAX_SHARDS)
        st = ts_err_set(err, TS_EUNAVAIL, "the cluster has %zu alive shards; start some "
                        "(tessera up --shards N)", n);
    for (size_t i = 0; !st && i < n; i++) {
        struct sdk_shard *sh = &t->conns.shards[t->conns.nshards];

        if ((st = ts_cluster_connect(t->cl, ids[i], want, 10000, &sh->conn, err))) {
            /* Unreachable: refused, or no answer at all (a link cut that drops packets). A
             * failover reports it (sdk_failover.c) and tries again. */
            if (st == TS_EUNAVAIL || st == TS_ETIMEDOUT) {
                t->conns.broken = ids[i];
                st = err->code = TS_EUNAVAIL;
            }
            break;
        }
        sh->shm = !strcmp(ts_tp_name(sh->conn), "shm");
        sh->epoch = ts_cluster_epoch(t->cl);
        sh->left_epoch = 0;
        /* A slower link (benchmarks), or, in a build with test hooks (util/hook.h),
         * $TESSERA_TEST_LINK_CUT=RANK:N: rank RANK's first connection hangs up instead of its
         * Nth send, a link cut in the middle of a step (lib/transport/fault.h). */
        const char *env = t->conns.cut_done ? NULL : ts_hook("TESSERA_TEST_LINK_CUT");
        long long cut = env && strchr(env, ':') && atoll(env) == (long long)t->rank
                        ? atoll(strchr(env, ':') + 1) : 0;
        if (delay_ms || cut > 0) {
            struct ts_fault_cfg fc = { .kind = cut > 0 ? TS_FAULT_DROP : TS_FAULT_NONE,
                                       .nth = cut > 0 ? (uint64_t)cut : 0,
                                       .delay_ms = delay_ms };
            struct ts_conn *w;
            t->conns.cut_done |= cut > 0;
            if ((st = ts_fault_wrap(sh->conn, &fc, &w, err))) {
                ts_tp_close(sh->conn);
                break;
            }
            sh->conn = w;
        }
        sh->id = ids[i];
        pthread_mutex_lock(&t->conns.mu);   /* sdk_follow_epoch sees it from now on */
        t->conns.nshards++;
        pthread_mutex_unlock(&t->conns.mu);
        snprintf(t->conns.transport, sizeof(t->conns.transport), "%s", ts_tp_name(sh->conn));
    }
    return st;
}

void sdk_close_shards(struct tessera *t)
{
    size_t n = t->conns.nshards;

    /* Out of sdk_follow_epoch's sight first: a goodbye to a hung shard may wait until it is
     * shut down (which then cannot happen) for TS_TP_STALL_MS. */
    pthread_mutex_lock(&t->conns.mu);
    t->conns.nshards = 0;
    pthread_mutex_unlock(&t->conns.mu);
    for (size_t i = 0; i < n; i++) {
        struct ts_frame_hdr bye = { .type = TS_FRAME_BYE };
        struct ts_err ignore = { 0 };
        /* Closing on purpose, not dying: an elastic job's shard would report a hang-up
         * without it as this worker's death (docs/elastic.md). */
        if (t->hello.done && !t->conns.shards[i].left_epoch &&
            ts_frame_send(t->conns.shards[i].conn, &bye, NULL, 0, &ignore))
            ts_log(TS_DEBUG, "sdk", "goodbye to shard %u: %s", t->conns.shards[i].id, ignore.msg);
        ts_tp_close(t->conns.shards[i].conn);
    }
    t->hello.done = false;
}

ts_status sdk_slot_of(struct tessera *t, uint32_t shard_id, uint32_t *slot, struct ts_err *err)
{
    for (size_t i = 0; i < t->conns.nshards; i++)
        if (t->conns.shards[i].id == shard_id) {
            *slot = (uint32_t)i;
            return TS_OK;
        }
    return ts_err_set(err, TS_EUNAVAIL, "shard %u joined after this trainer connected: "
                      "reconnect", shard_id);
}
