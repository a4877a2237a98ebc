/* json.h - a small JSON writer for --json output and bench results.
 *
 * Writes into a growing buffer with commas placed for you: open an object or array, add
 * members, close it. Keys and strings are escaped. Nesting is bounded (32 levels).
 * Ownership: struct ts_json is embedded by the caller; ts_json_fini() frees its buffer, or
 * ts_json_take() hands the NUL-terminated text to the caller (free()).
 * Threads: one writer per struct. Allocation failure aborts (output is small). */
#ifndef TS_UTIL_JSON_H
#define TS_UTIL_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ts_json {
    char *buf;
    size_t len, cap;
    int depth;
    bool first[32];           /* no member written yet at this depth */
    char close[32];           /* the bracket that closes each open level */
    bool after_key;
};

void ts_json_init(struct ts_json *j);
void ts_json_fini(struct ts_json *j);
char *ts_json_take(struct ts_json *j);

/* key is NULL inside arrays and at the top level. */
void ts_json_obj(struct ts_json *j, const char *key);
void ts_json_arr(struct ts_json *j, const char *key);
void ts_json_end(struct ts_json *j);          /* closes the innermost object or array */
void ts_json_str(struct ts_json *j, const char *key, const char *v);
void ts_json_int(struct ts_json *j, const char *key, int64_t v);
void ts_json_uint(struct ts_json *j, const char *key, uint64_t v);
void ts_json_num(struct ts_json *j, const char *key, double v);   /* NaN/Inf -> null */
void ts_json_bool(struct ts_json *j, const char *key, bool v);

#endif
