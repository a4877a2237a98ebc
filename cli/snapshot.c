/* snapshot.c - `tessera snapshot create|list|log|show|diff|rollback|gc|fsck`.
 *
 * create and (with --master) gc go through the master, which holds the snapshot lock. Every
 * other subcommand reads the store directly: --store DIR, or the directory the master at
 * --master reports (the store is a plain directory, local or on a shared filesystem).
 * Exit codes: 0 done, 1 failed (or fsck found damage), 2 usage. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cluster/cluster.h"
#include "rpc/rpc.h"
#include "snapshot/snapshot.h"
#include "util/flags.h"
#include "util/json.h"

struct snap_opts {
    const char *store, *master, *message, *tag, *job, *branch;
    int64_t timeout_ms, grace_s, limit;
    bool json;
    char *pos[3];
    int npos;
};

static int fail(const char *sub, const struct ts_err *e)
{
    fprintf(stderr, "tessera snapshot %s: %s\n", sub, e->msg);
    return 1;
}

void cli_utc_time(int64_t unix_ms, char *out, size_t n)
{
    time_t t = (time_t)(unix_ms / 1000);
    struct tm tm;

    strftime(out, n, "%Y-%m-%d %H:%M:%S UTC", gmtime_r(&t, &tm));
}

/* The store: --store, else the master's (cli.h). */
int cli_open_store(const char *cmd, const char *store, const char *master, int timeout_ms,
                   struct ts_store **s)
{
    char dir[1024] = "";
    struct ts_err err = { 0 };

    if (store) {
        snprintf(dir, sizeof(dir), "%s", store);
    } else {
        const char *addr = ts_master_default_addr(master);
        Tessera__V1__ClusterStatusResponse *cs = NULL;
        struct ts_master *m = NULL;

        if (ts_master_open(addr, &m, &err) || ts_master_status(m, timeout_ms, &cs, &err)) {
            ts_master_close(m);
            fprintf(stderr, "tessera %s: %s\n(give --store DIR to read a store without a "
                            "cluster)\n", cmd, err.msg);
            return 2;
        }
        snprintf(dir, sizeof(dir), "%s", cs->store);
        tessera__v1__cluster_status_response__free_unpacked(cs, NULL);
        ts_master_close(m);
        if (!dir[0]) {
            fprintf(stderr, "tessera %s: the master at %s runs without a store (tessera up "
                            "--store DIR)\n", cmd, addr);
            return 2;
        }
    }
    if (ts_store_open(dir, NULL, s, &err)) {
        fprintf(stderr, "tessera %s: %s\n", cmd, err.msg);
        return 2;
    }
    return 0;
}

/* The master of --master (then $TESSERA_MASTER, then the default); NULL after printing why. */
static struct ts_master *open_master(const struct snap_opts *o, const char *cmd)
{
    struct ts_err err = { 0 };
    struct ts_master *m;

    if (ts_master_open(ts_master_default_addr(o->master), &m, &err)) {
        fail(cmd, &err);
        return NULL;
    }
    return m;
}

static int do_create(const struct snap_opts *o)
{
    Tessera__V1__CreateSnapshotRequest req = TESSERA__V1__CREATE_SNAPSHOT_REQUEST__INIT;
    Tessera__V1__CreateSnapshotResponse *r = NULL;
    struct ts_err err = { 0 };
    struct ts_master *m;
    struct ts_json j;
    ts_status st;

    req.job = (char *)(o->job ? o->job : "");
    req.message = (char *)(o->message ? o->message : "");
    req.tag = (char *)(o->tag ? o->tag : "");
    req.timeout_ms = (uint32_t)o->timeout_ms;
    if (!(m = open_master(o, "create")))
        return 1;
    st = ts_master_create_snapshot(m, &req, (int)o->timeout_ms, &r, &err);
    ts_master_close(m);
    if (st)
        return fail("create", &err);
    if (o->json) {
        ts_json_init(&j);
        ts_json_obj(&j, NULL);
        ts_json_str(&j, "id", r->snapshot->id);
        ts_json_uint(&j, "step", r->snapshot->step);
        ts_json_str(&j, "branch", r->snapshot->branch);
        ts_json_str(&j, "tag", req.tag);
        ts_json_uint(&j, "bytes_written", r->bytes_written);
        ts_json_int(&j, "took_ms", r->took_ms);
        ts_json_end(&j);
        printf("%s\n", j.buf);
        ts_json_fini(&j);
    } else {
        printf("%s\n", r->snapshot->id);
        fprintf(stderr, "snapshot of step %" PRIu64 " on %s: %.1f MB written in %" PRId64
                " ms\n", r->snapshot->step, r->snapshot->branch, r->bytes_written / 1e6,
                r->took_ms);
    }
    tessera__v1__create_snapshot_response__free_unpacked(r, NULL);
    return 0;
}

/* ---- list and log ---- */

struct entry {
    uint8_t id[TS_STORE_ID_LEN];
    ts_manifest *m;
    char names[512];      /* refs pointing here: "heads/main tags/v1" */
    char branch[TS_STORE_REF_MAX + 1]; /* the first branch whose history holds it */
};

static struct entry *find(struct entry *v, size_t n, const uint8_t *id)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(v[i].id, id, TS_STORE_ID_LEN) == 0)
            return &v[i];
    return NULL;
}

static int newest_first(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;

    if (x->m->created_unix_ms != y->m->created_unix_ms)
        return x->m->created_unix_ms < y->m->created_unix_ms ? 1 : -1;
    return x->m->step < y->m->step ? 1 : x->m->step > y->m->step ? -1 : 0;
}

static void append(char *dst, size_t n, const char *word)
{
    size_t len = strlen(dst);

    snprintf(dst + len, n - len, "%s%s", len ? " " : "", word);
}

/* collect()'s walk of one ref's history. */
struct listing {
    struct entry *v;
    size_t n, cap;
    const char *ref;
    bool first;          /* the ref's own snapshot: the ref names it */
};

static ts_status collect_one(void *ctx, const uint8_t id[TS_STORE_ID_LEN], ts_manifest **m,
                             bool *stop, struct ts_err *err)
{
    struct listing *l = ctx;
    struct entry *e = find(l->v, l->n, id);

    if (e && !l->first) {
        *stop = true; /* the rest of this history is listed already */
        return TS_OK;
    }
    if (!e) {
        if (l->n == l->cap) {
            size_t cap = l->cap ? 2 * l->cap : 16;
            struct entry *nv = realloc(l->v, cap * sizeof(*nv));
            if (!nv)
                return ts_err_set(err, TS_ENOMEM, "out of memory");
            l->v = nv;
            l->cap = cap;
        }
        e = &l->v[l->n++];
        memset(e, 0, sizeof(*e));
        memcpy(e->id, id, TS_STORE_ID_LEN);
        e->m = *m; /* kept */
        *m = NULL;
        snprintf(e->branch, sizeof(e->branch), "%s", l->ref);
    }
    if (l->first)
        append(e->names, sizeof(e->names), l->ref);
    l->first = false;
    return TS_OK;
}

static void free_entries(struct entry *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ts_manifest_free(v[i].m);
    free(v);
}

/* Every snapshot reachable from a ref, with the refs naming it. */
static ts_status collect(struct ts_store *s, struct entry **out, size_t *n, struct ts_err *err)
{
    struct ts_store_ref *refs = NULL;
    struct listing l = { 0 };
    size_t nrefs = 0;
    ts_status st = ts_store_ref_list(s, NULL, &refs, &nrefs, err);

    /* Branches first, so that an entry's branch is a branch when one holds it. */
    for (int pass = 0; pass < 2 && !st; pass++)
        for (size_t r = 0; !st && r < nrefs; r++) {
            if ((strncmp(refs[r].name, "heads/", 6) == 0) != (pass == 0))
                continue;
            l.ref = refs[r].name;
            l.first = true;
            if ((st = ts_snap_history(s, refs[r].id, collect_one, &l, err)))
                ts_err_prefix(err, "ref %s", refs[r].name);
        }
    free(refs);
    if (st) {
        free_entries(l.v, l.n);
        return st;
    }
    *out = l.v;
    *n = l.n;
    return TS_OK;
}

static void json_entry(struct ts_json *j, const struct entry *e)
{
    char hex[TS_STORE_HEX_LEN + 1], buf[512], t[64];

    ts_json_obj(j, NULL);
    ts_json_str(j, "id", ts_store_hex(e->id, hex));
    ts_json_uint(j, "step", e->m->step);
    ts_json_str(j, "branch", strncmp(e->branch, "heads/", 6) == 0 ? e->branch + 6 : "");
    ts_json_arr(j, "tags");
    snprintf(buf, sizeof(buf), "%s", e->names);
    for (char *save = NULL, *w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save))
        if (strncmp(w, "tags/", 5) == 0)
            ts_json_str(j, NULL, w + 5);
    ts_json_end(j);
    ts_json_arr(j, "refs");
    snprintf(buf, sizeof(buf), "%s", e->names);
    for (char *save = NULL, *w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save))
        ts_json_str(j, NULL, w);
    ts_json_end(j);
    ts_json_int(j, "created_unix_ms", e->m->created_unix_ms);
    cli_utc_time(e->m->created_unix_ms, t, sizeof(t));
    ts_json_str(j, "time", t);
    ts_json_str(j, "message", e->m->message);
    ts_json_str(j, "parent", e->m->parent.len ? ts_store_hex(e->m->parent.data, hex) : "");
    ts_json_str(j, "job", e->m->job->id);
    ts_json_bool(j, "exact", e->m->job->exact);
    ts_json_end(j);
}

static int do_list(struct ts_store *s, const struct snap_opts *o)
{
    struct entry *v = NULL;
    size_t n = 0;
    struct ts_err err = { 0 };
    char hex[TS_STORE_HEX_LEN + 1], t[64], head[TS_STORE_REF_MAX + 1] = "";

    if (collect(s, &v, &n, &err))
        return fail("list", &err);
    if (n)   /* v is NULL without snapshots */
        qsort(v, n, sizeof(*v), newest_first);
    if (o->json) {
        struct ts_json j;

        ts_json_init(&j);
        ts_json_arr(&j, NULL);
        for (size_t i = 0; i < n; i++)
            json_entry(&j, &v[i]);
        ts_json_end(&j);
        printf("%s\n", j.buf);
        ts_json_fini(&j);
    } else {
        if (ts_store_head_get(s, head, &err))
            snprintf(head, sizeof(head), "unreadable (%s)", err.msg);
        printf("%-12s %8s  %-23s  %s\n", "ID", "STEP", "TIME", "REFS / MESSAGE");
        for (size_t i = 0; i < n; i++) {
            cli_utc_time(v[i].m->created_unix_ms, t, sizeof(t));
            printf("%.12s %8" PRIu64 "  %-23s  %s%s%s\n", ts_store_hex(v[i].id, hex),
                   v[i].m->step, t, v[i].names, v[i].names[0] && v[i].m->message[0] ? "  " : "",
                   v[i].m->message);
        }
        if (!n)
            printf("(no snapshots; take one with tessera snapshot create)\n");
        else
            printf("%zu snapshot%s; HEAD is %s\n", n, n == 1 ? "" : "s", head);
    }
    free_entries(v, n);
    return 0;
}

struct log_walk {
    const struct snap_opts *o;
    struct ts_json j;
    int64_t shown;
};

static ts_status log_one(void *ctx, const uint8_t id[TS_STORE_ID_LEN], ts_manifest **mp,
                         bool *stop, struct ts_err *err)
{
    struct log_walk *w = ctx;
    const ts_manifest *m = *mp;
    char hex[TS_STORE_HEX_LEN + 1], t[64];

    if (w->o->json) {
        struct entry e = { .m = *mp };
        memcpy(e.id, id, TS_STORE_ID_LEN);
        json_entry(&w->j, &e);
    } else {
        cli_utc_time(m->created_unix_ms, t, sizeof(t));
        printf("snapshot %s\nstep     %" PRIu64 "\ndate     %s\njob      %s (%s, %u "
               "workers, %s)\n", ts_store_hex(id, hex), m->step, t, m->job->id,
               m->job->exact ? "exact" : "float", m->job->workers, m->job->optimizer);
        if (m->message[0])
            printf("\n    %s\n", m->message);
        printf("\n");
    }
    *stop = w->o->limit && ++w->shown >= w->o->limit;
    return TS_OK;
}

static int do_log(struct ts_store *s, const struct snap_opts *o)
{
    uint8_t id[TS_STORE_ID_LEN];
    struct ts_err err = { 0 };
    struct log_walk w = { .o = o };
    int rc = 0;

    if (ts_snap_resolve(s, o->npos > 1 ? o->pos[1] : "HEAD", id, NULL, &err))
        return fail("log", &err);
    ts_json_init(&w.j);
    ts_json_arr(&w.j, NULL);
    if (ts_snap_history(s, id, log_one, &w, &err))
        rc = fail("log", &err);
    ts_json_end(&w.j);
    if (!rc && o->json)
        printf("%s\n", w.j.buf);
    ts_json_fini(&w.j);
    return rc;
}

static int do_show(struct ts_store *s, const struct snap_opts *o)
{
    if (o->npos < 2) {
        fprintf(stderr, "tessera snapshot show: name the snapshot: a branch, tag, id or HEAD "
                "(tessera snapshot list shows them)\n");
        return 2;
    }
    return cli_snapshot_show(s, o->pos[1], o->json);
}

static const char *kind_name(int k)
{
    static const char *const names[] = { "same", "changed", "added", "removed", "reshaped" };
    return names[k];
}

/* The tables part of diff's JSON: one object per table. */
static void diff_tables_json(struct ts_json *j, const struct ts_snap_table_diff *t, size_t n)
{
    ts_json_arr(j, "tables");
    for (size_t i = 0; i < n; i++) {
        ts_json_obj(j, NULL);
        ts_json_str(j, "name", t[i].name);
        ts_json_str(j, "change", kind_name(t[i].kind));
        ts_json_uint(j, "rows_a", t[i].rows_a);
        ts_json_uint(j, "rows_b", t[i].rows_b);
        ts_json_uint(j, "rows_added", t[i].added);
        ts_json_uint(j, "rows_removed", t[i].removed);
        ts_json_uint(j, "rows_changed", t[i].changed);
        ts_json_num(j, "l2", t[i].l2);
        ts_json_num(j, "max_abs", t[i].max_abs);
        ts_json_uint(j, "runs", t[i].runs);
        ts_json_uint(j, "runs_shared", t[i].runs_shared);
        ts_json_end(j);
    }
    ts_json_end(j);
}

static void diff_tables_text(const struct ts_snap_table_diff *t, size_t n)
{
    if (!n)
        return;
    printf("\n%-20s %-9s %10s %10s %9s %9s %9s %14s %14s %11s\n", "TABLE", "CHANGE", "ROWS-A",
           "ROWS-B", "ADDED", "REMOVED", "CHANGED", "L2", "MAX-ABS", "RUNS SHARED");
    for (size_t i = 0; i < n; i++)
        printf("%-20s %-9s %10" PRIu64 " %10" PRIu64 " %9" PRIu64 " %9" PRIu64 " %9" PRIu64
               " %14.6g %14.6g %5" PRIu64 "/%-5" PRIu64 "\n", t[i].name, kind_name(t[i].kind),
               t[i].rows_a, t[i].rows_b, t[i].added, t[i].removed, t[i].changed, t[i].l2,
               t[i].max_abs, t[i].runs_shared, t[i].runs);
}

static int do_diff(struct ts_store *s, const struct snap_opts *o)
{
    uint8_t a_id[TS_STORE_ID_LEN], b_id[TS_STORE_ID_LEN];
    ts_manifest *a = NULL, *b = NULL;
    struct ts_snap_tensor_diff *d = NULL;
    struct ts_snap_table_diff *t = NULL;
    struct ts_err err = { 0 };
    size_t n = 0, nt = 0;
    int rc = 0;

    if (o->npos < 3) {
        fprintf(stderr, "tessera snapshot diff: name two snapshots, tessera snapshot diff A B "
                "(branches, tags, ids or HEAD; tessera snapshot list shows them)\n");
        return 2;
    }
    if (ts_snap_resolve(s, o->pos[1], a_id, NULL, &err) ||
        ts_snap_resolve(s, o->pos[2], b_id, NULL, &err) ||
        ts_manifest_load(s, a_id, &a, &err) || ts_manifest_load(s, b_id, &b, &err) ||
        ts_snap_diff(s, a, b, &d, &n, &err) || ts_snap_diff_tables(s, a, b, &t, &nt, &err)) {
        rc = fail("diff", &err);
    } else if (o->json) {
        struct ts_json j;

        ts_json_init(&j);
        ts_json_obj(&j, NULL);
        ts_json_uint(&j, "step_a", a->step);
        ts_json_uint(&j, "step_b", b->step);
        ts_json_arr(&j, "tensors");
        for (size_t i = 0; i < n; i++) {
            ts_json_obj(&j, NULL);
            ts_json_str(&j, "name", d[i].name);
            ts_json_str(&j, "change", kind_name(d[i].kind));
            ts_json_uint(&j, "changed_elements", d[i].changed);
            ts_json_num(&j, "l2", d[i].l2);
            ts_json_num(&j, "max_abs", d[i].max_abs);
            ts_json_uint(&j, "chunks", d[i].chunks);
            ts_json_uint(&j, "chunks_shared", d[i].chunks_shared);
            ts_json_end(&j);
        }
        ts_json_end(&j);
        diff_tables_json(&j, t, nt);
        ts_json_end(&j);
        printf("%s\n", j.buf);
        ts_json_fini(&j);
    } else {
        printf("step %" PRIu64 " -> step %" PRIu64 "\n", a->step, b->step);
        printf("%-20s %-9s %12s %14s %14s %15s\n", "TENSOR", "CHANGE", "ELEMENTS", "L2",
               "MAX-ABS", "CHUNKS SHARED");
        for (size_t i = 0; i < n; i++)
            printf("%-20s %-9s %12" PRIu64 " %14.6g %14.6g %7" PRIu64 "/%-7" PRIu64 "\n",
                   d[i].name, kind_name(d[i].kind), d[i].changed, d[i].l2, d[i].max_abs,
                   d[i].chunks_shared, d[i].chunks);
        diff_tables_text(t, nt);
    }
    free(d);
    free(t);
    ts_manifest_free(a);
    ts_manifest_free(b);
    return rc;
}

static int do_rollback(struct ts_store *s, const struct snap_opts *o)
{
    uint8_t id[TS_STORE_ID_LEN], cur[TS_STORE_ID_LEN];
    static const uint8_t zero[TS_STORE_ID_LEN];
    char hex[TS_STORE_HEX_LEN + 1], ref[TS_STORE_REF_MAX + 8];
    struct ts_err err = { 0 }, e2 = { 0 };

    if (o->npos < 2) {
        fprintf(stderr, "tessera snapshot rollback: name the snapshot to go back to: a branch, "
                "tag or id (tessera snapshot list shows them)\n");
        return 2;
    }
    if (ts_snap_resolve(s, o->pos[1], id, NULL, &err))
        return fail("rollback", &err);
    ts_store_hex(id, hex);
    for (int n = 1; n < 1000; n++) {
        if (o->branch)
            snprintf(ref, sizeof(ref), "heads/%s", o->branch);
        else if (n == 1)
            snprintf(ref, sizeof(ref), "heads/rollback-%.12s", hex);
        else
            snprintf(ref, sizeof(ref), "heads/rollback-%.12s-%d", hex, n);
        if (ts_store_ref_get(s, ref, cur, &e2) == TS_ENOTFOUND || o->branch)
            break;
    }
    if (ts_store_ref_set(s, ref, id, zero, &err) || ts_store_head_set(s, ref, &err)) {
        if (o->branch && err.code == TS_ESTATE)
            fprintf(stderr, "tessera snapshot rollback: branch %s exists; pick another "
                            "--branch\n", o->branch);
        else
            fail("rollback", &err);
        return 1;
    }
    if (o->json) {
        struct ts_json j;
        ts_json_init(&j);
        ts_json_obj(&j, NULL);
        ts_json_str(&j, "branch", ref + 6);
        ts_json_str(&j, "id", hex);
        ts_json_end(&j);
        printf("%s\n", j.buf);
        ts_json_fini(&j);
        return 0;
    }
    printf("branch %s now points at %.12s, and HEAD at it\n", ref + 6, hex);
    printf("restart training from it: tessera up --store DIR --restore %s, then tessera "
           "train --steps K\n", ref + 6);
    return 0;
}

/* gc's --json, from the store or the master (which does not count the snapshots: -1). */
static void print_gc(int64_t snapshots, uint64_t live, uint64_t removed, uint64_t bytes,
                     uint64_t tmp)
{
    struct ts_json j;
    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    if (snapshots >= 0)
        ts_json_int(&j, "snapshots_reachable", snapshots);
    ts_json_uint(&j, "chunks_live", live);
    ts_json_uint(&j, "chunks_removed", removed);
    ts_json_uint(&j, "bytes_removed", bytes);
    ts_json_uint(&j, "tmp_removed", tmp);
    ts_json_end(&j);
    printf("%s\n", j.buf);
    ts_json_fini(&j);
}

static int do_gc(struct ts_store *s, const struct snap_opts *o)
{
    struct ts_store_stats st = { 0 };
    struct ts_err err = { 0 };
    uint8_t (*ids)[TS_STORE_ID_LEN] = NULL;
    size_t n = 0, nm = 0;

    if (ts_snap_live_chunks(s, &ids, &n, &nm, &err) ||
        ts_store_gc(s, (const uint8_t(*)[TS_STORE_ID_LEN])ids, n, (unsigned)o->grace_s, &st,
                    &err)) {
        free(ids);
        return fail("gc", &err);
    }
    free(ids);
    if (o->json)
        print_gc(nm, n, st.removed, st.removed_bytes, st.tmp_removed);
    else
        printf("gc: %zu snapshots reachable, %zu chunks live; removed %" PRIu64 " chunks (%.1f "
               "MB) and %" PRIu64 " stale temporary files\n", nm, n, st.removed,
               st.removed_bytes / 1e6, st.tmp_removed);
    return 0;
}

static int gc_via_master(const struct snap_opts *o)
{
    Tessera__V1__CollectGarbageRequest req = TESSERA__V1__COLLECT_GARBAGE_REQUEST__INIT;
    Tessera__V1__CollectGarbageResponse *r = NULL;
    struct ts_err err = { 0 };
    struct ts_master *m;
    ts_status st;

    req.tmp_grace_s = (uint32_t)o->grace_s;
    if (!(m = open_master(o, "gc")))
        return 1;
    st = ts_master_collect_garbage(m, &req, (int)o->timeout_ms, &r, &err);
    ts_master_close(m);
    if (st)
        return fail("gc", &err);
    if (o->json)
        print_gc(-1, r->chunks_live, r->chunks_removed, r->bytes_removed, r->tmp_removed);
    else
        printf("gc: %" PRIu64 " chunks live; removed %" PRIu64 " chunks (%.1f MB) and %" PRIu64
               " stale temporary files\n", r->chunks_live, r->chunks_removed,
               r->bytes_removed / 1e6, r->tmp_removed);
    tessera__v1__collect_garbage_response__free_unpacked(r, NULL);
    return 0;
}

/* One thing fsck found bad: a line on stdout, or with --json an item of j's "problems". */
static void bad_file(void *ctx, const char *what, const char *name, const struct ts_err *why)
{
    struct ts_json *j = ctx;

    if (!j) {
        printf("BAD %s %s: %s\n", what, name, why->msg);
        return;
    }
    ts_json_obj(j, NULL);
    ts_json_str(j, "what", what);
    ts_json_str(j, "name", name);
    ts_json_str(j, "error", why->msg);
    ts_json_end(j);
}

/* fsck's walk: a snapshot whose chunks are not all there fails the walk (its ref is bad). */
static ts_status whole_one(void *ctx, const uint8_t id[TS_STORE_ID_LEN], ts_manifest **mp,
                           bool *stop, struct ts_err *err)
{
    struct ts_store *s = ctx;
    const ts_manifest *m = *mp;
    char hex[TS_STORE_HEX_LEN + 1];
    size_t missing = 0;

    for (size_t t = 0; t < m->n_tensors; t++)
        for (size_t p = 0; p < m->tensors[t]->n_partitions; p++) {
            const ts_partition_manifest *pm = m->tensors[t]->partitions[p];
            for (size_t c = 0; c < pm->n_value_chunks; c++)
                missing += !ts_store_has(s, pm->value_chunks[c].data);
            for (size_t c = 0; c < pm->n_state_chunks; c++)
                missing += !ts_store_has(s, pm->state_chunks[c].data);
        }
    if (missing)
        return ts_err_set(err, TS_ECORRUPT, "snapshot %.12s misses %zu chunks",
                          ts_store_hex(id, hex), missing);
    return TS_OK;
}

static int do_fsck(struct ts_store *s, const struct snap_opts *o)
{
    struct ts_store_stats st = { 0 };
    struct ts_store_ref *refs = NULL;
    size_t nrefs = 0, bad_refs = 0;
    struct ts_err err = { 0 };
    struct ts_json j;

    fprintf(o->json ? stderr : stdout, "fsck: re-hashing every chunk and manifest ...\n");
    fflush(stdout);
    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_arr(&j, "problems");
    if (ts_store_fsck(s, bad_file, o->json ? &j : NULL, &st, &err) ||
        ts_store_ref_list(s, NULL, &refs, &nrefs, &err)) {
        ts_json_fini(&j);
        return fail("fsck", &err);
    }
    /* Every ref must reach whole snapshots: valid manifests whose chunks all exist. */
    for (size_t r = 0; r < nrefs; r++) {
        struct ts_err e = { 0 };

        if (ts_snap_history(s, refs[r].id, whole_one, s, &e)) {
            bad_file(o->json ? &j : NULL, "ref", refs[r].name, &e);
            bad_refs++;
        }
    }
    free(refs);
    ts_json_end(&j);
    ts_json_uint(&j, "scanned", st.scanned);
    ts_json_uint(&j, "bytes", st.scanned_bytes);
    ts_json_uint(&j, "bad", st.bad);
    ts_json_uint(&j, "bad_refs", bad_refs);
    ts_json_uint(&j, "refs", nrefs);
    ts_json_end(&j);
    if (o->json)
        printf("%s\n", j.buf);
    else
        printf("fsck: %" PRIu64 " files (%.1f MB) checked, %zu refs; %" PRIu64 " bad files, %zu "
               "bad refs\n", st.scanned, st.scanned_bytes / 1e6, nrefs, st.bad, bad_refs);
    ts_json_fini(&j);
    return st.bad || bad_refs ? 1 : 0;
}

static const struct {
    const char *name, *args, *about;
} subs[] = {
    { "create", "[-m MSG] [--tag T] [--job ID]", "snapshot the running job now (via the master); "
                                                 "prints the id" },
    { "list", "", "every snapshot reachable from a branch or tag, newest first" },
    { "log", "[REF]", "the history of REF (default HEAD), newest first" },
    { "show", "REF", "one snapshot: job, schedule, tensors" },
    { "diff", "A B", "which tensors and table rows changed between A and B, by how much, "
                     "chunks and runs shared" },
    { "rollback", "REF [--branch NAME]", "a new branch at REF, made HEAD; restart from it with "
                                         "tessera up --restore" },
    { "gc", "[--grace-s S]", "remove chunks no snapshot reaches (via the master when it runs)" },
    { "fsck", "", "re-hash every chunk and manifest; name what is bad (exit 1)" },
    { NULL, NULL, NULL },
};

int cmd_snapshot(int argc, char **argv)
{
    struct snap_opts o = { .timeout_ms = 60000, .grace_s = 3600, .npos = 3 };
    struct ts_rpc_tls tls = { 0 };
    const struct ts_flag flags[] = {
        { "store", TS_FLAG_STR, &o.store, "DIR", "the store (default: the master's)", 0, 0 },
        { "master", TS_FLAG_STR, &o.master, "ADDR", "master address (default $TESSERA_MASTER, "
                                                    "then 127.0.0.1:7070)", 0, 0 },
        { "m", TS_FLAG_STR, &o.message, "MSG", "create: a message kept with the snapshot", 0,
          0 },
        { "tag", TS_FLAG_STR, &o.tag, "T", "create: also tag it T", 0, 0 },
        { "job", TS_FLAG_STR, &o.job, "ID", "create: the job (default: the only one)", 0, 0 },
        { "branch", TS_FLAG_STR, &o.branch, "NAME", "rollback: the new branch's name", 0, 0 },
        { "json", TS_FLAG_BOOL, &o.json, NULL, "one JSON document on stdout", 0, 0 },
        { "limit", TS_FLAG_INT, &o.limit, "N", "log: at most N snapshots", 0, 1000000000 },
        { "grace-s", TS_FLAG_INT, &o.grace_s, "S", "gc: keep temporary files younger than S "
                                                   "seconds (default 3600)", 0, 100000000 },
        { "timeout-ms", TS_FLAG_INT, &o.timeout_ms, "MS", "master calls (default 60000)", 1,
          3600000 },
        { "token-file", TS_FLAG_STR, &tls.token_file, "FILE", "create, gc: the admin token "
          "(default $TESSERA_TOKEN_FILE; docs/security.md)", 0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    struct ts_err err = { 0 };
    struct ts_store *s = NULL;
    const char *sub;
    bool help;
    int rc;

    if (ts_flags_parse(flags, argc, argv, o.pos, &o.npos, &help, &err) ||
        (!help && ts_rpc_tls_setup(&tls, &err))) {
        fprintf(stderr, "tessera snapshot: %s\n", err.msg);
        return 2;
    }
    if (help || o.npos < 1) {
        FILE *f = help ? stdout : stderr;
        ts_flags_usage(f, "tessera snapshot <subcommand> [args] [options]",
                       "Snapshots of a job's parameters and optimizer state in a content-\n"
                       "addressed store, with branches and tags like git's "
                       "(docs/snapshots.md).", flags);
        fprintf(f, "\nsubcommands:\n");
        for (int i = 0; subs[i].name; i++)
            fprintf(f, "  %-8s %-32s %s\n", subs[i].name, subs[i].args, subs[i].about);
        fprintf(f, "\nA snapshot as a torch file and back: python3 -m tessera.snapshot "
                   "export|import --help\n(docs/python.md, \"Snapshots and torch files\").\n");
        return help ? 0 : 2;
    }
    sub = o.pos[0];
    if (strcmp(sub, "create") == 0)
        return do_create(&o);
    if (strcmp(sub, "gc") == 0 && !o.store)
        return gc_via_master(&o);
    for (int i = 0; subs[i].name; i++)
        if (strcmp(sub, subs[i].name) == 0) {
            char cmd[64];

            snprintf(cmd, sizeof(cmd), "snapshot %s", sub);
            if ((rc = cli_open_store(cmd, o.store, o.master, (int)o.timeout_ms, &s)))
                return rc;
            rc = strcmp(sub, "list") == 0       ? do_list(s, &o)
                 : strcmp(sub, "log") == 0      ? do_log(s, &o)
                 : strcmp(sub, "show") == 0     ? do_show(s, &o)
                 : strcmp(sub, "diff") == 0     ? do_diff(s, &o)
                 : strcmp(sub, "rollback") == 0 ? do_rollback(s, &o)
                 : strcmp(sub, "gc") == 0       ? do_gc(s, &o)
                                                : do_fsck(s, &o);
            ts_store_close(s);
            return rc;
        }
    fprintf(stderr, "tessera snapshot: unknown subcommand '%s' (tessera snapshot --help)\n", sub);
    return 2;
}
