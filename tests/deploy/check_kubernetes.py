#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Asserts what deploy/kubernetes renders to (kubectl kustomize output on
stdin): the security context, volumes, ports, probes and labels of the
DaemonSet; that the Service and PodMonitor select its pods by a port it
has; the CRDs (PodMonitor, PrometheusRule) structurally; that the
PrometheusRule and dashboard ConfigMap carry exactly deploy/prometheus and
deploy/grafana; and that the capabilities equal the systemd unit's.
Writes the rendered leakwatch.yaml to OUT_CONFIG for `leakwatch check-config`.
Usage: check_kubernetes.py SOURCE_DIR OUT_CONFIG < rendered.yaml"""
import json
import re
import sys

import yaml

src, out_config = sys.argv[1], sys.argv[2]
docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
by_kind = {}
for d in docs:
    by_kind.setdefault(d["kind"], []).append(d)
errors = []


def check(cond, what):
    if not cond:
        errors.append(what)


def one(kind):
    items = by_kind.get(kind, [])
    check(len(items) == 1, f"expected one {kind}, got {len(items)}")
    return items[0] if items else {}


ns = one("Namespace")
ns_name = ns.get("metadata", {}).get("name")
check(ns.get("metadata", {}).get("labels", {}).get("pod-security.kubernetes.io/enforce") == "privileged",
      "Namespace must enforce the privileged Pod Security level")
for d in docs:
    if d["kind"] != "Namespace":
        check(d["metadata"].get("namespace") == ns_name, f"{d['kind']}/{d['metadata']['name']} not in {ns_name}")

sa = one("ServiceAccount")
ds = one("DaemonSet")
spec = ds.get("spec", {})
pod = spec.get("template", {}).get("spec", {})
pod_labels = spec.get("template", {}).get("metadata", {}).get("labels", {})
check(spec.get("selector", {}).get("matchLabels", {}).items() <= pod_labels.items(),
      "DaemonSet selector must match its pod labels")
check(spec.get("updateStrategy", {}).get("type") == "RollingUpdate", "DaemonSet must roll updates")
check(pod.get("hostPID") is True, "hostPID: true (every process of the node in /proc)")
check(pod.get("serviceAccountName") == sa.get("metadata", {}).get("name"), "pod must use the ServiceAccount")
check(pod.get("automountServiceAccountToken") is False, "no API token: leakwatch does not call the API server")
check({"operator": "Exists"} in pod.get("tolerations", []), "must tolerate every taint (run on every node)")
containers = pod.get("containers", [])
check(len(containers) == 1, "one container")
c = containers[0] if containers else {}
check(c.get("image", "").startswith("ghcr.io/leakwatch/leakwatch:"), f"image {c.get('image')}")
check(c.get("args", [])[:1] == ["run"], "the container runs `leakwatch run`")
check(any(e.get("name") == "NODE_NAME" and e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName"
          for e in c.get("env", [])), "NODE_NAME from spec.nodeName")
sc = c.get("securityContext", {})
check(sc.get("privileged") is False, "not privileged: capabilities instead")
check(sc.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation: false")
check(sc.get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem: true")
check(sc.get("capabilities", {}).get("drop") == ["ALL"], "drop ALL capabilities")
added = set(sc.get("capabilities", {}).get("add", []))
unit = open(f"{src}/deploy/systemd/leakwatch.service").read()
bounding = set(re.search(r"^CapabilityBoundingSet=(.*)$", unit, re.M).group(1).split())
ambient = set(re.search(r"^AmbientCapabilities=(.*)$", unit, re.M).group(1).split())
check(bounding == ambient, f"unit: bounding {bounding} != ambient {ambient}")
check({"CAP_" + a for a in added} == bounding,
      f"DaemonSet adds {sorted(added)}, the systemd unit grants {sorted(bounding)}: they must agree")
for needed in ("CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"):
    check(needed in bounding, f"{needed} missing")
check("CAP_SYS_ADMIN" not in bounding, "CAP_SYS_ADMIN must not be granted")

ports = {p.get("name"): p for p in c.get("ports", [])}
check(ports.get("metrics", {}).get("containerPort") == 9478 and ports["metrics"].get("protocol") == "TCP",
      "container port metrics 9478/TCP")
for probe in ("readinessProbe", "livenessProbe"):
    get = c.get(probe, {}).get("httpGet", {})
    check(get.get("path") == "/healthz" and get.get("port") in ("metrics", 9478), f"{probe} must GET /healthz on metrics")
res = c.get("resources", {})
check(res.get("requests", {}).get("cpu") and res.get("requests", {}).get("memory") and res.get("limits", {}).get("memory"),
      "cpu and memory requests and a memory limit")

mounts = {m["name"]: m for m in c.get("volumeMounts", [])}
volumes = {v["name"]: v for v in pod.get("volumes", [])}
for name, path, host in (("btf", "/sys/kernel/btf", "/sys/kernel/btf"),
                         ("cgroup", "/sys/fs/cgroup", "/sys/fs/cgroup"),
                         ("pod-logs", "/var/log/pods", "/var/log/pods")):
    check(mounts.get(name, {}).get("mountPath") == path and mounts[name].get("readOnly") is True,
          f"{name} mounted read-only at {path}")
    check(volumes.get(name, {}).get("hostPath", {}).get("path") == host, f"volume {name} is hostPath {host}")
for name in mounts:
    check(name in volumes, f"mount {name} has no volume")
check(mounts.get("config", {}).get("mountPath") == "/etc/leakwatch", "config mounted at /etc/leakwatch")
cm_name = volumes.get("config", {}).get("configMap", {}).get("name")
configmaps = {m["metadata"]["name"]: m for m in by_kind.get("ConfigMap", [])}
check(cm_name in configmaps, f"config volume names ConfigMap {cm_name}, which is not rendered")
config_text = configmaps.get(cm_name, {}).get("data", {}).get("leakwatch.yaml", "")
check("--config" in c.get("args", []) and "/etc/leakwatch/leakwatch.yaml" in c.get("args", []),
      "run --config /etc/leakwatch/leakwatch.yaml")
config = yaml.safe_load(config_text) or {}
check(str(config.get("listen", "")).endswith(":9478") and not str(config.get("listen")).startswith("127."),
      "config must listen on 9478 beyond loopback, for Prometheus")
open(out_config, "w").write(config_text)

svc = one("Service")
check(svc.get("spec", {}).get("selector", {}).items() <= pod_labels.items(), "Service must select the pods")
check(any(p.get("targetPort") in ("metrics", 9478) and p.get("port") == 9478 for p in svc.get("spec", {}).get("ports", [])),
      "Service port 9478 -> metrics")

# CRDs: no schema package; their structure as the Prometheus Operator reads it.
pm = one("PodMonitor")
check(pm.get("apiVersion") == "monitoring.coreos.com/v1", "PodMonitor apiVersion")
pm_spec = pm.get("spec", {})
check(set(pm_spec) <= {"selector", "podMetricsEndpoints", "namespaceSelector", "jobLabel", "podTargetLabels"},
      f"PodMonitor spec keys {sorted(pm_spec)}")
check(pm_spec.get("selector", {}).get("matchLabels", {}).items() <= pod_labels.items(), "PodMonitor must select the pods")
endpoints = pm_spec.get("podMetricsEndpoints", [])
check(len(endpoints) == 1, "one podMetricsEndpoint")
for ep in endpoints:
    check(set(ep) <= {"port", "path", "interval", "scrapeTimeout", "scheme", "relabelings", "metricRelabelings",
                      "honorLabels", "tlsConfig", "basicAuth"}, f"podMetricsEndpoint keys {sorted(ep)}")
    check(ep.get("port") in ports, f"PodMonitor port {ep.get('port')} is not a container port name")
    check(ep.get("path") == "/metrics", "PodMonitor path /metrics")
    check(re.fullmatch(r"\d+[smh]", ep.get("interval", "")), "PodMonitor interval like 15s")
    for r in ep.get("relabelings", []):
        check(set(r) <= {"sourceLabels", "separator", "targetLabel", "regex", "modulus", "replacement", "action"},
              f"relabeling keys {sorted(r)}")
        if "regex" in r:
            re.compile(r["regex"])
    dropped = [r for r in ep.get("relabelings", []) if r.get("action") == "labeldrop"]
    check(any(re.fullmatch(r["regex"], "namespace") and re.fullmatch(r["regex"], "pod") for r in dropped),
          "the operator's namespace/pod target labels must be dropped: leakwatch's own label the traced pod")

pr = one("PrometheusRule")
check(pr.get("apiVersion") == "monitoring.coreos.com/v1", "PrometheusRule apiVersion")
check(set(pr.get("spec", {})) == {"groups"}, "PrometheusRule spec has only groups")
rules_file = yaml.safe_load(open(f"{src}/deploy/prometheus/leakwatch-rules.yml"))
check(pr.get("spec", {}).get("groups") == rules_file["groups"],
      "PrometheusRule differs from deploy/prometheus/leakwatch-rules.yml: run deploy/kubernetes/generate.sh")
for g in pr.get("spec", {}).get("groups", []):
    check(set(g) <= {"name", "interval", "rules", "partial_response_strategy"}, f"group keys {sorted(g)}")
    for r in g.get("rules", []):
        check(("record" in r) != ("alert" in r) and isinstance(r.get("expr"), str),
              f"rule {r.get('record') or r.get('alert')}: exactly one of record/alert, and an expr")
        check(set(r) <= {"record", "alert", "expr", "for", "labels", "annotations"}, f"rule keys {sorted(r)}")

dash = [m for m in configmaps.values() if m["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
check(len(dash) == 1, "one ConfigMap labelled grafana_dashboard: \"1\"")
if dash:
    data = dash[0].get("data", {})
    check(list(data) == ["leakwatch.json"], "the dashboard ConfigMap holds leakwatch.json")
    check(json.loads(data.get("leakwatch.json", "null")) == json.load(open(f"{src}/deploy/grafana/leakwatch.json")),
          "dashboard ConfigMap differs from deploy/grafana/leakwatch.json: run deploy/kubernetes/generate.sh")

for e in errors:
    print("check_kubernetes:", e, file=sys.stderr)
print(f"check_kubernetes: {len(docs)} objects, " + ("all checks passed" if not errors else f"{len(errors)} problems"))
sys.exit(1 if errors else 0)
