/* members_check.c - see members_check.h. */
#include "members_check.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* Printable characters, no spaces. */
static bool printable(const char *s)
{
    for (; *s; s++)
        if (!isgraph((unsigned char)*s))
            return false;
    return true;
}

ts_status members_check_addr(const char *field, const char *a, bool need_port, struct ts_err *err)
{
    const char *colon;
    char *end;
    long port;

    if (!a || !a[0])
        return ts_err_set(err, TS_EINVAL, "%s: required", field);
    if (strlen(a) > TS_MEMBERS_MAX_ADDR)
        return ts_err_set(err, TS_EINVAL, "%s: %zu bytes, at most %d", field, strlen(a),
                          TS_MEMBERS_MAX_ADDR);
    if (!printable(a))
        return ts_err_set(err, TS_EINVAL, "%s: must be printable with no spaces", field);
    if (!need_port)
        return TS_OK;
    colon = strrchr(a, ':');
    if (!colon || colon == a)
        return ts_err_set(err, TS_EINVAL, "%s: '%.64s' is not host:port", field, a);
    port = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || !isdigit((unsigned char)colon[1]) || port < 1 || port > 65535)
        return ts_err_set(err, TS_EINVAL, "%s: port of '%.64s' must be 1..65535", field, a);
    return TS_OK;
}

ts_status members_check_instance(const char *s, struct ts_err *err)
{
    if (!s || !s[0])
        return ts_err_set(err, TS_EINVAL, "instance: required (a unique id per process start)");
    if (strlen(s) > TS_MEMBERS_MAX_INSTANCE)
        return ts_err_set(err, TS_EINVAL, "instance: %zu bytes, at most %d", strlen(s),
                          TS_MEMBERS_MAX_INSTANCE);
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("._-", *p))
            return ts_err_set(err, TS_EINVAL, "instance: only letters, digits, '.', '_', '-'");
    return TS_OK;
}

ts_status members_check_lease(uint32_t lease_ms, struct ts_err *err)
{
    if (lease_ms && (lease_ms < TS_MEMBERS_MIN_LEASE_MS || lease_ms > TS_MEMBERS_MAX_LEASE_MS))
        return ts_err_set(err, TS_EINVAL, "lease_ms: %u is outside %u..%u (0: the default)",
                          lease_ms, TS_MEMBERS_MIN_LEASE_MS, TS_MEMBERS_MAX_LEASE_MS);
    return TS_OK;
}

ts_status members_check_kind(enum ts_member_kind kind, struct ts_err *err)
{
    if (kind != TS_MEMBER_SHARD && kind != TS_MEMBER_WORKER)
        return ts_err_set(err, TS_EINVAL, "kind: %d is not SHARD (1) or WORKER (2)", (int)kind);
    return TS_OK;
}

ts_status members_check_endpoints(const struct ts_endpoint *ep, size_t n, struct ts_err *err)
{
    if (n > TS_MEMBERS_MAX_ENDPOINTS)
        return ts_err_set(err, TS_EINVAL, "data_planes: %zu endpoints, at most %d", n,
                          TS_MEMBERS_MAX_ENDPOINTS);
    for (size_t i = 0; i < n; i++) {
        if (!ep[i].transport[0] || !printable(ep[i].transport))
            return ts_err_set(err, TS_EINVAL, "data_planes[%zu].transport: a name like tcp or "
                              "shm is required", i);
        if (!ep[i].len || ep[i].len > TS_MEMBERS_MAX_BLOB)
            return ts_err_set(err, TS_EINVAL, "data_planes[%zu].address: 1..%d bytes", i,
                              TS_MEMBERS_MAX_BLOB);
    }
    return TS_OK;
}
