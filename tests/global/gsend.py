#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Paced UDP sender to several gateways at once (stdlib only).

Runs in the client namespace. Gateway g (1-based, in --target order) gets
packets from SRC to DST:PORT at the rate its current phase gives it. Phases
run one after the other: --phase 4:375,375,0 means "for 4 s, 375/s to
gateways 1 and 2, none to 3". Packet n of a gateway leaves at its own
schedule (next = previous + 1/rate); a sender that falls behind sends what
is due at once, never more than the schedule allows, so every loop is
bounded by the schedule and the deadline.

Each datagram carries (gateway, sequence, CLOCK_MONOTONIC ns at send) so the
receivers can measure the path. SIGTERM ends the run early (the last phase is cut
there). Writes one JSON document: per gateway and
phase the packets planned and handed to the kernel, and how late the sender
ran behind its schedule (p99, max) - a sender that cannot keep up is
reported, never silently taken as the offered load.

  gsend.py --port 7000 --target 198.18.1.1,198.18.1.2 --target ... \
           --phase 4:375,375 --phase 4:0,750 --out sent.json
"""
import argparse
import errno
import heapq
import json
import os
import signal
import socket
import struct
import sys
import time

# Longest run the tool accepts (reference §8: loops bounded in time).
MAX_DURATION = 600.0
# Per-gateway rate cap, packets/s: far above what 2 CPUs can send from Python.
MAX_RATE = 50000.0
MAX_TARGETS = 64
# Payload: magic, gateway, sequence, send instant; padded to --size.
HDR = struct.Struct("!4sHIq")
MAGIC = b"LLG1"


stop = False


def on_stop(sig, frame):
    global stop
    stop = True


def parse_phase(text):
    dur, _, rates = text.partition(":")
    try:
        d = float(dur)
        r = [float(x) for x in rates.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("expected SECONDS:RATE,RATE,..., got '%s'" % text)
    if not 0 < d <= MAX_DURATION or any(not 0 <= x <= MAX_RATE for x in r):
        raise argparse.ArgumentTypeError("phase out of range: '%s'" % text)
    return d, r


def parse_target(text):
    src, _, dst = text.partition(",")
    if not dst:
        raise argparse.ArgumentTypeError("expected SRC,DST, got '%s'" % text)
    return src, dst


def pct(xs, p):
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--target", type=parse_target, action="append", required=True)
    ap.add_argument("--phase", type=parse_phase, action="append", required=True)
    ap.add_argument("--size", type=int, default=32, help="UDP payload bytes (>= 18)")
    ap.add_argument("--start-delay", type=float, default=0.05)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    n = len(a.target)
    if n > MAX_TARGETS:
        ap.error("too many targets")
    for d, r in a.phase:
        if len(r) != n:
            ap.error("a phase gives %d rates for %d targets" % (len(r), n))
    if sum(d for d, _ in a.phase) > MAX_DURATION:
        ap.error("longer than %g s" % MAX_DURATION)
    size = max(a.size, HDR.size)

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    socks = []
    for src, dst in a.target:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((src, 0))
        s.setblocking(False)
        s.connect((dst, a.port))
        socks.append(s)

    t0 = time.monotonic_ns() + int(a.start_delay * 1e9)
    bounds = [t0]  # phase p runs [bounds[p], bounds[p+1])
    for d, _ in a.phase:
        bounds.append(bounds[-1] + int(d * 1e9))
    t_end = bounds[-1]
    rates = [r for _, r in a.phase]

    def phase_of(t):
        for p in range(len(rates)):
            if t < bounds[p + 1]:
                return p
        return len(rates) - 1

    st = [[{"planned": 0, "sent": 0, "errors": 0} for _ in rates] for _ in range(n)]
    seq = [0] * n
    lag = []  # ns behind schedule, one sample per packet
    pad = b"." * (size - HDR.size)
    # Spread the gateways' phases over 1 ms so they do not all fire at once.
    heap = [(t0 + g * 1000000 // max(n, 1), g) for g in range(n)]
    heapq.heapify(heap)
    steps = 0
    step_cap = int(sum(d * sum(r) for d, r in a.phase)) * 2 + 1000 * n * len(rates) + 1000
    while heap and steps < step_cap and not stop:
        steps += 1
        t, g = heap[0]
        if t >= t_end:
            heapq.heappop(heap)
            continue
        now = time.monotonic_ns()
        if now >= t_end:
            break
        if t > now:
            time.sleep((t - now) / 1e9)
            continue
        heapq.heappop(heap)
        p = phase_of(t)
        r = rates[p][g]
        if r <= 0:
            # Nothing to send in this phase: resume at the next one.
            if p + 1 < len(rates):
                heapq.heappush(heap, (bounds[p + 1] + g * 1000000 // max(n, 1), g))
            continue
        s = st[g][p]
        s["planned"] += 1
        seq[g] += 1
        try:
            now = time.monotonic_ns()
            socks[g].send(HDR.pack(MAGIC, g + 1, seq[g], now) + pad)
            s["sent"] += 1
            lag.append(now - t)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ENOBUFS):
                raise
            s["errors"] += 1
        nt = t + int(1e9 / r)
        if phase_of(nt) != p and nt < t_end:
            # Crossing into the next phase: start on its own schedule.
            q = phase_of(nt)
            if rates[q][g] <= 0 or nt < bounds[q]:
                nt = bounds[q]
        heapq.heappush(heap, (nt, g))
    t_stop = time.monotonic_ns()
    for s in socks:
        s.close()

    if t_stop < t_end:
        # Stopped early (SIGTERM): the run ends here; later phases never ran.
        keep = [p for p in range(len(rates)) if bounds[p] < t_stop] or [0]
        rates = [rates[p] for p in keep]
        bounds = bounds[:len(keep)] + [t_stop]
        st = [gw[:len(keep)] for gw in st]
    doc = {"t0_ns": t0, "t_end_ns": t_end, "t_stop_ns": t_stop, "bounds_ns": bounds,
           "rates": rates, "lag_p99_ms": pct(lag, 0.99) / 1e6, "lag_max_ms": max(lag or [0]) / 1e6,
           "gateways": []}
    for g in range(n):
        doc["gateways"].append({"gw": g + 1, "src": a.target[g][0], "dst": a.target[g][1],
                                "phases": st[g]})
    with open(a.out + ".tmp", "w") as f:
        json.dump(doc, f)
    os.replace(a.out + ".tmp", a.out)
    planned = sum(x["planned"] for gw in st for x in gw)
    sent = sum(x["sent"] for gw in st for x in gw)
    print("gsend: %d targets, %d/%d packets sent in %.2f s, lag p99 %.1f ms max %.1f ms"
          % (n, sent, planned, (t_stop - t0) / 1e9, doc["lag_p99_ms"], doc["lag_max_ms"]),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
