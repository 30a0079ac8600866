#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Receiver of one gateway for the multi-gateway harness (stdlib only).

Runs in the gateway's namespace, bound to the gateway's data address, so it
sees exactly what the XDP program let through. For every datagram it keeps
three CLOCK_MONOTONIC instants (ns):
  app   time.monotonic_ns() when recvmsg returned (what a user program sees);
  kern  the kernel's receive stamp (SO_TIMESTAMPNS, taken microseconds after
        the XDP verdict), converted from CLOCK_REALTIME with the offset
        between the two clocks measured here at start and at end;
  send  the sender's stamp carried in the payload (gsend.py);
and, when the sender runs with many keys (gsend.py --kphase), the key index
the payload carries (-1 for the one-address mode), so each admitted packet is
attributed to its key.
app - kern is the receive-side jitter; kern - send the path through veth and
XDP. Stops on SIGTERM/SIGINT or --max-time, drains the socket, writes JSON.

  grecv.py --gw 3 --bind 198.18.3.2 --port 7000 --max-time 60 --out r3.json --ready F
"""
import argparse
import json
import os
import signal
import socket
import struct
import sys
import time

RCVBUF = 8 << 20  # several seconds of the admitted rate: never drop what XDP passed
POLL = 0.1  # stop-flag poll interval, s
SO_TIMESTAMPNS = 35  # asm-generic/socket.h (SO_TIMESTAMPNS_OLD)
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
SO_RCVBUFFORCE = 33
HDR = struct.Struct("!4sHIq")
MAGIC = b"LLG1"
HDR2 = struct.Struct("!4sHIqI")  # gsend.py --kphase: the key index follows
MAGIC2 = b"LLG2"
NO_KEY = 0xFFFFFFFF
DRAIN_MAX = 1000000

stop = False


def on_stop(sig, frame):
    global stop
    stop = True


def clock_offset():
    """CLOCK_REALTIME - CLOCK_MONOTONIC in ns, from the tightest of 50 brackets."""
    best = None
    for _ in range(50):
        m0 = time.monotonic_ns()
        r = time.time_ns()
        m1 = time.monotonic_ns()
        if best is None or m1 - m0 < best[0]:
            best = (m1 - m0, r - (m0 + m1) // 2)
    return best[1], best[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gw", type=int, required=True)
    ap.add_argument("--bind", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--max-time", type=float, default=120.0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ready")
    a = ap.parse_args()

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    s.bind((a.bind, a.port))
    s.settimeout(POLL)
    off0, err0 = clock_offset()
    if a.ready:
        with open(a.ready, "w") as f:
            f.write("ready\n")

    app, kern, send, seqs, keys = [], [], [], [], []
    bad = 0
    # Many keys: each key must arrive from one source (address, port), and each
    # source carry one key, or the XDP program did not see the keys we think.
    src_of, key_of, conflicts = {}, {}, 0
    anc = socket.CMSG_SPACE(16)

    def take(data, ancdata, src):
        nonlocal bad, conflicts
        t = time.monotonic_ns()
        k = 0
        for level, typ, cd in ancdata:
            if level == socket.SOL_SOCKET and typ == SCM_TIMESTAMPNS and len(cd) >= 16:
                sec, nsec = struct.unpack("qq", cd[:16])
                k = sec * 1000000000 + nsec
        if len(data) >= HDR2.size and data[:4] == MAGIC2:
            _, gw, sq, ts, key = HDR2.unpack_from(data)
        elif len(data) >= HDR.size and data[:4] == MAGIC:
            _, gw, sq, ts = HDR.unpack_from(data)
            key = NO_KEY
        else:
            bad += 1
            return
        app.append(t)
        keys.append(-1 if key == NO_KEY else key)
        if key != NO_KEY:
            if src_of.setdefault(key, src) != src or key_of.setdefault(src, key) != key:
                conflicts += 1
        kern.append(k)
        send.append(ts)
        seqs.append(sq)

    deadline = time.monotonic() + a.max_time
    while not stop and time.monotonic() < deadline:
        try:
            data, ancdata, _, src = s.recvmsg(2048, anc)
        except (socket.timeout, InterruptedError):
            continue
        take(data, ancdata, src)
    s.setblocking(False)
    for _ in range(DRAIN_MAX):
        try:
            data, ancdata, _, src = s.recvmsg(2048, anc)
        except (BlockingIOError, InterruptedError):
            break
        take(data, ancdata, src)
    s.close()
    off1, err1 = clock_offset()
    # Kernel stamps are CLOCK_REALTIME; both clocks are slewed alike, so the
    # offset moves only if somebody steps the clock (reported as drift).
    kmono = [k - off0 if k else 0 for k in kern]
    doc = {"gw": a.gw, "count": len(app), "bad": bad, "offset_ns": off0,
           "offset_drift_ns": off1 - off0, "offset_err_ns": max(err0, err1),
           "app": app, "kern": kmono, "send": send, "seq": seqs, "key": keys,
           "keys_seen": len(src_of), "sources_seen": len(key_of), "key_src_conflicts": conflicts}
    with open(a.out + ".tmp", "w") as f:
        json.dump(doc, f)
    os.replace(a.out + ".tmp", a.out)
    print("grecv %d: %d packets" % (a.gw, len(app)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
