/* log.c - see log.h. */
#include "util/log.h"

#include "util/knobs.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int level = -1;
static char subsys_filter[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init_once(void)
{
    const char *s = ts_knob_str(TS_KNOB_LOG_SUBSYS);

    /* The knob's words are in the order of enum ts_log_level; unset, it is info. */
    level = ts_knob_choice(TS_KNOB_LOG);
    if (s)
        snprintf(subsys_filter, sizeof(subsys_filter), ",%s,", s);
}

void ts_log_init(void)
{
    pthread_once(&once, init_once);
}

void ts_log_set_level(enum ts_log_level lvl)
{
    ts_log_init();
    level = (int)lvl;
}

bool ts_log_enabled(enum ts_log_level lvl, const char *subsys)
{
    char key[64];

    ts_log_init();
    if ((int)lvl > level)
        return false;
    if (!subsys_filter[0] || lvl == TS_ERROR)
        return true;
    snprintf(key, sizeof(key), ",%s,", subsys);
    return strstr(subsys_filter, key) != NULL;
}

void ts_log_emit(enum ts_log_level lvl, const char *subsys, const char *fmt, ...)
{
    static const char *const tags[] = { "ERROR", "WARN ", "INFO ", "DEBUG" };
    char line[1024];
    struct timespec ts;
    struct tm tm;
    va_list ap;
    int n;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s: ",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 ts.tv_nsec / 1000000, tags[lvl], subsys);
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    if (write(STDERR_FILENO, line, (size_t)n) < 0)
        return; /* nowhere left to report it */
}
