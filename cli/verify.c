/* verify.c - `tessera verify compare A B`: an audit of two model states, no cluster needed.
 *
 * A and B are snapshot refs in a store (--store DIR, or the running master's) or files (.npy,
 * raw float32). lib/audit does the work; this file renders the report as text or JSON.
 * Exit codes: 0 the audit passes, 1 it fails, 2 usage or I/O errors. docs/verify.md. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/audit.h"
#include "cli.h"
#include "cluster/cluster.h"
#include "data/data.h"
#include "snapshot/snapshot.h"
#include "util/flags.h"
#include "util/json.h"

static const char *verdict(bool ok)
{
    return ok ? "PASS" : "FAIL";
}

static void print_text(const struct ts_audit_state *a, const struct ts_audit_state *b,
                       const struct ts_audit_report *r)
{
    printf("A: %s\nB: %s\n\n", a->label, b->label);
    if (r->levels & (TS_AUDIT_BITS | TS_AUDIT_COSINE)) {
        printf("%-20s %12s %12s %10s %12s %12s %14s\n", "TENSOR", "ELEMENTS", "DIFFERING",
               "MAX ULP", "MAX ABS", "MAX REL", "COSINE");
        for (size_t i = 0; i < r->n; i++) {
            const struct ts_audit_tensor *t = &r->tensors[i];
            if (t->only_a || t->only_b || t->shape_differs) {
                printf("%-20s %12" PRIu64 "  %s\n", t->name, t->numel,
                       t->only_a ? "only in A" : t->only_b ? "only in B"
                       : strncmp(t->name, "table:", 6) ? "shapes differ"
                                                       : "dims differ");
                continue;
            }
            if (t->rows_differ)   /* bits not compared; the cosine over the common rows */
                printf("%-20s %12" PRIu64 "  %-48s %14.10f\n", t->name, t->numel,
                       "rows differ (other ids)", t->cosine);
            else
                printf("%-20s %12" PRIu64 " %12" PRIu64 " %10" PRIu64 " %12.4g %12.4g "
                       "%14.10f\n", t->name, t->numel, t->bits.ndiff, t->bits.max_ulp,
                       t->bits.max_abs, t->bits.max_rel, t->cosine);
            if (t->bits.has_diff)
                printf("%-20s first difference at [%" PRIu64 "]: %.9g vs %.9g\n", "",
                       t->bits.first_index, t->bits.first_a, t->bits.first_b);
            if (t->table)
                printf("%-20s rows: %" PRIu64 " common, %" PRIu64 " only in A, %" PRIu64
                       " only in B; cosine over %" PRIu64 " sampled, least row cosine "
                       "%.10f\n", "", t->rows_common, t->rows_only_a, t->rows_only_b,
                       t->rows_sampled, t->row_cosine_min);
        }
    }
    if (r->model && (r->levels & TS_AUDIT_COSINE))
        printf("\nlayer outputs on %d probe images, cosine: fc1 %.10f  fc2 %.10f  logits "
               "%.10f\n", r->probe, r->layer_cosine[0], r->layer_cosine[1], r->layer_cosine[2]);
    if (r->levels & TS_AUDIT_DIST) {
        printf("\ndistribution of the %s%s:\n", r->dist_of,
               r->model ? " on the probe images" : "");
        printf("  KS statistic %.6g, p-value %.6g (%s)\n", r->ks.statistic, r->ks.pvalue,
               r->ks.method == TS_VERIFY_KS_EXACT ? "exact" : "asymptotic");
        printf("  PSI %.6g, Jensen-Shannon distance %.6g\n", r->psi, r->js_distance);
        printf("  mean/std A %.6g / %.6g, B %.6g / %.6g\n", r->mean_a, r->std_a, r->mean_b,
               r->std_b);
        if (r->model)
            printf("  accuracy on the probe: A %.4f, B %.4f\n", r->accuracy_a, r->accuracy_b);
    }
    printf("\n");
    if (r->levels & TS_AUDIT_BITS)
        printf("bits:   %s%s\n", verdict(r->pass_bits),
               r->pass_bits ? " (bit-identical)" : "");
    if (r->levels & TS_AUDIT_COSINE)
        printf("cosine: %s\n", verdict(r->pass_cosine));
    if (r->levels & TS_AUDIT_DIST)
        printf("dist:   %s\n", verdict(r->pass_dist));
    printf("audit:  %s\n", verdict(r->pass));
}

static void print_json(const struct ts_audit_state *a, const struct ts_audit_state *b,
                       const struct ts_audit_report *r)
{
    struct ts_json j;

    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "a", a->label);
    ts_json_str(&j, "b", b->label);
    ts_json_bool(&j, "pass", r->pass);
    if (r->levels & TS_AUDIT_BITS)
        ts_json_bool(&j, "pass_bits", r->pass_bits);
    if (r->levels & TS_AUDIT_COSINE)
        ts_json_bool(&j, "pass_cosine", r->pass_cosine);
    if (r->levels & TS_AUDIT_DIST)
        ts_json_bool(&j, "pass_dist", r->pass_dist);
    ts_json_arr(&j, "tensors");
    for (size_t i = 0; i < r->n; i++) {
        const struct ts_audit_tensor *t = &r->tensors[i];
        ts_json_obj(&j, NULL);
        ts_json_str(&j, "name", t->name);
        ts_json_uint(&j, "elements", t->numel);
        ts_json_bool(&j, "only_a", t->only_a);
        ts_json_bool(&j, "only_b", t->only_b);
        ts_json_bool(&j, "shape_differs", t->shape_differs);
        if (t->table) {
            ts_json_bool(&j, "rows_differ", t->rows_differ);
            ts_json_obj(&j, "rows");
            ts_json_uint(&j, "common", t->rows_common);
            ts_json_uint(&j, "only_a", t->rows_only_a);
            ts_json_uint(&j, "only_b", t->rows_only_b);
            ts_json_uint(&j, "sampled", t->rows_sampled);
            ts_json_num(&j, "cosine", t->cosine);
            ts_json_num(&j, "row_cosine_min", t->row_cosine_min);
            ts_json_end(&j);
            if (t->rows_differ)
                ts_json_num(&j, "cosine", t->cosine);
        }
        if (!t->only_a && !t->only_b && !t->shape_differs && !t->rows_differ) {
            ts_json_uint(&j, "differing", t->bits.ndiff);
            ts_json_uint(&j, "nan_pairs", t->bits.nnan);
            ts_json_uint(&j, "max_ulp", t->bits.max_ulp);
            ts_json_num(&j, "max_abs", t->bits.max_abs);
            ts_json_num(&j, "max_rel", t->bits.max_rel);
            ts_json_uint(&j, "blocks_differing", t->bits.nblocks_diff);
            if (t->bits.has_diff) {
                ts_json_uint(&j, "first_index", t->bits.first_index);
                ts_json_num(&j, "first_a", t->bits.first_a);
                ts_json_num(&j, "first_b", t->bits.first_b);
            }
            ts_json_num(&j, "cosine", t->cosine);
        }
        ts_json_end(&j);
    }
    ts_json_end(&j);
    if (r->model && (r->levels & TS_AUDIT_COSINE)) {
        ts_json_obj(&j, "layer_cosine");
        ts_json_num(&j, "fc1", r->layer_cosine[0]);
        ts_json_num(&j, "fc2", r->layer_cosine[1]);
        ts_json_num(&j, "logits", r->layer_cosine[2]);
        ts_json_uint(&j, "probe_images", (uint64_t)r->probe);
        ts_json_end(&j);
    }
    if (r->levels & TS_AUDIT_DIST) {
        ts_json_obj(&j, "dist");
        ts_json_str(&j, "of", r->dist_of);
        ts_json_num(&j, "ks_statistic", r->ks.statistic);
        ts_json_num(&j, "ks_pvalue", r->ks.pvalue);
        ts_json_str(&j, "ks_method", r->ks.method == TS_VERIFY_KS_EXACT ? "exact" : "asymp");
        ts_json_num(&j, "psi", r->psi);
        ts_json_num(&j, "js_distance", r->js_distance);
        ts_json_num(&j, "mean_a", r->mean_a);
        ts_json_num(&j, "std_a", r->std_a);
        ts_json_num(&j, "mean_b", r->mean_b);
        ts_json_num(&j, "std_b", r->std_b);
        if (r->model) {
            ts_json_num(&j, "accuracy_a", r->accuracy_a);
            ts_json_num(&j, "accuracy_b", r->accuracy_b);
        }
        ts_json_arr(&j, "hist_edges");
        for (int i = 0; i <= TS_AUDIT_HIST_BINS; i++)
            ts_json_num(&j, NULL, r->edges[i]);
        ts_json_end(&j);
        ts_json_arr(&j, "hist_a");
        for (int i = 0; i < TS_AUDIT_HIST_BINS; i++)
            ts_json_uint(&j, NULL, r->hist_a[i]);
        ts_json_end(&j);
        ts_json_arr(&j, "hist_b");
        for (int i = 0; i < TS_AUDIT_HIST_BINS; i++)
            ts_json_uint(&j, NULL, r->hist_b[i]);
        ts_json_end(&j);
        ts_json_end(&j);
    }
    ts_json_end(&j);
    printf("%s\n", j.buf);
    ts_json_fini(&j);
}

/* `tessera verify data DIR REF`: the data in DIR against the map in snapshot REF. */
static int verify_data(const char *dir, const char *ref, struct ts_store *s, bool json)
{
    struct ts_dataset d = { 0 };
    struct ts_data_checksum *cs = NULL;
    uint8_t id[TS_STORE_ID_LEN];
    ts_manifest *m = NULL;
    struct ts_err err = { 0 };
    size_t n = 0, bad = 0, missing = 0;
    bool pass;
    struct ts_json j;

    if (!s) {
        fprintf(stderr, "tessera verify data: name the store that holds REF: --store DIR, or "
                "--master ADDR for the running cluster's\n");
        return 2;
    }
    if (ts_snap_resolve(s, ref, id, NULL, &err) || ts_manifest_load(s, id, &m, &err) ||
        ts_fmnist_load(dir, true, &d, &err)) {
        fprintf(stderr, "tessera verify data: %s\n", err.msg);
        ts_manifest_free(m);
        return 2;
    }
    if (!m->n_data_checksums) {
        fprintf(stderr, "tessera verify data: snapshot %s holds no data checksums (taken before "
                        "workers checked their data?)\n", ref);
        ts_manifest_free(m);
        ts_data_free(&d);
        return 2;
    }
    n = ts_data_checksum_count(&d);
    cs = calloc(n + 1, sizeof(*cs));
    if (cs)
        ts_data_checksums(&d, "train", cs);
    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_arr(&j, "mismatches");
    for (size_t i = 0; cs && i < n; i++) {
        const Tessera__V1__Manifest__DataChecksumsEntry *e = NULL;
        for (size_t k = 0; k < m->n_data_checksums && !e; k++)
            if (strcmp(m->data_checksums[k]->key, cs[i].name) == 0)
                e = m->data_checksums[k];
        if (e && memcmp(e->value.data, cs[i].sha256, 32) == 0)
            continue;
        missing += !e;
        bad += e != NULL;
        if (json) {
            ts_json_obj(&j, NULL);
            ts_json_str(&j, "partition", cs[i].name);
            ts_json_str(&j, "file", cs[i].file);
            ts_json_str(&j, "problem", e ? "differs" : "not in the snapshot's map");
            ts_json_end(&j);
        } else {
            printf("MISMATCH %s (%s/%s): %s\n", cs[i].name, dir, cs[i].file,
                   e ? "SHA-256 differs from the snapshot's" : "not in the snapshot's map");
        }
    }
    ts_json_end(&j);
    ts_json_uint(&j, "partitions", n);
    pass = cs && !bad && !missing && n == m->n_data_checksums;
    ts_json_uint(&j, "snapshot_partitions", m->n_data_checksums);
    ts_json_bool(&j, "pass", pass);
    ts_json_end(&j);
    if (json)
        printf("%s\n", j.buf);
    else
        printf("data: %zu partitions of %s checked against snapshot %s: %zu differ, %zu "
               "unknown -> %s\n", n, dir, ref, bad, missing, pass ? "PASS" : "FAIL");
    ts_json_fini(&j);
    free(cs);
    ts_data_free(&d);
    ts_manifest_free(m);
    return pass ? 0 : 1;
}

/* Progress on stderr (stdout stays the report) when a side is large enough to take a while. */
#define PROGRESS_MIN_BYTES (64u << 20)
static void loading(void *ctx, const char *tensor, uint64_t done, uint64_t total)
{
    if (total < PROGRESS_MIN_BYTES)
        return;
    fprintf(stderr, "reading %s: %3.0f%% (%s, %.0f of %.0f MB)\n", (const char *)ctx,
            100.0 * (double)done / (double)total, tensor, done / 1e6, total / 1e6);
}

/* "live" as A or B: a coordinated snapshot of the running job, taken through the master now. */
static ts_status live(const char *master, const char *a, const char *b, int timeout_ms,
                      char hex[65], struct ts_err *err)
{
    struct ts_master *m = NULL;
    ts_status st;

    if (strcmp(a, "live") && strcmp(b, "live"))
        return TS_OK;
    if (!master)
        return ts_err_set(err, TS_EINVAL, "\"live\" needs --master ADDR (the running cluster)");
    if (!(st = ts_master_open(master, &m, err)))
        st = ts_master_snapshot(m, NULL, "tessera verify: live audit", timeout_ms, hex, err);
    ts_master_close(m);
    return st;
}

int cmd_verify(int argc, char **argv)
{
    const char *store = NULL, *master = NULL, *level = NULL, *data = NULL;
    const char *cosine_s = NULL, *alpha_s = NULL, *psi_s = NULL;
    int64_t probe = 1000, timeout_ms = 10000, rows_sample = TS_AUDIT_ROWS_SAMPLE;
    bool json = false, help;
    char *pos[3];
    int npos = 3;
    const struct ts_flag flags[] = {
        { "store", TS_FLAG_STR, &store, "DIR", "snapshot store for refs (default: the "
                                              "master's, if --master is given)", 0, 0 },
        { "master", TS_FLAG_STR, &master, "ADDR", "read refs from the store of this master", 0,
          0 },
        { "level", TS_FLAG_STR, &level, "L", "bits, cosine, dist or all (default)", 0, 0 },
        { "json", TS_FLAG_BOOL, &json, NULL, "one JSON object on stdout", 0, 0 },
        { "cosine-min", TS_FLAG_STR, &cosine_s, "X", "cosine below X fails (default 1-1e-6, "
                                                     "float32)", 0, 0 },
        { "alpha", TS_FLAG_STR, &alpha_s, "P", "a KS p-value below P fails dist (default "
                                               "0.01)", 0, 0 },
        { "psi-max", TS_FLAG_STR, &psi_s, "X", "a PSI above X fails dist (default 0.1)", 0, 0 },
        { "probe", TS_FLAG_INT, &probe, "N", "test images the MLP's outputs are compared on "
                                             "(default 1000)", 1, 10000 },
        { "data", TS_FLAG_STR, &data, "DIR", "Fashion-MNIST directory (default Debian's)", 0,
          0 },
        { "rows-sample", TS_FLAG_INT, &rows_sample, "N", "a table's cosine: at most N common "
                                                         "rows, by id hash (default 65536; 0: "
                                                         "all)",
          0, INT64_MAX },
        { "timeout-ms", TS_FLAG_INT, &timeout_ms, "MS", "master calls (default 10000)", 1,
          600000 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    struct ts_audit_opts o = { .probe = 1000 };
    struct ts_audit_state a = { 0 }, b = { 0 };
    struct ts_audit_report r;
    struct ts_store *s = NULL;
    struct ts_err err = { 0 };
    char live_hex[65] = "";
    int rc = 2;

    if (argc > 0 && strcmp(argv[0], "replicas") == 0)
        return cmd_verify_replicas(argc - 1, argv + 1);
    if (ts_flags_parse(flags, argc, argv, pos, &npos, &help, &err)) {
        fprintf(stderr, "tessera verify: %s\n", err.msg);
        return 2;
    }
    if (!help && npos == 3 && strcmp(pos[0], "data") == 0) {
        int rc2;

        if ((store || master) &&
            (rc2 = cli_open_store("verify", store, master, (int)timeout_ms, &s)))
            return rc2;
        rc2 = verify_data(pos[1], pos[2], s, json);
        ts_store_close(s);
        return rc2;
    }
    if (help || npos != 3 || strcmp(pos[0], "compare") != 0) {
        FILE *f = help ? stdout : stderr;
        ts_flags_usage(f, "tessera verify compare A B [options]\n       tessera verify data "
                          "DIR REF --store S [--json]\n       tessera verify replicas "
                          "[--master ADDR] [--job ID] [--json]",
                       "Audits two model states and says whether they are the same, or how\n"
                       "they differ: bits (every element, ULP, first difference), cosine (per\n"
                       "tensor, and per layer output on probe images for the built-in MLP),\n"
                       "dist (KS, PSI, Jensen-Shannon of the outputs, or of the values).\n"
                       "A snapshot's tables are `table:NAME`: bits where both hold the same\n"
                       "ids, cosine over the rows both hold (at most --rows-sample of them).\n"
                       "A and B: snapshot refs (with --store or --master), `live` (a snapshot of\n"
                       "the running job, with --master) or files (.npy, raw float32).\n"
                       "`verify data` re-hashes the training data in DIR and checks it\n"
                       "against snapshot REF's data-checksum map. `verify replicas`\n"
                       "compares every replica of a job's partitions with its chain's head.\n"
                       "Exit 0: the audit passes; 1: it fails; 2: usage or I/O.",
                       flags);
        return help ? 0 : 2;
    }
    o.levels = ts_audit_level(level);
    o.cosine_min = cosine_s ? atof(cosine_s) : 0;
    o.alpha = alpha_s ? atof(alpha_s) : 0;
    o.psi_max = psi_s ? atof(psi_s) : 0;
    o.probe = (int)probe;
    o.data_dir = data;
    o.rows_sample = rows_sample ? (uint64_t)rows_sample : TS_AUDIT_ALL_ROWS;
    if (o.levels < 0 || (cosine_s && !(o.cosine_min > 0 && o.cosine_min <= 1)) ||
        (alpha_s && !(o.alpha > 0 && o.alpha < 1)) || (psi_s && !(o.psi_max > 0))) {
        fprintf(stderr, "tessera verify: --level is bits, cosine, dist or all; --cosine-min in "
                        "(0, 1]; --alpha in (0, 1); --psi-max > 0\n");
        return 2;
    }
    if ((store || master) && (rc = cli_open_store("verify", store, master, (int)timeout_ms, &s)))
        return rc;
    rc = 2;
    if (live(master, pos[1], pos[2], (int)timeout_ms, live_hex, &err)) {
        fprintf(stderr, "tessera verify: %s\n", err.msg);
    } else if (ts_audit_load(strcmp(pos[1], "live") ? pos[1] : live_hex, s,
                             &(struct ts_audit_progress){ loading, "A" }, &a, &err) ||
               ts_audit_load(strcmp(pos[2], "live") ? pos[2] : live_hex, s,
                             &(struct ts_audit_progress){ loading, "B" }, &b, &err)) {
        fprintf(stderr, "tessera verify: %s\n", err.msg);
    } else if (ts_audit_compare(&a, &b, &o, &r, &err)) {
        fprintf(stderr, "tessera verify: %s\n", err.msg);
    } else {
        if (json)
            print_json(&a, &b, &r);
        else
            print_text(&a, &b, &r);
        rc = r.pass ? 0 : 1;
        ts_audit_report_free(&r);
    }
    ts_audit_state_free(&a);
    ts_audit_state_free(&b);
    ts_store_close(s);
    return rc;
}
