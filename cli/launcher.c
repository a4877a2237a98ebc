/* launcher.c - a local cluster of real processes: tessera-master and N tessera-shard.
 *
 * The binaries are found beside the running `tessera`. Each child is started, watched and
 * stopped through util/launch.h (its log in DIR, SIGTERM if the launcher dies, stopped by pid,
 * never by name). The master and the shards pick their ports and write
 * them to files, which is how the launcher learns them without a race; a shard's port, matched
 * against the master's ClusterStatus, tells the launcher the id the master gave that process,
 * so that its log and every message name the shard as the master and `tessera status` do.
 * With TLS, shard slot i (its first process and every restart) shows the certificate of member
 * shard/i, shard-<i>.pem, issued from the directory's CA when missing: the master lets one
 * alive shard hold a member's certificate (docs/security.md, "The unit of trust"). */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cluster/cluster.h"
#include "rpc/rpc.h"
#include "util/launch.h"
#include "util/proc.h"

#define START_TIMEOUT_MS 15000

/* Waits for the master's port file; fails early, with its last words, if the master exits. */
static ts_status wait_port(struct cluster *c, const char *file, int *port, struct ts_err *err)
{
    char last[200], log[700];
    ts_status st = ts_launch_wait_port(c->master, file, START_TIMEOUT_MS, port, NULL, NULL);

    if (st == TS_OK)
        return TS_OK;
    snprintf(log, sizeof(log), "%s/master.log", c->dir);
    if (st == TS_EUNAVAIL) {
        c->master = 0; /* reaped */
        ts_launch_last_line(log, last, sizeof(last));
        return ts_err_set(err, TS_EUNAVAIL, "tessera-master exited at start (%s): see %s", last,
                          log);
    }
    return ts_err_set(err, TS_ETIMEDOUT, "tessera-master did not start within %d ms: see %s",
                      START_TIMEOUT_MS, log);
}

/* Appends "flag value" to argv at n when value is set; returns the new count. */
static int add_flag(char **argv, int n, const char *flag, const char *value)
{
    if (value) {
        argv[n++] = (char *)flag;
        argv[n++] = (char *)value;
    }
    return n;
}

/* With TLS: --tls-cert, --tls-key (DIR/<stem>.pem, .key), --tls-ca and --token-file for a
 * service; without, --insecure (the cluster's operator said so: `tessera up --insecure`).
 * buf holds the paths. */
static int add_tls(char **argv, int n, const struct cluster *c, const char *stem,
                   char buf[4][700])
{
    if (!c->tls_dir[0]) {
        argv[n++] = "--insecure";
        return n;
    }
    snprintf(buf[0], 700, "%s/%s.pem", c->tls_dir, stem);
    snprintf(buf[1], 700, "%s/%s.key", c->tls_dir, stem);
    snprintf(buf[2], 700, "%s/ca.pem", c->tls_dir);
    snprintf(buf[3], 700, "%s/admin.token", c->tls_dir);
    n = add_flag(argv, n, "--tls-cert", buf[0]);
    n = add_flag(argv, n, "--tls-key", buf[1]);
    n = add_flag(argv, n, "--tls-ca", buf[2]);
    return add_flag(argv, n, "--token-file", buf[3]);
}

/* Removes the files in dir whose names start with prefix ("": every file). */
static void remove_files(const char *dir, const char *prefix)
{
    struct dirent *e;
    char path[800];
    DIR *d = opendir(dir);

    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.' && strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            unlink(path);
        }
    if (d)
        closedir(d);
}

/* Starts the master; again after it died (c->master_restarts > 0): on the port it had, with
 * the state it kept. A first start forgets the state of an earlier cluster in the same
 * --dir. */
static ts_status start_master(const struct cluster_opts *o, struct cluster *c, const char *bin,
                              struct ts_err *err)
{
    char exe[700], listen[64], port_file[700], log[700], lease[32], every[32], replicas[32];
    char mport[16], quota[24], deadline[24];
    char state[600], restarts[16], old[700], tls[4][700];
    char *argv[40];
    int n = 0, port;
    const char *colon = strrchr(c->master_addr, ':');
    ts_status st;

    snprintf(exe, sizeof(exe), "%s/tessera-master", bin);
    snprintf(listen, sizeof(listen), "127.0.0.1:%d",
             c->master_restarts && colon ? atoi(colon + 1) : o->master_port);
    snprintf(port_file, sizeof(port_file), "%s/master.port", c->dir);
    snprintf(state, sizeof(state), "%s/master-state", c->dir);
    unlink(port_file);
    if (!c->master_restarts) {   /* not the lock: a master still holding it must refuse us */
        remove_files(state, "state");
        remove_files(state, "clock");
    }
    argv[n++] = exe;
    argv[n++] = "--listen";
    argv[n++] = listen;
    argv[n++] = "--port-file";
    argv[n++] = port_file;
    n = add_flag(argv, n, "--state-dir", state);
    if (c->master_restarts) {   /* the dead master's log stays, as master.N.log */
        snprintf(restarts, sizeof(restarts), "%u", c->master_restarts);
        n = add_flag(argv, n, "--restarts", restarts);
        snprintf(log, sizeof(log), "%s/master.log", c->dir);
        snprintf(old, sizeof(old), "%s/master.%u.log", c->dir, c->master_restarts - 1);
        rename(log, old);
    }
    if (o->lease_ms) {
        snprintf(lease, sizeof(lease), "%d", o->lease_ms);
        argv[n++] = "--lease-ms";
        argv[n++] = lease;
    }
    n = add_flag(argv, n, "--store", o->store);
    n = add_flag(argv, n, "--restore", o->restore);
    n = add_flag(argv, n, "--branch", o->branch);
    if (o->snapshot_every) {
        snprintf(every, sizeof(every), "%d", o->snapshot_every);
        argv[n++] = "--snapshot-every";
        argv[n++] = every;
    }
    if (o->replicas) {
        snprintf(replicas, sizeof(replicas), "%d", o->replicas);
        argv[n++] = "--replicas";
        argv[n++] = replicas;
    }
    if (o->metrics_port) {
        snprintf(mport, sizeof(mport), "%d", o->metrics_port);
        n = add_flag(argv, n, "--metrics-port", mport);
    }
    if (o->jobs_per_identity) {
        snprintf(quota, sizeof(quota), "%" PRId64, o->jobs_per_identity);
        n = add_flag(argv, n, "--jobs-per-identity", quota);
    }
    if (o->start_deadline_ms) {
        snprintf(deadline, sizeof(deadline), "%" PRId64,
                 o->start_deadline_ms < 0 ? 0 : o->start_deadline_ms);
        n = add_flag(argv, n, "--start-deadline-ms", deadline);
    }
    n = add_tls(argv, n, c, "master", tls);
    argv[n] = NULL;
    snprintf(log, sizeof(log), "%s/master.log", c->dir);
    if ((st = ts_launch(exe, argv, log, -1, &c->master, err)) ||
        (st = wait_port(c, port_file, &port, err)))
        return st;
    snprintf(c->master_addr, sizeof(c->master_addr), "127.0.0.1:%d", port);
    c->master_started_ms = ts_now_ms();
    return TS_OK;
}

/* The log (ext "log") or port file (ext "port") of shard process i (cli.h: its name). */
static void shard_file(const struct cluster *c, int i, const char *ext, char *out, size_t n)
{
    if (c->shards[i].id)
        snprintf(out, n, "%s/shard-%u.%s", c->dir, c->shards[i].id, ext);
    else
        snprintf(out, n, "%s/shard-new-%d.%s", c->dir, i + 1, ext);
}

/* Starts shard process i (again, when restarts > 0: without --restore, which a shard that
 * joins a running cluster must not use). */
static ts_status start_shard(struct cluster *c, int i, struct ts_err *err)
{
    const struct cluster_opts *o = &c->opts;
    char exe[700], log[700], port_file[700], budget[32], restarts[16], mport[16], tls[4][700];
    char stem[32], arm[24], orphan[24];
    char *argv[32] = { exe, "--master", c->master_addr, "--port-file", port_file, NULL };
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    struct cluster_shard *sh = &c->shards[i];
    int n = 5;
    ts_status st;

    snprintf(exe, sizeof(exe), "%s/tessera-shard", c->bin);
    n = add_flag(argv, n, "--store", o->store);
    if (!sh->restarts)
        n = add_flag(argv, n, "--restore", o->restore);
    /* Shards on one machine share it: half of its memory among them, unless told. */
    snprintf(budget, sizeof(budget), "%" PRId64, o->mem_budget_mib ? o->mem_budget_mib
             : pages > 0 && page > 0 ? (int64_t)pages * page / 2 / o->shards >> 20 : 4096);
    n = add_flag(argv, n, "--mem-budget", budget);
    if (sh->restarts) {
        snprintf(restarts, sizeof(restarts), "%u", sh->restarts);
        n = add_flag(argv, n, "--restarts", restarts);
    }
    if (o->metrics_port) {   /* a restarted shard takes its slot's port again */
        snprintf(mport, sizeof(mport), "%d", o->metrics_port + 1 + i);
        n = add_flag(argv, n, "--metrics-port", mport);
    }
    if (o->arm_timeout_ms) {
        snprintf(arm, sizeof(arm), "%" PRId64, o->arm_timeout_ms);
        n = add_flag(argv, n, "--arm-timeout-ms", arm);
    }
    if (o->orphan_job_ms) {
        snprintf(orphan, sizeof(orphan), "%" PRId64, o->orphan_job_ms);
        n = add_flag(argv, n, "--orphan-job-ms", orphan);
    }
    snprintf(stem, sizeof(stem), "shard-%d", i);   /* its slot's own certificate */
    n = add_tls(argv, n, c, stem, tls);
    argv[n] = NULL;
    sh->id = 0;
    shard_file(c, i, "log", log, sizeof(log));
    shard_file(c, i, "port", port_file, sizeof(port_file));
    unlink(port_file);
    if ((st = ts_launch(exe, argv, log, -1, &sh->pid, err)))
        return st;
    sh->started_ms = ts_now_ms();
    return TS_OK;
}

static ts_status start_shards(struct cluster *c, struct ts_err *err)
{
    ts_status st;

    c->shards = calloc((size_t)c->opts.shards + 1, sizeof(*c->shards));
    if (!c->shards)
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    for (int i = 0; i < c->opts.shards; i++) {
        if ((st = start_shard(c, i, err)))
            return st;
        c->nshards++;
    }
    return TS_OK;
}

/* The master's id of the shard listening on the port in port_file, or 0. */
static uint32_t id_by_port(const Tessera__V1__ClusterStatusResponse *cs, const char *port_file)
{
    int port = ts_port_file_read(port_file);
    char suffix[16];

    snprintf(suffix, sizeof(suffix), ":%d", port);
    for (size_t i = 0; port && i < cs->n_shards; i++) {
        const char *a = cs->shards[i]->addr;
        size_t al = strlen(a), sl = strlen(suffix);
        if (al > sl && strcmp(a + al - sl, suffix) == 0)
            return cs->shards[i]->id;
    }
    return 0;
}

/* Gives each shard process the master's id for it: its log is renamed to shard-<id>.log;
 * with say, a line on stdout for each (a restarted one). */
static void name_shards(struct cluster *c, const Tessera__V1__ClusterStatusResponse *cs,
                        bool say)
{
    char from[700], to[700], port_file[700];

    for (int i = 0; i < c->nshards; i++) {
        if (c->shards[i].id || !c->shards[i].pid)
            continue;
        shard_file(c, i, "log", from, sizeof(from));
        shard_file(c, i, "port", port_file, sizeof(port_file));
        if (!(c->shards[i].id = id_by_port(cs, port_file)))
            continue;
        unlink(port_file);
        shard_file(c, i, "log", to, sizeof(to));
        if (rename(from, to) < 0)
            fprintf(stderr, "tessera: cannot rename %s to %s: %s\n", from, to, strerror(errno));
        if (say) {
            printf("shard process %d registered as shard %u (log %s)\n", i + 1,
                   c->shards[i].id, to);
            fflush(stdout);
        }
    }
}

/* Waits until the master lists `want` alive shards, then names them (name_shards). */
static ts_status wait_shards(struct cluster *c, int want, struct ts_err *err)
{
    int64_t until = ts_now_ms() + START_TIMEOUT_MS;
    struct ts_master *m;
    int alive = 0;
    ts_status st;

    if ((st = ts_master_open(c->master_addr, &m, err)))
        return st;
    while (ts_now_ms() < until) {
        Tessera__V1__ClusterStatusResponse *cs;
        if (!ts_master_status(m, 1000, &cs, NULL)) {
            alive = 0;
            for (size_t i = 0; i < cs->n_shards; i++)
                alive += cs->shards[i]->state == TESSERA__V1__MEMBER_STATE__MEMBER_STATE_ALIVE;
            if (alive >= want)
                name_shards(c, cs, false);
            tessera__v1__cluster_status_response__free_unpacked(cs, NULL);
            if (alive >= want)
                break;
        }
        for (int i = 0; i < c->nshards; i++)
            if (ts_launch_exited(c->shards[i].pid, NULL)) {
                char log[700];
                ts_master_close(m);
                c->shards[i].pid = 0;
                shard_file(c, i, "log", log, sizeof(log));
                return ts_err_set(err, TS_EUNAVAIL, "shard process %d of %d exited at start: "
                                  "see %s", i + 1, c->nshards, log);
            }
        ts_sleep_ms(50);
    }
    ts_master_close(m);
    if (alive < want)
        return ts_err_set(err, TS_ETIMEDOUT, "only %d of %d shards registered within %d ms: see %s",
                          alive, want, START_TIMEOUT_MS, c->dir);
    return TS_OK;
}

/* opts.tls: the certificates (made when the directory has none; each shard's own issued when
 * missing) and the admin token (made when missing); this process's calls use the client
 * certificate. Without it the environment is read now, so that a token meant for TLS
 * ($TESSERA_TOKEN_FILE) stops the start before anything runs rather than go over plaintext. */
static ts_status setup_tls(struct cluster *c, struct ts_err *err)
{
    struct ts_certs_opts co = { .shards = c->opts.shards };
    char path[700], cert[700], key[700], member[32];
    ts_status st;

    if (!c->opts.tls)   /* plaintext, whatever a shell exported for another cluster */
        return ts_rpc_tls_setup(&(struct ts_rpc_tls){ .no_env = true }, err);
    if (c->opts.tls_dir)
        snprintf(c->tls_dir, sizeof(c->tls_dir), "%s", c->opts.tls_dir);
    else
        snprintf(c->tls_dir, sizeof(c->tls_dir), "%s/tls", c->dir);
    /* The master's certificate, then each shard slot's own (shard/i: a directory made for
     * fewer shards, or by an older `tessera certs init`, lacks some). */
    if ((st = ts_certs_ensure(c->tls_dir, "master", true, &co, NULL, err)))
        return st;
    for (int i = 0; i < c->opts.shards; i++) {
        snprintf(member, sizeof(member), "shard/%d", i);
        if ((st = ts_certs_ensure(c->tls_dir, member, true, &co, NULL, err))) {
            ts_err_prefix(err, "--tls-dir: shard %d's certificate", i);
            return st;
        }
    }
    snprintf(cert, sizeof(cert), "%s/client.pem", c->tls_dir);
    snprintf(key, sizeof(key), "%s/client.key", c->tls_dir);
    snprintf(path, sizeof(path), "%s/ca.pem", c->tls_dir);
    return ts_rpc_tls_setup(&(struct ts_rpc_tls){ .cert = cert, .key = key, .ca = path }, err);
}

ts_status cluster_start(const struct cluster_opts *o, struct cluster *c, struct ts_err *err)
{
    char *bin = c->bin;
    ts_status st;

    memset(c, 0, sizeof(*c));
    c->opts = *o;
    if (o->dir) {
        snprintf(c->dir, sizeof(c->dir), "%s", o->dir);
        if (mkdir(c->dir, 0755) < 0 && errno != EEXIST)
            return ts_err_set(err, TS_EIO, "--dir %s: %s", c->dir, strerror(errno));
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(c->dir, sizeof(c->dir), "%s/tessera-up.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
        if (!mkdtemp(c->dir))
            return ts_err_set(err, TS_EIO, "cannot make a log directory: %s", strerror(errno));
        c->own_dir = true;
    }
    if ((st = ts_proc_exe_dir(bin, sizeof(c->bin), err)) || (st = setup_tls(c, err)) ||
        (st = start_master(o, c, bin, err)) || (st = start_shards(c, err)) ||
        (st = wait_shards(c, o->shards, err))) {
        cluster_stop(c);
        return st;
    }
    return TS_OK;
}

void cluster_stop(struct cluster *c)
{
    for (int i = 0; i < c->nshards; i++)
        ts_launch_stop(c->shards[i].pid, 10000);
    ts_launch_stop(c->master, 10000);
    free(c->shards);
    c->shards = NULL;
    c->nshards = 0;
    c->master = 0;
}

void cluster_remove_logs(struct cluster *c)
{
    char state[600];

    if (!c->own_dir)
        return;
    /* The directory is ours alone: what is in it, the launcher's children wrote. */
    remove_files(c->dir, "shard-");
    remove_files(c->dir, "master.");
    snprintf(state, sizeof(state), "%s/master-state", c->dir);
    remove_files(state, "");
    rmdir(state);
    rmdir(c->dir);
}

#define RESPAWN_FIRST_MS 500      /* the first restart's delay; doubled per restart in a row */
#define RESPAWN_MAX_MS 30000      /* the longest delay */
#define RESPAWN_STEADY_MS 60000   /* up this long: the next death starts the backoff afresh */
#define NAME_POLL_MS 500          /* how often to look for restarted shards' ids */

/* The delay before the next restart of a process that started at started_ms, with *backoff
 * restarts in a row before it (counted on). */
static int64_t restart_delay(int *backoff, int64_t started_ms)
{
    int64_t delay;

    if (ts_now_ms() - started_ms >= RESPAWN_STEADY_MS)
        *backoff = 0;
    delay = (int64_t)RESPAWN_FIRST_MS << (*backoff < 6 ? *backoff : 6);
    ++*backoff;
    return delay < RESPAWN_MAX_MS ? delay : RESPAWN_MAX_MS;
}

/* Shard slot i's process exited with status: said, and with respawn a restart scheduled. */
static void shard_exited(struct cluster *c, int i, int status)
{
    struct cluster_shard *sh = &c->shards[i];
    char log[700], how[96], who[48];
    int64_t delay;

    shard_file(c, i, "log", log, sizeof(log));
    ts_launch_describe(status, how, sizeof(how));
    if (sh->id)
        snprintf(who, sizeof(who), "shard %u", sh->id);
    else
        snprintf(who, sizeof(who), "shard process %d", i + 1);
    if (!c->opts.respawn) {
        fprintf(stderr, "%s (pid %d) %s: see %s\n", who, (int)sh->pid, how, log);
        sh->pid = 0;
        return;
    }
    delay = restart_delay(&sh->backoff, sh->started_ms);
    sh->restart_at = ts_now_ms() + delay;
    fprintf(stderr, "%s (pid %d) %s: see %s; restarting it in %.1f s (restart %u)\n", who,
            (int)sh->pid, how, log, delay / 1000.0, sh->restarts + 1);
    sh->pid = 0;
}

/* Starts the shards whose restart is due. */
static void restart_due(struct cluster *c)
{
    for (int i = 0; i < c->nshards; i++) {
        struct cluster_shard *sh = &c->shards[i];
        struct ts_err err = { 0 };
        char log[700];

        if (!sh->restart_at || ts_now_ms() < sh->restart_at)
            continue;
        sh->restart_at = 0;
        sh->restarts++;
        if (start_shard(c, i, &err)) {
            fprintf(stderr, "restart %u of shard process %d failed: %s\n", sh->restarts, i + 1,
                    err.msg);
            shard_exited(c, i, 127 << 8);   /* try again, later */
            continue;
        }
        shard_file(c, i, "log", log, sizeof(log));
        fprintf(stderr, "shard process %d restarted (pid %d, restart %u): it joins the "
                "cluster; log %s\n", i + 1, (int)sh->pid, sh->restarts, log);
    }
}

/* Names restarted shards once the master lists them (their logs become shard-<id>.log). */
static void name_restarted(struct cluster *c)
{
    Tessera__V1__ClusterStatusResponse *cs;
    struct ts_master *m;
    bool unnamed = false;

    for (int i = 0; i < c->nshards; i++)
        unnamed |= c->shards[i].pid && !c->shards[i].id;
    if (!unnamed || ts_now_ms() - c->named_ms < NAME_POLL_MS)
        return;
    c->named_ms = ts_now_ms();
    if (ts_master_open(c->master_addr, &m, NULL))
        return;
    if (!ts_master_status(m, 1000, &cs, NULL)) {
        name_shards(c, cs, true);
        tessera__v1__cluster_status_response__free_unpacked(cs, NULL);
    }
    ts_master_close(m);
}

/* The master exited with status: said, and its restart scheduled. */
static void master_exited(struct cluster *c, int status)
{
    int64_t delay = restart_delay(&c->master_backoff, c->master_started_ms);
    char how[96];

    ts_launch_describe(status, how, sizeof(how));
    fprintf(stderr, "the master (pid %d) %s: see %s/master.log; restarting it in %.1f s "
            "(restart %u) with its state; training goes on meanwhile\n", (int)c->master, how,
            c->dir, delay / 1000.0, c->master_restarts + 1);
    c->master = 0;
    c->master_restart_at = ts_now_ms() + delay;
}

/* Starts the master again when its restart is due; false if it cannot be. */
static bool restart_master(struct cluster *c)
{
    struct ts_err err = { 0 };

    if (!c->master_restart_at || ts_now_ms() < c->master_restart_at)
        return true;
    c->master_restart_at = 0;
    c->master_restarts++;
    if (start_master(&c->opts, c, c->bin, &err)) {
        int64_t delay = restart_delay(&c->master_backoff, c->master_started_ms);
        if (c->master)   /* started but not listening: stop it, try again later */
            ts_launch_stop(c->master, 2000);
        c->master = 0;
        c->master_restart_at = ts_now_ms() + delay;
        fprintf(stderr, "restart %u of the master failed: %s; trying again in %.1f s\n",
                c->master_restarts, err.msg, delay / 1000.0);
        return c->master_restarts < 1000;
    }
    fprintf(stderr, "the master restarted (pid %d, restart %u) at %s with its state; log "
            "%s/master.log\n", (int)c->master, c->master_restarts, c->master_addr, c->dir);
    return true;
}

bool cluster_check(struct cluster *c)
{
    int status;

    for (int i = 0; i < c->nshards; i++)
        if (ts_launch_exited(c->shards[i].pid, &status))
            shard_exited(c, i, status);
    if (ts_launch_exited(c->master, &status))
        master_exited(c, status);
    if (!restart_master(c))
        return false;
    restart_due(c);
    if (c->master)
        name_restarted(c);
    return true;
}
