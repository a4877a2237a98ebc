/* tablestat.c - a table's status summed over shards and written as JSON (tablestat.h). */
#include "tablestat.h"

void ts_table_status_add(Tessera__V1__TableStatus *sum, const Tessera__V1__TableStatus *ts)
{
    sum->tiered |= ts->tiered;
    sum->rows += ts->rows;
    sum->bytes += ts->bytes;
    sum->rows_pulled += ts->rows_pulled;
    sum->rows_pushed += ts->rows_pushed;
    sum->pulled_per_s += ts->pulled_per_s;
    sum->pushed_per_s += ts->pushed_per_s;
    sum->mem_rows += ts->mem_rows;
    sum->hits += ts->hits;
    sum->misses += ts->misses;
    sum->evictions += ts->evictions;
    sum->written += ts->written;
    sum->writeback_rows += ts->writeback_rows;
    if (ts->writeback_lag_ms > sum->writeback_lag_ms)
        sum->writeback_lag_ms = ts->writeback_lag_ms;
    sum->disk_bytes += ts->disk_bytes;
    sum->prefetched += ts->prefetched;
    sum->prefetch_used += ts->prefetch_used;
    sum->prefetch_unused += ts->prefetch_unused;
    sum->ttl_steps = ts->ttl_steps;
    sum->ttl_seconds = ts->ttl_seconds;
    sum->expired += ts->expired;
}

void ts_table_status_json(struct ts_json *j, const char *job, const char *name, uint32_t shards,
                          const Tessera__V1__TableStatus *ts)
{
    ts_json_obj(j, NULL);
    ts_json_str(j, "job", job);
    ts_json_str(j, "name", name);
    if (shards)
        ts_json_uint(j, "shards", shards);
    ts_json_uint(j, "rows", ts->rows);
    ts_json_uint(j, "bytes", ts->bytes);
    ts_json_uint(j, "rows_pulled", ts->rows_pulled);
    ts_json_uint(j, "rows_pushed", ts->rows_pushed);
    ts_json_num(j, "pulled_per_s", ts->pulled_per_s);
    ts_json_num(j, "pushed_per_s", ts->pushed_per_s);
    ts_json_uint(j, "ttl_steps", ts->ttl_steps);
    ts_json_uint(j, "ttl_seconds", ts->ttl_seconds);
    ts_json_uint(j, "expired", ts->expired);
    if (ts->tiered) {
        ts_json_obj(j, "disk_tier");
        ts_json_uint(j, "mem_rows", ts->mem_rows);
        ts_json_uint(j, "hits", ts->hits);
        ts_json_uint(j, "misses", ts->misses);
        ts_json_num(j, "hit_rate", ts->hits + ts->misses ?
                    (double)ts->hits / (double)(ts->hits + ts->misses) : 1.0);
        ts_json_uint(j, "evictions", ts->evictions);
        ts_json_uint(j, "written", ts->written);
        ts_json_uint(j, "writeback_rows", ts->writeback_rows);
        ts_json_uint(j, "writeback_lag_ms", ts->writeback_lag_ms);
        ts_json_uint(j, "disk_bytes", ts->disk_bytes);
        ts_json_uint(j, "prefetched", ts->prefetched);
        ts_json_uint(j, "prefetch_used", ts->prefetch_used);
        ts_json_uint(j, "prefetch_unused", ts->prefetch_unused);
        ts_json_end(j);
    }
    ts_json_end(j);
}
