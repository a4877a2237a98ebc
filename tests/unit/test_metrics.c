/* test_metrics.c - lib/metrics: the text format Prometheus reads (HELP, TYPE, escaped label
 * values, cumulative histogram buckets ending in +Inf and equal to _count), a family asked
 * for twice is the same one while another type or labels under its name is refused, a
 * counter kept elsewhere never goes back, collectors run before each rendering, and updates
 * from several threads at once all count. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(format_of_every_type),
        cmocka_unit_test(registration_rules),
        cmocka_unit_test(collectors_run_before_rendering),
        cmocka_unit_test(concurrent_updates_all_count),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
