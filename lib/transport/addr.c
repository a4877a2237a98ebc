/* addr.c - the address text every socket-addressed backend (tcp, rdma) reads and writes:
 * "HOST:PORT" or "[V6]:PORT" in a blob, and a sockaddr printed the same way (internal.h). */
#include "transport/internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

ts_status ts__split_addr(const struct ts_blob *b, const char *who, char *host, size_t hn,
                         char *port, size_t pn, struct ts_err *e)
{
    char text[TS_BLOB_MAX + 1], *colon, *h = text;

    if (b->len == 0 || b->len >= sizeof(text))
        return ts_err_set(e, TS_EINVAL, "%s: address blob of %zu bytes", who, b->len);
    memcpy(text, b->data, b->len);
    text[b->len] = '\0';
    colon = strrchr(text, ':');
    if (!colon || colon == text || !colon[1] || strlen(colon + 1) >= pn)
        return ts_err_set(e, TS_EINVAL, "%s: address '%s' is not HOST:PORT", who, text);
    *colon = '\0';
    if (text[0] == '[' && colon[-1] == ']') {
        colon[-1] = '\0';
        h = text + 1;
    }
    if (strlen(h) >= hn)
        return ts_err_set(e, TS_EINVAL, "%s: host '%s' is too long", who, h);
    strcpy(host, h);
    strcpy(port, colon + 1);
    return TS_OK;
}

void ts__addr_text(const struct sockaddr *sa, char *buf, size_t n)
{
    char host[INET6_ADDRSTRLEN] = "?";

    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        snprintf(buf, n, "%s:%u", host, ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        snprintf(buf, n, "[%s]:%u", host, ntohs(in6->sin6_port));
    } else {
        snprintf(buf, n, "?");
    }
}
