/* snapshot_branch.c - which branch a master commits to (snapshot.h, snapper_open): --branch,
 * the restored snapshot's branch, a new "from-<id>" or "run-<time>" branch, or, after a
 * restart, the branch it had; HEAD moved to it. */
#include "snapshot.h"
#include "snapshot_internal.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

/* "from-<12 hex>", or with -2, -3... if that branch exists at another snapshot. */
static ts_status new_branch(struct snapper *sn, const char *stem, const uint8_t *at,
                            struct ts_err *err)
{
    uint8_t cur[TS_STORE_ID_LEN];
    struct ts_err e = { 0 };

    for (int n = 1; n < 1000; n++) {
        if (n == 1)
            snprintf(sn->branch, sizeof(sn->branch), "heads/%s", stem);
        else
            snprintf(sn->branch, sizeof(sn->branch), "heads/%s-%d", stem, n);
        ts_status st;

        e = (struct ts_err){ 0 };
        st = ts_store_ref_get(sn->store, sn->branch, cur, &e);
        if (st == TS_ENOTFOUND || (st == TS_OK && at && memcmp(cur, at, sizeof(cur)) == 0))
            return TS_OK;
        if (st && st != TS_ENOTFOUND)
            return ts_err_set(err, st, "%s", e.msg);
    }
    return ts_err_set(err, TS_EEXIST, "store: branches %s-2..999 all exist; use --branch", stem);
}

ts_status snap_resolve_restore(struct snapper *sn, const char *restore,
                                 char named[TS_STORE_REF_MAX + 1], struct ts_err *err)
{
    ts_status st;

    named[0] = '\0';
    if (!restore || !restore[0])
        return TS_OK;
    if ((st = ts_snap_resolve(sn->store, restore, sn->tip, named, err)))
        return st;
    sn->has_tip = true;
    return TS_OK;
}

/* A restarted master goes on committing to the branch it had: the tip is the branch's value
 * now (none if it has no snapshot yet), and HEAD points at it. */
ts_status snap_continue_branch(struct snapper *sn, const char *resume, struct ts_err *err)
{
    struct ts_err e = { 0 };
    ts_status st;

    snprintf(sn->branch, sizeof(sn->branch), "%s", resume);
    if (!ts_store_ref_valid(sn->branch))
        return ts_err_set(err, TS_ECORRUPT, "the state's branch '%s' is not a valid name",
                          resume);
    st = ts_store_ref_get(sn->store, sn->branch, sn->tip, &e);
    if (st && st != TS_ENOTFOUND)
        return ts_err_set(err, st, "%s", e.msg);
    sn->has_tip = st == TS_OK;
    return ts_store_head_set(sn->store, sn->branch, err);
}

ts_status snap_settle_branch(struct snapper *sn, const char *restore, const char *branch,
                               struct ts_err *err)
{
    char named[TS_STORE_REF_MAX + 1] = "", hex[TS_STORE_HEX_LEN + 1], stem[64];
    uint8_t cur[TS_STORE_ID_LEN];
    struct ts_err e = { 0 };
    ts_status st;

    if ((st = snap_resolve_restore(sn, restore, named, err)))
        return st;
    if (branch && branch[0]) {
        snprintf(sn->branch, sizeof(sn->branch), "heads/%s", branch);
        if (!ts_store_ref_valid(sn->branch))
            return ts_err_set(err, TS_EINVAL, "--branch: '%s' is not a valid name", branch);
        e = (struct ts_err){ 0 };
        st = ts_store_ref_get(sn->store, sn->branch, cur, &e);
        if (st == TS_OK && !(sn->has_tip && memcmp(cur, sn->tip, sizeof(cur)) == 0))
            return ts_err_set(err, TS_EEXIST, "--branch: %s exists at another snapshot; pick "
                              "another name", branch);
        if (st && st != TS_ENOTFOUND)
            return ts_err_set(err, st, "%s", e.msg);
    } else if (named[0]) {
        snprintf(sn->branch, sizeof(sn->branch), "%s", named);
    } else if (sn->has_tip) {
        snprintf(stem, sizeof(stem), "from-%.12s", ts_store_hex(sn->tip, hex));
        if ((st = new_branch(sn, stem, sn->tip, err)))
            return st;
    }
    if (sn->has_tip) { /* a new branch starts at the restored snapshot */
        e = (struct ts_err){ 0 };
        st = ts_store_ref_get(sn->store, sn->branch, cur, &e);
        if (st == TS_ENOTFOUND)
            st = ts_store_ref_set(sn->store, sn->branch, sn->tip, NULL, err);
        else if (st)
            st = ts_err_set(err, st, "%s", e.msg);
        if (st)
            return st;
    } else if (!(branch && branch[0])) {
        if ((st = ts_store_head_get(sn->store, sn->branch, err)))
            return st;
        e = (struct ts_err){ 0 };
        st = ts_store_ref_get(sn->store, sn->branch, cur, &e);
        if (st == TS_OK) { /* a fresh run does not continue someone else's history */
            time_t now = time(NULL);
            struct tm tm;

            strftime(stem, sizeof(stem), "run-%Y%m%d-%H%M%S", gmtime_r(&now, &tm));
            if ((st = new_branch(sn, stem, NULL, err)))
                return st;
        } else if (st != TS_ENOTFOUND) {
            return ts_err_set(err, st, "%s", e.msg);
        }
    }
    return ts_store_head_set(sn->store, sn->branch, err);
}

