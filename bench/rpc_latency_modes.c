/* rpc_latency_modes.c - bench_rpc_latency --vouch and --conns: what keeping many workers
 * alive costs the master (docs/scaling.md, "Workers vouched for by the shards" and "Beyond
 * one master"). See rpc_latency.h. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "rpc_latency.h"
#include "util/json.h"

/* ---- --vouch: workers beating, against shards vouching for them ---- */

/* The master's CPU a worker costs a second of liveness, in us. */
static double cpu_per_worker_s_us(const struct hb_result *h)
{
    return h->workers ? h->master_cpu_pct / 100.0 / (double)h->workers * 1e6 : 0;
}

/* Two masters of their own, the same workers and lease: [0] each worker beats every third of
 * its lease; [1] --vouch shards vouch for all of them every third of the lease and each
 * worker beats every --rest-ms, as workers the master lets rest do (docs/scaling.md). */
int rpc_run_vouch(const struct opts *o, const struct bench_master *proto, const char *machine)
{
    struct hb_result h[2];
    bool ok[2];
    const char *name[2] = { "every worker beats every third of its lease",
                            "shards vouch, workers beat every --rest-ms" };
    struct ts_json j;
    struct ts_err err = { 0 };

    for (int k = 0; k < 2; k++) {
        struct opts ok_o = *o;
        struct bench_master m = { .tls_dir = proto->tls_dir, .lease_ms = (int)o->lease_ms };
        struct ts_err e = { 0 };
        memset(&h[k], 0, sizeof(h[k]));
        ok_o.interval_ms = k ? o->rest_ms : o->lease_ms / 3;
        ok_o.vouch = k ? o->vouch : 0;
        fprintf(stderr, "vouch: %" PRId64 " workers, %s (%" PRId64 " ms), %" PRId64 " s...\n",
                o->workers, name[k], ok_o.interval_ms, o->seconds);
        if (bench_master_start(o->bin, &m, &e) || hb_run(&ok_o, &m, &h[k], &e)) {
            fprintf(stderr, "bench_rpc_latency: --vouch: %s\n", e.msg);
            ok[k] = false;
        } else {
            ok[k] = h[k].alive == h[k].workers && !h[k].errors && !h[k].clock_mismatch &&
                    (!k || h[k].rest_granted == h[k].calls);
        }
        ok[k] = bench_master_stop(&m) && ok[k];
    }
    printf("\nbench_rpc_latency --vouch %" PRId64 ": %s; loopback; %" PRId64 " workers%s%s, "
           "lease %" PRId64 " ms, %" PRId64 " s, a master of its own each\n\n", o->vouch,
           machine, o->workers, o->job ? " of job " : "", o->job ? o->job : "", o->lease_ms,
           o->seconds);
    printf("%-46s | %9s | %7s | %13s | %8s | %9s | %6s\n", "liveness", "beats/s", "master",
           "CPU/worker-s", "vouches", "alive", "errors");
    for (int k = 0; k < 2; k++)
        printf("%-46s | %9.0f | %6.1f%% | %10.1f us | %8" PRId64 " | %9" PRId64 " | %6" PRId64
               "%s\n", name[k], h[k].achieved_per_s, h[k].master_cpu_pct,
               cpu_per_worker_s_us(&h[k]), h[k].vouches, h[k].alive, h[k].errors,
               ok[k] ? "" : "  FAILED");
    printf("\nmaster CPU per worker-second, vouched / beating: %.2f; heartbeats granted rest: "
           "%" PRId64 " of %" PRId64 "\n\n", cpu_per_worker_s_us(&h[0]) > 0
           ? cpu_per_worker_s_us(&h[1]) / cpu_per_worker_s_us(&h[0]) : 0, h[1].rest_granted,
           h[1].calls);
    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "name", "rpc_latency_vouch");
    ts_json_str(&j, "machine", machine);
    ts_json_bool(&j, "ok", ok[0] && ok[1]);
    ts_json_int(&j, "workers", o->workers);
    ts_json_int(&j, "shards", o->vouch);
    ts_json_int(&j, "lease_ms", o->lease_ms);
    ts_json_int(&j, "rest_ms", o->rest_ms);
    ts_json_int(&j, "seconds", o->seconds);
    ts_json_arr(&j, "rows");
    for (int k = 0; k < 2; k++) {
        ts_json_obj(&j, NULL);
        ts_json_str(&j, "liveness", name[k]);
        ts_json_bool(&j, "ok", ok[k]);
        ts_json_num(&j, "heartbeats_per_s", bench_round1(h[k].achieved_per_s));
        ts_json_num(&j, "master_cpu_pct", bench_round1(h[k].master_cpu_pct));
        ts_json_num(&j, "master_cpu_per_worker_s_us", bench_round1(cpu_per_worker_s_us(&h[k])));
        ts_json_int(&j, "vouches", h[k].vouches);
        ts_json_int(&j, "rest_granted", h[k].rest_granted);
        ts_json_int(&j, "alive", h[k].alive);
        ts_json_int(&j, "errors", h[k].errors);
        ts_json_end(&j);
    }
    ts_json_end(&j);
    ts_json_obj(&j, "headline");
    ts_json_num(&j, "ours", bench_round1(cpu_per_worker_s_us(&h[1])));
    ts_json_num(&j, "baseline", bench_round1(cpu_per_worker_s_us(&h[0])));
    ts_json_str(&j, "unit", "us of master CPU per worker-second of liveness: shards vouching "
                "vs every worker beating");
    ts_json_num(&j, "ratio", cpu_per_worker_s_us(&h[0]) > 0
                ? (double)bench_round_i(cpu_per_worker_s_us(&h[1]) /
                                        cpu_per_worker_s_us(&h[0]) * 1e3) / 1e3 : 0);
    ts_json_end(&j);
    if (bench_write_json(&j, o->out, &err)) {
        fprintf(stderr, "bench_rpc_latency: %s\n", err.msg);
        return 1;
    }
    printf("wrote %s%s\n", o->out, ok[0] && ok[1] ? "" : " (marked \"ok\": false)");
    return ok[0] && ok[1] ? 0 : 1;
}

/* ---- --conns: what a connection costs the master, beside what a worker costs it ---- */

int rpc_run_conns(const struct opts *o, const struct bench_master *proto, const char *machine)
{
    struct bench_master m = { .tls_dir = proto->tls_dir, .lease_ms = (int)o->lease_ms };
    struct hb_result h = { 0 };
    double per_conn = 0;
    struct ts_err e = { 0 };
    struct ts_json j;
    bool ok;

    fprintf(stderr, "conns: %" PRId64 " workers registered over %d connections, then %" PRId64
            " connections of their own...\n", o->workers, HB_THREADS, o->conns);
    ok = !bench_master_start(o->bin, &m, &e) && !hb_run(o, &m, &h, &e) &&
         !hb_conn_cost(&m, o->conns, &per_conn, &e);
    if (!ok)
        fprintf(stderr, "bench_rpc_latency: --conns: %s\n", e.msg);
    ok = bench_master_stop(&m) && ok && h.alive == h.workers && !h.errors;
    printf("\nbench_rpc_latency --conns %" PRId64 ": %s; loopback\n\n", o->conns, machine);
    printf("%-56s | %12s\n", "the master's resident memory", "bytes");
    printf("%-56s | %12.0f\n", "a worker registered (over shared connections)",
           h.rss_per_worker);
    printf("%-56s | %12.0f\n", "a connection of its own (as each worker process holds)",
           per_conn);
    printf("\na connection costs %.1f times a registered worker%s\n\n",
           h.rss_per_worker > 0 ? per_conn / h.rss_per_worker : 0, ok ? "" : "  FAILED");
    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "name", "rpc_latency_conns");
    ts_json_str(&j, "machine", machine);
    ts_json_bool(&j, "ok", ok);
    ts_json_int(&j, "workers", o->workers);
    ts_json_int(&j, "connections", o->conns);
    ts_json_num(&j, "master_rss_per_worker_bytes", bench_round1(h.rss_per_worker));
    ts_json_num(&j, "master_rss_per_connection_bytes", bench_round1(per_conn));
    ts_json_obj(&j, "headline");
    ts_json_num(&j, "ours", bench_round1(per_conn));
    ts_json_num(&j, "baseline", bench_round1(h.rss_per_worker));
    ts_json_str(&j, "unit", "bytes of master memory: a connection of its own vs a registered "
                "worker");
    ts_json_num(&j, "ratio", h.rss_per_worker > 0
                ? (double)bench_round_i(per_conn / h.rss_per_worker * 1e3) / 1e3 : 0);
    ts_json_end(&j);
    if (bench_write_json(&j, o->out, &e)) {
        fprintf(stderr, "bench_rpc_latency: %s\n", e.msg);
        return 1;
    }
    printf("wrote %s\n", o->out);
    return ok ? 0 : 1;
}

