/* launch.c - see launch.h. */
#include "util/launch.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/proc.h"

ts_status ts_launch(const char *path, char *const argv[], const char *log, int out_fd,
                    pid_t *pid, struct ts_err *err)
{
    pid_t parent = getpid(), p;
    int fd = -1;

    /* Opened here, not in the child: between fork and exec only async-signal-safe calls. */
    if (log && (fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
        return ts_err_set(err, TS_EIO, "cannot create %s: %s", log, strerror(errno));
    if ((p = fork()) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return ts_err_set(err, TS_EIO, "fork: %s", strerror(e));
    }
    if (p == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1); /* the launcher died before prctl took effect */
        if (fd >= 0 && (dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0))
            _exit(126);
        if (fd < 0 && out_fd >= 0 && dup2(out_fd, STDOUT_FILENO) < 0)
            _exit(126);
        execv(path, argv);
        _exit(127);
    }
    if (fd >= 0)
        close(fd);
    *pid = p;
    return TS_OK;
}

bool ts_launch_exited(pid_t pid, int *status)
{
    int st = 0;

    if (pid <= 0 || waitpid(pid, &st, WNOHANG) != pid)
        return false;
    if (status)
        *status = st;
    return true;
}

ts_status ts_launch_wait_port(pid_t pid, const char *port_file, int ms, int *port, int *status,
                              struct ts_err *err)
{
    int64_t until = ts_now_ms() + ms;

    for (;;) {
        int got = ts_port_file_read(port_file);
        if (got) {
            *port = got;
            return TS_OK;
        }
        if (ts_launch_exited(pid, status))
            return ts_err_set(err, TS_EUNAVAIL, "exited before writing its port to %s",
                              port_file);
        if (ts_now_ms() >= until)
            return ts_err_set(err, TS_ETIMEDOUT, "wrote no port to %s within %d ms", port_file,
                              ms);
        ts_sleep_ms(10);
    }
}

int ts_launch_stop(pid_t pid, int ms)
{
    int64_t until = ts_now_ms() + ms;
    int status = 0;

    if (pid <= 0)
        return 0;
    kill(pid, SIGTERM);
    while (ts_now_ms() < until) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return status;
        if (r < 0)            /* not our child any more: reaped elsewhere */
            return 0;
        ts_sleep_ms(10);
    }
    kill(pid, SIGKILL);
    if (waitpid(pid, &status, 0) != pid)
        return 0;
    return status;
}

void ts_launch_describe(int status, char *buf, size_t cap)
{
    if (WIFSIGNALED(status))
        snprintf(buf, cap, "was killed by signal %d (%s)%s", WTERMSIG(status),
                 strsignal(WTERMSIG(status)), WCOREDUMP(status) ? ", core dumped" : "");
    else
        snprintf(buf, cap, "exited with status %d", WEXITSTATUS(status));
}

void ts_launch_last_line(const char *path, char *out, size_t n)
{
    char line[512];
    FILE *f;

    snprintf(out, n, "no log");
    if (!(f = fopen(path, "r")))
        return;
    snprintf(out, n, "(empty)");
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0])
            snprintf(out, n, "%s", line);
    }
    fclose(f);
}
