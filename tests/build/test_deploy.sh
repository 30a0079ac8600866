#!/bin/bash
# SPDX-License-Identifier: MIT
# What deploy/ ships for monitoring, checked without a network or root:
#  1. the alert rules load (`promtool check rules`) and their unit tests
#     pass (`promtool test rules deploy/prometheus/leaseline-rules.test.yml`);
#  2. the Grafana dashboard is JSON Grafana can import: panels with unique
#     ids, every target with a PromQL expression and the datasource variable;
#  3. every metric the dashboard or the rules query is one the metrics
#     writers export (their source: tests/net/test_prometheus.sh checks the
#     same against a live scrape), and docs/reference.md §7 documents
#     exactly the families the code exports.
# Usage: test_deploy.sh BUILD_DIR
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

passed=0 failed=0 skipped=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
skip() { skipped=$((skipped + 1)); echo "skip: $*"; }
names() { python3 tests/build/metric_names.py "$@"; }

RULES=deploy/prometheus/leaseline-rules.yml
if command -v promtool >/dev/null; then
	if promtool check rules "$RULES" >"$TMP/check" 2>&1; then
		ok "promtool check rules: $(grep -o '[0-9]* rules found' "$TMP/check")"
	else
		bad "promtool check rules $RULES:"
		sed 's/^/   /' "$TMP/check" | head -20
	fi
	if (cd deploy/prometheus && promtool test rules leaseline-rules.test.yml) >"$TMP/test" 2>&1; then
		ok "promtool test rules: $(grep -c 'alertname:' deploy/prometheus/leaseline-rules.test.yml) alert evaluations as expected"
	else
		bad "promtool test rules:"
		sed 's/^/   /' "$TMP/test" | head -30
	fi
	# Every alert of the rules file has at least one test that expects it to fire.
	missing=$(python3 - <<'PY'
import re
rules = set(re.findall(r"- alert: (\w+)", open("deploy/prometheus/leaseline-rules.yml").read()))
text = open("deploy/prometheus/leaseline-rules.test.yml").read()
fired = set(re.findall(r"alertname: (\w+)\n\s+exp_alerts:\n\s+- exp_labels", text))
print(" ".join(sorted(rules - fired)))
PY
	)
	[ -z "$missing" ] && ok "every alert has a test that fires it" || bad "alerts no test fires: $missing"
else
	skip "promtool not installed (scripts/install-deps.sh installs prometheus)"
fi

if python3 - deploy/grafana/leaseline.json >"$TMP/dash" 2>&1 <<'PY'; then
import json, sys
d = json.load(open(sys.argv[1]))
bad = []
ids = [p["id"] for p in d["panels"]]
if len(ids) != len(set(ids)):
    bad.append("panel ids repeat")
if d.get("uid") != "leaseline" or not d.get("title"):
    bad.append("no uid/title")
if "datasource" not in [v["name"] for v in d["templating"]["list"]]:
    bad.append("no datasource variable")
n = 0
for p in d["panels"]:
    if p["type"] == "row":
        continue
    if not p.get("targets"):
        bad.append("panel %r has no target" % p["title"])
    for t in p.get("targets", []):
        n += 1
        if not t.get("expr"):
            bad.append("panel %r: target without expr" % p["title"])
        if t.get("datasource", {}).get("uid") != "${datasource}":
            bad.append("panel %r: target not on ${datasource}" % p["title"])
    g = p["gridPos"]
    if g["x"] + g["w"] > 24:
        bad.append("panel %r wider than the grid" % p["title"])
for b in bad:
    print(b)
print("%d panels, %d queries" % (len(ids), n))
sys.exit(1 if bad else 0)
PY
	ok "the dashboard parses: $(tail -1 "$TMP/dash")"
else
	bad "deploy/grafana/leaseline.json:"
	sed 's/^/   /' "$TMP/dash" | head -20
fi

names code . >"$TMP/code"
names queried . >"$TMP/queried"
names reference . >"$TMP/reference"
unknown=$(comm -23 "$TMP/queried" "$TMP/code" | tr '\n' ' ')
[ "$(wc -l <"$TMP/code")" -gt 50 ] && [ "$(wc -l <"$TMP/queried")" -gt 20 ] ||
	bad "too few names found ($(wc -l <"$TMP/code") in the code, $(wc -l <"$TMP/queried") queried): the extraction broke"
[ -z "$unknown" ] && ok "the $(wc -l <"$TMP/queried") metrics the dashboard and rules query are all exported" ||
	bad "queried but not exported: $unknown"
undoc=$(comm -23 "$TMP/code" "$TMP/reference" | tr '\n' ' ')
[ -z "$undoc" ] && ok "every one of the $(wc -l <"$TMP/code") exported families is in reference §7" ||
	bad "exported but not in reference §7: $undoc"
gone=$(comm -13 "$TMP/code" "$TMP/reference" | tr '\n' ' ')
[ -z "$gone" ] && ok "reference §7 names no family the code does not export" ||
	bad "in reference §7 but not exported: $gone"

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
