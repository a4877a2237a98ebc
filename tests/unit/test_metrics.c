/* test_metrics.c - lib/metrics: the text format Prometheus reads (HELP, TYPE, escaped label
 * values, cumulative histogram buckets ending in +Inf and equal to _count), a family asked
 * for twice is the same one while another type or labels under its name is refused, a
 * counter kept elsewhere never goes back, collectors run before each rendering, updates
 * from several threads at once all count, and a label value's series go when it is forgotten
 * (a held child staying valid until its put, however the forget races with it); the HTTP
 * endpoint listens on the host it is given. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "metrics/http.h"
#include "metrics/metrics.h"

static void has(const char *text, const char *line)
{
    if (!strstr(text, line))
        fail_msg("rendering lacks '%s':\n%s", line, text);
}

static void format_of_every_type(void **state)
{
    const double bounds[] = { 0.1, 1 };
    struct ts_metric_family *c = ts_metrics_family("t_requests_total", "calls \\ with\nnewline",
                                                   TS_METRIC_COUNTER, "method,code", NULL, 0);
    struct ts_metric_family *g = ts_metrics_family("t_epoch", "the epoch", TS_METRIC_GAUGE,
                                                   NULL, NULL, 0);
    struct ts_metric_family *h = ts_metrics_family("t_seconds", "time", TS_METRIC_HISTOGRAM,
                                                   "job_id", bounds, 2);
    struct ts_metric *hm = ts_metric_one(h, "a\"b");
    size_t len;
    char *text;

    (void)state;
    ts_counter_add(ts_metric_child(c, (const char *[]){ "M/x", "OK" }), 3);
    ts_counter_add(ts_metric_child(c, (const char *[]){ "M/x", "OK" }), 2);
    ts_gauge_set(ts_metric_one(g, NULL), 7.5);
    ts_gauge_add(ts_metric_one(g, NULL), 1);
    ts_histogram_observe(hm, 0.05);
    ts_histogram_observe(hm, 0.5);
    ts_histogram_observe(hm, 0.5);
    ts_histogram_observe(hm, 9);
    text = ts_metrics_render(&len);
    assert_non_null(text);
    assert_int_equal(strlen(text), len);
    has(text, "# HELP t_requests_total calls \\\\ with\\nnewline\n");
    has(text, "# TYPE t_requests_total counter\n");
    has(text, "t_requests_total{method=\"M/x\",code=\"OK\"} 5\n");
    has(text, "# TYPE t_epoch gauge\nt_epoch 8.5\n");
    has(text, "# TYPE t_seconds histogram\n");
    has(text, "t_seconds_bucket{job_id=\"a\\\"b\",le=\"0.1\"} 1\n");
    has(text, "t_seconds_bucket{job_id=\"a\\\"b\",le=\"1\"} 3\n");
    has(text, "t_seconds_bucket{job_id=\"a\\\"b\",le=\"+Inf\"} 4\n");
    has(text, "t_seconds_sum{job_id=\"a\\\"b\"} 10.05");
    has(text, "t_seconds_count{job_id=\"a\\\"b\"} 4\n");
    assert_int_equal(ts_metric_count(hm), 4);
    free(text);
}

static void registration_rules(void **state)
{
    struct ts_metric_family *a = ts_metrics_family("t_same_total", "x", TS_METRIC_COUNTER,
                                                   "k", NULL, 0);
    struct ts_metric *m;

    (void)state;
    assert_non_null(a);
    assert_ptr_equal(ts_metrics_family("t_same_total", "x", TS_METRIC_COUNTER, "k", NULL, 0), a);
    assert_null(ts_metrics_family("t_same_total", "x", TS_METRIC_GAUGE, "k", NULL, 0));
    assert_null(ts_metrics_family("t_same_total", "x", TS_METRIC_COUNTER, "k,l", NULL, 0));
    assert_null(ts_metrics_family("9bad", "x", TS_METRIC_COUNTER, NULL, NULL, 0));
    assert_null(ts_metrics_family("t_bad_label", "x", TS_METRIC_COUNTER, "le", NULL, 0));
    assert_null(ts_metrics_family("t_bad_label2", "x", TS_METRIC_COUNTER, "a-b", NULL, 0));
    /* Updates of a NULL family's children are no-ops, not crashes. */
    ts_counter_add(ts_metric_one(NULL, "x"), 1);
    ts_histogram_observe(NULL, 1);
    m = ts_metric_one(a, "v");
    assert_ptr_equal(ts_metric_one(a, "v"), m);
    ts_counter_set(m, 10);
    ts_counter_set(m, 4);   /* a counter never goes back */
    assert_int_equal(ts_metric_count(m), 10);
}

static int collected;

static void collect(void *ctx)
{
    collected++;
    ts_gauge_set(ctx, collected);
}

static void collectors_run_before_rendering(void **state)
{
    struct ts_metric *g = ts_metric_one(ts_metrics_family("t_collected", "c", TS_METRIC_GAUGE,
                                                          NULL, NULL, 0), NULL);
    char *text;

    (void)state;
    ts_metrics_collector(collect, g);
    free(ts_metrics_render(NULL));
    text = ts_metrics_render(NULL);
    has(text, "t_collected 2\n");
    free(text);
}

static void *bump(void *arg)
{
    for (int i = 0; i < 100000; i++) {
        ts_counter_add(arg, 1);
        ts_histogram_observe(ts_metric_one(ts_metrics_family("t_race_seconds", "r",
                                                             TS_METRIC_HISTOGRAM, NULL, NULL,
                                                             0), NULL), 1e-3);
    }
    return NULL;
}

static void concurrent_updates_all_count(void **state)
{
    struct ts_metric *c = ts_metric_one(ts_metrics_family("t_race_total", "r",
                                                          TS_METRIC_COUNTER, NULL, NULL, 0),
                                        NULL);
    pthread_t th[4];

    (void)state;
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, bump, c), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(ts_metric_count(c), 400000);
    assert_int_equal(ts_metric_count(ts_metric_one(ts_metrics_family(
                         "t_race_seconds", "r", TS_METRIC_HISTOGRAM, NULL, NULL, 0), NULL)),
                     400000);
}

static void lacks(const char *text, const char *part)
{
    if (strstr(text, part))
        fail_msg("rendering still has '%s':\n%s", part, text);
}

/* A job's series go when it is forgotten, in every family with a job_id label; the others
 * stay, and the same value asked again starts from zero. */
static void forget_removes_the_series_of_a_value(void **state)
{
    struct ts_metric_family *h = ts_metrics_family("t_job_seconds", "h", TS_METRIC_HISTOGRAM,
                                                   "job_id", NULL, 0);
    struct ts_metric_family *c = ts_metrics_family("t_job_total", "c", TS_METRIC_COUNTER,
                                                   "job_id,rank", NULL, 0);
    struct ts_metric_family *o = ts_metrics_family("t_other_total", "o", TS_METRIC_COUNTER,
                                                   "method", NULL, 0);
    char *text;

    (void)state;
    ts_histogram_observe(ts_metric_one(h, "j1"), 0.1);
    ts_histogram_observe(ts_metric_one(h, "j2"), 0.1);
    ts_counter_add(ts_metric_child(c, (const char *[]){ "j1", "0" }), 5);
    ts_counter_add(ts_metric_child(c, (const char *[]){ "j1", "1" }), 5);
    ts_counter_add(ts_metric_child(c, (const char *[]){ "j2", "0" }), 7);
    ts_counter_add(ts_metric_one(o, "j1"), 1);   /* j1, but not a job_id */
    assert_int_equal(ts_metrics_forget("job_id", "j1"), 3);
    assert_int_equal(ts_metrics_forget("job_id", "j1"), 0);
    assert_int_equal(ts_metrics_forget("nolabel", "j2"), 0);
    text = ts_metrics_render(NULL);
    lacks(text, "job_id=\"j1\"");
    has(text, "t_job_seconds_count{job_id=\"j2\"} 1\n");
    has(text, "t_job_total{job_id=\"j2\",rank=\"0\"} 7\n");
    has(text, "t_other_total{method=\"j1\"} 1\n");
    has(text, "# TYPE t_job_seconds histogram\n");   /* the family stays */
    free(text);
    /* asked again: a new series from zero, at the end of its family */
    assert_int_equal(ts_metric_count(ts_metric_child(c, (const char *[]){ "j1", "0" })), 0);
    ts_counter_add(ts_metric_child(c, (const char *[]){ "j3", "0" }), 1);
    text = ts_metrics_render(NULL);
    has(text, "t_job_total{job_id=\"j2\",rank=\"0\"} 7\nt_job_total{job_id=\"j1\",rank=\"0\"} "
              "0\nt_job_total{job_id=\"j3\",rank=\"0\"} 1\n");
    free(text);
    assert_int_equal(ts_metrics_forget("job_id", "j2"), 2);
    assert_int_equal(ts_metrics_forget("job_id", "j3"), 1);
    assert_int_equal(ts_metrics_forget("job_id", "j1"), 1);
    ts_counter_add(ts_metric_child(c, (const char *[]){ "j4", "0" }), 1);   /* tail rewound */
    text = ts_metrics_render(NULL);
    has(text, "# TYPE t_job_total counter\nt_job_total{job_id=\"j4\",rank=\"0\"} 1\n");
    free(text);
    assert_int_equal(ts_metrics_forget("job_id", "j4"), 1);
}

/* A held child outlives its forget: updates land in it (counted nowhere), the put frees it. */
static void a_held_child_outlives_its_forget(void **state)
{
    struct ts_metric_family *h = ts_metrics_family("t_held_seconds", "h", TS_METRIC_HISTOGRAM,
                                                   "job_id", NULL, 0);
    struct ts_metric *m = ts_metric_hold(h, (const char *[]){ "held" });
    struct ts_metric *again;
    char *text;

    (void)state;
    assert_non_null(m);
    assert_ptr_equal(ts_metric_one(h, "held"), m);
    ts_histogram_observe(m, 1);
    assert_int_equal(ts_metrics_forget("job_id", "held"), 1);
    ts_histogram_observe(m, 1);   /* valid memory until the put */
    assert_int_equal(ts_metric_count(m), 2);
    again = ts_metric_hold(h, (const char *[]){ "held" });
    assert_ptr_not_equal(again, m);
    assert_int_equal(ts_metric_count(again), 0);
    text = ts_metrics_render(NULL);
    has(text, "t_held_seconds_count{job_id=\"held\"} 0\n");
    free(text);
    ts_metric_put(m);
    ts_metric_put(again);   /* still listed: stays, the registry's */
    assert_ptr_equal(ts_metric_one(h, "held"), again);
    ts_metric_put(NULL);
    assert_null(ts_metric_hold(NULL, (const char *[]){ "x" }));
    assert_int_equal(ts_metrics_forget("job_id", "held"), 1);
    assert_int_equal(ts_metrics_forget(NULL, "held"), 0);
}

static atomic_bool forgetting;

/* A connection's life: hold the job's child, update it, put it. */
static void *hold_update_put(void *arg)
{
    struct ts_metric_family *f = arg;

    while (atomic_load(&forgetting)) {
        struct ts_metric *m = ts_metric_hold(f, (const char *[]){ "busy" });
        for (int i = 0; i < 100; i++)
            ts_histogram_observe(m, 1e-3);
        ts_metric_put(m);
    }
    return NULL;
}

/* Forgets racing with holds, updates, puts and renderings: under ASan (make asan) nothing
 * is used after it is freed. */
static void forgets_race_with_updates(void **state)
{
    struct ts_metric_family *f = ts_metrics_family("t_busy_seconds", "b", TS_METRIC_HISTOGRAM,
                                                   "job_id", NULL, 0);
    pthread_t th[3];

    (void)state;
    atomic_store(&forgetting, true);
    for (int i = 0; i < 3; i++)
        assert_int_equal(pthread_create(&th[i], NULL, hold_update_put, f), 0);
    for (int i = 0; i < 2000; i++) {
        (void)ts_metrics_forget("job_id", "busy");
        if (i % 100 == 0)
            free(ts_metrics_render(NULL));
    }
    atomic_store(&forgetting, false);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    (void)ts_metrics_forget("job_id", "busy");
    char *text = ts_metrics_render(NULL);
    lacks(text, "job_id=\"busy\"");
    free(text);
}

/* Whether a TCP connection to addr:port (an IPv4 or IPv6 literal) is accepted. */
static bool reachable(const char *addr, uint16_t port)
{
    struct sockaddr_storage sa = { 0 };
    struct sockaddr_in *v4 = (struct sockaddr_in *)&sa;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&sa;
    bool six = strchr(addr, ':') != NULL;
    int fd = socket(six ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
    bool ok;

    assert_true(fd >= 0);
    if (six) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        assert_int_equal(inet_pton(AF_INET6, addr, &v6->sin6_addr), 1);
    } else {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
        assert_int_equal(inet_pton(AF_INET, addr, &v4->sin_addr), 1);
    }
    ok = connect(fd, (struct sockaddr *)&sa, six ? sizeof(*v6) : sizeof(*v4)) == 0;
    close(fd);
    return ok;
}

/* The endpoint listens on the host it is given (brackets and names allowed), and refuses
 * one that is no address. */
static void http_listens_where_told(void **state)
{
    struct ts_metrics_http *h = NULL;
    struct ts_err e = { 0 };
    uint16_t port;

    (void)state;
    assert_int_equal(ts_metrics_http_start("127.0.0.1", 0, &h, NULL), TS_OK);
    port = ts_metrics_http_port(h);
    assert_true(port > 0);
    assert_true(reachable("127.0.0.1", port));
    ts_metrics_http_stop(h);
    assert_int_equal(ts_metrics_http_start("localhost", 0, &h, NULL), TS_OK);   /* IPv4 first */
    assert_true(reachable("127.0.0.1", ts_metrics_http_port(h)));
    ts_metrics_http_stop(h);
    if (ts_metrics_http_start("[::1]", 0, &h, NULL) == TS_OK) {   /* where IPv6 is on */
        assert_true(reachable("::1", ts_metrics_http_port(h)));
        assert_false(reachable("127.0.0.1", ts_metrics_http_port(h)));
        ts_metrics_http_stop(h);
    }
    assert_int_equal(ts_metrics_http_start("no-such-host.invalid", 0, &h, &e), TS_EINVAL);
    assert_non_null(strstr(e.msg, "no-such-host.invalid"));
    ts_metrics_http_stop(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(format_of_every_type),
        cmocka_unit_test(registration_rules),
        cmocka_unit_test(collectors_run_before_rendering),
        cmocka_unit_test(concurrent_updates_all_count),
        cmocka_unit_test(forget_removes_the_series_of_a_value),
        cmocka_unit_test(a_held_child_outlives_its_forget),
        cmocka_unit_test(forgets_race_with_updates),
        cmocka_unit_test(http_listens_where_told),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
