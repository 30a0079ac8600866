#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""One table from the RESULT lines of gcheck.py (scripts/bench-global.sh).

  gsummary.py results.jsonl [--markdown]
"""
import json
import sys


def f(v, fmt="%.2f", none="-"):
    return none if v is None else fmt % v


def pct(v):
    return "-" if v is None else "%.1f%%" % (100 * v)


def rows(results):
    out = []
    for r in results:
        t = r["test"]
        verdict = "FAIL" if r.get("failed") else ("ok, target missed (known)" if r.get("xfail")
                                                  else "ok")
        if t.startswith("steady"):
            for ph in ("uniform", "skewed"):
                p = r[ph]
                fails = [x for x in r.get("failed", []) if x.startswith(ph)]
                verdict = "FAIL" if fails else (
                    "target missed (known issue)"
                    if any(x.startswith(ph) for x in r.get("xfail", [])) else "ok")
                out.append(("1 steady %s" % ph if r["kind"] == "lease" else
                            "3 standalone %s" % ph,
                            "overshoot max %+.1f%% of R (app clock %+.1f%%)"
                            % (p["overshoot"]["max_pct_R"], p["overshoot_app"]["max_pct_R"]),
                            "utilization %s; admitted per gateway %s pps%s"
                            % (pct(p["util"]), p["per_gw_pps"],
                               "; leased %s" % p["leased_pps"] if p.get("leased_pps") else ""),
                            verdict))
        elif t == "shift":
            out.append(("2 demand shift", "overshoot max %+.1f%% of R (during the move %+.1f%%)"
                        % (r["overshoot"]["max_pct_R"], r["overshoot_move"]["max_pct_R"]),
                        "utilization %s before; >= 95%% again after %s s (shares moved in %s s)"
                        % (pct(r["util_before"]), f(r["recovery_s"]), f(r["shares_moved_s"])),
                        verdict))
        elif t.startswith("partition"):
            g = r["gateways"]
            to = max(x["to_onloss_s"] or 0 for x in g)
            extra = ""
            if r["onloss"] == "fail-closed":
                extra = "admitted after expiry %d" % sum(x["admitted_after_expiry"] for x in g)
            elif r["onloss"] == "fallback":
                extra = "fallback %s pps/gw (share 25)" % [x.get("fallback_pps") for x in g]
            else:
                extra = "bypass %s pps/gw" % [x.get("bypass_pps") for x in g]
            rep = all(x["agent_fallback"] == x["coord_fallback"] and
                      x["agent_bypass"] == x["coord_bypass"] for x in g)
            out.append(("4 partition %s" % r["onloss"],
                        "overshoot max %+.1f%% of R" % r["overshoot"]["max_pct_R"],
                        "on-loss %.3f s after the cut (max of 3); %s; reported = counted: %s "
                        "(fallback %s, bypass %s); connected gateways used %s of R"
                        % (to, extra, "yes" if rep else "NO",
                           [x["agent_fallback"] for x in g], [x["agent_bypass"] for x in g],
                           pct(r["util_rest_during_cut"])), verdict))
        elif t == "restart":
            k = r["kills"]
            out.append(("5 coordinator kill -9",
                        "overshoot max %+.1f%% of R; max sum of live shares / R = %.3f"
                        % (r["overshoot"]["max_pct_R"], r["max_live_over_R"]),
                        "%d kills; epoch overlap samples %d; old grants dead %s s before new "
                        "ones; quiet after restart %s s; dips %s s; lowest 500 ms window "
                        "%s of R"
                        % (len(k), r["epoch_overlap_samples"],
                           [f(x["old_grants_dead_before_new_s"]) for x in k],
                           [f(x["quiet_s_after_restart"]) for x in k],
                           [f(x["dip_s"]) for x in k],
                           [pct(x["lowest_500ms_of_R"]) for x in k]), verdict))
        elif t == "failover":
            k = r["faults"]
            out.append(("8 replicas: failover",
                        "overshoot max %+.1f%% of R; max sum of live shares %d/s"
                        % (r["overshoot"]["max_pct_R"], r["max_live_rate"]),
                        "; ".join(("%s: last grant %s s after (bound %s s), %d admitted after "
                                   "expiry, live again %s s after quorum, from 1 refresh after "
                                   "that %s of R"
                                   % (x["fault"], f(x["last_grant_start_after_fault_s"]),
                                      f(x["deadline_bound_s"]), x["admitted_after_expiry"],
                                      f(x["relive_after_quorum_s"]),
                                      pct(x["lowest_500ms_from_1_refresh_after_all_live_of_R"])))
                                  if x["fault"] == "quorum" else
                                  "%s: lowest 500 ms %s of R, new term after %s s, stale %d"
                                  % (x["fault"], pct(x["lowest_500ms_of_R"]), f(x["relive_s"]),
                                     x["stale_applied"]) for x in k), verdict))
        elif t == "stale":
            out.append(("6 stale holder (SIGSTOP)",
                        "overshoot max %+.1f%% of R" % r["overshoot"]["max_pct_R"],
                        "lease expired %s s after the stop; admitted under the expired lease %d;"
                        " last admission %s ms before expiry; others used %s of R"
                        % (f(r["to_expiry_s"], "%.3f"), r["admitted_after_expiry"],
                           f(r["last_admit_before_expiry_ms"], "%.1f"),
                           pct(r["util_others_during_stop"])), verdict))
        elif t == "policy":
            out.append(("7 policy change R -> 0.6R",
                        "overshoot vs new contract from SIGHUP %+.1f%%, after drain %s"
                        % (r["overshoot_during"]["max_pct_R"],
                           "%+.1f%%" % r["overshoot_new"]["max_pct_R"] if r["overshoot_new"]
                           else "-"),
                        "shares <= new R after %s s (agents' maps); coordinator draining 0 after"
                        " %s s, last_drain_seconds %s"
                        % (f(r["drain_agents_s"], "%.3f"), f(r["drain_coord_s"], "%.3f"),
                           f(r["last_drain_seconds"], "%.3f")), verdict))
        elif t in ("keys-split", "zipf", "zipf-restart", "zipf-local", "cold"):
            ow = r["overshoot_worst"]
            contract = ("per key R %d/s B %d: worst key's window %+.0f packets (%+.1f%% of R, "
                        "key %d, %s); %d keys above the slack"
                        % (r["rate"], r["burst"], ow["excess"], ow["pct_R"], ow["key"],
                           ow["window"], r["keys_over_slack"]))
            if t == "zipf-local":
                out.append(("c standalone per-key buckets", contract,
                            "%d keys, %d keys over B; %d offered >= R: median utilization %s"
                            % (r["keys"], r["keys_over_burst"], r["hot_keys"],
                               pct(r["util_median"])), verdict))
                continue
            coord = "coordinator %s grants/s%s" % (
                f(r["grants_per_s"], "%.1f"),
                ", %s per-key entries/s, hot keys max %s" % (
                    f(r["key_grants_per_s"], "%.1f"), f(r["hot_keys_max"], "%.0f"))
                if r.get("key_grants") is not None else "")
            rss = r.get("coord_rss_kb") or {}
            if rss:
                coord += ", RSS %s kB (start/end)" % "/".join(
                    "%d" % rss[k] if k in rss else "?" for k in ("start", "end"))
            if t == "keys-split":
                figs = "hot keys' utilization %s; %s" % (
                    ", ".join("key %d %s" % (x["key"], pct(x["util"])) for x in r["split"]),
                    coord)
                name = "keys split (2 hot keys)"
            elif t == "cold":
                figs = ("%d keys offered, %d sent a packet, %d admitted one; after the warm-up "
                        "admitted %s of sent; per-key grant check: %s; %s" % (
                            r["keys"], r["keys_sent"], r["keys_admitted"],
                            pct(r["admitted"] / r["sent"] if r["sent"] else None),
                            r["key_grant_check"], coord))
                name = "g cold keys"
            else:
                figs = "%d keys, %d offered >= R: median utilization %s, worst %s; %s" % (
                    r["keys"], r["hot_keys"], pct(r["util_median"]), pct(r["util_worst"]), coord)
                name = "c zipf" if t == "zipf" else "f zipf, %d coordinator kills" % r["kills"]
            out.append((name, contract, figs, verdict))
    return out


def main():
    md = "--markdown" in sys.argv
    res = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    rs = rows(res)
    if md:
        print("| test | contract | figures | verdict |")
        print("|---|---|---|---|")
        for r in rs:
            print("| %s |" % " | ".join(r))
    else:
        for r in rs:
            print("%-28s %s\n%28s %s  [%s]" % (r[0], r[1], "", r[2], r[3]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
