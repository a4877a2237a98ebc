/* local.c - assembling a local cluster: its directory, TLS, the master, the shards with the
 * flags the options give, waiting until they registered, stopping them. respawn.c starts
 * restarts through the same ts__local_start_master and ts__local_start_shard, so that a
 * restart is started exactly as the first process was. See local.h. */
#include "local/internal.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rpc/rpc.h"
#include "sec/certs.h"
#include "util/launch.h"
#include "util/proc.h"

#define START_TIMEOUT_MS 15000
#define STOP_TIMEOUT_MS 10000

void ts__local_say(const struct ts_local *c, const struct ts_local_event *ev)
{
    if (c->opts.on_event)
        c->opts.on_event(c->opts.event_arg, ev);
}

/* Waits for the master's port file; fails early, with its last words, if the master exits. */
static ts_status wait_port(struct ts_local *c, int *port, struct ts_err *err)
{
    char last[200], log[TS__LOCAL_PATH], how[96];
    int status = 0;
    ts_status st = ts_launch_wait_port(c->master, c->port_file, START_TIMEOUT_MS, port,
                                       &status, NULL);

    if (st == TS_OK)
        return TS_OK;
    snprintf(log, sizeof(log), "%s/master.log", c->dir);
    if (st == TS_EUNAVAIL) {
        c->master = 0; /* reaped */
        if (c->opts.no_logs) {
            ts_launch_describe(status, how, sizeof(how));
            return ts_err_set(err, TS_EUNAVAIL, "tessera-master %s before listening; its "
                              "stderr is above", how);
        }
        ts_launch_last_line(log, last, sizeof(last));
        return ts_err_set(err, TS_EUNAVAIL, "tessera-master exited at start (%s): see %s", last,
                          log);
    }
    if (c->opts.no_logs)
        return ts_err_set(err, TS_ETIMEDOUT, "tessera-master wrote no port in %d s",
                          START_TIMEOUT_MS / 1000);
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

/* "flag N" when v is not 0; num holds the text. */
static int add_num(char **argv, int n, const char *flag, int64_t v, char num[24])
{
    if (!v)
        return n;
    snprintf(num, 24, "%" PRId64, v);
    return add_flag(argv, n, flag, num);
}

/* With TLS: --tls-cert, --tls-key (DIR/<stem>.pem, .key), --tls-ca and, unless tls_as_is,
 * --token-file for a service; without, --insecure (the cluster's owner said so: `tessera up
 * --insecure`). buf holds the paths. */
static int add_tls(char **argv, int n, const struct ts_local *c, const char *stem,
                   char buf[4][TS__LOCAL_PATH])
{
    if (!c->tls_dir[0]) {
        argv[n++] = "--insecure";
        return n;
    }
    snprintf(buf[0], TS__LOCAL_PATH, "%s/%s.pem", c->tls_dir, stem);
    snprintf(buf[1], TS__LOCAL_PATH, "%s/%s.key", c->tls_dir, stem);
    snprintf(buf[2], TS__LOCAL_PATH, "%s/ca.pem", c->tls_dir);
    snprintf(buf[3], TS__LOCAL_PATH, "%s/admin.token", c->tls_dir);
    n = add_flag(argv, n, "--tls-cert", buf[0]);
    n = add_flag(argv, n, "--tls-key", buf[1]);
    n = add_flag(argv, n, "--tls-ca", buf[2]);
    return c->opts.tls_as_is ? n : add_flag(argv, n, "--token-file", buf[3]);
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

/* Appends at argv[n] the master's flags that come from the options; returns the new count.
 * num holds the numbers' text. */
static int master_flags(const struct ts_local *c, char **argv, int n, char num[7][24])
{
    const struct ts_local_opts *o = &c->opts;

    n = add_num(argv, n, "--lease-ms", o->lease_ms, num[0]);
    n = add_num(argv, n, "--grace-ms", o->grace_ms, num[1]);
    n = add_flag(argv, n, "--store", o->store);
    n = add_flag(argv, n, "--restore", o->restore);
    n = add_flag(argv, n, "--branch", o->branch);
    n = add_num(argv, n, "--snapshot-every", o->snapshot_every, num[2]);
    n = add_num(argv, n, "--replicas", o->replicas, num[3]);
    n = add_num(argv, n, "--metrics-port", o->metrics_port, num[4]);
    n = add_num(argv, n, "--jobs-per-identity", o->jobs_per_identity, num[5]);
    if (o->start_deadline_ms) {
        snprintf(num[6], 24, "%" PRId64, o->start_deadline_ms < 0 ? 0 : o->start_deadline_ms);
        n = add_flag(argv, n, "--start-deadline-ms", num[6]);
    }
    return n;
}

/* Starts the master; again after it died (c->master_restarts > 0): on the port it had, with
 * the state it kept. A first start forgets the state of an earlier cluster in the same
 * directory. */
ts_status ts__local_start_master(struct ts_local *c, struct ts_err *err)
{
    char exe[TS__LOCAL_PATH], log[TS__LOCAL_PATH], old[TS__LOCAL_PATH], state[600];
    char listen[64], restarts[16], num[7][24], tls[4][TS__LOCAL_PATH];
    char *argv[48];
    int n = 0, port;
    const char *colon = strrchr(c->master_addr, ':');
    ts_status st;

    snprintf(exe, sizeof(exe), "%s/tessera-master", c->bin);
    snprintf(listen, sizeof(listen), "127.0.0.1:%d",
             c->master_restarts && colon ? atoi(colon + 1) : c->opts.master_port);
    snprintf(state, sizeof(state), "%s/master-state", c->dir);
    snprintf(log, sizeof(log), "%s/master.log", c->dir);
    unlink(c->port_file);
    /* not the lock: a master still holding it must refuse us */
    if (!c->master_restarts && !c->opts.no_state) {
        remove_files(state, "state");
        remove_files(state, "clock");
    }
    argv[n++] = exe;
    argv[n++] = "--listen";
    argv[n++] = listen;
    argv[n++] = "--port-file";
    argv[n++] = c->port_file;
    if (!c->opts.no_state)
        n = add_flag(argv, n, "--state-dir", state);
    if (c->master_restarts) {
        snprintf(restarts, sizeof(restarts), "%u", c->master_restarts);
        n = add_flag(argv, n, "--restarts", restarts);
        if (!c->opts.no_logs) {   /* the dead master's log stays, as master.N.log */
            snprintf(old, sizeof(old), "%s/master.%u.log", c->dir, c->master_restarts - 1);
            rename(log, old);
        }
    }
    n = master_flags(c, argv, n, num);
    n = add_tls(argv, n, c, "master", tls);
    argv[n] = NULL;
    if ((st = ts_launch(exe, argv, c->opts.no_logs ? NULL : log, -1, &c->master, err)) ||
        (st = wait_port(c, &port, err)))
        return st;
    snprintf(c->master_addr, sizeof(c->master_addr), "127.0.0.1:%d", port);
    c->master_started_ms = ts_now_ms();
    return TS_OK;
}

/* The log (ext "log") or port file (ext "port") of shard slot i (local.h: its name). */
void ts__local_shard_file(const struct ts_local *c, int i, const char *ext, char *out, size_t n)
{
    if (c->shards[i].id)
        snprintf(out, n, "%s/shard-%u.%s", c->dir, c->shards[i].id, ext);
    else
        snprintf(out, n, "%s/shard-new-%d.%s", c->dir, i + 1, ext);
}

/* The shards' --mem-budget, or NULL for their own default. Shards on one machine share it:
 * half of its memory among them, unless told. */
static const char *mem_budget(const struct ts_local_opts *o, char buf[32])
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);

    if (o->mem_budget_mib < 0 || (!o->mem_budget_mib && !o->shards))
        return NULL;
    snprintf(buf, 32, "%" PRId64, o->mem_budget_mib ? o->mem_budget_mib
             : pages > 0 && page > 0 ? (int64_t)pages * page / 2 / o->shards >> 20 : 4096);
    return buf;
}

/* Starts the process of shard slot i (again, when restarts > 0: without --restore, which a
 * shard that joins a running cluster must not use). */
ts_status ts__local_start_shard(struct ts_local *c, int i, struct ts_err *err)
{
    const struct ts_local_opts *o = &c->opts;
    struct ts__local_slot *sh = &c->shards[i];
    char exe[TS__LOCAL_PATH], log[TS__LOCAL_PATH], port_file[TS__LOCAL_PATH];
    char budget[32], restarts[16], num[4][24], tls[4][TS__LOCAL_PATH], stem[32];
    char tier[TS__LOCAL_PATH], redo[TS__LOCAL_PATH];
    char *argv[40 + TS_LOCAL_MAX_ARGS] = { exe, "--master", c->master_addr, "--port-file",
                                           port_file, NULL };
    int n = 5;
    ts_status st;

    snprintf(exe, sizeof(exe), "%s/tessera-shard", c->bin);
    n = add_flag(argv, n, "--store", o->store);
    if (!sh->restarts)
        n = add_flag(argv, n, "--restore", o->restore);
    n = add_flag(argv, n, "--mem-budget", mem_budget(o, budget));
    n = add_flag(argv, n, "--table-mem", o->table_mem);
    n = add_flag(argv, n, "--table-index-mem", o->table_index_mem);
    if (o->table_dir) {   /* each slot its own tier, emptied when its shard starts */
        (void)mkdir(o->table_dir, 0700);   /* the shard says why when it cannot make its own */
        snprintf(tier, sizeof(tier), "%s/shard-%d", o->table_dir, i);
        n = add_flag(argv, n, "--table-dir", tier);
    }
    if (o->redo_dir) {    /* each slot its own log, which a restarted shard finds again */
        (void)mkdir(o->redo_dir, 0700);
        snprintf(redo, sizeof(redo), "%s/shard-%d", o->redo_dir, i);
        n = add_flag(argv, n, "--redo-dir", redo);
    }
    if (sh->restarts) {
        snprintf(restarts, sizeof(restarts), "%u", sh->restarts);
        n = add_flag(argv, n, "--restarts", restarts);
    }
    if (o->metrics_port) {   /* a restarted shard takes its slot's port again */
        snprintf(num[0], 24, "%d", o->metrics_port + 1 + i);
        n = add_flag(argv, n, "--metrics-port", num[0]);
    }
    n = add_num(argv, n, "--arm-timeout-ms", o->arm_timeout_ms, num[1]);
    n = add_num(argv, n, "--orphan-job-ms", o->orphan_job_ms, num[2]);
    n = add_num(argv, n, "--grace-ms", o->grace_ms, num[3]);
    snprintf(stem, sizeof(stem), "shard-%d", i);   /* its slot's own certificate */
    n = add_tls(argv, n, c, stem, tls);
    for (int k = 0; sh->args && sh->args[k]; k++)
        argv[n++] = sh->args[k];
    argv[n] = NULL;
    sh->id = 0;
    ts__local_shard_file(c, i, "log", log, sizeof(log));
    ts__local_shard_file(c, i, "port", port_file, sizeof(port_file));
    unlink(port_file);
    if ((st = ts_launch(exe, argv, o->no_logs ? NULL : log, -1, &sh->pid, err)))
        return st;
    sh->started_ms = ts_now_ms();
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

void ts__local_name_shards(struct ts_local *c, const Tessera__V1__ClusterStatusResponse *cs,
                           bool named)
{
    char from[TS__LOCAL_PATH], to[TS__LOCAL_PATH], port_file[TS__LOCAL_PATH], msg[1600];

    for (int i = 0; i < c->nshards; i++) {
        struct ts__local_slot *sh = &c->shards[i];
        if (sh->id || !sh->pid)
            continue;
        ts__local_shard_file(c, i, "log", from, sizeof(from));
        ts__local_shard_file(c, i, "port", port_file, sizeof(port_file));
        if (!(sh->id = id_by_port(cs, port_file)))
            continue;
        unlink(port_file);
        ts__local_shard_file(c, i, "log", to, sizeof(to));
        if (!c->opts.no_logs && rename(from, to) < 0) {
            snprintf(msg, sizeof(msg), "cannot rename %s to %s: %s", from, to, strerror(errno));
            ts__local_say(c, &(struct ts_local_event){ .kind = TS_LOCAL_LOG_RENAME_FAILED,
                                                       .slot = i, .msg = msg });
        }
        if (named)
            ts__local_say(c, &(struct ts_local_event){ .kind = TS_LOCAL_SHARD_NAMED,
                                                       .slot = i, .pid = sh->pid, .id = sh->id,
                                                       .log = c->opts.no_logs ? NULL : to });
    }
}

/* The alive shards of cs. */
static int alive(const Tessera__V1__ClusterStatusResponse *cs)
{
    int n = 0;

    for (size_t i = 0; i < cs->n_shards; i++)
        n += cs->shards[i]->state == TESSERA__V1__MEMBER_STATE__MEMBER_STATE_ALIVE;
    return n;
}

/* A shard process that exited during ts_local_wait_shards: reaped, said in err. */
static ts_status exited_at_start(struct ts_local *c, struct ts_err *err)
{
    char log[TS__LOCAL_PATH];

    for (int i = 0; i < c->nshards; i++) {
        if (!ts_launch_exited(c->shards[i].pid, NULL))
            continue;
        c->shards[i].pid = 0;
        if (c->opts.no_logs)
            return ts_err_set(err, TS_EUNAVAIL, "shard process %d of %d exited at start; its "
                              "stderr is above", i + 1, c->nshards);
        ts__local_shard_file(c, i, "log", log, sizeof(log));
        return ts_err_set(err, TS_EUNAVAIL, "shard process %d of %d exited at start: see %s",
                          i + 1, c->nshards, log);
    }
    return TS_OK;
}

ts_status ts_local_wait_shards(struct ts_local *c, int want, struct ts_err *err)
{
    int64_t until = ts_now_ms() + START_TIMEOUT_MS;
    struct ts_master *m;
    int n = 0;
    ts_status st;

    if ((st = ts_master_open(c->master_addr, &m, err)))
        return st;
    while (ts_now_ms() < until) {
        Tessera__V1__ClusterStatusResponse *cs;
        if (!ts_master_status(m, 1000, &cs, NULL)) {
            if ((n = alive(cs)) >= want)
                ts__local_name_shards(c, cs, false);
            tessera__v1__cluster_status_response__free_unpacked(cs, NULL);
            if (n >= want)
                break;
        }
        if ((st = exited_at_start(c, err))) {
            ts_master_close(m);
            return st;
        }
        ts_sleep_ms(50);
    }
    ts_master_close(m);
    if (n >= want)
        return TS_OK;
    if (c->opts.no_logs)
        return ts_err_set(err, TS_ETIMEDOUT, "only %d of %d shards registered within %d ms; "
                          "their stderr is above", n, want, START_TIMEOUT_MS);
    return ts_err_set(err, TS_ETIMEDOUT, "only %d of %d shards registered within %d ms: see %s",
                      n, want, START_TIMEOUT_MS, c->dir);
}

/* Member shard/i's certificate in c->tls_dir, issued from its CA when missing. */
static ts_status ensure_shard_cert(struct ts_local *c, int i, struct ts_err *err)
{
    struct ts_certs_opts co = { .shards = c->opts.shards };
    char member[32];
    ts_status st;

    if (!c->tls_dir[0] || c->opts.tls_as_is)
        return TS_OK;
    snprintf(member, sizeof(member), "shard/%d", i);
    if ((st = ts_certs_ensure(c->tls_dir, member, true, &co, NULL, err)))
        ts_err_prefix(err, "--tls-dir: shard %d's certificate", i);
    return st;
}

/* opts.tls: the certificates (made when the directory has none; each shard's own issued when
 * missing) and the admin token (made when missing), unless tls_as_is; this process's calls
 * use the client certificate. Without it the environment is read now, so that a token meant
 * for TLS ($TESSERA_TOKEN_FILE) stops the start before anything runs rather than go over
 * plaintext. keep_process_tls leaves this process's TLS alone. */
static ts_status setup_tls(struct ts_local *c, struct ts_err *err)
{
    const struct ts_local_opts *o = &c->opts;
    struct ts_certs_opts co = { .shards = o->shards };
    char path[TS__LOCAL_PATH], cert[TS__LOCAL_PATH], key[TS__LOCAL_PATH];
    ts_status st;

    if (o->tls) {
        if (o->tls_dir)
            snprintf(c->tls_dir, sizeof(c->tls_dir), "%s", o->tls_dir);
        else
            snprintf(c->tls_dir, sizeof(c->tls_dir), "%s/tls", c->dir);
    }
    /* The master's certificate, then each shard slot's own (shard/i: a directory made for
     * fewer shards, or by an older `tessera certs init`, lacks some). */
    if (o->tls && !o->tls_as_is &&
        (st = ts_certs_ensure(c->tls_dir, "master", true, &co, NULL, err)))
        return st;
    for (int i = 0; i < o->shards; i++)
        if ((st = ensure_shard_cert(c, i, err)))
            return st;
    if (o->keep_process_tls)
        return TS_OK;
    if (!o->tls)   /* plaintext, whatever a shell exported for another cluster */
        return ts_rpc_tls_setup(&(struct ts_rpc_tls){ .no_env = true }, err);
    snprintf(cert, sizeof(cert), "%s/client.pem", c->tls_dir);
    snprintf(key, sizeof(key), "%s/client.key", c->tls_dir);
    snprintf(path, sizeof(path), "%s/ca.pem", c->tls_dir);
    return ts_rpc_tls_setup(&(struct ts_rpc_tls){ .cert = cert, .key = key, .ca = path }, err);
}

/* dir, made if missing, or a new directory of ours named prefix.XXXXXX. */
static ts_status make_dir(struct ts_local *c, const char *dir, const char *prefix,
                          struct ts_err *err)
{
    const char *tmp = getenv("TMPDIR");

    if (dir) {
        snprintf(c->dir, sizeof(c->dir), "%s", dir);
        if (mkdir(c->dir, 0755) < 0 && errno != EEXIST)
            return ts_err_set(err, TS_EIO, "--dir %s: %s", c->dir, strerror(errno));
        return TS_OK;
    }
    snprintf(c->dir, sizeof(c->dir), "%s/%s.XXXXXX", tmp && tmp[0] ? tmp : "/tmp",
             prefix ? prefix : "tessera-up");
    if (!mkdtemp(c->dir))
        return ts_err_set(err, TS_EIO, "cannot make a log directory: %s", strerror(errno));
    c->own_dir = true;
    return TS_OK;
}

/* The options with every string copied into c (restarts read them long after the caller's
 * strings may be gone). */
static ts_status copy_opts(struct ts_local *c, const struct ts_local_opts *o, struct ts_err *err)
{
    const char **fields[] = { &c->opts.store, &c->opts.restore, &c->opts.branch,
                              &c->opts.tls_dir, &c->opts.table_mem, &c->opts.table_dir,
                              &c->opts.table_index_mem, &c->opts.redo_dir };

    _Static_assert(sizeof(fields) / sizeof(fields[0]) == sizeof(c->strs) / sizeof(c->strs[0]),
                   "a copied option without its place in strs");
    c->opts = *o;
    c->opts.dir = c->opts.tmp_prefix = NULL;   /* read once, at the start, from o */
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        if (!*fields[i])
            continue;
        if (!(c->strs[i] = strdup(*fields[i])))
            return ts_err_set(err, TS_ENOMEM, "out of memory");
        *fields[i] = c->strs[i];
    }
    return TS_OK;
}

ts_status ts_local_start(const struct ts_local_opts *o, struct ts_local **out,
                         struct ts_err *err)
{
    struct ts_local *c;
    ts_status st;

    if (o->shards < 0 || o->shards > TS_LOCAL_MAX_SHARDS)
        return ts_err_set(err, TS_EINVAL, "shards: %d, want 0..%d", o->shards,
                          TS_LOCAL_MAX_SHARDS);
    if (o->tls && o->tls_as_is && !o->tls_dir)
        return ts_err_set(err, TS_EINVAL, "tls_as_is: name the certificate directory "
                          "(tls_dir)");
    if (!(c = calloc(1, sizeof(*c))))
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    if ((st = copy_opts(c, o, err)) || (st = make_dir(c, o->dir, o->tmp_prefix, err)))
        goto out_free;
    snprintf(c->port_file, sizeof(c->port_file), "%s/master.port", c->dir);
    if (o->bin)
        snprintf(c->bin, sizeof(c->bin), "%s", o->bin);
    else if ((st = ts_proc_exe_dir(c->bin, sizeof(c->bin), err)))
        goto out_free;
    if ((st = setup_tls(c, err)) || (st = ts__local_start_master(c, err)))
        goto out_free;
    for (int i = 0; i < o->shards && !st; i++)
        st = ts_local_add_shard(c, NULL, NULL, err);
    if (st || (o->shards && (st = ts_local_wait_shards(c, o->shards, err))))
        goto out_free;
    *out = c;
    return TS_OK;
out_free:
    ts_local_free(c);
    return st;
}

static void free_args(char **args)
{
    for (int k = 0; args && args[k]; k++)
        free(args[k]);
    free(args);
}

/* A NULL-terminated copy of args, or NULL for none. */
static ts_status copy_args(const char *const *args, char ***out, struct ts_err *err)
{
    int n = 0;

    *out = NULL;
    while (args && args[n])
        n++;
    if (n > TS_LOCAL_MAX_ARGS)
        return ts_err_set(err, TS_EINVAL, "shard flags: %d, at most %d", n, TS_LOCAL_MAX_ARGS);
    if (!n)
        return TS_OK;
    if (!(*out = calloc((size_t)n + 1, sizeof(**out))))
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++)
        if (!((*out)[i] = strdup(args[i]))) {
            free_args(*out);
            *out = NULL;
            return ts_err_set(err, TS_ENOMEM, "out of memory");
        }
    return TS_OK;
}

ts_status ts_local_add_shard(struct ts_local *c, const char *const *args, pid_t *pid,
                             struct ts_err *err)
{
    struct ts__local_slot *sh;
    ts_status st;

    if (c->nshards == TS_LOCAL_MAX_SHARDS)
        return ts_err_set(err, TS_EINVAL, "shards: at most %d", TS_LOCAL_MAX_SHARDS);
    sh = &c->shards[c->nshards];
    if (c->nshards >= c->opts.shards && (st = ensure_shard_cert(c, c->nshards, err)))
        return st;
    if ((st = copy_args(args, &sh->args, err)))
        return st;
    if ((st = ts__local_start_shard(c, c->nshards, err))) {
        free_args(sh->args);
        memset(sh, 0, sizeof(*sh));
        return st;
    }
    if (pid)
        *pid = sh->pid;
    c->nshards++;
    return TS_OK;
}

/* Stops one child: its wait status unless it exited with 0, which err then describes. */
static bool stop_one(pid_t *pid, const char *who, struct ts_err *err)
{
    char how[96];
    int status;

    if (*pid <= 0)
        return true;
    status = ts_launch_stop(*pid, STOP_TIMEOUT_MS);
    *pid = 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return true;
    ts_launch_describe(status, how, sizeof(how));
    ts_err_set(err, TS_EINTERNAL, "%s did not exit cleanly: it %s%s", who, how,
               WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL
                   ? " after ignoring SIGTERM for 10 s" : "");
    return false;
}

bool ts_local_stop(struct ts_local *c, struct ts_err *err)
{
    char who[48];
    bool clean = true;

    for (int i = 0; i < c->nshards; i++) {
        snprintf(who, sizeof(who), "tessera-shard (shard process %d)", i + 1);
        clean &= stop_one(&c->shards[i].pid, who, err);
        c->shards[i].restart_at = 0;
    }
    clean &= stop_one(&c->master, "tessera-master", err);
    c->master_restart_at = 0;
    return clean;
}

void ts_local_kill(const struct ts_local *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->nshards; i++)
        if (c->shards[i].pid > 0)
            kill(c->shards[i].pid, SIGTERM);
    if (c->master > 0)
        kill(c->master, SIGTERM);
    unlink(c->port_file);
    if (c->own_dir)   /* fails, harmlessly, while logs or state are in it */
        rmdir(c->dir);
}

void ts_local_remove_logs(struct ts_local *c)
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

void ts_local_free(struct ts_local *c)
{
    if (!c)
        return;
    ts_local_stop(c, NULL);
    for (int i = 0; i < c->nshards; i++)
        free_args(c->shards[i].args);
    for (size_t i = 0; i < sizeof(c->strs) / sizeof(c->strs[0]); i++)
        free(c->strs[i]);
    free(c);
}

const char *ts_local_master_addr(const struct ts_local *c) { return c->master_addr; }
const char *ts_local_dir(const struct ts_local *c) { return c->dir; }
const char *ts_local_tls_dir(const struct ts_local *c)
{
    return c->tls_dir[0] ? c->tls_dir : NULL;
}
pid_t ts_local_master_pid(const struct ts_local *c) { return c->master; }
int ts_local_shards(const struct ts_local *c) { return c->nshards; }
pid_t ts_local_shard_pid(const struct ts_local *c, int slot)
{
    return slot >= 0 && slot < c->nshards ? c->shards[slot].pid : 0;
}

