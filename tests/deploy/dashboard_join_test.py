#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The dashboard's kube-state-metrics join, which the integration test
(a host without Kubernetes) only sees fall back: with `promtool test rules`
and synthetic series, each query of deploy/grafana/leakwatch.json that joins
kube_pod_info takes comm from leakwatch_process_info and namespace and pod
from kube_pod_info where leakwatch has the pod's UID, and keeps a host
process (no UID) with its own labels.
Usage: dashboard_join_test.py SOURCE_DIR"""
import json
import os
import subprocess
import sys
import tempfile

import yaml

src = sys.argv[1]
dash = json.load(open(f"{src}/deploy/grafana/leakwatch.json"))
joins = [(p["id"], t["refId"], t["expr"]) for p in dash["panels"] if p["type"] != "row"
         for t in p["targets"] if "kube_pod_info" in t["expr"]]
if not joins:
    sys.exit("dashboard_join_test: no panel query joins kube_pod_info")
variables = {"$__rate_interval": "2m", "$instance": "host1:9478", "$pid": "10"}
common = 'job="leakwatch",instance="host1:9478",start_time="1"'
identity = 'target="t",exe="/x",unit="",container_id=""'
tests = []
for panel, ref, expr in joins:
    for k, v in variables.items():
        expr = expr.replace(k, v)
    kind = "cuda_device" if "cuda_" in expr else "heap"
    series = [
        # In a pod; leakwatch could not read /var/log/pods, so only the UID.
        {"series": f'leakwatch_process_leak_rate_bytes_per_second{{{common},pid="10",kind="{kind}"}}', "values": "100x5"},
        {"series": f'leakwatch_process_info{{{common},{identity},pid="10",comm="web",uid="u-1",namespace="",pod=""}}', "values": "1x5"},
        # On the host.
        {"series": f'leakwatch_process_leak_rate_bytes_per_second{{{common},pid="20",kind="{kind}"}}', "values": "50x5"},
        {"series": f'leakwatch_process_info{{{common},{identity},pid="20",comm="batch",uid="",namespace="",pod=""}}', "values": "1x5"},
        {"series": 'kube_pod_info{job="kube-state-metrics",instance="ksm:8080",namespace="prod",pod="web-7d9",uid="u-1",node="n1",created_by_kind="ReplicaSet",created_by_name="web-7"}', "values": "1x5"},
    ]
    tests.append({"name": f"panel {panel} query {ref}", "interval": "1m", "input_series": series,
                  "promql_expr_test": [{"expr": expr, "eval_time": "4m", "exp_samples": [
                      {"labels": '{comm="web",instance="host1:9478",namespace="prod",pid="10",pod="web-7d9"}', "value": 100},
                      {"labels": '{comm="batch",instance="host1:9478",pid="20"}', "value": 50}]}]})
with tempfile.TemporaryDirectory() as d:
    open(os.path.join(d, "empty.yml"), "w").write("groups: []\n")
    open(os.path.join(d, "join.test.yml"), "w").write(yaml.safe_dump({"rule_files": ["empty.yml"], "tests": tests}))
    r = subprocess.run(["promtool", "test", "rules", "join.test.yml"], cwd=d, capture_output=True, text=True)
print(r.stdout + r.stderr)
print(f"dashboard_join_test: {len(joins)} joining queries: " + ("passed" if r.returncode == 0 else "FAILED"))
sys.exit(r.returncode)
