#!/usr/bin/python3
"""rpc_latency_py.py - the python3-grpcio half of bench/rpc_latency.

Why: most people who call the master by hand do it from Python, and grpcio's overhead is the
context in which our C client's figures make sense. bench_rpc_latency starts the master, then
runs this script against it with the same warm-up and call count as its own C loop, and reads
the one JSON line printed on stdout (keys in a fixed order, compact separators).

Debian 12 ships grpcio without grpc_tools, so there is no generated stub: the call goes through
channel.unary_unary with the protoc-generated message classes (build/gen/python on PYTHONPATH).
Percentiles use the nearest-rank rule, as the C side does.
"""

import argparse
import json
import os
import sys
import time

import grpc

try:
    from tessera.v1 import master_pb2
except ImportError as e:
    sys.exit(f"rpc_latency_py: {e}: put the build's gen/python on PYTHONPATH")

METHOD = "/tessera.v1.Master/ClusterStatus"



def channel(target):
    """Plaintext, or mutual TLS with $TESSERA_TLS_DIR's client certificate as our SDK does
    (docs/security.md)."""
    d = os.environ.get("TESSERA_TLS_DIR")
    if not d:
        return grpc.insecure_channel(target)

    def read(name):
        with open(os.path.join(d, name), "rb") as f:
            return f.read()
    creds = grpc.ssl_channel_credentials(read("ca.pem"), read("client.key"), read("client.pem"))
    return grpc.secure_channel(target, creds,
                               options=[("grpc.ssl_target_name_override", "server.tessera")])

def percentile(sorted_ns, p):
    """Nearest rank: the smallest sample with at least p% of the samples at or below it."""
    rank = max(1, (p * len(sorted_ns) + 99) // 100)  # integer ceil, as in the C side
    return sorted_ns[rank - 1]


def main():
    ap = argparse.ArgumentParser(description="ClusterStatus latency from python3-grpcio")
    ap.add_argument("--target", required=True, help="master host:port")
    ap.add_argument("--calls", type=int, default=10000, help="measured calls (default 10000)")
    ap.add_argument("--warmup", type=int, default=200, help="calls before measuring (default 200)")
    ap.add_argument("--deadline-s", type=float, default=5.0, help="per-call deadline (default 5)")
    a = ap.parse_args()
    if a.calls < 1 or a.warmup < 0:
        sys.exit("rpc_latency_py: --calls must be >= 1 and --warmup >= 0")

    with channel(a.target) as ch:
        call = ch.unary_unary(
            METHOD,
            request_serializer=master_pb2.ClusterStatusRequest.SerializeToString,
            response_deserializer=master_pb2.ClusterStatusResponse.FromString)
        req = master_pb2.ClusterStatusRequest()
        # The first call waits for the connection; later ones find it ready.
        call(req, timeout=a.deadline_s, wait_for_ready=True)
        for _ in range(a.warmup):
            call(req, timeout=a.deadline_s)
        lat = []
        clock = time.perf_counter_ns
        for _ in range(a.calls):
            t0 = clock()
            call(req, timeout=a.deadline_s)
            lat.append(clock() - t0)

    lat.sort()

    def us(ns):
        return round(ns / 1000.0, 1)

    print(json.dumps({
        "p50_us": us(percentile(lat, 50)),
        "p90_us": us(percentile(lat, 90)),
        "p99_us": us(percentile(lat, 99)),
        "max_us": us(lat[-1]),
        "calls": len(lat),
        "grpcio": grpc.__version__,
    }, separators=(",", ":")), flush=True)  # the C side reads these keys in this order


if __name__ == "__main__":
    try:
        main()
    except grpc.RpcError as e:
        sys.exit(f"rpc_latency_py: {METHOD}: {e.code().name}: {e.details()}")
