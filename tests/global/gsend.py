#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Paced UDP sender to several gateways at once (stdlib only).

Runs in the client namespace. Two modes; phases run one after the other.

One client address (--phase): gateway g (1-based, in --target order) gets
packets from SRC to DST:PORT at the rate its current phase gives it:
--phase 4:375,375,0 means "for 4 s, 375/s to gateways 1 and 2, none to 3".

Many keys (--kphase, with --keys N): key k (0-based) is the source address
--key-base + k (a `key: src-ip` limit sees N keys), or, with --key-ports P, the
address --key-base + k // P and source port --port-base + k % P (a `key: flow`
limit sees N keys). The addresses must be local in the client namespace
(lib.sh routes the whole block to lo); one unconnected socket per source port
sends every key's packets with its source address set per packet
(IP_PKTINFO). A phase is a sum of generators, joined by '+':

  hot:K@G=RATE              key K at RATE/s, spread evenly over gateways G
  uniform:K0-K1@G=RATE      every key of K0..K1 at RATE/s, spread over G
  zipf:K0-K1,s=S,pps=T[,seed=X][,spread=1/2/4/8]
                            Zipf demand: key K0+i at T*(i+1)^-s/H; each key
                            on m gateways (m drawn from spread, default
                            1/2/4/8) in a fixed random pattern from seed
  cycle:K0-K1@G=RATE        RATE/s to each gateway of G, cycling through the
                            keys (each gateway from its own starting key, and
                            on from where it stopped in the phase before):
                            many cold keys with few streams
  G: all, a gateway (3) or a list (1/2/5).

  --kphase 6:hot:0@1=300+hot:1@2=300+uniform:2-5@all=20

Every (key or key range, gateway) pair is a stream with its own schedule
(next = previous + 1/rate, the first packet at a fixed random offset within
its first interval). A sender that falls behind sends what is due at once,
never more than the schedule allows, so every loop is bounded by the schedule
and the deadline.

Each datagram carries (gateway, sequence, CLOCK_MONOTONIC ns at send, key)
so the receivers can measure the path and attribute it to its key. SIGTERM
ends the run early (the last phase is cut there). Writes one JSON document:
per gateway and phase (and per stream in key mode) the packets planned and
handed to the kernel, and how late the sender ran behind its schedule (p99,
max) - a sender that cannot keep up is reported, never silently taken as the
offered load.

  gsend.py --port 7000 --target 198.18.1.1,198.18.1.2 --target ... \\
           --phase 4:375,375 --phase 4:0,750 --out sent.json
  gsend.py --port 7000 --target ... --keys 1000 --key-base 198.18.128.1 \\
           --kphase 10:zipf:0-999,s=1,pps=2400,seed=7 --out sent.json
"""
import argparse
import errno
import heapq
import ipaddress
import json
import os
import random
import signal
import socket
import struct
import sys
import time

# Longest run the tool accepts (reference §8: loops bounded in time).
MAX_DURATION = 600.0
# Per-stream rate cap, packets/s: far above what 2 CPUs can send from Python.
MAX_RATE = 50000.0
MAX_TARGETS = 64
# Keys one run may name (flow mode: addresses x ports), and source ports.
MAX_KEYS = 1 << 21
MAX_PORTS = 256
# Streams of one phase: every (key, gateway) pair of a generator.
MAX_STREAMS = 200000
# Payload: magic, gateway, sequence, send instant[, key]; padded to --size.
HDR = struct.Struct("!4sHIq")
MAGIC = b"LLG1"
HDR2 = struct.Struct("!4sHIqI")
MAGIC2 = b"LLG2"
NO_KEY = 0xFFFFFFFF
IP_PKTINFO = 8  # linux/in.h (not exported by every Python)
# All the harness's addresses are in the benchmarking range (reference §8).
BENCH_NET = ipaddress.IPv4Network("198.18.0.0/15")

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


def parse_kphase(text):
    dur, _, gens = text.partition(":")
    try:
        d = float(dur)
    except ValueError:
        raise argparse.ArgumentTypeError("expected SECONDS:GEN[+GEN...], got '%s'" % text)
    if not 0 < d <= MAX_DURATION or not gens:
        raise argparse.ArgumentTypeError("phase out of range: '%s'" % text)
    return d, gens.split("+")


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


# ---------- generators: text -> [(gw, k0, k1, rate)] (gw 0-based, keys inclusive) ----------

class GenError(ValueError):
    pass


def gws_of(text, n):
    if text in ("", "all"):
        return list(range(n))
    try:
        gs = sorted({int(x) - 1 for x in text.split("/")})
    except ValueError:
        raise GenError("bad gateway list '%s'" % text)
    if not gs or gs[0] < 0 or gs[-1] >= n:
        raise GenError("gateway out of range in '%s' (1..%d)" % (text, n))
    return gs


def key_range(text, nkeys):
    a, _, b = text.partition("-")
    try:
        k0 = int(a)
        k1 = int(b) if b else k0
    except ValueError:
        raise GenError("bad key range '%s'" % text)
    if not 0 <= k0 <= k1 < nkeys:
        raise GenError("key range '%s' outside 0..%d" % (text, nkeys - 1))
    return k0, k1


def at_rate(text):
    """'KEYS@GWS=RATE' or 'KEYS=RATE' -> (KEYS, GWS, rate)"""
    lhs, _, rate = text.rpartition("=")
    keys, _, gws = lhs.partition("@")
    try:
        r = float(rate)
    except ValueError:
        raise GenError("bad rate in '%s'" % text)
    if not lhs or not 0 < r <= MAX_RATE:
        raise GenError("expected KEYS[@GWS]=RATE with 0 < RATE <= %g, got '%s'" % (MAX_RATE, text))
    return keys, gws, r


def zipf_streams(args, n, nkeys):
    parts = args.split(",")
    k0, k1 = key_range(parts[0], nkeys)
    opt = {"s": "1.0", "seed": "1", "spread": "1/2/4/8"}
    for p in parts[1:]:
        k, _, v = p.partition("=")
        if k not in ("s", "pps", "seed", "spread"):
            raise GenError("zipf: unknown option '%s'" % k)
        opt[k] = v
    try:
        s, pps, seed = float(opt["s"]), float(opt["pps"]), int(opt["seed"])
        spread = [min(n, int(x)) for x in opt["spread"].split("/")]
    except (KeyError, ValueError):
        raise GenError("zipf: expected K0-K1,s=S,pps=T[,seed=X][,spread=1/2/..], got '%s'" % args)
    if not 0 < pps <= MAX_RATE or s < 0 or not spread or min(spread) < 1:
        raise GenError("zipf: options out of range in '%s'" % args)
    L = k1 - k0 + 1
    w = [(i + 1) ** -s for i in range(L)]
    h = sum(w)
    out = []
    for i in range(L):
        rng = random.Random(seed * 1000003 + i)
        m = rng.choice(spread)
        gs = sorted(rng.sample(range(n), m))
        r = pps * w[i] / h / m
        out.extend((g, k0 + i, k0 + i, r) for g in gs)
    return out


def gen_streams(text, n, nkeys):
    kind, _, args = text.partition(":")
    if kind == "hot":
        keys, gws, r = at_rate(args)
        k0, k1 = key_range(keys, nkeys)
        if k0 != k1:
            raise GenError("hot: one key, got '%s'" % keys)
        gs = gws_of(gws, n)
        return [(g, k0, k0, r / len(gs)) for g in gs]
    if kind == "uniform":
        keys, gws, r = at_rate(args)
        k0, k1 = key_range(keys, nkeys)
        gs = gws_of(gws, n)
        return [(g, k, k, r / len(gs)) for k in range(k0, k1 + 1) for g in gs]
    if kind == "cycle":
        keys, gws, r = at_rate(args)
        k0, k1 = key_range(keys, nkeys)
        return [(g, k0, k1, r) for g in gws_of(gws, n)]
    if kind == "zipf":
        return zipf_streams(args, n, nkeys)
    raise GenError("unknown generator '%s' (hot, uniform, zipf, cycle)" % kind)


# ---------- sockets ----------

class Legacy:
    """One connected socket per gateway, from the target's SRC."""

    def __init__(self, targets, port):
        self.socks = []
        for src, dst in targets:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((src, 0))
            s.setblocking(False)
            s.connect((dst, port))
            self.socks.append(s)

    def send(self, g, key, payload):
        self.socks[g].send(payload)

    def close(self):
        for s in self.socks:
            s.close()


class Keyed:
    """Unconnected sockets (one per source port); the source address per packet."""

    def __init__(self, targets, port, nkeys, base, ports, port_base):
        self.dst = [(dst, port) for _, dst in targets]
        self.ports = max(ports, 1)
        naddr = (nkeys + self.ports - 1) // self.ports
        b = ipaddress.IPv4Address(base)
        last = b + (naddr - 1)
        if b not in BENCH_NET or last not in BENCH_NET:
            raise SystemExit("gsend: key addresses %s..%s leave %s" % (b, last, BENCH_NET))
        self.base = int(b)
        self.cmsg = {}
        self.socks = []
        for p in range(self.ports):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("0.0.0.0", port_base + p if ports else 0))
            s.setblocking(False)
            self.socks.append(s)
        self.first = str(b)
        self.last = str(last)

    def addr_cmsg(self, a):
        c = self.cmsg.get(a)
        if c is None:
            c = [(socket.IPPROTO_IP, IP_PKTINFO,
                  struct.pack("=I4s4s", 0, struct.pack("!I", self.base + a), b"\0" * 4))]
            self.cmsg[a] = c
        return c

    def send(self, g, key, payload):
        a, p = divmod(key, self.ports)
        self.socks[p].sendmsg([payload], self.addr_cmsg(a), 0, self.dst[g])

    def close(self):
        for s in self.socks:
            s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--target", type=parse_target, action="append", required=True)
    ap.add_argument("--phase", type=parse_phase, action="append", default=[])
    ap.add_argument("--kphase", type=parse_kphase, action="append", default=[])
    ap.add_argument("--keys", type=int, default=0, help="keys of --kphase (0..N-1)")
    ap.add_argument("--key-base", default="198.18.128.1", help="source address of key 0")
    ap.add_argument("--key-ports", type=int, default=0,
                    help="P > 0: key k = (address k // P, source port --port-base + k %% P)")
    ap.add_argument("--port-base", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1, help="offsets of the streams' schedules")
    ap.add_argument("--size", type=int, default=32, help="UDP payload bytes (>= 22)")
    ap.add_argument("--start-delay", type=float, default=0.05)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    n = len(a.target)
    if n > MAX_TARGETS:
        ap.error("too many targets")
    if bool(a.phase) == bool(a.kphase):
        ap.error("give --phase (one address) or --kphase (many keys), not both")
    keyed = bool(a.kphase)
    if keyed and not 0 < a.keys <= MAX_KEYS:
        ap.error("--kphase needs --keys 1..%d" % MAX_KEYS)
    if not 0 <= a.key_ports <= MAX_PORTS or not 1024 <= a.port_base <= 65535 - a.key_ports:
        ap.error("--key-ports 0..%d and --port-base 1024.. within 65535" % MAX_PORTS)
    # phases: [(seconds, [(gw, k0, k1, rate)])]; k0 = -1: the target's own address.
    phases = []
    for d, r in a.phase:
        if len(r) != n:
            ap.error("a phase gives %d rates for %d targets" % (len(r), n))
        phases.append((d, [(g, -1, -1, r[g]) for g in range(n) if r[g] > 0]))
    for d, gens in a.kphase:
        streams = []
        try:
            for gtext in gens:
                streams.extend(gen_streams(gtext, n, a.keys))
        except GenError as e:
            ap.error(str(e))
        if len(streams) > MAX_STREAMS:
            ap.error("a phase has %d streams (max %d)" % (len(streams), MAX_STREAMS))
        if any(not 0 < s[3] <= MAX_RATE for s in streams):
            ap.error("a stream's rate is out of (0, %g]" % MAX_RATE)
        phases.append((d, streams))
    if sum(d for d, _ in phases) > MAX_DURATION:
        ap.error("longer than %g s" % MAX_DURATION)
    size = max(a.size, HDR2.size if keyed else HDR.size)

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    if keyed:
        out = Keyed(a.target, a.port, a.keys, a.key_base, a.key_ports, a.port_base)
    else:
        out = Legacy(a.target, a.port)

    t0 = time.monotonic_ns() + int(a.start_delay * 1e9)
    bounds = [t0]  # phase p runs [bounds[p], bounds[p+1])
    for d, _ in phases:
        bounds.append(bounds[-1] + int(d * 1e9))
    t_end = bounds[-1]

    # Per phase, per stream: planned, sent, errors.
    cnt = [[[0, 0, 0] for _ in ss] for _, ss in phases]
    seq = [0] * n
    lag = []  # ns behind schedule, one sample per packet
    pad = b"." * (size - (HDR2.size if keyed else HDR.size))
    rng = random.Random(a.seed)
    starts = [[0] * len(ss) for _, ss in phases]
    # A cycling stream that goes on in the next phase (same gateway and keys)
    # resumes where it stopped, so a run of several phases keeps meeting new keys.
    cycle_pos = {}
    steps = 0
    step_cap = int(sum(d * sum(s[3] for s in ss) for d, ss in phases)) * 2 + \
        1000 * sum(len(ss) + n for _, ss in phases) + 1000
    for p, (d, streams) in enumerate(phases):
        if stop:
            break
        b0, b1 = bounds[p], bounds[p + 1]
        heap = []
        nxt = [0] * len(streams)  # cycle position per stream
        for i, (g, k0, k1, r) in enumerate(streams):
            if k0 < 0:
                # One address: spread the gateways' phases over 1 ms.
                off = g * 1000000 // max(n, 1)
            else:
                off = int(rng.random() * 1e9 / r)
                nxt[i] = cycle_pos.get((g, k0, k1), (g * (k1 - k0 + 1)) // n)
                starts[p][i] = nxt[i]
            if b0 + off < b1:
                heap.append((b0 + off, i))
        heapq.heapify(heap)
        while heap and steps < step_cap and not stop:
            steps += 1
            t, i = heap[0]
            now = time.monotonic_ns()
            if now >= b1:
                break
            if t > now:
                time.sleep((t - now) / 1e9)
                continue
            heapq.heappop(heap)
            g, k0, k1, r = streams[i]
            c = cnt[p][i]
            c[0] += 1
            seq[g] += 1
            if k0 < 0:
                key = NO_KEY
            else:
                key = k0 + nxt[i] % (k1 - k0 + 1)
                nxt[i] += 1
            try:
                now = time.monotonic_ns()
                if k0 < 0:
                    payload = HDR.pack(MAGIC, g + 1, seq[g], now) + pad
                else:
                    payload = HDR2.pack(MAGIC2, g + 1, seq[g], now, key) + pad
                out.send(g, key, payload)
                c[1] += 1
                lag.append(now - t)
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.ENOBUFS):
                    raise
                c[2] += 1
            nt = t + int(1e9 / r)
            if nt < b1:
                heapq.heappush(heap, (nt, i))
        for i, (g, k0, k1, r) in enumerate(streams):
            if k0 >= 0:
                cycle_pos[(g, k0, k1)] = nxt[i] % (k1 - k0 + 1)
        # Wait out the phase (the next one starts on its own schedule).
        while not stop and steps < step_cap:
            now = time.monotonic_ns()
            if now >= b1:
                break
            steps += 1
            time.sleep(min((b1 - now) / 1e9, 0.1))
    t_stop = time.monotonic_ns()
    out.close()

    rates = [[sum(s[3] for s in ss if s[0] == g) for g in range(n)] for _, ss in phases]
    if t_stop < t_end:
        # Stopped early (SIGTERM): the run ends here; later phases never ran.
        keep = [p for p in range(len(phases)) if bounds[p] < t_stop] or [0]
        rates = [rates[p] for p in keep]
        bounds = bounds[:len(keep)] + [t_stop]
        phases = [phases[p] for p in keep]
        cnt = [cnt[p] for p in keep]
    doc = {"t0_ns": t0, "t_end_ns": t_end, "t_stop_ns": t_stop, "bounds_ns": bounds,
           "rates": rates, "lag_p99_ms": pct(lag, 0.99) / 1e6, "lag_max_ms": max(lag or [0]) / 1e6,
           "gateways": []}
    for g in range(n):
        ph = []
        for p, (_, ss) in enumerate(phases):
            tot = {"planned": 0, "sent": 0, "errors": 0}
            for i, s in enumerate(ss):
                if s[0] == g:
                    for j, k in enumerate(("planned", "sent", "errors")):
                        tot[k] += cnt[p][i][j]
            ph.append(tot)
        doc["gateways"].append({"gw": g + 1, "src": a.target[g][0], "dst": a.target[g][1],
                                "phases": ph})
    if keyed:
        doc["keyed"] = {"keys": a.keys, "key_base": a.key_base, "key_ports": a.key_ports,
                        "port_base": a.port_base, "first_addr": out.first, "last_addr": out.last,
                        "gens": [gens for _, gens in a.kphase][:len(phases)]}
        # Per phase: [gw (1-based), k0, k1, rate, planned, sent, errors, start]; a
        # stream with k0 < k1 cycles through the keys k0..k1 from k0 + start.
        doc["streams"] = [[[s[0] + 1, s[1], s[2], round(s[3], 6)] + cnt[p][i] + [starts[p][i]]
                           for i, s in enumerate(ss)] for p, (_, ss) in enumerate(phases)]
    with open(a.out + ".tmp", "w") as f:
        json.dump(doc, f)
    os.replace(a.out + ".tmp", a.out)
    planned = sum(c[0] for ph in cnt for c in ph)
    sent = sum(c[1] for ph in cnt for c in ph)
    print("gsend: %d targets, %s%d/%d packets sent in %.2f s, lag p99 %.1f ms max %.1f ms"
          % (n, "%d keys, %d streams, " % (a.keys, sum(len(ss) for _, ss in phases))
             if keyed else "", sent, planned, (t_stop - t0) / 1e9, doc["lag_p99_ms"],
             doc["lag_max_ms"]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
