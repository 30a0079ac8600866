#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Paced UDP sender for leaseline's namespace tests (stdlib only).

Each source address (it must be local: the tests add them to the client
veth) sends at a fixed rate for a fixed time, paced by its own schedule:
packet k of a source leaves at t0 + phase + k / rate. A sender that falls
behind sends what is due at once, but never more than its schedule allows,
so the count per source is bounded by ceil(rate * duration) + 1 and the loop
by the deadline. Writes one JSON document with, per source, the packets
handed to the kernel and the instants (CLOCK_MONOTONIC) of the first and the
last one.

  udpsend.py --dst 198.18.0.2 --port 7000 --duration 4 --out sent.json \
             --flow 198.18.0.10-198.18.0.41:200 [--flow A-B:RATE ...]
"""
import argparse
import errno
import heapq
import ipaddress
import json
import math
import socket
import sys
import time

# Sources one run may use: the tests need tens; a typo should not open 65536 sockets.
MAX_SOURCES = 1024
# Per-source rate cap (packets/s): far above what the tests need, bounds the loop.
MAX_RATE = 100000.0
# Longest run the tool accepts, in seconds (reference §8: loops bounded in time).
MAX_DURATION = 120.0


def parse_flow(text):
    """'198.18.0.10-198.18.0.41:200' -> ([addresses], 200.0)"""
    span, _, rate = text.rpartition(":")
    if not span:
        raise argparse.ArgumentTypeError("expected FIRST[-LAST]:RATE, got '%s'" % text)
    first, _, last = span.partition("-")
    a = ipaddress.IPv4Address(first)
    b = ipaddress.IPv4Address(last) if last else a
    if int(b) < int(a) or int(b) - int(a) >= MAX_SOURCES:
        raise argparse.ArgumentTypeError("bad address range '%s'" % span)
    r = float(rate)
    if not 0 < r <= MAX_RATE:
        raise argparse.ArgumentTypeError("rate must be in (0, %g], got '%s'" % (MAX_RATE, rate))
    return [str(ipaddress.IPv4Address(i)) for i in range(int(a), int(b) + 1)], r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dst", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--flow", type=parse_flow, action="append", required=True,
                    help="FIRST[-LAST]:RATE, packets per second per source")
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--size", type=int, default=32, help="UDP payload bytes")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if not 0 < a.duration <= MAX_DURATION:
        ap.error("duration must be in (0, %g]" % MAX_DURATION)

    srcs = []  # (address, rate)
    for addrs, rate in a.flow:
        srcs.extend((s, rate) for s in addrs)
    if len(srcs) > MAX_SOURCES:
        ap.error("too many sources (%d > %d)" % (len(srcs), MAX_SOURCES))

    socks, stats = [], []
    for addr, rate in srcs:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((addr, 0))
        s.setblocking(False)
        socks.append(s)
        stats.append({"rate": rate, "sent": 0, "errors": 0, "first": None, "last": None,
                      "limit": math.ceil(rate * a.duration) + 1})
    payload = b"leaseline-test".ljust(a.size, b".")[: a.size]
    dst = (a.dst, a.port)

    t0 = time.monotonic() + 0.05
    deadline = t0 + a.duration
    # Spread the sources' phases over one period so they do not all fire at once.
    heap = [(t0 + (i / len(srcs)) / rate, i, 0) for i, (_, rate) in enumerate(srcs)]
    heapq.heapify(heap)
    while heap:
        t, i, k = heap[0]
        if t >= deadline:
            break
        now = time.monotonic()
        if now >= deadline:
            break
        if t > now:
            time.sleep(min(t - now, deadline - now))
            continue
        heapq.heappop(heap)
        st = stats[i]
        try:
            socks[i].sendto(payload, dst)
            st["sent"] += 1
            now = time.monotonic()
            if st["first"] is None:
                st["first"] = now
            st["last"] = now
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ENOBUFS):
                raise
            st["errors"] += 1
        if k + 1 < st["limit"]:
            heapq.heappush(heap, (t0 + (i / len(srcs) + k + 1) / srcs[i][1], i, k + 1))
    t_end = time.monotonic()
    for s in socks:
        s.close()

    doc = {"dst": a.dst, "port": a.port, "duration": a.duration, "t_start": t0, "t_end": t_end,
           "sources": {addr: {k: v for k, v in st.items() if k != "limit"}
                       for (addr, _), st in zip(srcs, stats)}}
    with open(a.out, "w") as f:
        json.dump(doc, f)
    total = sum(st["sent"] for st in stats)
    errs = sum(st["errors"] for st in stats)
    print("udpsend: %d sources, %d packets in %.2f s, %d send errors"
          % (len(srcs), total, t_end - t0, errs), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
