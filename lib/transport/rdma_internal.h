/* rdma_internal.h - the rdma backend's connection data on the wire (rdma.c): what each side's
 * rdma_cm private data carries, shared with tests/unit/test_transport.c, whose raw verbs peer
 * sends it wrong on purpose. Not part of lib/transport's interface. */
#ifndef TS_TRANSPORT_RDMA_INTERNAL_H
#define TS_TRANSPORT_RDMA_INTERNAL_H

#include <stdint.h>

#define RDMA_WIRE_MAGIC 0x3141444d52535400ull   /* "\0TSRDMA1" */
#define RDMA_WIRE_VERSION 1
#define RDMA_RING (4u << 20)   /* receive ring bytes per connection and direction */

/* Sent in the REQ (connector) and the REP (acceptor): 48 bytes, within the 56 an RC REQ
 * carries. 64-bit fields first, no padding, the host's byte order (both ends run this build's
 * format; version says so). ring_*: where the peer writes its bytes; credit_*: the 64-bit word
 * where the peer writes how many of ours it has consumed. */
struct rdma_wire_info {
    uint64_t magic;
    uint64_t ring_addr, ring_size, credit_addr;
    uint32_t ring_rkey, credit_rkey, version, pad;
};

_Static_assert(sizeof(struct rdma_wire_info) == 48, "an RC REQ carries 56 bytes of private data");

#endif
