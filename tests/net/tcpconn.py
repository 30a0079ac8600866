#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""TCP server and clients for leaseline's new-connection test (stdlib only).

  server  binds ADDR:PORT, accepts every connection, reads and discards what
          it is sent; until SIGTERM/SIGINT or --max-time. Writes --ready once
          listening and, at the end, JSON: per source address the connections
          accepted and the bytes received.
  connect opens connections from --src at --rate per second for --duration
          seconds, each given --timeout to complete (a SYN the gateway drops
          is not retried: the socket is closed first), then closed. JSON: the
          attempts, the connections made, the failures, first/last instant.
  bulk    one connection from --src, made at once, then sends as fast as it
          can for --duration seconds. JSON: (instant, bytes sent so far) every
          --sample seconds, and the total.

All instants are CLOCK_MONOTONIC seconds. Every loop is bounded in time.
"""
import argparse
import errno
import json
import selectors
import signal
import socket
import sys
import time

MAX_DURATION = 120.0
MAX_RATE = 10000.0
CHUNK = 1 << 16

stop = False


def on_stop(sig, frame):
    global stop
    stop = True


def dump(path, doc):
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f)
    import os
    os.replace(path + ".tmp", path)


def server(a):
    sel = selectors.DefaultSelector()
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((a.bind, a.port))
    ls.listen(4096)
    ls.setblocking(False)
    sel.register(ls, selectors.EVENT_READ, None)
    if a.ready:
        open(a.ready, "w").close()
    per = {}
    deadline = time.monotonic() + min(a.max_time, MAX_DURATION)
    while not stop and time.monotonic() < deadline:
        for key, _ in sel.select(0.1):
            if key.data is None:
                try:
                    c, (src, _) = ls.accept()
                except BlockingIOError:
                    continue
                c.setblocking(False)
                s = per.setdefault(src, {"accepted": 0, "bytes": 0})
                s["accepted"] += 1
                sel.register(c, selectors.EVENT_READ, src)
            else:
                try:
                    b = key.fileobj.recv(1 << 20)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    b = b""
                if b:
                    per[key.data]["bytes"] += len(b)
                else:
                    sel.unregister(key.fileobj)
                    key.fileobj.close()
    dump(a.out, {"sources": per})


def close_now(s):
    # Closing an attempt that is still in SYN-SENT ends it: an unanswered
    # SYN is not retransmitted, so the gateway sees one SYN per attempt. A
    # made connection is closed with FIN, so the server accepts every one.
    s.close()


def connect(a):
    """Attempts on schedule (attempt k at t0 + k / rate), each non-blocking
    with its own --timeout, so that failures do not slow the schedule."""
    rate = min(a.rate, MAX_RATE)
    dur = min(a.duration, MAX_DURATION)
    sel = selectors.DefaultSelector()
    t0 = time.monotonic()
    n = int(rate * dur)
    k = made = failed = 0
    first = last = None
    pending = {}  # socket -> deadline
    end = t0 + dur + a.timeout + 1.0
    while not stop and (k < n or pending) and time.monotonic() < end:
        now = time.monotonic()
        while k < n and t0 + k / rate <= now:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((a.src, 0))
            s.setblocking(False)
            first = now if first is None else first
            last = now
            err = s.connect_ex((a.dst, a.port))
            k += 1
            if err == 0:
                made += 1
                close_now(s)
            elif err in (errno.EINPROGRESS, errno.EAGAIN):
                pending[s] = now + a.timeout
                sel.register(s, selectors.EVENT_WRITE)
            else:
                failed += 1
                close_now(s)
        wait = min([t0 + k / rate - now] if k < n else [0.05] +
                   [d - now for d in pending.values()])
        for key, _ in sel.select(max(0.0, min(wait, 0.05))):
            s = key.fileobj
            sel.unregister(s)
            del pending[s]
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                made += 1
            else:
                failed += 1
            close_now(s)
        now = time.monotonic()
        for s in [s for s, d in pending.items() if d <= now]:
            sel.unregister(s)
            del pending[s]
            failed += 1
            close_now(s)
    dump(a.out, {"src": a.src, "attempts": k, "made": made, "failed": failed + len(pending),
                 "first": first, "last": last})


def bulk(a):
    dur = min(a.duration, MAX_DURATION)
    s = socket.create_connection((a.dst, a.port), timeout=5, source_address=(a.src, 0))
    s.settimeout(1.0)
    buf = b"\0" * CHUNK
    sent = 0
    t0 = time.monotonic()
    samples = [(t0, 0)]
    next_sample = t0 + a.sample
    end = t0 + dur
    while not stop:
        now = time.monotonic()
        if now >= next_sample:
            samples.append((now, sent))
            next_sample += a.sample
        if now >= end:
            break
        try:
            sent += s.send(buf)
        except socket.timeout:
            continue
    samples.append((time.monotonic(), sent))
    s.shutdown(socket.SHUT_WR)
    s.close()
    dump(a.out, {"src": a.src, "sent": sent, "samples": samples})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["server", "connect", "bulk"])
    ap.add_argument("--bind")
    ap.add_argument("--dst")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--src")
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument("--duration", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=0.25)
    ap.add_argument("--sample", type=float, default=0.1)
    ap.add_argument("--max-time", type=float, default=60.0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ready")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    {"server": server, "connect": connect, "bulk": bulk}[a.mode](a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
