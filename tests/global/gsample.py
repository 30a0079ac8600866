#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Sampler for the multi-gateway harness (stdlib only).

Every --period seconds it reads each agent's lease and counters straight
from the agent's pinned maps (ll_leases, ll_limit_stats: the bpf(2) syscall
through ctypes, so it needs no help from the agent and keeps reading while
an agent is stopped), and every --coord-period seconds it scrapes the
coordinator's /metrics. Runs in the coordinator's namespace (the pins are in
the shared mount namespace). Writes JSON lines:

  {"t": ns, "gw": {"1": [rate, burst, expiry_ns, epoch, seq, on_loss,
                         allowed, denied, fallback, bypass], ...}}
  {"t": ns, "coord": {"leaseline_coord_live_rate{limit=\\"x\\"}": 950, ...}}

t is CLOCK_MONOTONIC, the clock of the leases' expiry and of the receivers.

  gsample.py --pins 1=/pin/gw-1 --pins 2=... --coord 127.0.0.1:9476 \
             --period 0.02 --coord-period 0.1 --max-time 60 --out samples.jsonl
"""
import argparse
import ctypes
import json
import os
import signal
import socket
import struct
import sys
import time

SYS_BPF = 321  # x86_64
BPF_MAP_LOOKUP_ELEM = 1
BPF_OBJ_GET = 7
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_F_LOCK = 4
LL_MAX_LIMITS = 256  # include/ll_types.h
# struct ll_lease (include/ll_types.h): checked against the map's value size.
LEASE = struct.Struct("<IIII B3x I QQQQQ QQQQ QQQQ QQ")
LEASE_SIZE = 144
# struct ll_limit_stats: 15 u64 per CPU (checked against the map's value size).
STATS = struct.Struct("<15Q")

libc = ctypes.CDLL(None, use_errno=True)
stop = False


def on_stop(sig, frame):
    global stop
    stop = True


def bpf(cmd, attr):
    r = libc.syscall(SYS_BPF, cmd, ctypes.byref(attr), ctypes.sizeof(attr))
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


def obj_get(path):
    p = ctypes.create_string_buffer(path.encode())
    attr = ctypes.create_string_buffer(128)
    struct.pack_into("<QII", attr, 0, ctypes.addressof(p), 0, 0)
    return bpf(BPF_OBJ_GET, attr)


def map_value_size(fd):
    info = ctypes.create_string_buffer(88)
    attr = ctypes.create_string_buffer(128)
    struct.pack_into("<IIQ", attr, 0, fd, len(info), ctypes.addressof(info))
    bpf(BPF_OBJ_GET_INFO_BY_FD, attr)
    return struct.unpack_from("<IIIII", info, 0)[3]


class Map:
    def __init__(self, path, vsize):
        self.fd = obj_get(path)
        self.vsize = vsize
        self.key = ctypes.c_uint32(0)
        self.val = ctypes.create_string_buffer(vsize)
        self.attr = ctypes.create_string_buffer(128)

    def lookup(self, k, flags=0):
        self.key.value = k
        struct.pack_into("<IIQQQ", self.attr, 0, self.fd, 0, ctypes.addressof(self.key),
                         ctypes.addressof(self.val), flags)
        bpf(BPF_MAP_LOOKUP_ELEM, self.attr)
        return self.val.raw

    def close(self):
        os.close(self.fd)


def possible_cpus():
    n = 0
    with open("/sys/devices/system/cpu/possible") as f:
        for part in f.read().strip().split(","):
            a, _, b = part.partition("-")
            n += (int(b) if b else int(a)) - int(a) + 1
    return n


class Agent:
    """One agent's pinned maps; (re)opened lazily, the global limits found by scan."""

    def __init__(self, gw, pin):
        self.gw, self.pin = gw, pin
        self.leases = self.stats = None
        self.ids = []
        self.ncpu = possible_cpus()

    def open(self):
        lp, sp = os.path.join(self.pin, "ll_leases"), os.path.join(self.pin, "ll_limit_stats")
        if not (os.path.exists(lp) and os.path.exists(sp)):
            return False
        self.leases = Map(lp, LEASE_SIZE)
        vs = map_value_size(self.leases.fd)
        if vs != LEASE_SIZE:
            raise SystemExit("gsample: ll_leases value is %d bytes, expected %d: "
                             "struct ll_lease changed, update gsample.py" % (vs, LEASE_SIZE))
        self.stats = Map(sp, ((STATS.size + 7) // 8 * 8) * self.ncpu)
        vs = map_value_size(self.stats.fd)
        if vs != STATS.size:
            raise SystemExit("gsample: ll_limit_stats value is %d bytes, expected %d: "
                             "struct ll_limit_stats changed, update gsample.py" % (vs, STATS.size))
        return True

    def scan(self):
        self.ids = []
        for i in range(LL_MAX_LIMITS):
            f = LEASE.unpack(self.leases.lookup(i, BPF_F_LOCK))
            if f[1]:  # gen: written by leases_sync for a global limit
                self.ids.append(i)

    def sample(self):
        if self.leases is None and not self.open():
            return None
        if not self.ids:
            self.scan()
            if not self.ids:
                return None
        i = self.ids[0]
        f = LEASE.unpack(self.leases.lookup(i, BPF_F_LOCK))
        # lock gen prev_gen fb_gen on_loss pad1 expiry rate burst_s fill chunk
        # prev_rate prev_burst_s prev_fill reload fb_rate fb_burst_s fb_fill fb_chunk epoch seq
        raw = self.stats.lookup(i)
        tot = [0] * len(STATS.unpack_from(raw, 0))
        step = (STATS.size + 7) // 8 * 8
        for c in range(self.ncpu):
            for j, v in enumerate(STATS.unpack_from(raw, c * step)):
                tot[j] += v
        # allowed_pkts denied_pkts fallback_pkts bypass_pkts
        return [f[7], f[8] // 1000000000, f[6], f[19], f[20], f[4],
                tot[0], tot[2], tot[8], tot[10]]


def scrape(addr, timeout=0.2):
    host, _, port = addr.rpartition(":")
    out = {}
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as s:
            s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            buf = b""
            while True:
                d = s.recv(65536)
                if not d:
                    break
                buf += d
    except OSError:
        return None
    _, _, body = buf.partition(b"\r\n\r\n")
    for line in body.decode(errors="replace").splitlines():
        if not line or line.startswith("#"):
            continue
        k, _, v = line.rpartition(" ")
        try:
            out[k] = float(v)
        except ValueError:
            pass
    return out


def held_epoch(agents):
    """The highest epoch any agent holds a lease of (0: none)."""
    floor = 0
    for ag in agents:
        try:
            v = ag.sample()
        except OSError:
            v, ag.leases, ag.ids = None, None, []
        if v is not None:
            floor = max(floor, v[3])
    return floor


def wait_until(agents, n, max_time, ok, what):
    """Until ok(sample) holds for n agents' samples (polled every 50 ms), at
    most max_time s; 0, or 1 with what was seen."""
    deadline = time.monotonic() + max_time
    hits = 0
    while time.monotonic() < deadline:
        hits = 0
        for ag in agents:
            try:
                v = ag.sample()
            except OSError:
                v, ag.leases, ag.ids = None, None, []
            if v is not None and ok(v):
                hits += 1
        if hits >= n:
            return 0
        time.sleep(0.05)
    print("gsample: %d of %d agents %s after %g s" % (hits, n, what, max_time), file=sys.stderr)
    return 1


def wait_live(agents, n, max_time, new_epoch=False, above=None):
    """Until n agents hold a live lease (of an epoch above every epoch the agents
    held when the wait began, with new_epoch; above `above`, if given)."""
    floor = 0
    if above is not None:
        floor, new_epoch = above, True
    elif new_epoch:
        floor = held_epoch(agents)
    low = floor - (0 if new_epoch else 1)
    return wait_until(agents, n, max_time,
                      lambda v: v[2] > time.monotonic_ns() and v[0] > 0 and v[3] > low,
                      "hold a live lease")


def wait_dead(agents, n, max_time):
    """Until n agents hold no live lease (each expired in its own map)."""
    return wait_until(agents, n, max_time, lambda v: v[2] <= time.monotonic_ns(),
                      "hold no live lease")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pins", action="append", default=[], help="GW=PIN_DIR")
    ap.add_argument("--coord", help="HOST:PORT of the coordinator's metrics")
    ap.add_argument("--period", type=float, default=0.02)
    ap.add_argument("--coord-period", type=float, default=0.1)
    ap.add_argument("--max-time", type=float, default=120.0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ready")
    ap.add_argument("--wait-live", type=int, metavar="N",
                    help="only wait (up to --max-time) until N agents hold a live lease")
    ap.add_argument("--wait-dead", type=int, metavar="N",
                    help="only wait (up to --max-time) until N agents hold no live lease")
    ap.add_argument("--new-epoch", action="store_true",
                    help="with --wait-live: a lease of an epoch newer than any held now")
    ap.add_argument("--epoch-above", type=int, metavar="E",
                    help="with --wait-live: a lease of an epoch above E (a restarted "
                    "coordinator adopts shares at once: take E before the kill)")
    ap.add_argument("--print-epoch", action="store_true",
                    help="print the highest epoch any agent holds and exit")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    agents = []
    for p in a.pins:
        gw, _, d = p.partition("=")
        agents.append(Agent(gw, d))
    if a.print_epoch:
        print(held_epoch(agents))
        return 0
    if a.wait_dead is not None:
        return wait_dead(agents, a.wait_dead, a.max_time)
    if a.wait_live is not None:
        return wait_live(agents, a.wait_live, a.max_time, a.new_epoch, a.epoch_above)
    out = open(a.out, "w")
    if a.ready:
        with open(a.ready, "w") as f:
            f.write("ready\n")
    deadline = time.monotonic() + a.max_time
    next_coord = 0.0
    sweeps = 0
    while not stop and time.monotonic() < deadline:
        t0 = time.monotonic()
        row = {}
        for ag in agents:
            try:
                v = ag.sample()
            except OSError:
                v = None
                ag.leases = None  # pins gone (agent restarted elsewhere): reopen
                ag.ids = []
            if v is not None:
                row[ag.gw] = v
        out.write(json.dumps({"t": time.monotonic_ns(), "gw": row}) + "\n")
        sweeps += 1
        if a.coord and t0 >= next_coord:
            m = scrape(a.coord)
            if m is not None:
                out.write(json.dumps({"t": time.monotonic_ns(), "coord": m}) + "\n")
            next_coord = t0 + a.coord_period
        dt = a.period - (time.monotonic() - t0)
        if dt > 0:
            time.sleep(dt)
    out.close()
    print("gsample: %d sweeps" % sweeps, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
