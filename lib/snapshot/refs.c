/* refs.c - names for snapshots (HEAD, branches, tags, ids, ~N) and reachability. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snapshot/internal.h"

#define MAX_HISTORY 1000000   /* parents followed before a cycle is assumed */

/* The ref `full` ("heads/x" or "tags/x"): TS_OK, TS_ENOTFOUND (err untouched: a probe) or
 * another error. */
static ts_status try_ref(struct ts_store *s, const char *full, uint8_t id[TS_STORE_ID_LEN],
                         struct ts_err *err)
{
    struct ts_err e = { 0 };
    ts_status st = ts_store_ref_valid(full) ? ts_store_ref_get(s, full, id, &e) : TS_ENOTFOUND;

    if (st && st != TS_ENOTFOUND)
        ts_err_set(err, st, "%s", e.msg);
    return st;
}

/* ref without "~N". */
static ts_status resolve_base(struct ts_store *s, const char *ref, uint8_t id[TS_STORE_ID_LEN],
                              char *branch, struct ts_err *err)
{
    char full[TS_STORE_REF_MAX + 8];
    uint8_t tag_id[TS_STORE_ID_LEN];
    bool is_branch, is_tag;
    size_t n = strlen(ref);
    ts_status st;

    if (strcmp(ref, "HEAD") == 0) {
        if ((st = ts_store_head_get(s, full, err)))
            return st;
        if ((st = ts_store_ref_get(s, full, id, err)) == TS_ENOTFOUND)
            return ts_err_set(err, TS_ENOTFOUND, "HEAD: branch %s has no snapshot yet", full);
        if (!st && branch)
            snprintf(branch, TS_STORE_REF_MAX + 1, "%s", full);
        return st;
    }
    if (strncmp(ref, "heads/", 6) == 0 || strncmp(ref, "tags/", 5) == 0) {
        if ((st = try_ref(s, ref, id, err)) == TS_ENOTFOUND)
            return ts_err_set(err, st, "ref %s: not found (tessera snapshot list shows them)",
                              ref);
        if (!st && branch && ref[0] == 'h')
            snprintf(branch, TS_STORE_REF_MAX + 1, "%s", ref);
        return st;
    }
    if (n > TS_STORE_REF_MAX - 6)
        return ts_err_set(err, TS_EINVAL, "ref '%.64s...': too long", ref);
    snprintf(full, sizeof(full), "heads/%s", ref);
    st = try_ref(s, full, id, err);
    if (st && st != TS_ENOTFOUND)
        return st;
    is_branch = st == TS_OK;
    snprintf(full, sizeof(full), "tags/%s", ref);
    st = try_ref(s, full, tag_id, err);
    if (st && st != TS_ENOTFOUND)
        return st;
    is_tag = st == TS_OK;
    if (is_branch && is_tag && memcmp(id, tag_id, TS_STORE_ID_LEN) != 0)
        return ts_err_set(err, TS_EINVAL, "ref '%s' is both a branch and a tag; say heads/%s "
                          "or tags/%s", ref, ref, ref);
    if (is_branch) {
        if (branch)
            snprintf(branch, TS_STORE_REF_MAX + 1, "heads/%s", ref);
        return TS_OK;
    }
    if (is_tag) {
        memcpy(id, tag_id, TS_STORE_ID_LEN);
        return TS_OK;
    }
    if (n >= 4 && n <= TS_STORE_HEX_LEN && strspn(ref, "0123456789abcdefABCDEF") == n)
        return ts_store_object_find(s, ref, id, err);
    return ts_err_set(err, TS_ENOTFOUND, "ref '%s': no branch, tag or snapshot id of that name "
                      "(tessera snapshot list shows them)", ref);
}

ts_status ts_snap_history(struct ts_store *s, const uint8_t id[TS_STORE_ID_LEN],
                          ts_snap_visit fn, void *ctx, struct ts_err *err)
{
    uint8_t at[TS_STORE_ID_LEN], next[TS_STORE_ID_LEN];
    bool stop = false, root = false;
    ts_status st = TS_OK;

    memcpy(at, id, sizeof(at));
    for (unsigned long depth = 0; !st && !stop && !root; depth++) {
        ts_manifest *m = NULL;

        if (depth > MAX_HISTORY)
            return ts_err_set(err, TS_ECORRUPT, "snapshot history longer than %d: a cycle?",
                              MAX_HISTORY);
        if ((st = ts_manifest_load(s, at, &m, err)))
            break;
        root = m->parent.len != TS_STORE_ID_LEN;
        if (!root)
            memcpy(next, m->parent.data, sizeof(next));
        st = fn(ctx, at, &m, &stop, err);
        ts_manifest_free(m);
        memcpy(at, next, sizeof(at));
    }
    return st;
}

/* ts_snap_resolve's "~N": stops N parents back from where the walk starts. */
struct back_walk {
    unsigned long left;
    bool started;
    uint8_t id[TS_STORE_ID_LEN];
};

static ts_status step_back(void *ctx, const uint8_t id[TS_STORE_ID_LEN], ts_manifest **m,
                           bool *stop, struct ts_err *err)
{
    struct back_walk *w = ctx;

    if (!w->started) { /* the starting snapshot itself */
        w->started = true;
        return TS_OK;
    }
    memcpy(w->id, id, TS_STORE_ID_LEN);
    *stop = --w->left == 0;
    return TS_OK;
}

ts_status ts_snap_resolve(struct ts_store *s, const char *ref, uint8_t id[TS_STORE_ID_LEN],
                          char *branch, struct ts_err *err)
{
    char base[TS_STORE_REF_MAX + 1];
    struct back_walk w = { 0 };
    const char *tilde;
    unsigned long back = 0;
    ts_status st;

    if (branch)
        branch[0] = '\0';
    if (!ref || !ref[0])
        return ts_err_set(err, TS_EINVAL, "ref: required (a branch, tag, id or HEAD)");
    tilde = strchr(ref, '~');
    if (tilde) {
        char *end;

        back = strtoul(tilde + 1, &end, 10);
        if (tilde[1] == '\0')
            back = 1;
        else if (*end || tilde[1] == '-' || back > MAX_HISTORY)
            return ts_err_set(err, TS_EINVAL, "ref '%.64s': after '~' comes a count of parents",
                              ref);
        if ((size_t)(tilde - ref) > TS_STORE_REF_MAX || tilde == ref)
            return ts_err_set(err, TS_EINVAL, "ref '%.64s': no name before '~'", ref);
        snprintf(base, sizeof(base), "%.*s", (int)(tilde - ref), ref);
    } else if (strlen(ref) > TS_STORE_REF_MAX) {
        return ts_err_set(err, TS_EINVAL, "ref '%.64s...': too long", ref);
    } else {
        snprintf(base, sizeof(base), "%s", ref);
    }
    if ((st = resolve_base(s, base, id, back ? NULL : branch, err)) || !back)
        return st;
    w.left = back;
    if ((st = ts_snap_history(s, id, step_back, &w, err)))
        return st;
    if (w.left)
        return ts_err_set(err, TS_ENOTFOUND, "ref '%s': the history has only %lu snapshot%s "
                          "before %s", ref, back - w.left, back - w.left == 1 ? "" : "s", base);
    memcpy(id, w.id, TS_STORE_ID_LEN);
    return TS_OK;
}

/* A set of ids: open addressing on the first 8 bytes (they are SHA-256, so uniform). */
struct idset {
    uint8_t (*v)[TS_STORE_ID_LEN];
    bool *used;
    size_t cap, n;
};

static uint64_t id_hash(const uint8_t *id)
{
    uint64_t h;

    memcpy(&h, id, sizeof(h));
    return h;
}

/* Adds id; *added tells whether it was new. */
static ts_status idset_add(struct idset *s, const uint8_t *id, bool *added, struct ts_err *err)
{
    if (2 * (s->n + 1) > s->cap) {
        struct idset g = { .cap = s->cap ? 2 * s->cap : 64 };
        bool dummy;

        g.v = malloc(g.cap * sizeof(*g.v));
        g.used = calloc(g.cap, sizeof(bool));
        if (!g.v || !g.used) {
            free(g.v);
            free(g.used);
            return ts_err_set(err, TS_ENOMEM, "snapshot: out of memory");
        }
        for (size_t i = 0; i < s->cap; i++)
            if (s->used[i] && idset_add(&g, s->v[i], &dummy, err))
                return TS_ENOMEM; /* cannot happen: g has room */
        free(s->v);
        free(s->used);
        *s = g;
    }
    for (size_t i = id_hash(id) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        if (!s->used[i]) {
            s->used[i] = true;
            memcpy(s->v[i], id, TS_STORE_ID_LEN);
            s->n++;
            *added = true;
            return TS_OK;
        }
        if (memcmp(s->v[i], id, TS_STORE_ID_LEN) == 0) {
            *added = false;
            return TS_OK;
        }
    }
}

static void idset_free(struct idset *s)
{
    free(s->v);
    free(s->used);
}

static ts_status add_one(void *ctx, const uint8_t *id, struct ts_err *err)
{
    bool added;

    return idset_add(ctx, id, &added, err);
}

/* Adds every chunk of m to chunks: its tensors' and its tables'. */
static ts_status add_chunks(struct idset *chunks, const ts_manifest *m, struct ts_err *err)
{
    ts_status st = snap_add_table_chunks(m, add_one, chunks, err);
    bool added;

    for (size_t t = 0; !st && t < m->n_tensors; t++)
        for (size_t p = 0; !st && p < m->tensors[t]->n_partitions; p++) {
            const ts_partition_manifest *pm = m->tensors[t]->partitions[p];
            for (size_t i = 0; !st && i < pm->n_value_chunks; i++)
                st = idset_add(chunks, pm->value_chunks[i].data, &added, err);
            for (size_t i = 0; !st && i < pm->n_state_chunks; i++)
                st = idset_add(chunks, pm->state_chunks[i].data, &added, err);
        }
    return st;
}

/* gc's walk: the chunks of each snapshot not seen yet; a seen one's ancestors are too. */
struct reach {
    struct idset seen, chunks;
};

static ts_status reach_one(void *ctx, const uint8_t id[TS_STORE_ID_LEN], ts_manifest **m,
                           bool *stop, struct ts_err *err)
{
    struct reach *r = ctx;
    bool added;
    ts_status st = idset_add(&r->seen, id, &added, err);

    if (!st && !added)
        *stop = true;
    else if (!st)
        st = add_chunks(&r->chunks, *m, err);
    return st;
}

ts_status ts_snap_live_chunks(struct ts_store *s, uint8_t (**ids)[TS_STORE_ID_LEN], size_t *n,
                              size_t *nmanifests, struct ts_err *err)
{
    struct reach r = { 0 };
    struct ts_store_ref *refs = NULL;
    size_t nrefs = 0, k = 0;
    ts_status st = ts_store_ref_list(s, NULL, &refs, &nrefs, err);

    for (size_t i = 0; !st && i < nrefs; i++)
        if ((st = ts_snap_history(s, refs[i].id, reach_one, &r, err)))
            ts_err_prefix(err, "ref %s", refs[i].name);
    free(refs);
    if (!st && !(*ids = malloc((r.chunks.n + 1) * sizeof(**ids))))
        st = ts_err_set(err, TS_ENOMEM, "snapshot: out of memory");
    for (size_t i = 0; !st && i < r.chunks.cap; i++)
        if (r.chunks.used[i])
            memcpy((*ids)[k++], r.chunks.v[i], TS_STORE_ID_LEN);
    if (!st) {
        *n = k;
        if (nmanifests)
            *nmanifests = r.seen.n;
    }
    idset_free(&r.seen);
    idset_free(&r.chunks);
    return st;
}
