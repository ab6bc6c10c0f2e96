#!/usr/bin/env python3
"""Checks the monitoring files in contrib/ against the metric names and the runbooks.

Usage: check_monitoring.py [ROOT]

- contrib/metric-names.txt lists the metric names outbox exports (NAME TYPE a line).
- contrib/grafana/outbox-dashboard.json is well-formed JSON: a dashboard with a uid, a title,
  panel ids that are unique, and each panel (rows aside) with at least one query whose every
  metric name (outbox_*) is listed (a histogram's _bucket, _sum and _count series too).
- contrib/prometheus/outbox-alerts.yml names only listed metrics; every alert has a severity
  label and the annotations summary, description and runbook_url, and its runbook_url ends
  in docs/monitoring.md#ANCHOR, an anchor of that page (GitHub's heading slugs), which is the
  alert's name in lower case (its runbook's heading).
Prints each problem, and exits 1 if there is any. Python's standard library only (no YAML
parser: the rules file is read line by line, in the layout it has).
"""
import json
import pathlib
import re
import sys

NAME = re.compile(r"\boutbox_[a-z0-9_]+")
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")
RUNBOOK = re.compile(r"/docs/monitoring\.md#([\w-]+)$")


def known_names(root):
    names = {}
    for n, line in enumerate((root / "contrib/metric-names.txt").read_text().splitlines(), 1):
        line = line.split("#", 1)[0].split()
        if line:
            if len(line) != 2 or line[1] not in ("counter", "gauge", "histogram"):
                raise SystemExit(f"contrib/metric-names.txt:{n}: not NAME counter|gauge|histogram")
            names[line[0]] = line[1]
    return names


def unknown(text, names):
    """The outbox_* names in text that are not exported."""
    out = set()
    for name in NAME.findall(text):
        base = next((name[: -len(s)] for s in HISTOGRAM_SERIES
                     if name.endswith(s) and names.get(name[: -len(s)]) == "histogram"), name)
        if base not in names:
            out.add(name)
    return sorted(out)


def check_dashboard(root, names, problems):
    rel = "contrib/grafana/outbox-dashboard.json"
    try:
        dash = json.loads((root / rel).read_text(encoding="utf-8"))
    except ValueError as e:
        problems.append(f"{rel}: not JSON: {e}")
        return 0
    for key in ("uid", "title", "panels"):
        if not dash.get(key):
            problems.append(f"{rel}: no {key}")
    ids, queries = set(), 0
    panels = list(dash.get("panels", []))
    for p in panels:
        panels.extend(p.get("panels", []))  # a collapsed row's
        title = p.get("title", "?")
        if p.get("id") in ids:
            problems.append(f"{rel}: panel '{title}': id {p.get('id')} used twice")
        ids.add(p.get("id"))
        if p.get("type") == "row":
            continue
        exprs = [t.get("expr", "") for t in p.get("targets", [])]
        if not exprs or not all(exprs):
            problems.append(f"{rel}: panel '{title}': a panel without a query, or an empty one")
        for e in exprs:
            queries += 1
            if not NAME.search(e):
                problems.append(f"{rel}: panel '{title}': '{e}' names no outbox metric")
            for name in unknown(e, names):
                problems.append(f"{rel}: panel '{title}': {name} is not an outbox metric")
    # Names elsewhere in the file (descriptions, variables) are checked too.
    for name in unknown(json.dumps(dash), names):
        problems.append(f"{rel}: {name} is not an outbox metric")
    return queries


def check_rules(root, names, problems):
    rel = "contrib/prometheus/outbox-alerts.yml"
    text = (root / rel).read_text(encoding="utf-8")
    for name in unknown(text, names):
        problems.append(f"{rel}: {name} is not an outbox metric")
    anchors = docs_anchors(root / "docs/monitoring.md")
    # One block per rule: from its "- alert:" line to the next rule or group.
    blocks = re.split(r"\n(?=\s*- (?:alert|record|name):)", text)
    alerts = 0
    for block in blocks:
        m = re.match(r"\s*- alert:\s*(\S+)", block)
        if not m:
            continue
        alerts += 1
        alert = m.group(1)
        for key in ("severity", "summary", "description", "runbook_url"):
            if not re.search(rf"^\s+{key}:\s*\S", block, re.M):
                problems.append(f"{rel}: {alert}: no {key}")
        url = re.search(r"^\s+runbook_url:\s*\"?([^\"\s]+)\"?\s*$", block, re.M)
        anchor = RUNBOOK.search(url.group(1)) if url else None
        if url and not anchor:
            problems.append(f"{rel}: {alert}: runbook_url {url.group(1)} is not "
                            ".../docs/monitoring.md#ANCHOR")
        elif anchor and anchor.group(1) not in anchors:
            problems.append(f"{rel}: {alert}: runbook_url: docs/monitoring.md has no heading "
                            f"#{anchor.group(1)}")
        elif anchor and anchor.group(1) != alert.lower():
            problems.append(f"{rel}: {alert}: runbook_url #{anchor.group(1)}, not "
                            f"#{alert.lower()} (its runbook's heading)")
    if not alerts:
        problems.append(f"{rel}: no alert found")
    return alerts


def docs_anchors(path):
    sys.path.insert(0, str(path.parent.parent / "scripts"))
    from check_docs import anchors  # the slugs scripts/check_docs.py checks links against
    return anchors(path.read_text(encoding="utf-8"))


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    names = known_names(root)
    problems = []
    queries = check_dashboard(root, names, problems)
    alerts = check_rules(root, names, problems)
    for p in problems:
        print(p)
    print(f"check_monitoring: {len(names)} metric names, {queries} dashboard queries, "
          f"{alerts} alert rules, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
