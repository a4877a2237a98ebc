/* run.c - `tessera run`: N copies of a user's training program as the ranks of one job.
 *
 * Each copy learns its place from the environment (docs/launch.md): RANK, WORLD_SIZE,
 * LOCAL_RANK, LOCAL_WORLD_SIZE (torchrun's names), TESSERA_MASTER, TESSERA_JOB, TESSERA_RANK,
 * TESSERA_WORKERS and TESSERA_RESTARTS, which tessera.Client, tessera.torch.attach and
 * tessera-worker read (tessera_launch_env). Each copy runs in its own process group (a
 * script's data-loader processes go with it) and gets SIGTERM if this launcher dies. Its
 * stdout and stderr come through pipes and leave here line by line with a "[rank R] " prefix,
 * stdout to ours (to stderr with --json, whose stdout is the one JSON document), stderr to
 * ours, and, with --log-dir, into DIR/rank-R.log too.
 *
 * The job's status is the exit status: 0 when every rank exited 0. A rank that fails stops
 * the others (they would wait for it at the next step). With --respawn a rank killed by a
 * signal is started again after RESPAWN_MS (TESSERA_RESTARTS counts), which is what an
 * elastic job (docs/elastic.md) survives: its slots moved to the live ranks meanwhile. A
 * restarted rank that exits with RUN_EXIT_JOB_ENDED, or fails while the master lists its job
 * finished, came back too late: the others finished the job, which is not a failure. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "local/local.h"
#include "util/flags.h"
#include "util/knobs.h"
#include "util/json.h"
#include "util/launch.h"
#include "util/proc.h"

#define RUN_MAX_WORKERS 256
#define RESPAWN_MS 500
#define STOP_GRACE_MS 10000
#define LINE_MAX_BYTES 8192     /* a longer line leaves in pieces of this size */
#define RUN_EXIT_JOB_ENDED 3    /* tessera-worker's and docs/launch.md's convention */

struct run_flags {
    int64_t workers, shards, max_restarts;
    const char *master, *job, *log_dir;
    bool local_cluster, insecure, respawn, json, no_prefix;
};

/* One stream of one rank: its pipe, and the part of a line not yet written. */
struct stream {
    int fd;                        /* -1 once at EOF */
    char buf[LINE_MAX_BYTES];
    size_t len;
};

struct rank {
    pid_t pid;                     /* 0: not running */
    int restarts;
    int64_t due;                   /* --respawn: when it starts again (0: not due) */
    int status;                    /* its last wait status */
    bool done;                     /* exited for good */
    struct stream out, err;
    FILE *log;                     /* --log-dir */
};

struct run {
    const struct run_flags *f;
    char **cmd;                    /* the program and its arguments, NULL-terminated */
    const char *master, *job;
    const char *tls_dir;           /* --local-cluster with TLS: its certificates */
    struct ts_local *cluster;      /* --local-cluster: watched while the ranks run */
    struct rank *ranks;
    int n;
    FILE *out;                     /* where the ranks' stdout goes: stdout, or stderr (--json) */
};

extern char **environ;

/* The variables a rank's environment gets from here (docs/launch.md). */
static const char *const placed[] = { "RANK", "TESSERA_RANK", "LOCAL_RANK", "WORLD_SIZE",
                                      "TESSERA_WORKERS", "LOCAL_WORLD_SIZE", "TESSERA_RESTARTS",
                                      "TESSERA_MASTER", "TESSERA_JOB", "TESSERA_TLS_DIR" };
#define PLACED (sizeof(placed) / sizeof(placed[0]))

/* Rank's environment: ours without the variables of placed[], then them. Made before fork
 * (the child of a process with gRPC's threads may not allocate). One block: free(env). */
static char **rank_env(const struct run *r, int rank)
{
    const char *val[PLACED];
    char num[3][16];
    size_t n = 0, bytes = 0;
    char **env, *p;

    snprintf(num[0], sizeof(num[0]), "%d", rank);
    snprintf(num[1], sizeof(num[1]), "%d", r->n);
    snprintf(num[2], sizeof(num[2]), "%d", r->ranks[rank].restarts);
    val[0] = val[1] = val[2] = num[0];   /* one host: the local rank is the rank */
    val[3] = val[4] = val[5] = num[1];
    val[6] = num[2];
    val[7] = r->master;
    val[8] = r->job;
    val[9] = r->tls_dir ? r->tls_dir : ts_knob_str(TS_KNOB_TLS_DIR);
    for (char **e = environ; *e; e++, n++)
        bytes += strlen(*e) + 1;
    for (size_t i = 0; i < PLACED; i++)
        bytes += strlen(placed[i]) + (val[i] ? strlen(val[i]) : 0) + 2;
    if (!(env = malloc((n + PLACED + 1) * sizeof(*env) + bytes)))
        return NULL;
    p = (char *)(env + n + PLACED + 1);
    n = 0;
    for (char **e = environ; *e; e++) {
        bool ours = false;
        for (size_t i = 0; i < PLACED && !ours; i++) {
            size_t len = strlen(placed[i]);
            ours = !strncmp(*e, placed[i], len) && (*e)[len] == '=';
        }
        if (!ours)
            env[n++] = *e;
    }
    for (size_t i = 0; i < PLACED; i++)
        if (val[i]) {
            env[n++] = p;
            p += sprintf(p, "%s=%s", placed[i], val[i]) + 1;
        }
    env[n] = NULL;
    return env;
}

/* Index of the first argument that is the program (after "--", or the first non-option);
 * argc when there is none. An option that takes a value skips it. */
static int program_at(const struct ts_flag *flags, int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--"))
            return i + 1;
        if (a[0] != '-')
            return i;
        for (const struct ts_flag *fl = flags; fl->name; fl++) {
            const char *name = a + (a[1] == '-' ? 2 : 1);
            if (fl->kind != TS_FLAG_BOOL && !strcmp(name, fl->name)) {
                i++;   /* "--name VALUE" ("--name=VALUE" is one argument) */
                break;
            }
        }
    }
    return argc;
}

/* In the child, after fork: only async-signal-safe calls (gRPC's threads may hold locks). */
static void child(char *const *cmd, char *const *env, int out_fd, int err_fd, pid_t parent)
{
    static const char msg[] = "tessera run: cannot execute the program (not found, or not "
                              "executable: see PATH)\n";
    sigset_t none;

    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);   /* the launcher blocks them to wait */
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
        _exit(1);   /* the launcher died before prctl took effect */
    if (dup2(out_fd, STDOUT_FILENO) < 0 || dup2(err_fd, STDERR_FILENO) < 0)
        _exit(126);
    execvpe(cmd[0], cmd, env);
    if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0)
        _exit(127);
    _exit(127);
}

static ts_status start_rank(struct run *r, int rank, struct ts_err *err)
{
    struct rank *k = &r->ranks[rank];
    int out[2] = { -1, -1 }, errp[2] = { -1, -1 };
    char **env = rank_env(r, rank);
    pid_t pid, parent;

    if (!env)
        return ts_err_set(err, TS_ENOMEM, "out of memory");
    if (pipe2(out, O_CLOEXEC) || pipe2(errp, O_CLOEXEC)) {
        int e = errno;
        for (int i = 0; i < 2; i++) {
            if (out[i] >= 0)
                close(out[i]);
            if (errp[i] >= 0)
                close(errp[i]);
        }
        free(env);
        return ts_err_set(err, TS_EIO, "pipe: %s", strerror(e));
    }
    fflush(NULL);
    parent = getpid();
    if ((pid = fork()) == 0)
        child(r->cmd, env, out[1], errp[1], parent);
    free(env);
    close(out[1]);
    close(errp[1]);
    if (pid < 0) {
        close(out[0]);
        close(errp[0]);
        return ts_err_set(err, TS_EIO, "fork: %s", strerror(errno));
    }
    setpgid(pid, pid);   /* also here: no race with a kill of the group right after */
    k->pid = pid;
    k->out = (struct stream){ .fd = out[0] };
    k->err = (struct stream){ .fd = errp[0] };
    return TS_OK;
}

/* Writes buf[0..n) as one line of rank's, prefixed, to f (and its log). */
static void emit(const struct run *r, int rank, FILE *f, const char *buf, size_t n)
{
    struct rank *k = &r->ranks[rank];

    if (!r->f->no_prefix)
        fprintf(f, "[rank %d] ", rank);
    fwrite(buf, 1, n, f);
    fputc('\n', f);
    fflush(f);
    if (k->log) {
        fwrite(buf, 1, n, k->log);
        fputc('\n', k->log);
        fflush(k->log);
    }
}

/* Reads what s's pipe has and writes its whole lines; at EOF, the rest too. */
static void drain(const struct run *r, int rank, struct stream *s, FILE *f)
{
    ssize_t got = read(s->fd, s->buf + s->len, sizeof(s->buf) - s->len);
    size_t start = 0;

    if (got < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (got > 0)
        s->len += (size_t)got;
    for (size_t i = 0; i < s->len; i++)
        if (s->buf[i] == '\n') {
            emit(r, rank, f, s->buf + start, i - start);
            start = i + 1;
        }
    if (got <= 0 || (start == 0 && s->len == sizeof(s->buf))) {   /* EOF, or a long line */
        if (s->len > start)
            emit(r, rank, f, s->buf + start, s->len - start);
        start = s->len;
    }
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
    if (got <= 0) {
        close(s->fd);
        s->fd = -1;
    }
}

/* Waits up to ms for output and passes it on. */
static void pump(struct run *r, int ms)
{
    struct pollfd p[2 * RUN_MAX_WORKERS];
    struct stream *of[2 * RUN_MAX_WORKERS];
    int who[2 * RUN_MAX_WORKERS], n = 0;

    for (int i = 0; i < r->n; i++) {
        struct stream *ss[2] = { &r->ranks[i].out, &r->ranks[i].err };
        for (int k = 0; k < 2; k++)
            if (r->ranks[i].pid && ss[k]->fd >= 0) {
                p[n] = (struct pollfd){ .fd = ss[k]->fd, .events = POLLIN };
                of[n] = ss[k];
                who[n++] = i;
            }
    }
    if (!n) {
        ts_sleep_ms(ms);
        return;
    }
    if (poll(p, (nfds_t)n, ms) <= 0)
        return;
    for (int i = 0; i < n; i++)
        if (p[i].revents)
            drain(r, who[i], of[i], of[i] == &r->ranks[who[i]].out ? r->out : stderr);
}

/* After rank's process ended: what is left in its pipes (a grandchild may hold them open:
 * never wait for it). */
static void flush_rank(struct run *r, int rank)
{
    struct stream *ss[2] = { &r->ranks[rank].out, &r->ranks[rank].err };

    for (int k = 0; k < 2; k++) {
        if (ss[k]->fd < 0)
            continue;
        fcntl(ss[k]->fd, F_SETFL, O_NONBLOCK);
        while (ss[k]->fd >= 0) {
            size_t before = ss[k]->len;
            drain(r, rank, ss[k], k ? stderr : r->out);
            if (ss[k]->fd >= 0 && ss[k]->len == before)   /* nothing more now */
                break;
        }
        if (ss[k]->fd >= 0) {
            if (ss[k]->len)
                emit(r, rank, k ? stderr : r->out, ss[k]->buf, ss[k]->len);
            close(ss[k]->fd);
            ss[k]->fd = -1;
            ss[k]->len = 0;
        }
    }
}

/* SIGTERM to every running rank's group, STOP_GRACE_MS for them, then SIGKILL. */
static void stop_all(struct run *r)
{
    int64_t until = ts_now_ms() + STOP_GRACE_MS;
    bool left = true;

    for (int i = 0; i < r->n; i++) {
        r->ranks[i].due = 0;
        if (r->ranks[i].pid)
            kill(-r->ranks[i].pid, SIGTERM);
    }
    while (left && ts_now_ms() < until) {
        left = false;
        pump(r, 50);
        for (int i = 0; i < r->n; i++) {
            struct rank *k = &r->ranks[i];
            if (k->pid && ts_launch_exited(k->pid, &k->status)) {
                flush_rank(r, i);
                k->pid = 0;
                k->done = true;
            }
            left |= k->pid != 0;
        }
    }
    for (int i = 0; i < r->n; i++)
        if (r->ranks[i].pid) {
            kill(-r->ranks[i].pid, SIGKILL);
            waitpid(r->ranks[i].pid, &r->ranks[i].status, 0);
            flush_rank(r, i);
            r->ranks[i].pid = 0;
            r->ranks[i].done = true;
        }
}

/* The exit code a wait status stands for: its code, or 128 + the signal (the shell's). */
static int exit_code_of(int status)
{
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Whether the master lists the job as finished (or idle: finished and kept). A restarted rank
 * that failed once its job had ended (its registration refused: the others finished without
 * it) did nothing wrong. */
static bool job_finished(const struct run *r)
{
    Tessera__V1__ClusterStatusResponse *cs = NULL;
    struct ts_err err = { 0 };
    const Tessera__V1__JobInfo *jb = cli_job_at(r->master, r->job, &cs, &err);
    bool done = jb && (jb->state == TESSERA__V1__JOB_STATE__JOB_STATE_FINISHED ||
                       jb->state == TESSERA__V1__JOB_STATE__JOB_STATE_IDLE);

    if (cs)
        tessera__v1__cluster_status_response__free_unpacked(cs, NULL);
    return done;
}

/* Runs the ranks until each is done; returns the exit code. */
static int supervise(struct run *r)
{
    int rc = 0, failed = -1, alive = 0;
    struct ts_err err = { 0 };

    for (int i = 0; i < r->n; i++) {
        if (start_rank(r, i, &err)) {
            fprintf(stderr, "tessera run: rank %d: %s\n", i, err.msg);
            stop_all(r);
            return 1;
        }
        alive++;
    }
    while (alive > 0) {
        int sig = ts_proc_wait_signal(0);
        if (sig) {
            fprintf(stderr, "tessera run: signal %d: stopping the ranks\n", sig);
            stop_all(r);
            return 130;
        }
        pump(r, 100);
        if (r->cluster && !ts_local_check(r->cluster)) {
            fprintf(stderr, "tessera run: the local cluster's master cannot be started again: "
                    "stopping the ranks\n");
            stop_all(r);
            return 1;
        }
        for (int i = 0; i < r->n; i++) {
            struct rank *k = &r->ranks[i];
            char how[96];
            if (k->due && ts_now_ms() >= k->due) {
                k->due = 0;
                k->restarts++;
                fprintf(stderr, "tessera run: starting rank %d again (restart %d)\n", i,
                        k->restarts);
                if (start_rank(r, i, &err)) {
                    fprintf(stderr, "tessera run: rank %d: %s\n", i, err.msg);
                    k->done = true;
                    alive--;
                    rc = 1;
                    failed = failed < 0 ? i : failed;
                }
                continue;
            }
            if (!k->pid || !ts_launch_exited(k->pid, &k->status))
                continue;
            flush_rank(r, i);
            k->pid = 0;
            ts_launch_describe(k->status, how, sizeof(how));
            if (WIFSIGNALED(k->status) && r->f->respawn && k->restarts < r->f->max_restarts &&
                failed < 0) {
                fprintf(stderr, "tessera run: rank %d %s; it starts again in %d ms (an elastic "
                        "job's live ranks hold its slots meanwhile)\n", i, how, RESPAWN_MS);
                k->due = ts_now_ms() + RESPAWN_MS;
                continue;
            }
            k->done = true;
            alive--;
            if (k->restarts > 0 && WIFEXITED(k->status) && k->status &&
                (WEXITSTATUS(k->status) == RUN_EXIT_JOB_ENDED || job_finished(r))) {
                fprintf(stderr, "tessera run: rank %d came back after its job ended; the "
                        "others finished it\n", i);
                continue;
            }
            if (k->status == 0 || failed >= 0)
                continue;
            failed = i;
            rc = exit_code_of(k->status);
            fprintf(stderr, "tessera run: rank %d %s%s; stopping the others (they would wait "
                    "for it)\n", i, how, WIFSIGNALED(k->status) && !r->f->respawn
                    ? " (--respawn starts a killed rank again, for an elastic job)" : "");
            stop_all(r);
            alive = 0;
        }
    }
    return rc;
}

/* The job as the master saw it: one line on stderr, and into j when not NULL. */
static void job_report(const struct run *r, struct ts_json *j)
{
    Tessera__V1__ClusterStatusResponse *cs = NULL;
    struct ts_err err = { 0 };
    const Tessera__V1__JobInfo *jb = cli_job_at(r->master, r->job, &cs, &err);

    if (jb && j) {
        ts_json_str(j, "state", ts_job_state_name(jb->state));
        if (jb->fingerprint[0])
            ts_json_str(j, "params_sha256", jb->fingerprint);
        if (jb->reason[0])
            ts_json_str(j, "reason", jb->reason);
    }
    if (jb) {
        fprintf(stderr, "tessera run: job %s %s%s%s%s%s\n", r->job,
                ts_job_state_name(jb->state), jb->fingerprint[0] ? ", params_sha256 " : "",
                jb->fingerprint, jb->reason[0] ? ": " : "", jb->reason);
    } else if (!cs) {
        fprintf(stderr, "tessera run: the job's state: %s\n", err.msg);
    }
    if (cs)
        tessera__v1__cluster_status_response__free_unpacked(cs, NULL);
}

static void print_json(const struct run *r, int rc, double seconds)
{
    struct ts_json j;
    char *text;

    ts_json_init(&j);
    ts_json_obj(&j, NULL);
    ts_json_str(&j, "job", r->job);
    ts_json_str(&j, "master", r->master);
    ts_json_int(&j, "workers", r->n);
    ts_json_int(&j, "exit_code", rc);
    ts_json_num(&j, "seconds", seconds);
    job_report(r, &j);
    ts_json_arr(&j, "ranks");
    for (int i = 0; i < r->n; i++) {
        const struct rank *k = &r->ranks[i];
        ts_json_obj(&j, NULL);
        ts_json_int(&j, "rank", i);
        ts_json_int(&j, "exit_code", k->done ? exit_code_of(k->status) : -1);
        ts_json_int(&j, "restarts", k->restarts);
        ts_json_end(&j);
    }
    ts_json_end(&j);
    ts_json_end(&j);
    if ((text = ts_json_take(&j))) {
        printf("%s\n", text);
        free(text);
    }
}

static int open_logs(struct run *r)
{
    char path[PATH_MAX];

    if (!r->f->log_dir)
        return 0;
    if (mkdir(r->f->log_dir, 0755) && errno != EEXIST) {
        fprintf(stderr, "tessera run: --log-dir %s: %s\n", r->f->log_dir, strerror(errno));
        return 2;
    }
    for (int i = 0; i < r->n; i++) {
        snprintf(path, sizeof(path), "%s/rank-%d.log", r->f->log_dir, i);
        if (!(r->ranks[i].log = fopen(path, "w"))) {
            fprintf(stderr, "tessera run: %s: %s\n", path, strerror(errno));
            return 2;
        }
    }
    return 0;
}

/* Whether PROGRAM can be started: a path, or a name on $PATH, executable. */
static bool runnable(const char *prog)
{
    const char *path = getenv("PATH");
    char buf[PATH_MAX];

    if (strchr(prog, '/'))
        return access(prog, X_OK) == 0;
    for (const char *p = path ? path : "/usr/bin:/bin"; p && *p;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        snprintf(buf, sizeof(buf), "%.*s/%s", (int)len, len ? p : ".", prog);
        if (access(buf, X_OK) == 0)
            return true;
        p = end ? end + 1 : NULL;
    }
    return false;
}

/* The master must answer before any rank starts: each would fail on its own otherwise. */
static int check_master(const struct run *r)
{
    Tessera__V1__ClusterStatusResponse *cs = NULL;
    struct ts_err err = { 0 };

    cli_job_at(r->master, r->job, &cs, &err);
    if (cs) {
        tessera__v1__cluster_status_response__free_unpacked(cs, NULL);
        return 0;
    }
    fprintf(stderr, "tessera run: %s\nno master answers at %s: start a cluster with `tessera "
            "up` (then --master or $TESSERA_MASTER), or let --local-cluster start one\n",
            err.msg, r->master);
    return 1;
}

static int run_job(struct run *r)
{
    int64_t t0 = ts_now_ms();
    int rc;

    if (!r->cluster && (rc = check_master(r)))
        return rc;

    if (!(r->ranks = calloc((size_t)r->n, sizeof(*r->ranks)))) {
        fprintf(stderr, "tessera run: out of memory\n");
        return 1;
    }
    if (!(rc = open_logs(r))) {
        fprintf(stderr, "tessera run: job %s, %d rank%s of `%s` against %s\n", r->job, r->n,
                r->n == 1 ? "" : "s", r->cmd[0], r->master);
        rc = supervise(r);
        if (r->f->json)
            print_json(r, rc, (double)(ts_now_ms() - t0) / 1000.0);
        else if (rc != 130)
            job_report(r, NULL);
    }
    for (int i = 0; i < r->n; i++)
        if (r->ranks[i].log)
            fclose(r->ranks[i].log);
    free(r->ranks);
    return rc;
}

int cmd_run(int argc, char **argv)
{
    static char job_id[64];
    struct run_flags f = { .workers = 1, .shards = 2, .max_restarts = 3 };
    const struct ts_flag flags[] = {
        { "workers", TS_FLAG_INT, &f.workers, "N", "copies of the program, ranks 0..N-1 "
          "(default 1)", 1, RUN_MAX_WORKERS },
        { "master", TS_FLAG_STR, &f.master, "ADDR", "the cluster (default $TESSERA_MASTER, "
          "then 127.0.0.1:7070)", 0, 0 },
        { "job", TS_FLAG_STR, &f.job, "ID", "the job id every rank gets (default "
          "run-PID-MS: a new job each run)", 0, 0 },
        { "local-cluster", TS_FLAG_BOOL, &f.local_cluster, NULL, "start a master and "
          "--shards shards on 127.0.0.1 first (mutual TLS, 2 replicas), stop them at the end",
          0, 0 },
        { "shards", TS_FLAG_INT, &f.shards, "N", "with --local-cluster: shards (default 2)",
          1, 64 },
        { "insecure", TS_FLAG_BOOL, &f.insecure, NULL, "with --local-cluster: plaintext, no "
          "admin token, an unauthenticated data plane (loopback development only)", 0, 0 },
        { "respawn", TS_FLAG_BOOL, &f.respawn, NULL, "start a rank killed by a signal again "
          "($TESSERA_RESTARTS counts); its job must be elastic to go on meanwhile "
          "(docs/elastic.md)", 0, 0 },
        { "max-restarts", TS_FLAG_INT, &f.max_restarts, "N", "with --respawn: restarts of one "
          "rank before its death fails the job (default 3)", 0, 1000 },
        { "log-dir", TS_FLAG_STR, &f.log_dir, "DIR", "also write rank R's output to "
          "DIR/rank-R.log (made if missing)", 0, 0 },
        { "no-prefix", TS_FLAG_BOOL, &f.no_prefix, NULL, "pass the ranks' lines on without "
          "the \"[rank R] \" prefix", 0, 0 },
        { "json", TS_FLAG_BOOL, &f.json, NULL, "end with one JSON document on stdout (job, "
          "exit_code, state, params_sha256, ranks); the ranks' stdout goes to stderr", 0, 0 },
        { NULL, 0, NULL, NULL, NULL, 0, 0 },
    };
    int at = program_at(flags, argc, argv), npos = 0, rc;
    struct run r = { .f = &f };
    struct ts_local *c;
    struct ts_err err = { 0 };
    bool help;

    if (ts_flags_parse(flags, at < argc && at > 0 && !strcmp(argv[at - 1], "--") ? at - 1 : at,
                       argv, NULL, &npos, &help, &err)) {
        fprintf(stderr, "tessera run: %s\n", err.msg);
        return 2;
    }
    if (help) {
        ts_flags_usage(stdout, "tessera run [options] [--] PROGRAM [ARG...]",
                       "Starts --workers copies of PROGRAM (a training script: `python3 "
                       "train.py`, or any\nprogram) as the ranks of one job. Each finds its "
                       "place in the environment:\nRANK, WORLD_SIZE, LOCAL_RANK, "
                       "TESSERA_MASTER, TESSERA_JOB (tessera.Client and\ntessera.torch.attach "
                       "read them; docs/launch.md). Their output comes here, each\nline "
                       "prefixed \"[rank R] \". Exits 0 when every rank exited 0; a rank that "
                       "fails\nstops the others and its exit code is the job's.", flags);
        return 0;
    }
    if (at >= argc) {
        fprintf(stderr, "tessera run: no program to run: tessera run [options] [--] PROGRAM "
                "[ARG...], e.g. tessera run --local-cluster --workers 2 python3 train.py\n");
        return 2;
    }
    if (!runnable(argv[at])) {
        fprintf(stderr, "tessera run: %s: no such program%s (nothing was started)\n", argv[at],
                strchr(argv[at], '/') ? ", or not executable" : " on $PATH");
        return 127;
    }
    if (f.insecure && !f.local_cluster) {
        fprintf(stderr, "tessera run: --insecure is for --local-cluster (a cluster of yours "
                "says its own TLS: set TESSERA_TLS_DIR)\n");
        return 2;
    }
    if (f.local_cluster && f.master) {
        fprintf(stderr, "tessera run: --local-cluster starts its own master: drop --master\n");
        return 2;
    }
    if (!f.job) {
        snprintf(job_id, sizeof(job_id), "run-%d-%lld", (int)getpid(), (long long)ts_unix_ms());
        f.job = job_id;
    }
    r.cmd = argv + at;
    r.n = (int)f.workers;
    r.job = f.job;
    r.out = f.json ? stderr : stdout;
    r.master = f.master ? f.master : ts_master_default_addr(NULL);
    ts_proc_block_signals();
    if (!f.local_cluster)
        return run_job(&r);
    {
        struct ts_local_opts o = { .shards = (int)f.shards,
                                   .replicas = f.shards >= 2 ? 2 : 1, .tls = !f.insecure,
                                   .on_event = cli_local_event };
        if (ts_local_start(&o, &c, &err)) {
            fprintf(stderr, "tessera run: --local-cluster: %s\n", err.msg);
            return 1;
        }
    }
    r.master = ts_local_master_addr(c);
    r.cluster = c;
    r.tls_dir = ts_local_tls_dir(c);
    if (f.insecure)
        fprintf(stderr, "tessera run: --insecure: plaintext, no admin token, an "
                "unauthenticated data plane\n");
    rc = run_job(&r);
    ts_local_stop(c, NULL);
    if (rc == 0)
        ts_local_remove_logs(c);
    else
        fprintf(stderr, "tessera run: the cluster's logs are kept in %s\n", ts_local_dir(c));
    ts_local_free(c);
    return rc;
}
