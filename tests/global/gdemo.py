#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Table and picture of scripts/demo-global.sh (stdlib only).

  gdemo.py RUN_DIR --rate R --burst B --gateways N --svg OUT.svg

The run has three parts, marked in events.txt: standalone buckets (each
gateway its own local (R, B)), leaseline (one global (R, B) leased out), and
leaseline with gateway 1's control link cut. Prints one row per part and
draws the admitted rate per 100 ms, summed over gateways, against the
contract line.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ganalyze import NS, Run, bins, overshoot, svg_rate_plot, worst_pct  # noqa: E402

BIN_S = 0.1
# Below this share of the rate asked, the sender is said to have fallen behind.
OFFERED_MIN = 0.95


def offered(path):
    """Packets/s the sender handed the kernel over its run, and its worst lag
    (ms) behind the schedule; (None, None) without its document."""
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError):
        return None, None
    sent = sum(p["sent"] for g in d["gateways"] for p in g["phases"])
    dur = (d["t_stop_ns"] - d["t0_ns"]) / NS
    return (sent / dur if dur > 0 else 0.0), d.get("lag_max_ms", 0.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run")
    ap.add_argument("--rate", type=int, required=True)
    ap.add_argument("--burst", type=int, required=True)
    ap.add_argument("--gateways", type=int, required=True)
    ap.add_argument("--offered", type=int, required=True, help="packets/s per gateway")
    ap.add_argument("--ttl", type=float, required=True)
    ap.add_argument("--svg", required=True)
    a = ap.parse_args()
    run = Run(a.run)
    m = {e[0]: e[1] for e in run.events}
    t0, t_end = m["standalone"], m["end"]
    tk = run.times("kern")
    g1 = sorted(t for t in run.recv[1]["kern"] if t)
    parts = [("standalone buckets, (R, B) each", m["standalone"] + NS // 2, m["standalone_end"]),
             ("leaseline, one contract (R, B)", m["leaseline"] + NS // 2, m["cut"]),
             ("leaseline, gateway 1 cut off", m["cut"], m["restore"]),
             ("leaseline, link restored", m["restore"], m["end"])]
    # What the sender really offered (its own count), per send: the
    # standalone part had one, the three leaseline parts share the next.
    sent = {"standalone": offered(os.path.join(a.run, "send-standalone.json")),
            "leaseline": offered(os.path.join(a.run, "send.json"))}
    asked = a.offered * a.gateways
    print("%-34s %9s %10s %10s %14s" % ("", "offered/s", "admitted/s", "contract", "worst window"))
    rows = []
    for name, p0, p1 in parts:
        off = sent["standalone" if name.startswith("standalone") else "leaseline"][0]
        sel = [t for t in tk if p0 <= t < p1]
        rate = len(sel) / ((p1 - p0) / NS) if p1 > p0 else 0
        ov = overshoot(sel, a.rate, a.burst) if len(sel) > 1 else {}
        worst = worst_pct(ov, a.rate) if ov else float("nan")
        verdict = "holds" if ov and max(v[0] for v in ov.values()) <= 1 else "OVERSHOOTS"
        off = asked if off is None else off
        rows.append((name, off, rate, worst, verdict))
        print("%-34s %9.0f %10.0f %10d %+9.0f%% R  %s" % (name, off, rate, a.rate, worst, verdict))
    behind = [(k, v) for k, v in sent.items() if v[0] is not None and v[0] < OFFERED_MIN * asked]
    for k, (off, lag) in behind:
        print("note: the %s sender offered %.0f/s of the %d/s asked (%.0f%%; up to %.0f ms behind "
              "its schedule): this machine is too busy to offer the load, so its rows say less "
              "than they should" % (k, off, asked, 100 * off / asked, lag))
    # The start: every standalone bucket is full (B each); leaseline's are
    # full at their shares, B together.
    first = {k: len([t for t in tk if m[k] <= t < m[k] + NS]) for k in ("standalone", "leaseline")}
    allow = a.burst + a.rate
    print("first second: standalone buckets admitted %d (%.1fx the %d the contract allows, "
          "B + R*1 s), leaseline %d (%.2fx)%s"
          % (first["standalone"], first["standalone"] / allow, allow, first["leaseline"],
             first["leaseline"] / allow,
             " - nothing admitted in it: the sender started late or fell behind"
             if not first["standalone"] or not first["leaseline"] else ""))
    last = [t for t in g1 if m["cut"] <= t < m["restore"]]
    stop = (last[-1] - m.get("cut_end", m["cut"])) / NS if last else 0.0
    back = [t for t in g1 if t >= m["restore"]]
    print("gateway 1: last admission %.2f s after its link was cut (ttl %s s), admitting again "
          "%s s after the link came back" % (stop, a.ttl,
                                              "%.2f" % ((back[0] - m["restore"]) / NS) if back
                                              else "never"))
    n = int((t_end - t0) / NS / BIN_S)
    total = bins(tk, t0, t0 + int(n * BIN_S * NS), BIN_S)
    gw1 = bins(g1, t0, t0 + int(n * BIN_S * NS), BIN_S)
    marks = [(k, (m[e] - t0) / NS) for k, e in (("standalone", "standalone"),
                                                 ("leaseline", "leaseline"),
                                                 ("gw-1 cut", "cut"), ("restored", "restore"))]
    svg_rate_plot(a.svg, [("admitted, %d gateways" % a.gateways, "#1f5fbf", total, BIN_S),
                          ("admitted, gateway 1", "#e08a00", gw1, BIN_S)],
                  [("contract rate R", "#c00", "8 4", a.rate),
                   ("most a 100 ms window may hold, B + R*0.1 s", "#e99", "3 3",
                    (a.burst + a.rate * BIN_S) / BIN_S)], n * BIN_S, marks,
                  title="leaseline: admitted packets/s per 100 ms vs the contract "
                        "R = %d/s (B = %d)" % (a.rate, a.burst))
    print("picture: %s" % a.svg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
