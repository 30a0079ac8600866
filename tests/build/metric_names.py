#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Metric family names, for tests/build/test_deploy.sh and tests/net/test_prometheus.sh.

  metric_names.py code ROOT        families the metrics writers can export (their source)
  metric_names.py reference ROOT   families docs/reference.md section 7 documents
  metric_names.py queried ROOT     families the Grafana dashboard and the alert rules query
  metric_names.py exposition FILE  families with a sample in a scraped /metrics text

One name a line, sorted. Stdlib only.
"""
import json
import re
import sys

NAME = re.compile(r"\bleaseline_[a-z0-9_]*[a-z0-9]\b")
WRITERS = ("user/agent/agent_metrics.c", "user/coord/coord_metrics.c", "user/lib/prom.c")
DASHBOARD = "deploy/grafana/leaseline.json"
RULES = "deploy/prometheus/leaseline-rules.yml"


def code(root):
    names = set()
    for f in WRITERS:
        for lit in re.findall(r'"((?:[^"\\]|\\.)*)"', open(root + "/" + f).read()):
            names.update(NAME.findall(lit))
    return names


def reference(root):
    text = open(root + "/docs/reference.md").read()
    sec = text.split("\n## 7. ", 1)[1].split("\n## 8. ", 1)[0]
    names = set()
    for row in sec.splitlines():
        # The tables' first column: `name`, `name` | labels
        if row.startswith("| `"):
            names.update(NAME.findall(row.split("|")[1]))
    return names


def exprs(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("expr", "definition") and isinstance(v, str):
                yield v
            elif k == "query" and isinstance(v, str):
                yield v
            else:
                yield from exprs(v)
    elif isinstance(node, list):
        for v in node:
            yield from exprs(v)


def queried(root):
    names = set()
    for e in exprs(json.load(open(root + "/" + DASHBOARD))):
        names.update(NAME.findall(e))
    for line in open(root + "/" + RULES):
        m = re.match(r"\s*(?:-\s*)?expr:\s*(.*)", line)
        if m:
            names.update(NAME.findall(m.group(1)))
    # Folded (>-) expressions continue on the lines below `expr: >-`.
    text = open(root + "/" + RULES).read()
    for block in re.findall(r"expr: >-\n((?:\s{10,}.*\n)+)", text):
        names.update(NAME.findall(block))
    return names


def exposition(path):
    names = set()
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)", line)
        if m and m.group(1).startswith("leaseline_"):
            names.add(m.group(1))
    return names


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("code", "reference", "queried", "exposition"):
        sys.exit(__doc__)
    fn = {"code": code, "reference": reference, "queried": queried, "exposition": exposition}
    for n in sorted(fn[sys.argv[1]](sys.argv[2])):
        print(n)


if __name__ == "__main__":
    main()
