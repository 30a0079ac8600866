#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Figures and checks of the multi-gateway harness (stdlib only).

A run directory holds what tests/global/lib.sh collected:
  recv-<g>.json   admitted packets of gateway g (grecv.py): app/kern/send ns
  send.json       what the client sent (gsend.py), phase boundaries
  samples.jsonl   leases and counters from the pinned maps, coordinator metrics
  events.txt      "NAME EPOCHREALTIME" lines written by the shell (gl_mark)
  final-*.prom    metrics scraped at the end

Contract: for a global limit (R, B) the packets all gateways admit in any
window of length w stay <= B + R*w. overshoot(w) = max over windows starting
at each admitted packet of count - (B + R*w), reported in packets and as a
percentage of R*w (the excess rate over the window relative to R). Counting
uses the kernel receive stamps (taken microseconds after the XDP verdict);
the same figure from the receivers' own clock reads (app) is printed next to
it with the spread of app - kern, which is what turns into a small positive
overshoot at short windows when a receiver is descheduled.

A library: gcheck.py (the scenarios' checks), gdemo.py and gsummary.py use it.
"""
import bisect
import glob
import json
import math
import os
import time

WINDOWS = [0.05, 0.1, 0.25, 0.5, 1.0, 2.0]
# Per-key contracts are small (R ~ 20-100/s): windows below 100 ms hold a packet
# or two, so the per-key checks look at 100 ms .. 4 s (and the whole run).
KEY_WINDOWS = [0.1, 0.25, 0.5, 1.0, 2.0, 4.0]
NS = 1000000000
# Allowance for the kernel stamp being taken after the XDP verdict: one packet
# (the stamp delay is a NAPI poll, tens of microseconds: R * 50 us << 1).
KERN_SLACK_PKTS = 1
UTIL_TARGET = 0.95


# ---------- loading ----------

def clock_offset():
    best = None
    for _ in range(50):
        m0 = time.monotonic_ns()
        r = time.time_ns()
        m1 = time.monotonic_ns()
        if best is None or m1 - m0 < best[0]:
            best = (m1 - m0, r - (m0 + m1) // 2)
    return best[1]


class Run:
    def __init__(self, d):
        self.dir = d
        self.recv = {}
        for f in glob.glob(os.path.join(d, "recv-*.json")):
            r = json.load(open(f))
            self.recv[r["gw"]] = r
        p = os.path.join(d, "send.json")
        self.send = json.load(open(p)) if os.path.exists(p) else None
        off = clock_offset()
        self.events = []
        p = os.path.join(d, "events.txt")
        if os.path.exists(p):
            for line in open(p):
                parts = line.split()
                if len(parts) >= 2:
                    t = int(round(float(parts[1]) * 1e6)) * 1000 - off
                    self.events.append((parts[0], t, parts[2:]))
        self.samples, self.coord = [], []
        p = os.path.join(d, "samples.jsonl")
        if os.path.exists(p):
            for line in open(p):
                try:
                    s = json.loads(line)
                except ValueError:
                    continue  # the sampler was stopped mid-line
                if "gw" in s:
                    self.samples.append((s["t"], {int(k): v for k, v in s["gw"].items()}))
                elif "coord" in s:
                    self.coord.append((s["t"], s["coord"]))

    def mark(self, name, k=0):
        hits = [e for e in self.events if e[0] == name]
        return hits[k][1] if len(hits) > k else None

    def marks(self, name):
        return [e for e in self.events if e[0] == name]

    def times(self, key="kern", gws=None, t0=None, t1=None):
        out = []
        for g, r in self.recv.items():
            if gws is not None and g not in gws:
                continue
            out.extend(t for t in r[key] if t)
        out.sort()
        if t0 is not None:
            out = out[bisect.bisect_left(out, t0):]
        if t1 is not None:
            out = out[:bisect.bisect_right(out, t1)]
        return out

    def phase(self, p):
        b = self.send["bounds_ns"]
        return b[p], b[p + 1]

    def key_times(self, key="kern", t0=None, t1=None):
        """{key index: sorted stamps} over all gateways (many-key runs; the
        receivers read the key from the payload). Packets without a key (-1) or
        a stamp are left out."""
        out = {}
        for r in self.recv.values():
            for k, t in zip(r.get("key", ()), r[key]):
                if k >= 0 and t and (t0 is None or t >= t0) and (t1 is None or t <= t1):
                    out.setdefault(k, []).append(t)
        for v in out.values():
            v.sort()
        return out

    def key_gw_counts(self):
        """{key: {gw: packets admitted}}"""
        out = {}
        for g, r in self.recv.items():
            for k in r.get("key", ()):
                if k >= 0:
                    d = out.setdefault(k, {})
                    d[g] = d.get(g, 0) + 1
        return out

    def offered(self, p=None):
        """Offered load of a many-key run from gsend.py's streams, as three lists
        indexed by key: pps in phase p (default: the time-weighted mean over all
        phases), a bit mask of the gateways (bit g-1 for gateway g) and the
        packets sent (a cycling stream's spread evenly over its keys)."""
        nk = self.send["keyed"]["keys"]
        b = self.send["bounds_ns"]
        total = (b[-1] - b[0]) / NS
        rate, mask, sent = [0.0] * nk, [0] * nk, [0.0] * nk
        for q, ss in enumerate(self.send.get("streams") or []):
            if p is not None and q != p:
                continue
            wq = 1.0 if p is not None else (b[q + 1] - b[q]) / NS / total
            for g, k0, k1, r, _, snt, _, _ in ss:
                n = k1 - k0 + 1
                bit = 1 << (g - 1)
                if n == 1:
                    rate[k0] += r * wq
                    mask[k0] |= bit
                    sent[k0] += snt
                else:
                    rk, sk = r * wq / n, snt / n
                    rate[k0:k1 + 1] = [x + rk for x in rate[k0:k1 + 1]]
                    mask[k0:k1 + 1] = [x | bit for x in mask[k0:k1 + 1]]
                    sent[k0:k1 + 1] = [x + sk for x in sent[k0:k1 + 1]]
        return rate, mask, sent

    def keys_sent(self):
        """Distinct keys the sender sent at least one packet from (exact: a
        cycling stream sent its keys in turn from its start)."""
        nk = self.send["keyed"]["keys"]
        seen = bytearray(nk)
        for ss in self.send.get("streams") or []:
            for g, k0, k1, r, _, snt, _, start in ss:
                n = k1 - k0 + 1
                for j in range(min(snt, n)):
                    seen[k0 + (start + j) % n] = 1
        return sum(seen)


def gws_of_mask(m):
    return [g + 1 for g in range(m.bit_length()) if m >> g & 1]

# ---------- figures ----------

def overshoot(ts, rate, burst, windows=WINDOWS, whole=True):
    """{w: (excess packets, window start)}; ts sorted ns."""
    res = {}
    n = len(ts)
    span = (ts[-1] - ts[0]) / NS if n >= 2 else 0
    for w in windows:
        if w > span and w != windows[0]:
            continue  # no window of that length fits: the whole-run figure covers it
        wn = int(w * NS)
        best, at, j = -math.inf, None, 0
        for i in range(n):
            if j < i:
                j = i
            lim = ts[i] + wn
            while j < n and ts[j] <= lim:
                j += 1
            ex = (j - i) - (burst + rate * w)
            if ex > best:
                best, at = ex, ts[i]
        res[w] = (best if n else -(burst + rate * w), at)
    if whole and n >= 2:
        T = (ts[-1] - ts[0]) / NS
        res["whole"] = (n - (burst + rate * T), ts[0], T)
    return res


def counter_increase(coord, name, t0, t1):
    """Increase of a coordinator counter over [t0, t1] from the sampler's
    scrapes, across restarts (a drop is a restart from 0: the new value counts).
    None if the counter was never scraped in that span."""
    tot, prev, seen = 0.0, None, False
    for t, m in coord:
        if t < t0 or t > t1 or name not in m:
            continue
        v = m[name]
        seen = True
        if prev is not None:
            tot += v - prev if v >= prev else v
        prev = v
    return tot if seen else None


def gauge_max(coord, name, t0=None, t1=None):
    vs = [m[name] for t, m in coord if name in m and (t0 is None or t >= t0) and
          (t1 is None or t <= t1)]
    return max(vs) if vs else None


def worst_pct(ov, rate):
    """Largest excess as % of R*w over the windows (whole run included)."""
    best = -math.inf
    for w, v in ov.items():
        wl = v[2] if w == "whole" else w
        if wl > 0:
            best = max(best, 100.0 * v[0] / (rate * wl))
    return best


def fmt_ov(ov, rate):
    parts = []
    for w, v in ov.items():
        if w == "whole":
            parts.append("whole(%.1fs) %+.0f" % (v[2], v[0]))
        else:
            parts.append("%gms %+.0f" % (w * 1000, v[0]))
    return ", ".join(parts) + "  => max %+.1f%% of R" % worst_pct(ov, rate)


def bins(ts, t0, t1, width_s):
    w = int(width_s * NS)
    nb = max(0, (t1 - t0) // w)
    out = [0] * nb
    for t in ts[bisect.bisect_left(ts, t0):bisect.bisect_left(ts, t0 + nb * w)]:
        out[(t - t0) // w] += 1
    return out


def utilization(ts, rate, t0, t1, width_s=1.0):
    """(mean, min) of admitted/(R*width) over whole bins of [t0, t1)."""
    b = bins(ts, t0, t1, width_s)
    if not b:
        return 0.0, 0.0
    u = [x / (rate * width_s) for x in b]
    return sum(b) / (rate * width_s * len(b)), min(u)


def recovery(ts, rate, t_from, t_max, target=UTIL_TARGET, win_s=0.5, step_s=0.05):
    """First t >= t_from with admitted in [t, t+win) >= target*R*win: t - t_from (s)."""
    t = t_from
    need = target * rate * win_s
    while t + int(win_s * NS) <= t_max:
        a = bisect.bisect_left(ts, t)
        b = bisect.bisect_left(ts, t + int(win_s * NS))
        if b - a >= need:
            return (t - t_from) / NS
        t += int(step_s * NS)
    return None


def dip(ts, rate, t_from, t_max, target=UTIL_TARGET, win_s=0.2, step_s=0.05):
    """Longest stretch in [t_from, t_max) during which admissions over a sliding
    win_s window stay below target*R: (start, seconds); (None, 0.0) if none."""
    t = t_from
    need = target * rate * win_s
    start, best = None, (None, 0.0)
    while t + int(win_s * NS) <= t_max:
        a = bisect.bisect_left(ts, t)
        b = bisect.bisect_left(ts, t + int(win_s * NS))
        low = b - a < need
        if low and start is None:
            start = t
        if not low and start is not None:
            if (t - start) / NS > best[1]:
                best = (start, (t - start) / NS)
            start = None
        t += int(step_s * NS)
    if start is not None and (t - start) / NS > best[1]:
        best = (start, (t - start) / NS)
    return best


def low_window(ts, rate, t_from, t_max, win_s=0.5, step_s=0.05):
    """Lowest admitted rate over a sliding win_s window in [t_from, t_max), as a
    share of rate; None if the span is shorter than one window."""
    t, low = t_from, None
    while t + int(win_s * NS) <= t_max:
        a = bisect.bisect_left(ts, t)
        b = bisect.bisect_left(ts, t + int(win_s * NS))
        share = (b - a) / (rate * win_s)
        low = share if low is None else min(low, share)
        t += int(step_s * NS)
    return low


def pctl(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def skew(run, t0=None, t1=None):
    """Receive-side jitter app-kern and path kern-send, ms."""
    ak, ks = [], []
    for r in run.recv.values():
        for a, k, s in zip(r["app"], r["kern"], r["send"]):
            if not k or (t0 and k < t0) or (t1 and k > t1):
                continue
            ak.append((a - k) / 1e6)
            ks.append((k - s) / 1e6)
    return {"app_kern_p50": pctl(ak, .5), "app_kern_p99": pctl(ak, .99),
            "app_kern_max": max(ak or [float("nan")]),
            "kern_send_p50": pctl(ks, .5), "kern_send_p99": pctl(ks, .99),
            "kern_send_max": max(ks or [float("nan")])}


def fmt_skew(s):
    return ("receive jitter app-kern p50 %.3f p99 %.3f max %.2f ms; "
            "path kern-send p50 %.3f p99 %.3f max %.2f ms"
            % (s["app_kern_p50"], s["app_kern_p99"], s["app_kern_max"],
               s["kern_send_p50"], s["kern_send_p99"], s["kern_send_max"]))


def sender_report(run, p=None):
    """Offered vs planned per phase: [(phase, rates, planned, sent, achieved)]."""
    s = run.send
    rows = []
    for q in range(len(s["rates"])) if p is None else [p]:
        d = (s["bounds_ns"][q + 1] - s["bounds_ns"][q]) / NS
        want = sum(s["rates"][q]) * d
        sent = sum(g["phases"][q]["sent"] for g in s["gateways"])
        err = sum(g["phases"][q]["errors"] for g in s["gateways"])
        rows.append({"phase": q, "seconds": d, "offered_pps": sum(s["rates"][q]),
                     "want": want, "sent": sent, "errors": err,
                     "achieved": sent / want if want else 1.0})
    return rows


def fmt_sender(run):
    out = []
    for r in sender_report(run):
        out.append("phase %d: %.0f pps x %.1f s -> sent %d of %.0f (%.1f%%), %d errors"
                   % (r["phase"], r["offered_pps"], r["seconds"], r["sent"], r["want"],
                      100 * r["achieved"], r["errors"]))
    out.append("sender lag behind schedule: p99 %.1f ms, max %.1f ms"
               % (run.send["lag_p99_ms"], run.send["lag_max_ms"]))
    return out


def prom(path):
    out = {}
    if not os.path.exists(path):
        return out
    for line in open(path):
        if not line.strip() or line.startswith("#"):
            continue
        k, _, v = line.rstrip().rpartition(" ")
        try:
            out[k] = float(v)
        except ValueError:
            pass
    return out


# ---------- SVG ----------

def svg_rate_plot(path, series, lines, t_len, marks=(), title="", ymax=None,
                  width=900, height=380):
    """series: [(label, color, [count per bin], bin_s)]; lines: [(label, color, dash,
    rate)] drawn across the whole run; marks: [(text, t_s)]."""
    ml, mr, mt, mb = 60, 20, 58, 40
    pw, ph = width - ml - mr, height - mt - mb
    top = ymax or max([max(s[2] or [0]) / s[3] for s in series] +
                      [ln[3] for ln in lines] + [1]) * 1.1

    def X(t):
        return ml + pw * t / t_len

    def Y(r):
        return mt + ph * (1 - min(r, top) / top)

    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
         'font-family="sans-serif" font-size="12">' % (width, height),
         '<rect width="100%" height="100%" fill="white"/>',
         '<text x="%d" y="20" font-size="15">%s</text>' % (ml, title)]
    step = 10 ** math.floor(math.log10(top / 2)) if top > 0 else 1
    if top / step > 8:
        step *= 2
    for k in range(0, int(top / step) + 1):
        y = Y(k * step)
        o.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>'
                 % (ml, ml + pw, y, y))
        o.append('<text x="%d" y="%.1f" text-anchor="end">%g</text>' % (ml - 5, y + 4, k * step))
    for s in range(0, int(t_len) + 1, max(1, int(t_len / 12))):
        o.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>'
                 % (X(s), mt + ph + 16, s))
    o.append('<text x="%d" y="%d" text-anchor="middle">time (s)</text>'
             % (ml + pw / 2, height - 6))
    o.append('<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">'
             'admitted packets/s</text>' % (mt + ph / 2, mt + ph / 2))
    for name, t in marks:
        o.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#999" '
                 'stroke-dasharray="4 3"/>' % (X(t), X(t), mt, mt + ph))
        o.append('<text x="%.1f" y="%d" fill="#555">%s</text>' % (X(t) + 3, mt + 12, name))
    for label, color, dash, r in lines:
        o.append('<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" '
                 'stroke-width="2" stroke-dasharray="%s"/>' % (X(0), X(t_len), Y(r), Y(r),
                                                               color, dash))
    for label, color, vals, bs in series:
        pts = " ".join("%.1f,%.1f" % (X((k + 0.5) * bs), Y(v / bs)) for k, v in enumerate(vals))
        o.append('<polyline fill="none" stroke="%s" stroke-width="1.6" points="%s"/>'
                 % (color, pts))
    lx = ml
    for label, color in [(s[0], s[1]) for s in series] + [(ln[0], ln[1]) for ln in lines]:
        o.append('<rect x="%d" y="%d" width="14" height="4" fill="%s"/>' % (lx, 34, color))
        o.append('<text x="%d" y="%d">%s</text>' % (lx + 18, 40, label))
        lx += 30 + int(6.3 * len(label))
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")
