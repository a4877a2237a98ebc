/* rpc.c - tessera.v1.Verify: Compare, on lib/audit. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "audit/audit.h"
#include "cluster/cluster.h"
#include "metrics/metrics.h"
#include "tessera/v1/verify.pb-c.h"
#include "service.h"
#include "util/proc.h"

#define LIVE_MS 120000

static ts_status check(const Tessera__V1__CompareRequest *r, int *levels, struct ts_err *err)
{
    if (!r->a[0] || strlen(r->a) > 300)
        return ts_err_set(err, TS_EINVAL, "a: a snapshot ref or \"live\", 1..300 bytes");
    if (!r->b[0] || strlen(r->b) > 300)
        return ts_err_set(err, TS_EINVAL, "b: a snapshot ref or \"live\", 1..300 bytes");
    if ((*levels = ts_audit_level(r->level)) < 0)
        return ts_err_set(err, TS_EINVAL, "level: '%.32s'; bits, cosine, dist or all", r->level);
    if (!(r->cosine_min >= 0 && r->cosine_min <= 1))
        return ts_err_set(err, TS_EINVAL, "cosine_min: %g is outside [0, 1]", r->cosine_min);
    if (!(r->alpha >= 0 && r->alpha < 1))
        return ts_err_set(err, TS_EINVAL, "alpha: %g is outside [0, 1)", r->alpha);
    if (!(r->psi_max >= 0))
        return ts_err_set(err, TS_EINVAL, "psi_max: %g is negative", r->psi_max);
    if (r->probe > 10000)
        return ts_err_set(err, TS_EINVAL, "probe: %u, at most 10000", r->probe);
    if (strlen(r->job) > 64)
        return ts_err_set(err, TS_EINVAL, "job: at most 64 bytes");
    return TS_OK;
}

static ts_status load(struct verifier *v, const char *which, const char *spec, const char *job,
                      struct ts_audit_state *out, struct ts_err *err)
{
    char hex[TS_STORE_HEX_LEN + 1];
    ts_status st = TS_OK;

    memset(out, 0, sizeof(*out));
    if (strcmp(spec, "live") == 0 &&
        (st = ts_master_snapshot(v->master, job, "tessera-verify: live audit", LIVE_MS, hex,
                                 err)) == TS_OK)
        spec = hex;
    if (!st)
        st = ts_audit_load_snapshot(spec, v->store, NULL, out, err);
    if (st)
        ts_err_prefix(err, "%s", which);
    return st;
}

static void fill(struct ts_rpc_call *call, const struct ts_audit_state *a,
                 const struct ts_audit_state *b, const struct ts_audit_report *r,
                 Tessera__V1__CompareResponse *resp)
{
    resp->a = ts_rpc_strdup(call, a->label);
    resp->b = ts_rpc_strdup(call, b->label);
    resp->pass = r->pass;
    resp->pass_bits = r->pass_bits;
    resp->pass_cosine = r->pass_cosine;
    resp->pass_dist = r->pass_dist;
    resp->tensors = ts_rpc_alloc(call, (r->n + 1) * sizeof(*resp->tensors));
    for (size_t i = 0; i < r->n; i++) {
        const struct ts_audit_tensor *t = &r->tensors[i];
        Tessera__V1__TensorAudit *ta = ts_rpc_new(call, &tessera__v1__tensor_audit__descriptor);
        ta->name = ts_rpc_strdup(call, t->name);
        ta->elements = t->numel;
        ta->only_a = t->only_a;
        ta->only_b = t->only_b;
        ta->shape_differs = t->shape_differs;
        ta->differing = t->bits.ndiff;
        ta->max_ulp = t->bits.max_ulp;
        ta->max_abs = t->bits.max_abs;
        ta->max_rel = t->bits.max_rel;
        ta->has_diff = t->bits.has_diff;
        ta->first_index = t->bits.first_index;
        ta->first_a = t->bits.first_a;
        ta->first_b = t->bits.first_b;
        ta->cosine = t->cosine;
        resp->tensors[resp->n_tensors++] = ta;
    }
    if (r->model) {
        resp->layer_cosine = ts_rpc_alloc(call, 3 * sizeof(double));
        memcpy(resp->layer_cosine, r->layer_cosine, 3 * sizeof(double));
        resp->n_layer_cosine = 3;
    }
    resp->dist_of = ts_rpc_strdup(call, r->dist_of ? r->dist_of : "");
    resp->ks_statistic = r->ks.statistic;
    resp->ks_pvalue = r->ks.pvalue;
    resp->psi = r->psi;
    resp->js_distance = r->js_distance;
    resp->mean_a = r->mean_a;
    resp->std_a = r->std_a;
    resp->mean_b = r->mean_b;
    resp->std_b = r->std_b;
    resp->accuracy_a = r->accuracy_a;
    resp->accuracy_b = r->accuracy_b;
}

/* Audits for Prometheus (docs/observability.md): by result (pass, fail: the comparison ran;
 * error: it could not), and how long each took. */
static struct {
    pthread_once_t once;
    struct ts_metric_family *audits, *secs;
} audit_metrics = { PTHREAD_ONCE_INIT, NULL, NULL };

static void register_audit_metrics(void)
{
    audit_metrics.audits = ts_metrics_family("tessera_verify_audits_total", "Compare calls, by "
                                             "result: pass, fail (the states differ beyond the "
                                             "thresholds) or error", TS_METRIC_COUNTER,
                                             "result", NULL, 0);
    audit_metrics.secs = ts_metrics_family("tessera_verify_audit_seconds", "a Compare: loading "
                                           "both states and comparing them",
                                           TS_METRIC_HISTOGRAM, NULL, NULL, 0);
}

static void count_audit(const char *result, int64_t t0)
{
    pthread_once(&audit_metrics.once, register_audit_metrics);
    ts_counter_add(ts_metric_one(audit_metrics.audits, result), 1);
    ts_histogram_observe(ts_metric_one(audit_metrics.secs, NULL),
                         (double)(ts_now_ns() - t0) / 1e9);
}

static ts_status compare(struct ts_rpc_call *call, const ProtobufCMessage *rq,
                         ProtobufCMessage *rs, struct ts_err *err)
{
    int64_t t0 = ts_now_ns();
    const Tessera__V1__CompareRequest *req = (const void *)rq;
    struct verifier *v = ts_rpc_ctx(call);
    struct ts_audit_state a = { 0 }, b = { 0 };
    struct ts_audit_report r;
    struct ts_audit_opts o = { 0 };
    ts_status st = check(req, &o.levels, err);

    /* "live" makes this service write a snapshot through the master with its own certificate
     * (CreateSnapshot: admin or verify): only a caller that could ask for one itself may. */
    if (!st && (!strcmp(req->a, "live") || !strcmp(req->b, "live")) &&
        (st = ts_rpc_need_role(call, TS_ROLE_ADMIN, err)))
        ts_err_prefix(err, "\"live\" writes a snapshot of the running job");
    o.cosine_min = req->cosine_min;
    o.alpha = req->alpha;
    o.psi_max = req->psi_max;
    o.probe = (int)req->probe;
    o.data_dir = v->data_dir;
    if (!st && !(st = load(v, "a", req->a, req->job, &a, err)) &&
        !(st = load(v, "b", req->b, req->job, &b, err)) &&
        !(st = ts_audit_compare(&a, &b, &o, &r, err))) {
        fill(call, &a, &b, &r, (Tessera__V1__CompareResponse *)rs);
        count_audit(r.pass ? "pass" : "fail", t0);
        ts_audit_report_free(&r);
    } else {
        count_audit("error", t0);
    }
    ts_audit_state_free(&a);
    ts_audit_state_free(&b);
    return st;
}

/* Any certificate of the CA may compare snapshots, which only reads the store; compare()
 * asks for an admin when a side is "live" (docs/security.md). */
static const struct ts_rpc_method verify_methods[] = {
    { "Compare", compare, &tessera__v1__compare_request__descriptor,
      &tessera__v1__compare_response__descriptor, TS_RPC_OWN_THREAD, 0, 0 },
    { NULL, NULL, NULL, NULL, 0, 0, 0 },
};

struct ts_rpc_service ts_verify_service = { "tessera.v1.Verify", verify_methods, NULL };
