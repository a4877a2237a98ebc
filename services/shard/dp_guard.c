/* dp_guard.c - what a data-plane connection must show before the shard trusts it, and the
 * count of everything the data plane refused, by reason (docs/security.md, "Bounded before
 * trust" and "Refusals").
 *
 * A connection is trusted once it did the handshake, where the shard requires one (mutual
 * TLS), or once its HELLO was answered, where it does not. Before that it costs the shard as
 * little as it can and cannot hold anything for long:
 *   - its frames may carry at most DP_UNTRUSTED_FRAME bytes (a HELLO is a job id and a nonce;
 *     an AUTH is a proof): a longer one is refused on its header, before a payload byte is
 *     read, and the receive buffer of TS_FRAME_MAX bytes is made only once it is trusted;
 *   - it must be trusted within DP_UNTRUSTED_MS, or it is closed;
 *   - at most DP_UNTRUSTED_MAX connections are untrusted at once, DP_SOURCE_MAX of them from one
 *     source (a host; every shm peer is one source): past either cap the oldest untrusted one
 *     (of that source, or of all) is cut for the newcomer, never the newcomer, so a flood of
 *     silent connections, even from a real worker's own host, delays that worker by at most
 *     its own handshake;
 *   - the shard serves at most max_conns connections in all (--max-conns): one thread each,
 *     since a pull blocks its connection until the step completes (dataplane.c), and a pool
 *     smaller than the connections could leave a step's last push without a thread.
 * Nothing a connection sends can make another wait: the listener accepts and hands on. */
#include "dp_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "util/log.h"
#include "util/proc.h"

static const char *const refusal_names[DP_REFUSED_N] = {
    [DP_REFUSED_HANDSHAKE] = "handshake", [DP_REFUSED_CORRUPT] = "corrupt",
    [DP_REFUSED_MAC] = "mac",             [DP_REFUSED_IDENTITY] = "identity",
    [DP_REFUSED_CONFLICT] = "conflict",   [DP_REFUSED_KIND] = "kind",
    [DP_REFUSED_OVERSIZE] = "oversize",   [DP_REFUSED_IDLE] = "idle",
    [DP_REFUSED_FLOOD] = "flood",         [DP_REFUSED_PEER] = "peer",
};

const char *dataplane_refusal_name(enum dp_refusal r)
{
    return r < DP_REFUSED_N ? refusal_names[r] : "unknown";
}

void dataplane_refusals(struct dataplane *dp, uint64_t out[DP_REFUSED_N])
{
    for (int r = 0; r < DP_REFUSED_N; r++)
        out[r] = atomic_load(&dp->refused[r]);
}

void dp_refuse(struct dataplane *dp, enum dp_refusal why, const char *peer, const char *msg)
{
    uint64_t n = atomic_fetch_add(&dp->refused[why], 1) + 1;

    /* The first ten of a reason, then one in a thousand: a flood must not fill the log. */
    if (n <= 10 || n % 1000 == 0)
        ts_log(TS_WARN, "dataplane", "refused (%s, %" PRIu64 " so far): %s: %s",
               refusal_names[why], n, peer, msg);
}

void dp_refuse_frame(struct dp_conn *dc, const struct ts_err *err)
{
    enum dp_refusal why = DP_REFUSED_CORRUPT;

    if (dc->c->refusal == TS_FRAME_REFUSED_MAC)
        why = DP_REFUSED_MAC;
    else if (dc->c->refusal == TS_FRAME_REFUSED_OVERSIZE && !atomic_load(&dc->trusted))
        why = DP_REFUSED_OVERSIZE;
    dp_refuse(dc->dp, why, dc->c->peer, err->msg);
}

/* The source of a peer: its name without the port ("tcp:10.0.0.5:4123" -> "tcp:10.0.0.5";
 * every "shm:pid N" -> "shm"). */
static void source_of(const char *peer, char *out, size_t n)
{
    const char *colon = strrchr(peer, ':');

    snprintf(out, n, "%.*s", colon ? (int)(colon - peer) : (int)strlen(peer), peer);
}

/* Cuts o, an untrusted connection, to make room: its thread sees the hang-up and ends. */
static void cut(struct dataplane *dp, struct dp_conn *o, const char *why)
{
    atomic_store(&o->cut, true);
    ts_tp_shutdown(o->c);
    dp_refuse(dp, DP_REFUSED_FLOOD, o->c->peer, why);
}

bool dp_guard_admit(struct dataplane *dp, struct dp_conn *dc)
{
    struct dp_conn *oldest = NULL, *oldest_here = NULL;
    size_t all = 0, untrusted = 0, same = 0;

    source_of(dc->c->peer, dc->source, sizeof(dc->source));
    dc->born_ms = ts_now_ms();
    for (struct dp_conn *o = dp->conns; o; o = o->next) {
        if (atomic_load(&o->done))
            continue;
        all++;
        if (atomic_load(&o->trusted) || atomic_load(&o->cut))
            continue;
        untrusted++;
        if (!oldest || o->born_ms < oldest->born_ms)
            oldest = o;
        if (strcmp(o->source, dc->source))
            continue;
        same++;
        if (!oldest_here || o->born_ms < oldest_here->born_ms)
            oldest_here = o;
    }
    if (all >= dp->max_conns) {
        dp_refuse(dp, DP_REFUSED_FLOOD, dc->c->peer, "the shard serves its --max-conns "
                  "connections already; closed");
        return false;
    }
    /* The oldest goes, not the newcomer: a real worker's handshake follows its connect at
     * once, so it is the newest, and a flood from its own host cannot keep it out. */
    if (same >= DP_SOURCE_MAX && oldest_here)
        cut(dp, oldest_here, "the oldest of too many connections from its host that have "
            "not said HELLO (or done the handshake) yet; cut");
    else if (untrusted >= DP_UNTRUSTED_MAX && oldest)
        cut(dp, oldest, "the oldest of too many connections that have not said HELLO (or "
            "done the handshake) yet; cut");
    return true;
}

size_t dp_guard_cap(const struct dp_conn *dc)
{
    return atomic_load(&dc->trusted) ? TS_FRAME_MAX : DP_UNTRUSTED_FRAME;
}

bool dp_guard_expired(struct dp_conn *dc)
{
    if (atomic_load(&dc->trusted) || ts_now_ms() - dc->born_ms < DP_UNTRUSTED_MS)
        return false;
    dp_refuse(dc->dp, DP_REFUSED_IDLE, dc->c->peer, "no HELLO (or handshake) within the "
              "limit; closed");
    return true;
}

void dp_guard_trust(struct dp_conn *dc)
{
    if (dc->dp->require_auth && !dc->c->authed)
        return;
    atomic_store(&dc->trusted, true);
}
