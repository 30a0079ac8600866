#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The connection storm of tests/net/test_storm.sh (stdlib only).

  flood     many TCP connects to the coordinator from many source addresses
            (a /N the namespace routes to lo), as fast as it can; each one
            then silent, or sending garbage, or replaying one TLS ClientHello
            (the coordinator does a key exchange and signs for each, then
            waits for a certificate that never comes); records how long the
            coordinator let each live. JSON to --out.
  client    a TLS client with a certificate (gw-N's, or the rogue CA's)
            that says HELLO as some holder, or sends garbage frames after
            the handshake, again and again until --duration: how each
            attempt ended (served = a POLICY frame came back). JSON to --out.
  fakecoord a fake coordinator on plain TCP for one agent: garbage, a policy
            and then grants of rate 2^64-1 for the wrong holder and the
            right one, a policy version 2^64-1, a frame longer than any.
  stamp     copy stdin to --out, each line prefixed with CLOCK_MONOTONIC.
  sample    every --interval: `leaseline status -j` lease fields of a pin
            dir, and VmRSS of a pid; one line each to --out.
  gaps      grant inter-arrival gaps from a stamped agent log, per window.
"""
import argparse
import errno
import json
import os
import random
import resource
import select
import socket
import ssl
import struct
import subprocess
import sys
import time

WIRE_MAGIC = 0x4C4C5731
def _wire_version():
    """The version this tree's user/lib/wire.h speaks (a fake of another
    version is refused by the agent before it reads anything)."""
    import os
    import re
    h = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "user", "lib",
                     "wire.h")
    with open(h) as f:
        return int(re.search(r"^#define WIRE_VERSION (\d+)", f.read(), re.M).group(1))


WIRE_VERSION = _wire_version()
HELLO, POLICY, GRANT, REPORT = 1, 2, 3, 4
U64_MAX = (1 << 64) - 1


# ---- wire (docs/protocol.md) ----

def name(s):
    b = s.encode()
    return struct.pack("B", len(b)) + b


def frame(t, payload, magic=WIRE_MAGIC, version=WIRE_VERSION, length=None):
    return struct.pack(">IHHI", magic, version, t, len(payload) if length is None else length) + payload


def hello(holder, incarnation=1, epoch=0, version=0, counters_ident=0):
    # wire 5: the counters identity follows (0: unknown)
    return frame(HELLO, name(holder) + struct.pack(">QQQQ", incarnation, epoch, version,
                                                    counters_ident))


def policy(epoch, version, yaml):
    y = yaml.encode()
    return frame(POLICY, struct.pack(">QQI", epoch, version, len(y)) + y)


def grant(limit, holder, incarnation, epoch, seq, report_seq, version, rate, burst, ttl, refresh):
    return frame(GRANT, name(limit) + name(holder) +
                 struct.pack(">QQQQQQQQQ", incarnation, epoch, seq, report_seq, version, rate,
                             burst, ttl, refresh) +
                 bytes(16) +  # the tag: proves nothing (a fake coordinator has no key)
                 struct.pack(">BQH", 1, 0, 0))  # a whole (empty) per-key set


def read_frame(sock, buf):
    """One frame (type, payload) from sock, buffering in buf; None at EOF."""
    while True:
        if len(buf) >= 12:
            magic, _, t, n = struct.unpack(">IHHI", bytes(buf[:12]))
            if magic != WIRE_MAGIC:
                raise ValueError("bad magic")
            if len(buf) >= 12 + n:
                p = bytes(buf[12:12 + n])
                del buf[:12 + n]
                return t, p
        d = sock.recv(65536)
        if not d:
            return None
        buf += d


def parse_hello(p):
    n = p[0]
    holder = p[1:1 + n].decode()
    inc, = struct.unpack(">Q", p[1 + n:9 + n])
    return holder, inc


# ---- flood ----

def client_hello_bytes():
    """The first flight of a TLS 1.3 client, to replay on many connections."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


def raise_nofile(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))  # as root
            return want
        except (ValueError, OSError):
            want = hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return want


def cmd_flood(a):
    host, port = a.dst.rsplit(":", 1)
    dst = (host, int(port))
    base = struct.unpack(">I", socket.inet_aton(a.src_base))[0]
    nofile = raise_nofile(max(a.count, 16384) + 1024)
    max_open = nofile - 256
    ch = client_hello_bytes()
    garbage = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(random.randrange(256) for _ in range(100))
    kinds = ["garbage"] * a.garbage + ["hello"] * a.hello + ["silent"] * (a.count - a.garbage - a.hello)
    random.Random(1).shuffle(kinds)
    ep = select.epoll()
    conns = {}  # fd -> [sock, kind, t_start, t_est]
    res = {"attempted": 0, "established": 0, "failed": {},
           "lifetimes": {"silent": [], "garbage": [], "hello": []}, "open_at_end": 0, "held": {},
           "max_open": 0}
    nxt = 0
    t0 = time.monotonic()
    t_last = t0
    hold_until = None

    def finish(fd, why=None):
        s, kind, ts, te = conns.pop(fd)
        try:
            ep.unregister(fd)
        except OSError:
            pass
        s.close()
        if why is not None:
            res["failed"][why] = res["failed"].get(why, 0) + 1
        else:
            res["lifetimes"][kind].append(round(time.monotonic() - te, 4))

    while True:
        now = time.monotonic()
        if now - t0 > a.max_time:
            break
        # Open as many as there is room for, a batch at a time.
        n = 0
        more = nxt < a.count or now - t0 < a.duration
        while more and len(conns) < max_open and n < 64:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            # No TIME_WAIT on our side: a reset when we give up on it.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            src = socket.inet_ntoa(struct.pack(">I", base + (nxt % a.addrs)))
            try:
                s.bind((src, 0))
                e = s.connect_ex(dst)
            except OSError as ex:
                e = ex.errno
            res["attempted"] += 1
            if e not in (0, errno.EINPROGRESS):
                res["failed"][errno.errorcode.get(e, str(e))] = \
                    res["failed"].get(errno.errorcode.get(e, str(e)), 0) + 1
                s.close()
            else:
                conns[s.fileno()] = [s, kinds[nxt % len(kinds)], now, None]
                ep.register(s.fileno(), select.EPOLLOUT)
            nxt += 1
            n += 1
            more = nxt < a.count or now - t0 < a.duration
        if not more and hold_until is None:
            t_last = time.monotonic()
            hold_until = t_last + a.hold
        res["max_open"] = max(res["max_open"], len(conns))
        if hold_until is not None and (not conns or time.monotonic() > hold_until):
            break
        for fd, ev in ep.poll(0 if more and len(conns) < max_open else 0.05):
            c = conns.get(fd)
            if c is None:
                continue
            s, kind, ts, te = c
            if te is None:
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    finish(fd, errno.errorcode.get(err, str(err)))
                    continue
                c[3] = time.monotonic()
                res["established"] += 1
                try:
                    if kind == "garbage":
                        s.send(garbage)
                    elif kind == "hello":
                        s.send(ch)
                except OSError:
                    pass
                ep.modify(fd, select.EPOLLIN | select.EPOLLRDHUP)
                continue
            try:
                while True:
                    d = s.recv(65536)
                    if not d:
                        finish(fd)
                        break
            except BlockingIOError:
                pass
            except OSError:
                finish(fd)
    t_end = time.monotonic()
    # Still open when we stop: the coordinator had not closed these.
    for fd in list(conns):
        s, kind, ts, te = conns.pop(fd)
        res["open_at_end"] += 1
        if te is None:
            res["failed"]["connecting at end"] = res["failed"].get("connecting at end", 0) + 1
        else:
            res["held"][kind] = max(res["held"].get(kind, 0), round(t_end - te, 4))
        s.close()
    res["connect_seconds"] = round(t_last - t0, 3)
    res["total_seconds"] = round(t_end - t0, 3)
    res["connects_per_second"] = round(res["established"] / max(t_last - t0, 1e-3), 1)
    res["t_start"], res["t_last_connect"] = t0, t_last
    for k, v in res["lifetimes"].items():
        res["lifetime_max_" + k] = max(v, default=0)
        res["closed_within_0.1s_" + k] = sum(1 for x in v if x < 0.1)
    with open(a.out, "w") as f:
        json.dump(res, f)


# ---- TLS clients ----

def cmd_client(a):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_verify_locations(a.ca)
    ctx.load_cert_chain(a.cert, a.key)
    host, port = a.dst.rsplit(":", 1)
    out = {"attempts": 0, "outcomes": {}, "served_after": None, "t": []}
    t0 = time.monotonic()
    while time.monotonic() - t0 < a.duration:
        out["attempts"] += 1
        t = time.monotonic()
        what = "?"
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(3.0)
        try:
            s.bind((a.src, 0))
            s.connect((host, int(port)))
            ts = ctx.wrap_socket(s)
            s = ts
            ts.do_handshake()
            if a.garbage:
                ts.sendall(frame(REPORT, b"\xff" * 40, length=1 << 30))
            else:
                ts.sendall(hello(a.holder, incarnation=int(time.time_ns())))
            buf = bytearray()
            f = read_frame(ts, buf)
            if f is None:
                what = "closed after hello" if not a.garbage else "closed after garbage"
            elif f[0] == POLICY:
                what = "served"
            else:
                what = "frame %d" % f[0]
        except ssl.SSLError as e:
            what = "tls: " + (e.reason or str(e))
        except (ConnectionResetError, BrokenPipeError):
            what = "reset"
        except socket.timeout:
            what = "timeout"
        except OSError as e:
            what = "os: " + (errno.errorcode.get(e.errno, str(e.errno)) if e.errno else str(e))
        except ValueError as e:
            what = "bad frame: %s" % e
        finally:
            s.close()
        out["outcomes"][what] = out["outcomes"].get(what, 0) + 1
        out["t"].append([round(t - t0, 3), round(time.monotonic() - t, 3), what])
        if what == "served":
            out["served_after"] = round(time.monotonic() - t0, 3)
            if a.once:
                break
        time.sleep(a.interval)
    with open(a.out, "w") as f:
        json.dump(out, f)


# ---- fake coordinator ----

FAKE_POLICY = """version: {v}
limits:
  - {{name: g, key: none, scope: global, rate: 1000, burst: 100}}
rules:
  - {{name: all, limits: [g]}}
"""


def cmd_fakecoord(a):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", a.port))
    ls.listen(16)
    ls.settimeout(0.2)
    if a.ready:
        open(a.ready, "w").close()
    log = open(a.out, "w", buffering=1)
    t0 = time.monotonic()
    n = 0
    while time.monotonic() - t0 < a.duration:
        try:
            c, _ = ls.accept()
        except socket.timeout:
            continue
        n += 1
        c.settimeout(2.0)
        buf = bytearray()
        try:
            f = read_frame(c, buf)
            if f is None or f[0] != HELLO:
                log.write("conn %d: no hello\n" % n)
                continue
            holder, inc = parse_hello(f[1])
            log.write("conn %d: hello from %s\n" % (n, holder))
            if n == 1:
                # Garbage where the first frame should be.
                c.sendall(os.urandom(4096))
                log.write("conn %d: sent 4096 random bytes\n" % n)
            elif n == 2:
                c.sendall(policy(5, 1, FAKE_POLICY.format(v=1)))
                time.sleep(0.3)
                c.sendall(grant("g", "gw-9", inc, 5, 1, 0, 1, U64_MAX, U64_MAX, U64_MAX, 100000000))
                c.sendall(grant("g", holder, inc, 5, 2, 0, 1, U64_MAX, U64_MAX, U64_MAX, 100000000))
                time.sleep(0.3)
                c.sendall(policy(5, U64_MAX, FAKE_POLICY.format(v=U64_MAX)))
                log.write("conn %d: policy v1, grants 2^64-1 (gw-9, %s), policy v2^64-1\n" % (n, holder))
                time.sleep(0.5)
                # A header announcing more than any frame may carry.
                c.sendall(frame(GRANT, b"", length=1 << 31))
                log.write("conn %d: a 2 GiB frame header\n" % n)
            else:
                # Frames of an unknown type and version, then silence.
                c.sendall(frame(99, b"x" * 64) + frame(GRANT, b"", version=77))
                log.write("conn %d: unknown type and version\n" % n)
            # Hold it until the agent gives up on us.
            c.settimeout(0.2)
            end = time.monotonic() + 2.0
            while time.monotonic() < end:
                try:
                    if not c.recv(65536):
                        log.write("conn %d: the agent closed it\n" % n)
                        break
                except socket.timeout:
                    pass
        except (OSError, ValueError) as e:
            log.write("conn %d: %s\n" % (n, e))
        finally:
            c.close()
    log.write("connections %d\n" % n)


# ---- measuring ----

def cmd_stamp(a):
    with open(a.out, "w", buffering=1) as out:
        inp = sys.stdin.buffer
        while True:
            line = inp.readline()
            if not line:
                break
            out.write("%.6f %s" % (time.monotonic(), line.decode(errors="replace")))


def rss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def cpu_s(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            v = f.read().rsplit(")", 1)[1].split()
        return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return -1


def cmd_sample(a):
    end = time.monotonic() + a.duration
    with open(a.out, "w", buffering=1) as out:
        while time.monotonic() < end:
            t = time.monotonic()
            live = rem = seq = "-"
            try:
                r = subprocess.run(["nsenter", "--net=/run/netns/" + a.ns, a.ll, "status",
                                    "--pin-dir", a.pin, "-j"], capture_output=True, text=True,
                                   timeout=5)
                for lim in json.loads(r.stdout).get("limits", []):
                    if "lease" in lim:
                        live = lim["lease"]["live"]
                        rem = "%.3f" % lim["lease"]["remaining_seconds"]
                        seq = lim["lease"]["seq"]
            except (subprocess.SubprocessError, ValueError):
                pass
            out.write("%.3f live=%s remaining=%s seq=%s rss_kb=%d cpu_s=%.2f\n" %
                      (t, live, rem, seq, rss_kb(a.pid), cpu_s(a.pid)))
            time.sleep(max(0.0, a.interval - (time.monotonic() - t)))


def pct(v, p):
    if not v:
        return 0.0
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def cmd_gaps(a):
    """Gaps between grant arrivals of limit --limit in a stamped log, for the
    grants that arrived in each window FROM-TO (the gap ending in it), and
    the lease time left at each (ttl minus the report-to-grant delay)."""
    arr = []
    for line in open(a.log, errors="replace"):
        p = line.split(" ", 2)
        if len(p) == 3 and p[1] == "grant" and p[2].startswith(a.limit + " "):
            left = float(p[2].rsplit(", ", 1)[1].split()[0])
            arr.append((float(p[0]), left))
    out = {}
    # The lease time left when a grant arrives is ttl less the time since
    # its report was sent (ms resolution): the most left seen is the
    # quickest round trip, and a grant with less came back that much later.
    # So each gap splits into the agent's report interval (its own loop) and
    # the change in round trip (the coordinator, the path, the agent waking).
    top = max((x[1] for x in arr), default=0)
    for w in a.window:
        label, rng = w.split("=")
        lo, hi = (float(x) for x in rng.split("-"))
        idx = [i for i in range(1, len(arr)) if lo <= arr[i][0] <= hi]
        gaps = [arr[i][0] - arr[i - 1][0] for i in idx]
        sends = [gaps[k] - (top - arr[i][1]) + (top - arr[i - 1][1]) for k, i in enumerate(idx)]
        late = [top - arr[i][1] for i in idx]
        out[label] = {"grants": len(idx), "gap_max": round(max(gaps, default=0), 4),
                      "gap_p99": round(pct(gaps, 99), 4), "gap_p50": round(pct(gaps, 50), 4),
                      "left_min": min((arr[i][1] for i in idx), default=0),
                      "rtt_excess_max": round(max(late, default=0), 4),
                      "rtt_excess_p99": round(pct(late, 99), 4),
                      "send_interval_max": round(max(sends, default=0), 4)}
    json.dump(out, sys.stdout)
    print()


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("flood")
    p.add_argument("--dst", required=True)
    p.add_argument("--src-base", required=True)
    p.add_argument("--addrs", type=int, default=4094)
    p.add_argument("--count", type=int, default=10000)
    p.add_argument("--duration", type=float, default=0.0, help="go on past --count until then")
    p.add_argument("--garbage", type=int, default=1000)
    p.add_argument("--hello", type=int, default=1000)
    p.add_argument("--hold", type=float, default=4.0)
    p.add_argument("--max-time", type=float, default=30.0)
    p.add_argument("--out", required=True)
    p = sub.add_parser("client")
    for o in ("--dst", "--src", "--ca", "--cert", "--key", "--out"):
        p.add_argument(o, required=True)
    p.add_argument("--holder", default="gw-1")
    p.add_argument("--garbage", action="store_true")
    p.add_argument("--once", action="store_true")
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--interval", type=float, default=0.25)
    p = sub.add_parser("fakecoord")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--ready")
    p.add_argument("--out", required=True)
    p = sub.add_parser("stamp")
    p.add_argument("--out", required=True)
    p = sub.add_parser("sample")
    for o in ("--ll", "--ns", "--pin", "--out"):
        p.add_argument(o, required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--interval", type=float, default=0.2)
    p = sub.add_parser("gaps")
    p.add_argument("--log", required=True)
    p.add_argument("--limit", required=True)
    p.add_argument("--window", action="append", default=[])
    a = ap.parse_args()
    globals()["cmd_" + a.cmd](a)


if __name__ == "__main__":
    main()
