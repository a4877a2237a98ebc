/* train.c - `tessera train`: N tessera-worker processes against a cluster, or one --local.
 *
 * Rank 0 writes to our stdout and stderr; the other ranks log to DIR/worker-R.log. With
 * --json our stdout is one JSON document, written here at the end (struct doc): rank 0 is
 * started with --json, which sends its progress to stderr and its result, a JSON line, to its
 * stdout, a pipe read here. If one rank fails the others are stopped (they would wait for it
 * at the next step) and its log's last line is shown. In an elastic job (docs/elastic.md) a
 * rank killed by a signal is a death the job survives: the others take its slots, and with
 * --respawn it is started again (it joins the running job). With --join R only rank R
 * starts, writing to our stdout: one more worker for a running elastic job. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "client/option_flags.h"
#include "cluster/cluster.h"
#include "util/json.h"
#include "util/launch.h"
#include "util/proc.h"

/* tessera-worker's exit code for a restart (--restarts N) whose job ended before it rejoined
 * (services/worker/worker.h). */
#define WORKER_EXIT_JOB_ENDED 3

#define MAX_WORKERS 64
#define RESPAWN_MS 500      /* --respawn: a killed worker starts again this much later */
#define DOC_LINE_MAX 16384  /* --json: the longest line of rank 0's stdout held whole */

/* --json: rank 0's stdout (the one rank of --join's), through a pipe, so that ours carries
 * one JSON document, written once the run is over: rank 0's result when the run succeeded,
 * the job's as the master knows it when rank 0 did not finish it (or with --join R, R > 0),
 * nothing when the run failed (its messages are on stderr). A restarted rank 0 writes into
 * the same pipe: the newest document wins. A line that is not a document goes on to stderr. */
struct doc {
    int rd, wr;                     /* the pipe; -1: none */
    char buf[DOC_LINE_MAX];         /* the part of a line not read whole yet */
    size_t len;
    char *last;                     /* the newest document, or NULL */
};

static int doc_open(struct doc *d)
{
    int p[2];

    if (pipe2(p, O_CLOEXEC))
        return -1;
    /* Ours only: the worker's end stays blocking (its stdio would drop a line at EAGAIN). */
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    d->rd = p[0];
    d->wr = p[1];
    return 0;
}

static void doc_line(struct doc *d, const char *s, size_t n)
{
    char *c;

    if (n && s[0] == '{' && (c = strndup(s, n))) {
        free(d->last);
        d->last = c;
    } else {
        fprintf(stderr, "%.*s\n", (int)n, s);
    }
}

/* Takes what the pipe holds now, without waiting (we hold its write end: no EOF); at_end:
 * the last line too, whole or not. */
static void doc_read(struct doc *d, bool at_end)
{
    ssize_t got;

    while (d->rd >= 0 && (got = read(d->rd, d->buf + d->len, sizeof(d->buf) - d->len)) > 0) {
        size_t start = 0;
        d->len += (size_t)got;
        for (size_t i = 0; i < d->len; i++)
            if (d->buf[i] == '\n') {
                doc_line(d, d->buf + start, i - start);
                start = i + 1;
            }
        if (!start && d->len == sizeof(d->buf)) {   /* no document is this long */
            fwrite(d->buf, 1, d->len, stderr);
            start = d->len;
        }
        memmove(d->buf, d->buf + start, d->len - start);
        d->len -= start;
    }
    if (at_end && d->len) {
        doc_line(d, d->buf, d->len);
        d->len = 0;
    }
}

static void doc_close(struct doc *d)
{
    if (d->rd >= 0)
        close(d->rd);
    if (d->wr >= 0)
        close(d->wr);
    free(d->last);
}

/* Rank's item of --slow-factor (checked by train_flags): its factor and, if it has one, its
 * steps as tessera-worker's --slow-steps A:B. */
static bool slow_of(const char *spec, int rank, char *factor, size_t flen, char *steps,
                    size_t slen)
{
    for (const char *p = spec; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
        unsigned r;
        double x;
        unsigned long long a, b;
        int got = sscanf(p, "%u:%lf:%llu-%llu", &r, &x, &a, &b);
        if (got < 2 || (int)r != rank)
            continue;
        snprintf(factor, flen, "%g", x);
        if (got == 4)
            snprintf(steps, slen, "%llu:%llu", a, b);
        else
            steps[0] = '\0';
        return true;
    }
    return false;
}

/* Starts rank's worker; its stdout and stderr go to log, or with log NULL its stdout to
 * out_fd when >= 0, else to ours. */
static pid_t spawn_worker(const struct train_cli *t, const char *bin, const char *master,
                          int rank, int restarts, const char *log, int out_fd)
{
    /* The schema's flags the worker gets from t->sdk; these its command line says itself. */
    static const char *const own[] = { "master", "job", "rank", "workers", "restarts",
                                       "start-workers", NULL };
    char exe[600], r[16], w[16], again[16], start[16], mport[16], factor[32], steps[48];
    char opts[16384], tr[1024];
    char *argv[96];
    int n = 0;
    struct ts_err err = { 0 };
    pid_t pid;

    snprintf(exe, sizeof(exe), "%s/tessera-worker", bin);
    snprintf(r, sizeof(r), "%d", rank);
    snprintf(w, sizeof(w), "%u", t->sdk.workers);
    argv[n++] = exe;
    argv[n++] = "--master";
    argv[n++] = (char *)master;
    argv[n++] = "--rank";
    argv[n++] = r;
    argv[n++] = "--workers";
    argv[n++] = w;
    argv[n++] = "--job";
    argv[n++] = (char *)t->job;
    if (ts_trainer_argv(&t->tr, argv, &n, 50, tr, sizeof(tr), &err) ||
        ts_option_argv(&t->sdk, own, argv, &n, 80, opts, sizeof(opts), &err)) {
        fprintf(stderr, "tessera train: %s\n", err.msg);
        return -1;
    }
    if (t->sdk.start_workers) {   /* the job's other slots wait for workers that join */
        snprintf(start, sizeof(start), "%u", t->sdk.start_workers);
        argv[n++] = "--start-workers";
        argv[n++] = start;
    }
    if (restarts) {
        snprintf(again, sizeof(again), "%d", restarts);
        argv[n++] = "--restarts";
        argv[n++] = again;
    }
    if (t->amp) {
        argv[n++] = "--loss-scale";
        argv[n++] = "dynamic";
    }
    if (t->slow && atoi(t->slow) == rank) {
        argv[n++] = "--slow-ms";
        argv[n++] = strchr(t->slow, ':') + 1;
    }
    if (t->slow_factor && slow_of(t->slow_factor, rank, factor, sizeof(factor), steps,
                                  sizeof(steps))) {
        argv[n++] = "--slow-factor";
        argv[n++] = factor;
        if (steps[0]) {
            argv[n++] = "--slow-steps";
            argv[n++] = steps;
        }
    }
    if (t->metrics_port >= 0) {   /* 0: each picks a free port */
        snprintf(mport, sizeof(mport), "%lld",
                 (long long)(t->metrics_port ? t->metrics_port + rank : 0));
        argv[n++] = "--metrics-port";
        argv[n++] = mport;
        if (t->metrics_listen) {
            argv[n++] = "--metrics-listen";
            argv[n++] = (char *)t->metrics_listen;
        }
    }
    argv[n] = NULL;
    if (ts_launch(argv[0], argv, log, out_fd, &pid, &err)) {
        fprintf(stderr, "tessera train: %s\n", err.msg);
        return -1;
    }
    return pid;
}

FILE *cli_json_stdout(const char *cmd)
{
    FILE *doc = NULL;
    int fd;

    fflush(stdout);
    if ((fd = dup(STDOUT_FILENO)) < 0 || !(doc = fdopen(fd, "w")) ||
        dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
        fprintf(stderr, "tessera %s: --json: cannot set stdout aside for the document: %s\n",
                cmd, strerror(errno));
        if (doc)
            fclose(doc);
        else if (fd >= 0)
            close(fd);
        return NULL;
    }
    return doc;
}

/* Says which worker failed, how, and where its messages are: on our own stdout and stderr
 * (terminal: rank 0, or the one rank of --join), or in its log in dir. */
static void report_failure(const char *dir, int rank, bool terminal, int status)
{
    char how[96], log[600], last[512];

    ts_launch_describe(status, how, sizeof(how));
    if (terminal) {
        fprintf(stderr, "tessera train: worker %d %s%s\n", rank, how, WIFSIGNALED(status)
                ? " (it wrote to this terminal; a signal leaves it no last words)"
                : " (its messages are above)");
    } else {
        snprintf(log, sizeof(log), "%s/worker-%d.log", dir, rank);
        ts_launch_last_line(log, last, sizeof(last));
        fprintf(stderr, "tessera train: worker %d %s; its log:\n  %s: %s\n", rank, how, log,
                last);
    }
    if (rmdir(dir))   /* not empty: ranks above 0 wrote their logs there */
        fprintf(stderr, "tessera train: the workers' logs are kept in %s\n", dir);
}

static bool respawning(const int64_t *due, int nw)
{
    for (int r = 0; r < nw; r++)
        if (due[r])
            return true;
    return false;
}

/* The master must answer before any worker starts: each would fail on its own, in the SDK's
 * words. With --join the job must be running too, or the new worker would start a run of its
 * own and wait for ranks that never come. */
static int check_master(const struct train_cli *t, const char *master)
{
    Tessera__V1__ClusterStatusResponse *cs;
    struct ts_err err = { 0 };
    const Tessera__V1__JobInfo *j = cli_job_at(master, t->job, &cs, &err);
    int rc = t->join >= 0 && (!j || j->state != TESSERA__V1__JOB_STATE__JOB_STATE_RUNNING);

    if (!cs) {
        fprintf(stderr, "tessera train: %s\nno master answers at %s: start a cluster with "
                "`tessera up` (then --master ADDR or $TESSERA_MASTER), or train in one process "
                "with --local\n", err.msg, master);
        return 1;
    }
    if (rc)
        fprintf(stderr, "tessera train: --join %d: job '%s' is not running at %s (tessera "
                "status lists the jobs); start it first\n", t->join, t->job, master);
    tessera__v1__cluster_status_response__free_unpacked(cs, NULL);
    return rc;
}

/* Rank 0 did not finish the job (it died, or came back after the others had), or this run
 * was rank R > 0 of --join: the job's result as its workers told the master. A text line on
 * stdout when rank 0 died; with --json the document to (job, state, params_sha256, reason
 * where the master has them), the line on stderr. */
static void print_job_result(const struct train_cli *t, const char *master, bool lost0,
                             FILE *to)
{
    Tessera__V1__ClusterStatusResponse *cs;
    struct ts_err err = { 0 };
    const Tessera__V1__JobInfo *j = cli_job_at(master, t->job, &cs, &err);
    struct ts_json doc;

    if (!cs)
        fprintf(stderr, "tessera train: the job's fingerprint: %s (tessera status lists the "
                "job's once the master answers)\n", err.msg);
    else if (j && j->fingerprint[0] && lost0)
        fprintf(t->tr.json ? stderr : stdout, "params_sha256 %s (the job's, as its workers told "
                "the master: worker 0 did not finish)\n", j->fingerprint);
    if (t->tr.json) {
        ts_json_init(&doc);
        ts_json_obj(&doc, NULL);
        ts_json_str(&doc, "job", t->job);
        if (j) {
            ts_json_str(&doc, "state", ts_job_state_name(j->state));
            if (j->fingerprint[0])
                ts_json_str(&doc, "params_sha256", j->fingerprint);
            if (j->reason[0])
                ts_json_str(&doc, "reason", j->reason);
        }
        ts_json_end(&doc);
        fprintf(to, "%s\n", doc.buf);
        ts_json_fini(&doc);
    }
    if (cs)
        tessera__v1__cluster_status_response__free_unpacked(cs, NULL);
}

/* Whether the master gave rank's slot of the job to a worker: SEATED when a worker of that
 * rank registered (or the master does not answer: the death is then taken for one the others
 * survive), OVERDUE when none did but the live workers took the slot over at the master's
 * start deadline (docs/elastic.md, "A rank that never came"), UNSEATED when nobody holds it. */
enum seat { SEATED, OVERDUE, UNSEATED };
static enum seat seated(const struct train_cli *t, const char *master, int rank)
{
    Tessera__V1__ClusterStatusResponse *cs;
    struct ts_err err = { 0 };
    const Tessera__V1__JobInfo *j = cli_job_at(master, t->job, &cs, &err);
    enum seat s = !cs ? SEATED : j && (size_t)rank < j->n_slot_owners && j->slot_owners[rank]
                                 ? OVERDUE : UNSEATED;

    for (size_t i = 0; s == OVERDUE && i < cs->n_workers; i++)
        if (!strcmp(cs->workers[i]->job, t->job) && cs->workers[i]->rank == (uint32_t)rank)
            s = SEATED;
    if (cs)
        tessera__v1__cluster_status_response__free_unpacked(cs, NULL);
    return s;
}

/* Where rank's worker writes: NULL for this terminal (rank 0, or the one rank of --join),
 * else its log in dir, formatted into buf. */
static const char *log_of(const struct train_cli *t, const char *dir, int rank, char *buf,
                          size_t n)
{
    snprintf(buf, n, "%s/worker-%d.log", dir, rank);
    return rank == 0 || t->join >= 0 ? NULL : buf;
}

int run_training(const struct train_cli *in, const char *master)
{
    struct train_cli job = *in, *t = &job;
    char job_id[64];
    pid_t pids[MAX_WORKERS];
    int64_t due[MAX_WORKERS] = { 0 };   /* --respawn: when a killed rank starts again */
    int restarts[MAX_WORKERS] = { 0 };
    char bin[512], dir[512], log[600];
    /* Ranks first .. first + nw - 1: every rank, or the one of --join. */
    int first = t->join >= 0 ? t->join : 0, nw = t->local || t->join >= 0 ? 1 : t->workers;
    int left, rc = 0, failed = -1, failed_status = 0;
    bool lost0 = false;
    struct ts_err err = { 0 };
    struct doc doc = { .rd = -1, .wr = -1 };

    if (!t->job) { /* a new job per run: shards keep each job's state apart */
        snprintf(job_id, sizeof(job_id), "train-%d-%lld", (int)getpid(),
                 (long long)ts_unix_ms());
        t->job = job_id;
    }
    if (!t->local && check_master(t, master))
        return 1;
    if (ts_proc_exe_dir(bin, sizeof(bin), &err)) {
        fprintf(stderr, "tessera train: %s\n", err.msg);
        return 1;
    }
    snprintf(dir, sizeof(dir), "%s/tessera-train.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR")
                                                                            : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "tessera train: cannot make a log directory in %s: %s; set TMPDIR "
                "to a writable directory\n", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
                strerror(errno));
        return 1;
    }
    if (t->tr.json && doc_open(&doc)) {
        fprintf(stderr, "tessera train: cannot make a pipe: %s\n", strerror(errno));
        rmdir(dir);
        return 1;
    }
    fflush(stdout);
    for (int r = 0; r < nw; r++) {
        pids[r] = spawn_worker(t, bin, t->local ? "local" : master, first + r, 0,
                               log_of(t, dir, first + r, log, sizeof(log)), doc.wr);
        if (pids[r] < 0) { /* could not fork: stop the ranks already started */
            for (int k = 0; k < r; k++) {
                kill(pids[k], SIGTERM);
                waitpid(pids[k], NULL, 0);
            }
            doc_close(&doc);
            return 1;
        }
    }
    for (left = nw; left > 0 || respawning(due, nw);) {
        int status, sig = ts_proc_wait_signal(100);
        pid_t p;
        doc_read(&doc, false);   /* a full pipe would stop rank 0 */
        if (sig) {
            fprintf(stderr, "tessera train: signal %d: stopping the workers\n", sig);
            for (int r = 0; r < nw; r++)
                if (pids[r] > 0)
                    kill(pids[r], SIGTERM);
            memset(due, 0, sizeof(due));
            rc = 130;
        }
        for (int r = 0; r < nw; r++)
            if (due[r] && ts_now_ms() >= due[r]) {
                due[r] = 0;
                fprintf(stderr, "tessera train: starting worker %d again (restart %d)\n",
                        first + r, ++restarts[r]);
                if ((pids[r] = spawn_worker(t, bin, master, first + r, restarts[r],
                                            log_of(t, dir, first + r, log, sizeof(log)),
                                            doc.wr)) > 0) {
                    left++;
                    lost0 &= first + r != 0;
                }
            }
        while ((p = waitpid(-1, &status, WNOHANG)) > 0) {
            for (int r = 0; r < nw; r++) {
                if (pids[r] != p)
                    continue;
                pids[r] = 0;
                left--;
                /* (--join: the job goes on without its worker; this run did not, unless
                 * it starts it again.) */
                if (WIFSIGNALED(status) && t->sdk.elastic &&
                    (left > 0 || (t->join >= 0 && t->respawn)) && rc != 130 && failed < 0) {
                    /* A death the job survives: the live workers take the rank's slot, once
                     * the master gave it to the rank; a rank killed before it joined holds
                     * none, so nobody could take it over: it starts again instead. */
                    enum seat s = t->respawn ? SEATED : seated(t, master, first + r);
                    bool unseated = s == UNSEATED;
                    if (unseated)
                        fprintf(stderr, "tessera train: worker %d was killed (signal %d) "
                                "before it joined the job: no one holds its share, so it "
                                "starts again\n", first + r, WTERMSIG(status));
                    else if (s == OVERDUE)
                        fprintf(stderr, "tessera train: worker %d was killed (signal %d) "
                                "before it joined the job; the others took over its share at "
                                "the master's start deadline\n", first + r, WTERMSIG(status));
                    else
                        fprintf(stderr, "tessera train: worker %d was killed (signal %d); "
                                "the others take over its share%s\n", first + r,
                                WTERMSIG(status), t->respawn ? ", and it starts again" : "");
                    lost0 |= first + r == 0;
                    if (t->respawn || unseated)
                        due[r] = ts_now_ms() + RESPAWN_MS;
                    continue;
                }
                if (WIFEXITED(status) && WEXITSTATUS(status) == WORKER_EXIT_JOB_ENDED &&
                    restarts[r] > 0) {
                    /* Restarted too late: the others finished the job without it. */
                    fprintf(stderr, "tessera train: worker %d came back after the job ended; "
                            "the others finished it\n", first + r);
                    lost0 |= first + r == 0;
                    continue;
                }
                if ((!WIFEXITED(status) || WEXITSTATUS(status)) && failed < 0 && rc != 130) {
                    failed = r;
                    failed_status = status;
                    rc = 1;
                    memset(due, 0, sizeof(due));
                    for (int k = 0; k < nw; k++) /* they would wait for this rank */
                        if (pids[k] > 0)
                            kill(pids[k], SIGTERM);
                }
            }
        }
    }
    doc_read(&doc, true);
    if (failed >= 0) {
        report_failure(dir, first + failed, !log_of(t, dir, first + failed, log, sizeof(log)),
                       failed_status);
        doc_close(&doc);
        return rc;
    }
    if (!rc && t->tr.json && doc.last)
        fprintf(t->json_out ? t->json_out : stdout, "%s\n", doc.last);
    else if (!rc && (lost0 || t->tr.json))
        print_job_result(t, master, lost0, t->json_out ? t->json_out : stdout);
    doc_close(&doc);
    for (int r = 0; r < nw; r++) /* a run that worked leaves nothing behind */
        if (log_of(t, dir, first + r, log, sizeof(log)))
            unlink(log);
    rmdir(dir);
    return rc;
}
