/* names.c - see names.h. */
#include "util/names.h"

#include <string.h>

ts_status ts_job_id_check(const char *field, const char *id, struct ts_err *err)
{
    size_t n = id ? strlen(id) : 0;

    if (n == 0)
        return ts_err_set(err, TS_EINVAL, "%s: required (1..%d bytes of letters, digits, '.', "
                          "'_', '-')", field, TS_JOB_ID_MAX);
    if (n > TS_JOB_ID_MAX)
        return ts_err_set(err, TS_EINVAL, "%s: %zu bytes, at most %d", field, n, TS_JOB_ID_MAX);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)id[i];
        /* ASCII by hand: isalnum() would follow the locale. */
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return ts_err_set(err, TS_EINVAL, "%s: byte %zu is 0x%02x; only letters, digits, "
                              "'.', '_' and '-' are allowed", field, i, c);
    }
    return TS_OK;
}
