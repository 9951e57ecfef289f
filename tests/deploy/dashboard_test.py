#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The Grafana dashboard's pickers and links (deploy/grafana/leakwatch.json),
without root: the integration test (LeakwatchPrometheus) runs every query on
real data from one leakwatch; this one covers what one instance cannot show.

- The process picker: one instance (`process_instance`, chained to the
  `instance` selection), then `pid`, whose options read `comm (pid)` and
  hold only that instance's processes, although two instances trace the
  same pid. The pid variable's PromQL runs under `promtool test rules` on
  synthetic series, and its output goes through Grafana's query_result
  formatting and the variable's regex, as Grafana does it.
- Every query that names $pid also pins instance="$process_instance", so a
  pid never mixes processes of two instances.
- The row links go to ${leakwatch_url} (a textbox variable with a default),
  never to a hard-coded http:// or the scraped instance address.
Usage: dashboard_test.py SOURCE_DIR"""
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

src = sys.argv[1]
dash = json.load(open(f"{src}/deploy/grafana/leakwatch.json"))
errors = []


def check(cond, what):
    if not cond:
        errors.append(what)


variables = {v["name"]: v for v in dash["templating"]["list"]}
check(list(variables) == ["datasource", "instance", "process_instance", "pid", "leakwatch_url"],
      f"variables {list(variables)}: datasource, instance, process_instance, pid, leakwatch_url in that order "
      "(a variable may only use those before it)")


def query_of(v):
    q = v.get("query", "")
    return q.get("query", "") if isinstance(q, dict) else q


# process_instance: one instance among those selected.
pi = variables.get("process_instance", {})
check(pi.get("type") == "query" and pi.get("multi") is False and pi.get("includeAll") is False,
      "process_instance: a single-valued query variable (no All)")
check(re.fullmatch(r'label_values\(leakwatch_\w+\{instance=~"\$instance"\}, instance\)', query_of(pi)),
      f"process_instance must list the instances of $instance: {query_of(pi)}")

# pid: comm (pid) of that instance.
pid = variables.get("pid", {})
check(pid.get("type") == "query" and pid.get("multi") is False and pid.get("includeAll") is False,
      "pid: a single-valued query variable")
m = re.fullmatch(r"query_result\((.*)\)", query_of(pid), re.S)
check(m is not None, f"pid: a query_result() variable (its text is built in PromQL): {query_of(pid)}")
pid_promql = m.group(1) if m else ""
check('instance="$process_instance"' in pid_promql, "pid must be scoped to instance=\"$process_instance\"")
js_regex = pid.get("regex", "")
rm = re.fullmatch(r"/(.*)/([a-z]*)", js_regex, re.S)
check(rm is not None, f"pid regex {js_regex!r} is not /.../")
py_regex = re.compile(rm.group(1).replace("(?<", "(?P<")) if rm else re.compile("$^")
check({"text", "value"} <= set(py_regex.groupindex), "pid regex must capture named groups text and value")

# Every process query pins the instance.
queries = [(p["id"], t["refId"], t["expr"]) for p in dash["panels"] if p.get("type") != "row" for t in p["targets"]]
for panel, ref, expr in queries:
    if "$pid" in expr:
        selectors = re.findall(r"\{[^}]*\}", expr)
        for s in selectors:
            check('pid="$pid"' not in s or 'instance="$process_instance"' in s,
                  f"panel {panel} query {ref}: {s} selects $pid without instance=\"$process_instance\"")
        check("$instance" not in expr, f"panel {panel} query {ref}: a process query must not use $instance (several)")
rows = [p for p in dash["panels"] if p.get("type") == "row"]
check(any("${pid:text}" in r["title"] and "$process_instance" in r["title"] for r in rows),
      "the process row's title names the process as the picker does (${pid:text}) and its instance")

# Per-process and per-site series carry only pid and start_time (issue 35,
# item 12): a query whose legend names the process's comm, target or pod
# takes them from leakwatch_process_info, joined on (instance, pid,
# start_time).
IDENTITY = ("comm", "exe", "target", "unit", "uid", "container_id", "namespace", "pod")
for pnl in dash["panels"]:
    for t in pnl.get("targets", []):
        named = [n for n in IDENTITY if "{{" + n + "}}" in t.get("legendFormat", "")]
        if named and re.search(r"leakwatch_(process|site)_|leakwatch_cuda_device", t["expr"]):
            check("leakwatch_process_info" in t["expr"] and "on (instance, pid, start_time) group_left" in t["expr"],
                  f"panel {pnl['id']} query {t['refId']}: legend names {named} but the query does not join "
                  "leakwatch_process_info on (instance, pid, start_time)")

# The links.
url = variables.get("leakwatch_url", {})
default = url.get("query", "")
check(url.get("type") == "textbox", "leakwatch_url: a textbox variable (typed, or set with &var-leakwatch_url=)")
check(re.fullmatch(r"https?://[^/\s$]+(/\S*)?", default or "") and not default.endswith("/"),
      f"leakwatch_url default {default!r}: scheme://host[:port], no trailing slash")
check(url.get("current", {}).get("value") == default, "leakwatch_url's current value is its default")
links = [(p["id"], l["url"]) for p in dash["panels"] for l in p.get("fieldConfig", {}).get("defaults", {}).get("links", [])]
check(len(links) >= 2, f"expected the stack and pprof row links, found {links}")
for panel, link in links:
    check(link.startswith("${leakwatch_url}/"), f"panel {panel}: link {link} must start with ${{leakwatch_url}}/")
    check("http://" not in link and "__data.fields.instance" not in link,
          f"panel {panel}: link {link} hard-codes a scheme or the scraped instance address")

# The pid picker on data: two instances trace pid 10 (different programs),
# host1 also pid 20. promtool evaluates the PromQL; then Grafana's
# query_result formatting (metric{labels in Prometheus' order,...} value
# timestamp_ms) and the regex make the options.
series = [
    ('leakwatch_process_info{instance="host1:9478",job="leakwatch",pid="10",start_time="5",comm="web",target="t"}', "1x5"),
    ('leakwatch_process_live_bytes{instance="host1:9478",job="leakwatch",pid="10",start_time="5",kind="heap"}', "100x5"),
    ('leakwatch_process_info{instance="host1:9478",job="leakwatch",pid="20",start_time="6",comm="model server",target="t"}', "1x5"),
    ('leakwatch_process_info{instance="host2:9478",job="leakwatch",pid="10",start_time="7",comm="batch",target="t"}', "1x5"),
]
promql = pid_promql.replace("$process_instance", "host1:9478")
exp = [{"labels": '{pid="10",process="web (10)"}', "value": 1},
       {"labels": '{pid="20",process="model server (20)"}', "value": 1}]
test = {"rule_files": ["empty.yml"], "tests": [{
    "interval": "1m", "input_series": [{"series": s, "values": v} for s, v in series],
    "promql_expr_test": [{"expr": promql, "eval_time": "4m", "exp_samples": exp}]}]}
with tempfile.TemporaryDirectory() as d:
    open(os.path.join(d, "empty.yml"), "w").write("groups: []\n")
    open(os.path.join(d, "pid.test.yml"), "w").write(yaml.safe_dump(test))
    r = subprocess.run(["promtool", "test", "rules", "pid.test.yml"], cwd=d, capture_output=True, text=True)
check(r.returncode == 0, f"the pid picker's PromQL on two instances:\n{r.stdout}{r.stderr}")
options = []
for e in exp:
    line = "{" + e["labels"][1:-1] + "} " + str(e["value"]) + " 240000"  # query_result: no __name__ after max by
    mm = py_regex.search(line)
    check(mm is not None, f"pid regex does not match the query_result line {line!r}")
    if mm:
        options.append((mm.group("text"), mm.group("value")))
check(options == [("web (10)", "10"), ("model server (20)", "20")],
      f"pid options {options}: expected web (10) -> 10 and model server (20) -> 20, nothing of host2")

for e in errors:
    print("dashboard_test:", e, file=sys.stderr)
print(f"dashboard_test: pid options on host1 {options}; links {[l for _, l in links]}: "
      + ("passed" if not errors else f"{len(errors)} problems"))
sys.exit(1 if errors else 0)
