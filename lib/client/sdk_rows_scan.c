/* sdk_rows_scan.c - a table's fingerprint and row count in the SDK (tessera.h,
 * tessera_table_sha256, tessera_table_rows): every shard's rows paged through in ascending id
 * and merged, as a local run's one store gives them (sdk_rows.c has the rest of the tables). */
#include "sdk_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "transport/frame.h"

#define SCAN_PAGE_BYTES (8u << 20)   /* a fingerprint's page of rows from one shard */
#define SCAN_PAGE_ROWS 4096

/* One shard's side of a fingerprint: a page of its rows (ids, then rows) and where the merge
 * is in it. */
struct scan {
    uint32_t slot;
    uint8_t *page;
    size_t k, at;             /* rows in the page, rows merged of it */
    uint64_t total, got;      /* rows the shard listed, rows received */
};

/* Asks slot sc->slot for the next page of table id's rows (first: from the start, at
 * version) and reads it. */
static ts_status scan_page(struct tessera *t, struct sdk_table *x, int id, uint64_t version,
                           bool first, uint32_t page, struct scan *sc, struct ts_err *err)
{
    struct ts_frame_hdr h = { .type = TS_FRAME_ROWS_SCAN, .tensor = (uint32_t)id,
                              .partition = page, .step = version,
                              .flags = first ? TS_SCAN_FIRST : 0, .rank = t->rank };
    struct reply_info ri = { .upto = true };
    size_t row = sizeof(uint64_t) + x->dim * sizeof(float);
    ts_status st;

    if ((st = ts_frame_send(t->conns.shards[sc->slot].conn, &h, NULL, 0, err))) {
        sdk_note_broken(t, sc->slot, st);
        return st;
    }
    if ((st = sdk_read_reply(t, sc->slot, TS_FRAME_ROWS, (uint32_t)id, page, sc->page,
                             page * row, &ri, err)))
        return st;
    if (ri.len % row || (first && ri.step > UINT64_MAX / 2))
        return ts_err_set(err, TS_ECORRUPT, "shard %u: a scan page of %" PRIu64 " bytes for "
                          "rows of %zu", t->conns.shards[sc->slot].id, ri.len, row);
    if (first)
        sc->total = ri.step;
    sc->k = ri.len / row;
    sc->at = 0;
    sc->got += sc->k;
    if (sc->got > sc->total || (!sc->k && sc->got < sc->total))
        return ts_err_set(err, TS_ECORRUPT, "shard %u: a scan of %" PRIu64 " rows sent %" PRIu64,
                          t->conns.shards[sc->slot].id, sc->total, sc->got);
    return TS_OK;
}

static uint64_t scan_id(const struct scan *sc)
{
    uint64_t id;

    memcpy(&id, sc->page + sc->at * sizeof(uint64_t), sizeof(id));
    return id;
}

/* The merge of every shard's rows into the fingerprint (or only the count, f NULL). */
static ts_status scan_all(struct tessera *t, struct sdk_table *x, int id, uint64_t version,
                          char *hex, uint64_t *count, struct ts_err *err)
{
    size_t row = sizeof(uint64_t) + x->dim * sizeof(float), n = t->conns.nshards;
    uint32_t page = (uint32_t)(SCAN_PAGE_BYTES / row);
    struct scan *sc = calloc(n ? n : 1, sizeof(*sc));
    struct ts_table_fp *f = NULL;
    ts_status st = sc ? TS_OK : ts_err_set(err, TS_ENOMEM, "out of memory");

    if (page > SCAN_PAGE_ROWS)
        page = SCAN_PAGE_ROWS;
    if (page < 1)
        page = 1;
    *count = 0;
    for (size_t s = 0; !st && s < n; s++) {
        sc[s].slot = (uint32_t)s;
        if (!(sc[s].page = malloc(page * row)))
            st = ts_err_set(err, TS_ENOMEM, "out of memory for a scan page");
        if (!st)
            st = scan_page(t, x, id, version, true, page, &sc[s], err);
        *count += st ? 0 : sc[s].total;
    }
    if (!st && hex)
        st = ts_table_fp_begin(x->name, x->dim, *count, &f, err);
    while (!st && hex) {
        size_t best = n;
        for (size_t s = 0; s < n; s++)
            if (sc[s].at < sc[s].k && (best == n || scan_id(&sc[s]) < scan_id(&sc[best])))
                best = s;
        if (best == n)
            break;
        struct scan *b = &sc[best];
        float v[TS_TABLE_DIM_MAX];
        memcpy(v, b->page + b->k * sizeof(uint64_t) + b->at * x->dim * sizeof(float),
               x->dim * sizeof(float));
        ts_table_fp_row(f, scan_id(b), v);
        if (++b->at == b->k && b->got < b->total)
            st = scan_page(t, x, id, version, false, page, b, err);
    }
    ts_table_fp_end(f, st ? NULL : hex);
    for (size_t s = 0; sc && s < n; s++)
        free(sc[s].page);
    free(sc);
    return st;
}

/* A fingerprint's scan, as a failover sends it again (sdk_fail_over): every shard of the new
 * map, whose stores serve the rows of a shard that died. */
struct scan_call {
    struct sdk_table *x;
    int id;
    uint64_t version;
    char *hex;
    uint64_t *count;
};

static ts_status rescan(struct tessera *t, void *ctx, struct ts_err *err)
{
    struct scan_call *c = ctx;

    return scan_all(t, c->x, c->id, c->version, c->hex, c->count, err);
}

/* The fingerprint (hex) or the row count of table id at version. */
static int fingerprint(tessera *t, int id, uint64_t version, char *hex, uint64_t *count,
                       struct tessera_error *e)
{
    struct ts_err err = { 0 };
    struct sdk_table *x;
    ts_status st;

    if ((st = sdk_rows_table_for(t, id, 0, &x, &err)))
        return sdk_fail(e, &err);
    if (t->local) {
        uint64_t *ids = NULL;
        size_t n = 0;
        /* ts_table_ids waits for the version as a pull would */
        if (!(st = ts_table_ids(x->local, version, t->timeout_ms, &ids, &n, &err))) {
            *count = n;
            if (hex)
                st = ts_table_sha256(&x->local, 1, hex, &err);
        }
        free(ids);
    } else {
        struct scan_call c = { x, id, version, hex, count };
        if ((st = scan_all(t, x, id, version, hex, count, &err)))
            st = sdk_rows_recover(t, st, "fingerprint of rows", version, rescan, &c, &err);
    }
    if (st && st != TS_EROLLBACK)
        ts_err_prefix(&err, "table '%s' fingerprint", x->name);
    return st ? sdk_fail(e, &err) : sdk_ok(e);
}

int tessera_table_sha256(tessera *t, int table, uint64_t version, char hex[65],
                         struct tessera_error *e)
{
    uint64_t count;

    return fingerprint(t, table, version, hex, &count, e);
}

int tessera_table_rows(tessera *t, int table, uint64_t version, uint64_t *rows,
                       struct tessera_error *e)
{
    return fingerprint(t, table, version, NULL, rows, e);
}

uint64_t tessera_table_version(const tessera *t, int table)
{
    return table >= 0 && table < t->ntables ? t->tables[table]->version : 0;
}
