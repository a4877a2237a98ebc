/* fault.c - the fault-injecting wrapper (see fault.h).
 *
 * A corrupted byte is sent as its own one-byte send between the bytes before and after it, so
 * that a 40 MiB payload need not be copied to flip one bit: on a byte stream, three sends are
 * the same bytes as one. A hang-up uses the inner connection's shutdown, not close, because
 * another thread may be blocked in recv on it; the wrapper's close frees it. */
#include "transport/fault.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/proc.h"

struct fault_conn {
    struct ts_conn base;
    struct ts_conn *inner;
    struct ts_fault_cfg cfg;
    uint64_t sends;           /* sender thread only */
    atomic_bool dropped;
};

/* Sends bytes [from, to) of head followed by body, as one inner send. */
static ts_status send_range(struct ts_conn *in, const uint8_t *h, size_t hl, const uint8_t *b,
                            size_t from, size_t to, struct ts_err *e)
{
    const uint8_t *p1 = NULL, *p2 = NULL;
    size_t n1 = 0, n2 = 0, bf;

    if (from < hl) {
        p1 = h + from;
        n1 = (to < hl ? to : hl) - from;
    }
    if (to > hl) {
        bf = from > hl ? from - hl : 0;
        p2 = b + bf;
        n2 = to - hl - bf;
    }
    if (n1 + n2 == 0)
        return TS_OK;
    return ts_tp_send(in, p1, n1, p2, n2, e);
}

static ts_status corrupt(struct fault_conn *f, const uint8_t *h, size_t hl, const uint8_t *b,
                         size_t bl, struct ts_err *e)
{
    size_t off = (size_t)f->cfg.offset, total = hl + bl;
    uint8_t byte;
    ts_status st;

    if (f->cfg.offset >= total)
        return send_range(f->inner, h, hl, b, 0, total, e);
    byte = (off < hl ? h[off] : b[off - hl]) ^ (f->cfg.mask ? f->cfg.mask : 0x01);
    if ((st = send_range(f->inner, h, hl, b, 0, off, e)))
        return st;
    if ((st = ts_tp_send(f->inner, &byte, 1, NULL, 0, e)))
        return st;
    return send_range(f->inner, h, hl, b, off + 1, total, e);
}

static void hang_up(struct fault_conn *f)
{
    atomic_store(&f->dropped, true);
    ts_tp_shutdown(f->inner);
}

static ts_status fault_send(struct ts_conn *base, const void *head, size_t hlen,
                            const void *body, size_t blen, struct ts_err *e)
{
    struct fault_conn *f = (struct fault_conn *)base;
    uint64_t nth = f->cfg.nth ? f->cfg.nth : 1, n, keep;
    size_t total = hlen + blen;
    ts_status st;

    if (atomic_load(&f->dropped))
        return ts_err_set(e, TS_EUNAVAIL, "fault: connection to %s was dropped", base->peer);
    if (f->cfg.delay_ms > 0)
        ts_sleep_ms(f->cfg.delay_ms);
    n = ++f->sends;
    if (n != nth || f->cfg.kind == TS_FAULT_NONE)
        return ts_tp_send(f->inner, head, hlen, body, blen, e);
    switch (f->cfg.kind) {
    case TS_FAULT_CORRUPT:
        return corrupt(f, head, hlen, body, blen, e);
    case TS_FAULT_TRUNCATE:
        keep = f->cfg.keep < total ? f->cfg.keep : total;
        st = send_range(f->inner, head, hlen, body, 0, (size_t)keep, e);
        hang_up(f);
        if (st)
            return st;
        return ts_err_set(e, TS_EUNAVAIL, "fault: send %llu cut after %llu of %zu bytes, then "
                          "hung up (torn)", (unsigned long long)n, (unsigned long long)keep,
                          total);
    case TS_FAULT_DROP:
        hang_up(f);
        return ts_err_set(e, TS_EUNAVAIL, "fault: hung up instead of send %llu",
                          (unsigned long long)n);
    default:
        return ts_err_set(e, TS_EINTERNAL, "fault: kind %d unknown", (int)f->cfg.kind);
    }
}

static ts_status fault_recv(struct ts_conn *base, void *buf, size_t n, int ms, struct ts_err *e)
{
    return ts_tp_recv(((struct fault_conn *)base)->inner, buf, n, ms, e);
}

static ts_status fault_recv_view(struct ts_conn *base, size_t n, const void **p,
                                struct ts_err *e)
{
    return ts_tp_recv_view(((struct fault_conn *)base)->inner, n, p, e);
}

static void fault_release(struct ts_conn *base, size_t n)
{
    ts_tp_release(((struct fault_conn *)base)->inner, n);
}

static void fault_interrupt(struct ts_conn *base)
{
    ts_tp_interrupt(((struct fault_conn *)base)->inner);
}

static void fault_shutdown(struct ts_conn *base)
{
    hang_up((struct fault_conn *)base);
}

static void fault_close(struct ts_conn *base)
{
    struct fault_conn *f = (struct fault_conn *)base;

    ts_tp_close(f->inner);
    free(f);
}

/* A wrapper is made from a connection, never listened for or dialled. */
static ts_status fault_probe(struct ts_err *e)
{
    return TS_OK;
}

static bool fault_usable(const struct ts_blob *peer)
{
    return false;
}

static ts_status fault_listen(const char *host, struct ts_listener **l, struct ts_blob *addr,
                              struct ts_err *e)
{
    return ts_err_set(e, TS_ENOTSUP, "fault: wraps a connection (ts_fault_wrap); no listen");
}

static ts_status fault_accept(struct ts_listener *l, int ms, struct ts_conn **c,
                              struct ts_err *e)
{
    return ts_err_set(e, TS_ENOTSUP, "fault: no accept");
}

static void fault_unlisten(struct ts_listener *l)
{
}

static ts_status fault_connect(const struct ts_blob *to, int ms, struct ts_conn **c,
                               struct ts_err *e)
{
    return ts_err_set(e, TS_ENOTSUP, "fault: wraps a connection (ts_fault_wrap); no connect");
}

static const struct ts_transport_ops fault_ops = {
    .name = "fault",
    .probe = fault_probe,
    .usable = fault_usable,
    .listen = fault_listen,
    .accept = fault_accept,
    .unlisten = fault_unlisten,
    .connect = fault_connect,
    .send = fault_send,
    .recv = fault_recv,
    .recv_view = fault_recv_view,
    .release = fault_release,
    .interrupt = fault_interrupt,
    .shutdown = fault_shutdown,
    .close = fault_close,
};

ts_status ts_fault_wrap(struct ts_conn *inner, const struct ts_fault_cfg *cfg,
                        struct ts_conn **out, struct ts_err *err)
{
    struct fault_conn *f;

    if (!inner || !cfg)
        return ts_err_set(err, TS_EINVAL, "fault wrap: connection and config are required");
    if (cfg->kind > TS_FAULT_DROP || cfg->delay_ms < 0)
        return ts_err_set(err, TS_EINVAL, "fault wrap: kind %d / delay %d ms invalid",
                          (int)cfg->kind, cfg->delay_ms);
    if (!(f = calloc(1, sizeof(*f))))
        return ts_err_set(err, TS_ENOMEM, "fault wrap: out of memory");
    f->base.ops = &fault_ops;
    f->inner = inner;
    f->cfg = *cfg;
    /* A wrapper that corrupts what it sends is no longer a path that cannot alter bytes: its
     * frames must carry payload hashes. Cuts, drops and delays keep local_out, so that torn
     * frames are tested without hashes too. Receiving is inner's, unchanged. */
    f->base.local_in = inner->local_in;
    f->base.local_out = inner->local_out && cfg->kind != TS_FAULT_CORRUPT;
    f->base.view_max = inner->view_max;
    /* The wrapper goes on with inner's byte stream: the padding frame.c owes or expects there. */
    f->base.tx_pad = inner->tx_pad;
    f->base.rx_pad = inner->rx_pad;
    snprintf(f->base.peer, sizeof(f->base.peer), "fault>%.57s", inner->peer);
    *out = &f->base;
    return TS_OK;
}
