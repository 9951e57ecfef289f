#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Checks deploy/prometheus beyond what promtool does: every alert has a
severity, summary, description and a runbook_url, the installed
docs/runbooks.md at one of its sections; and the promtool test file sees every alert both
firing and silent at least once; and README.md's alert table lists every
alert with its severity. Usage: check_rules.py SOURCE_DIR"""
import re
import sys

import yaml

src = sys.argv[1]
rules = yaml.safe_load(open(f"{src}/deploy/prometheus/leakwatch-rules.yml"))
tests = yaml.safe_load(open(f"{src}/deploy/prometheus/leakwatch-rules.test.yml"))
runbook = open(f"{src}/docs/runbooks.md").read()
# GitHub's anchors: the heading lowercased, spaces to '-', punctuation dropped.
anchors = {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
           for h in re.findall(r"^#+ (.+)$", runbook, re.M)}

errors = []
alerts = []
for group in rules["groups"]:
    for rule in group["rules"]:
        if "alert" not in rule:
            continue
        name = rule["alert"]
        alerts.append(name)
        if rule.get("labels", {}).get("severity") not in ("critical", "warning", "info"):
            errors.append(f"{name}: severity must be critical|warning|info")
        ann = rule.get("annotations", {})
        for key in ("summary", "description", "runbook_url"):
            if not ann.get(key):
                errors.append(f"{name}: annotation {key} missing")
        url = ann.get("runbook_url", "")
        # The runbook as the .deb installs it, never a made-up host (issue 35,
        # item 12): set-runbook-url.sh points them elsewhere at install.
        m = re.fullmatch(r"file:///usr/share/doc/leakwatch/runbooks\.md#([a-z0-9-]+)", url)
        if not m:
            errors.append(f"{name}: runbook_url {url!r} is not file:///usr/share/doc/leakwatch/runbooks.md#ANCHOR")
        elif m.group(1) not in anchors:
            errors.append(f"{name}: docs/runbooks.md has no section #{m.group(1)}")

fired, silent = set(), set()
for test in tests["tests"]:
    for case in test.get("alert_rule_test", []):
        (fired if case.get("exp_alerts") else silent).add(case["alertname"])
for name in alerts:
    if name not in fired:
        errors.append(f"{name}: no promtool case where it fires")
    if name not in silent:
        errors.append(f"{name}: no promtool case where it stays silent")

# README's alert table lists every alert with its severity (issue 35: it
# listed 10 of 13).
readme = open(f"{src}/README.md").read()
severities = {r["alert"]: r.get("labels", {}).get("severity")
              for g in rules["groups"] for r in g["rules"] if "alert" in r}
for name in alerts:
    if not re.search(rf"^\| {name} \| {severities[name]} \|", readme, re.M):
        errors.append(f"{name}: no row '| {name} | {severities[name]} |' in README.md's alert table")

for e in errors:
    print("check_rules:", e, file=sys.stderr)
print(f"check_rules: {len(alerts)} alerts, each with severity, summary, description, a runbook "
      f"section, promtool cases firing and silent, and a README row" if not errors else f"check_rules: {len(errors)} problems")
sys.exit(1 if errors else 0)
