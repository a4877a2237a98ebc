/* dp_rows.c - a sparse table's frames on the data plane (frame.h: ROWS_PUSH, ROWS_PULL,
 * ROWS_SCAN; docs/embeddings.md, "Rows on the wire").
 *
 * A push carries a rank's ids of a step, strictly ascending, and their gradients; lib/table
 * checks them and sums or applies them (table.h), and an ACK answers. A pull carries ids in
 * any order and is answered with their rows once its version may be read. A scan walks the
 * rows that exist in ascending id, a page a request, for a fingerprint: its first request
 * lists the ids (after the version it names), the next ones page through that list on this
 * connection.
 * Waits are cut in slices so that the job's end (dataplane_end_job) or the shard's stop ends
 * them, as a dense pull's. */
#include "dp_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/metrics.h"
#include "tables.h"
#include "transport/frame.h"
#include "util/proc.h"

#define ROWS_SLICE_MS 200           /* how soon a waiting pull sees the job end */
#define SCAN_PAGE_MAX 65536         /* rows a scan reply carries at most */

/* The table a frame names, on a connection that named its job. */
static ts_status table_of(struct dp_conn *dc, const struct ts_frame_hdr *h,
                          struct shard_table **st, struct ts_table **t, struct ts_err *err)
{
    if (!dc->job)
        return ts_err_set(err, TS_ESTATE, "no job: send a HELLO naming a registered job first");
    if (!(*st = shard_params_table(dc->dp->params, dc->job, h->tensor)))
        return ts_err_set(err, TS_ENOTFOUND, "table_id: %u is not a table of job '%s' on this "
                          "shard (register it first)", h->tensor, dc->job->job.id);
    *t = (*st)->t;
    return TS_OK;
}

/* Room for n rows of dim floats in dc->rows. */
static ts_status rows_room(struct dp_conn *dc, size_t n, uint32_t dim, struct ts_err *err)
{
    size_t want = n * dim;

    if (want <= dc->rows_cap)
        return TS_OK;
    float *r = realloc(dc->rows, (want ? want : 1) * sizeof(float));
    if (!r)
        return ts_err_set(err, TS_ENOMEM, "no memory for %zu rows of %u floats", n, dim);
    dc->rows = r;
    dc->rows_cap = want;
    return TS_OK;
}

ts_status dp_rows_push(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *buf,
                       struct ts_err *err)
{
    struct ts_frame_hdr ack = { .type = TS_FRAME_ACK, .tensor = h->tensor, .step = h->step };
    struct shard_table *sht;
    struct ts_table *t;
    size_t n = h->partition, elem = h->encoding == TS_ENC_FIXED ? sizeof(int64_t)
                                                                : sizeof(float);
    bool applied = false;
    ts_status st;

    if ((st = table_of(dc, h, &sht, &t, err)) || (st = dp_owns(dc, h->rank, 0, err)))
        return st;
    if (n > TS_TABLE_PUSH_MAX ||
        h->len != n * (sizeof(uint64_t) + (size_t)ts_table_dim(t) * elem))
        return ts_err_set(err, TS_EINVAL, "table '%s': a push of %zu rows of %u elements of %zu "
                          "bytes, after their ids, is %zu bytes, not %" PRIu64, ts_table_name(t),
                          n, ts_table_dim(t), elem,
                          n * (sizeof(uint64_t) + (size_t)ts_table_dim(t) * elem), h->len);
    const struct ts_row_push in = { .rank = h->rank, .step = h->step, .n = n, .ids = buf,
                                    .encoding = h->encoding,
                                    .grad = (const uint8_t *)buf + n * sizeof(uint64_t) };
    if ((st = ts_table_push(t, &in, &applied, err)))
        return st;
    atomic_fetch_add(&sht->pushed, n);
    ts_counter_add(dc->metrics.updates, applied);
    ts_counter_add(dc->metrics.push_bytes, h->len);
    return ts_frame_send(dc->c, &ack, NULL, 0, err);
}

/* Waits for version want of t in slices, ending with the job (TS_ECANCELLED), then reads ids
 * into dc->rows. */
static ts_status read_rows(struct dp_conn *dc, struct ts_table *t, uint32_t rank, uint64_t want,
                           const uint64_t *ids, size_t n, struct ts_err *err)
{
    int64_t until = ts_now_ms() + DP_PULL_WAIT_MS;
    ts_status st;

    if ((st = rows_room(dc, n, ts_table_dim(t), err)))
        return st;
    for (;;) {
        st = ts_table_pull(t, rank, want, ROWS_SLICE_MS, ids, n, dc->rows, err);
        if (st != TS_ETIMEDOUT || ts_now_ms() >= until)
            return st;
        if (atomic_load(&dc->cancel) & DP_CANCEL_END)
            return ts_err_set(err, TS_ECANCELLED, "table '%s': the pull of version %" PRIu64
                              " ended with its job", ts_table_name(t), want);
        ts_err_clear(err);
    }
}

ts_status dp_rows_pull(struct dp_conn *dc, const struct ts_frame_hdr *h, const void *buf,
                       struct ts_err *err)
{
    struct ts_frame_hdr out = { .type = TS_FRAME_ROWS, .tensor = h->tensor, .step = h->step,
                                .partition = h->partition, .dtype = 1 };
    struct shard_table *sht;
    struct ts_table *t;
    size_t n = h->partition;
    ts_status st;

    if ((st = table_of(dc, h, &sht, &t, err)))
        return st;
    if (n > TS_TABLE_PUSH_MAX || h->len != n * sizeof(uint64_t))
        return ts_err_set(err, TS_EINVAL, "table '%s': a pull of %zu ids is %zu bytes, not %"
                          PRIu64 " (at most %u ids)", ts_table_name(t), n,
                          n * sizeof(uint64_t), h->len, TS_TABLE_PUSH_MAX);
    /* The reply is one frame: no pull makes the shard hold more than a frame's rows. */
    if (n * ts_table_dim(t) * sizeof(float) > TS_FRAME_MAX)
        return ts_err_set(err, TS_EINVAL, "table '%s': %zu rows of %u floats are more than one "
                          "reply frame holds (%u bytes); pull fewer at a time",
                          ts_table_name(t), n, ts_table_dim(t), TS_FRAME_MAX);
    if ((st = read_rows(dc, t, h->rank, h->step, buf, n, err)))
        return st;
    atomic_fetch_add(&sht->pulled, n);
    ts_counter_add(dc->metrics.pull_bytes, n * ts_table_dim(t) * sizeof(float));
    return ts_frame_send(dc->c, &out, dc->rows, n * ts_table_dim(t) * sizeof(float), err);
}

static void scan_end(struct dp_conn *dc)
{
    free(dc->scan_ids);
    dc->scan_ids = NULL;
    dc->scan_n = dc->scan_at = 0;
    dc->scan_table = 0;
}

ts_status dp_rows_scan(struct dp_conn *dc, const struct ts_frame_hdr *h, struct ts_err *err)
{
    struct ts_frame_hdr out = { .type = TS_FRAME_ROWS, .tensor = h->tensor, .dtype = 1 };
    struct shard_table *sht;
    struct ts_table *t;
    size_t k;
    ts_status st;

    if ((st = table_of(dc, h, &sht, &t, err)))
        return st;
    if (h->partition < 1 || h->partition > SCAN_PAGE_MAX)
        return ts_err_set(err, TS_EINVAL, "table '%s': a scan page of %u rows; ask for 1..%d",
                          ts_table_name(t), h->partition, SCAN_PAGE_MAX);
    if (h->flags & TS_SCAN_FIRST) {
        int64_t until = ts_now_ms() + DP_PULL_WAIT_MS;

        scan_end(dc);
        while ((st = ts_table_ids(t, h->step, ROWS_SLICE_MS, &dc->scan_ids, &dc->scan_n,
                                  err)) == TS_ETIMEDOUT && ts_now_ms() < until &&
               !(atomic_load(&dc->cancel) & DP_CANCEL_END))
            ts_err_clear(err);
        if (st)
            return st;
        dc->scan_table = h->tensor + 1;
    }
    if (dc->scan_table != h->tensor + 1)
        return ts_err_set(err, TS_ESTATE, "table '%s': no scan of it is in progress on this "
                          "connection (begin one with TS_SCAN_FIRST)", ts_table_name(t));
    k = dc->scan_n - dc->scan_at;
    if (k > h->partition)
        k = h->partition;
    if (k && (st = read_rows(dc, t, 0, 0, dc->scan_ids + dc->scan_at, k, err)))
        return st;
    const struct iovec parts[2] = {
        { (void *)(dc->scan_ids + dc->scan_at), k * sizeof(uint64_t) },
        { dc->rows, k * ts_table_dim(t) * sizeof(float) },
    };
    out.step = dc->scan_n;
    out.partition = h->partition;   /* the page asked for; the length says how many came */
    dc->scan_at += k;
    return ts_frame_sendv(dc->c, &out, parts, 2, err);
}

void dp_rows_free(struct dp_conn *dc)
{
    scan_end(dc);
    free(dc->rows);
    dc->rows = NULL;
    dc->rows_cap = 0;
}
