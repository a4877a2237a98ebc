/* members_check.h - the master's checks of what a member says about itself when it registers
 * or heartbeats (members.c): each refuses with TS_EINVAL and a message naming the field, so
 * that a bad request changes nothing. Pure functions of their arguments. */
#ifndef TS_MASTER_MEMBERS_CHECK_H
#define TS_MASTER_MEMBERS_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "members.h"

/* An address in `field`: required, at most TS_MEMBERS_MAX_ADDR bytes, printable; with
 * need_port, host:port with a port of 1..65535. */
ts_status members_check_addr(const char *field, const char *a, bool need_port,
                             struct ts_err *err) TS_MUST_CHECK;
/* A process start's id: 1..TS_MEMBERS_MAX_INSTANCE of [A-Za-z0-9._-]. */
ts_status members_check_instance(const char *s, struct ts_err *err) TS_MUST_CHECK;
/* 0 (the default) or TS_MEMBERS_MIN_LEASE_MS..TS_MEMBERS_MAX_LEASE_MS. */
ts_status members_check_lease(uint32_t lease_ms, struct ts_err *err) TS_MUST_CHECK;
/* SHARD or WORKER. */
ts_status members_check_kind(enum ts_member_kind kind, struct ts_err *err) TS_MUST_CHECK;
/* A shard's data-plane endpoints: at most TS_MEMBERS_MAX_ENDPOINTS, each a transport name and
 * an address of 1..TS_MEMBERS_MAX_BLOB bytes. */
ts_status members_check_endpoints(const struct ts_endpoint *ep, size_t n,
                                  struct ts_err *err) TS_MUST_CHECK;

#endif
