#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""UDP receiver for leaseline's namespace tests (stdlib only).

Binds ADDR:PORT, counts datagrams per source address and keeps each one's
arrival instant (CLOCK_MONOTONIC, the clock udpsend.py and the shell use),
until SIGTERM/SIGINT or --max-time. Writes --ready once the socket is bound
and one JSON document to --out at the end.

  udpcount.py --bind 198.18.0.2 --port 7000 --max-time 30 --out recv.json --ready F
"""
import argparse
import json
import signal
import socket
import sys
import time

# Receive buffer asked for (SO_RCVBUFFORCE as root): a few seconds of the
# tests' admitted traffic, so the socket never drops what XDP passed.
RCVBUF = 8 << 20
# Poll interval for the stop flag, seconds.
POLL = 0.1

stop = False


def on_stop(sig, frame):
    global stop
    stop = True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bind", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--max-time", type=float, default=60.0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ready")
    a = ap.parse_args()

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, 33, RCVBUF)  # SO_RCVBUFFORCE
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    s.bind((a.bind, a.port))
    s.settimeout(POLL)
    if a.ready:
        with open(a.ready, "w") as f:
            f.write("ready\n")

    times = {}
    deadline = time.monotonic() + a.max_time
    while not stop and time.monotonic() < deadline:
        try:
            _, (src, _) = s.recvfrom(2048)
        except socket.timeout:
            continue
        except InterruptedError:
            continue
        times.setdefault(src, []).append(round(time.monotonic(), 5))
    # Drain what is already queued: it was admitted before we were told to stop.
    s.setblocking(False)
    for _ in range(1000000):
        try:
            _, (src, _) = s.recvfrom(2048)
        except (BlockingIOError, InterruptedError):
            break
        times.setdefault(src, []).append(round(time.monotonic(), 5))
    s.close()

    doc = {"sources": {src: {"count": len(t), "times": t} for src, t in times.items()}}
    with open(a.out, "w") as f:
        json.dump(doc, f)
    print("udpcount: %d packets from %d sources" % (sum(len(t) for t in times.values()),
                                                     len(times)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
