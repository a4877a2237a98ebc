/* rpc_latency.h - what bench_rpc_latency's main file (rpc_latency.c: the command line, the
 * default run, --sweep and --master) and its modes file (rpc_latency_modes.c: --vouch and
 * --conns) share: the options, and the simulated workers' run with them (hbsim.h).
 * bench/ only. Ownership: the options' strings are argv's or literals, never freed. */
#ifndef TS_BENCH_RPC_LATENCY_H
#define TS_BENCH_RPC_LATENCY_H

#include <stdbool.h>
#include <stdint.h>

#include "benchlib.h"
#include "hbsim.h"

struct opts {
    const char *bin, *out, *python, *job, *sweep, *master;
    int64_t calls, workers, seconds, interval_ms, lease_ms, rate, vouch, rest_ms, conns;
    bool quick;
};

/* hbsim's hb_bench with o's load (workers, job, seconds, interval, lease, vouching shards;
 * the workers leave at the end under --master). */
ts_status hb_run(const struct opts *o, const struct bench_master *m, struct hb_result *res,
                 struct ts_err *err) TS_MUST_CHECK;

/* --vouch and --conns: tables on stdout, JSON to o->out; the process's exit status. */
int rpc_run_vouch(const struct opts *o, const struct bench_master *proto, const char *machine);
int rpc_run_conns(const struct opts *o, const struct bench_master *proto, const char *machine);

#endif
