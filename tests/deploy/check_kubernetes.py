#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Asserts what deploy/kubernetes renders to (`kubectl kustomize` output):

BASE (deploy/kubernetes): installs on a plain cluster: only built-in kinds,
no CRD; no priorityClassName (system-node-critical is refused outside
kube-system on some managed clusters); every object labelled
app.kubernetes.io/name and part-of; the DaemonSet's selector is the one
earlier releases created (immutable), its pods carry it, and the Service
selects them; the security context, volumes (the cache and state
directories read-write, at the unit's CacheDirectory/StateDirectory
paths), ports, probes; AppArmor through the field or the annotation as the
oldest supported Kubernetes (docs/kubernetes.md) requires; the capabilities
equal the systemd unit's.
OPERATOR (deploy/kubernetes/prometheus-operator): exactly the PodMonitor,
the PrometheusRule and the dashboard ConfigMap, in the base's namespace; the
CRD kinds are there and only there; the PodMonitor selects the base's pods
by a port they have; the PrometheusRule and dashboard equal deploy/prometheus
and deploy/grafana.
PRIORITY (deploy/kubernetes/priority-class): one PriorityClass of our own,
below the system classes, never preempting.
COMBINED: an overlay of a user's that lists the three and sets the
DaemonSet's priorityClassName (docs/kubernetes.md): the union of the three,
the DaemonSet on that class.
APPARMOR_LEGACY: the documented patch for clusters older than 1.30: the
annotation instead of the field ("-" where only kubectl 1.20 is at hand:
the patch is written for current kustomize).
SCRAPE_CONFIG: docs/kubernetes.md's prometheus.yml for a Prometheus without
the operator keeps exactly the DaemonSet's pods' metrics port (Debian's
promtool lacks Kubernetes service discovery, so it is checked here).
And no kustomization.yaml under deploy/kubernetes uses a field that current
kustomize deprecates or the kustomize of Debian's kubectl 1.20 lacks.
Writes the rendered leakwatch.yaml to OUT_CONFIG for `leakwatch check-config`.
Usage: check_kubernetes.py SOURCE_DIR OUT_CONFIG BASE OPERATOR PRIORITY COMBINED APPARMOR_LEGACY SCRAPE_CONFIG"""
import glob
import json
import re
import sys

import yaml

src, out_config = sys.argv[1], sys.argv[2]
renders = {}
if len(sys.argv) != 9:
    sys.exit(__doc__)
for name, path in zip(("base", "operator", "priority", "combined", "apparmor_legacy"), sys.argv[3:8]):
    if path != "-":  # "-": not rendered here (only kubectl 1.20 at hand)
        renders[name] = [d for d in yaml.safe_load_all(open(path)) if d]
scrape_config = yaml.safe_load(open(sys.argv[8]))
errors = []
LABELS = {"app.kubernetes.io/name": "leakwatch", "app.kubernetes.io/part-of": "leakwatch"}
# What commonLabels made of the selector in releases up to 0.1.0: a
# DaemonSet's selector cannot change, so every later release keeps it.
DAEMONSET_SELECTOR = dict(LABELS)
CRD_GROUP = "monitoring.coreos.com"


def check(cond, what):
    if not cond:
        errors.append(what)


def key(d):
    return (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])


def group(d):
    return d["apiVersion"].split("/")[0] if "/" in d["apiVersion"] else ""


def builtin(d):
    g = group(d)
    return g == "" or "." not in g or g.endswith(".k8s.io")


def by_kind(docs):
    out = {}
    for d in docs:
        out.setdefault(d["kind"], []).append(d)
    return out


def one(docs, kind, where):
    items = by_kind(docs).get(kind, [])
    check(len(items) == 1, f"{where}: expected one {kind}, got {len(items)}")
    return items[0] if items else {}


# The kustomization files themselves.
DEPRECATED_OR_MISSING = {
    "commonLabels": "deprecated (kubectl warns): state the labels in each manifest",
    "bases": "deprecated in current kustomize",
    "patchesStrategicMerge": "deprecated in current kustomize",
    "patchesJson6902": "deprecated in current kustomize",
    "vars": "deprecated in current kustomize",
    "imageTags": "removed",
    "components": "not in the kustomize of Debian's kubectl 1.20 (2.0.3)",
    "labels": "not in the kustomize of Debian's kubectl 1.20 (2.0.3)",
    "patches": "not in the kustomize of Debian's kubectl 1.20 (2.0.3)",
    "replacements": "not in the kustomize of Debian's kubectl 1.20 (2.0.3)",
}
kustomizations = sorted(glob.glob(f"{src}/deploy/kubernetes/**/kustomization.yaml", recursive=True))
check(len(kustomizations) == 3, f"expected base, prometheus-operator and priority-class kustomizations, found {kustomizations}")
for path in kustomizations:
    k = yaml.safe_load(open(path)) or {}
    rel = path[len(src) + 1:]
    check(k.get("apiVersion") == "kustomize.config.k8s.io/v1beta1" and k.get("kind") == "Kustomization",
          f"{rel}: apiVersion kustomize.config.k8s.io/v1beta1, kind Kustomization (Debian's kubectl 1.20 reads no other)")
    for field, why in DEPRECATED_OR_MISSING.items():
        check(field not in k, f"{rel}: {field}: {why}")
    for r in k.get("resources", []):
        check(not r.startswith(".."), f"{rel}: resource {r} outside its directory (a base inside a base's directory is a cycle)")

# --- BASE -------------------------------------------------------------------
base = renders["base"]
where = "base"
check(set(by_kind(base)) == {"Namespace", "ServiceAccount", "DaemonSet", "Service", "ConfigMap"},
      f"base kinds {sorted(by_kind(base))}")
for d in base:
    check(builtin(d), f"base: {d['apiVersion']} {d['kind']} is not a built-in kind (the base must need no CRD)")
ns = one(base, "Namespace", where)
ns_name = ns.get("metadata", {}).get("name")
check(ns.get("metadata", {}).get("labels", {}).get("pod-security.kubernetes.io/enforce") == "privileged",
      "Namespace must enforce the privileged Pod Security level")
for d in base:
    if d["kind"] != "Namespace":
        check(d["metadata"].get("namespace") == ns_name, f"{d['kind']}/{d['metadata']['name']} not in {ns_name}")
for name in ("base", "operator", "priority"):
    for d in renders[name]:
        labels = d["metadata"].get("labels", {})
        check(LABELS.items() <= labels.items(), f"{name}: {d['kind']}/{d['metadata']['name']} lacks the labels {LABELS}")

sa = one(base, "ServiceAccount", where)
ds = one(base, "DaemonSet", where)
spec = ds.get("spec", {})
pod = spec.get("template", {}).get("spec", {})
pod_meta = spec.get("template", {}).get("metadata", {})
pod_labels = pod_meta.get("labels", {})
selector = spec.get("selector", {})
check(selector == {"matchLabels": DAEMONSET_SELECTOR},
      f"DaemonSet selector {selector} must stay {DAEMONSET_SELECTOR} (immutable: existing installs have it)")
check(selector.get("matchLabels", {}).items() <= pod_labels.items(), "DaemonSet selector must match its pod labels")
check(spec.get("updateStrategy", {}).get("type") == "RollingUpdate", "DaemonSet must roll updates")
check(pod.get("hostPID") is True, "hostPID: true (every process of the node in /proc)")
check(pod.get("serviceAccountName") == sa.get("metadata", {}).get("name"), "pod must use the ServiceAccount")
check(pod.get("automountServiceAccountToken") is False, "no API token: leakwatch does not call the API server")
check({"operator": "Exists"} in pod.get("tolerations", []), "must tolerate every taint (run on every node)")
check("priorityClassName" not in pod,
      f"base: priorityClassName {pod.get('priorityClassName')}: none in the base (system-node-critical is refused "
      "outside kube-system on some clusters; priority-class/ is the option)")
check("system-node-critical" not in yaml.safe_dump_all(base), "base: system-node-critical anywhere")
containers = pod.get("containers", [])
check(len(containers) == 1, "one container")
c = containers[0] if containers else {}
check(c.get("image", "").startswith("ghcr.io/leakwatch/leakwatch:"), f"image {c.get('image')}")
check(c.get("args", [])[:1] == ["run"], "the container runs `leakwatch run`")
env = {e.get("name"): e for e in c.get("env", [])}
check(env.get("NODE_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName",
      "NODE_NAME from spec.nodeName")
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

# AppArmor: the securityContext field is GA from 1.30; before, only the
# annotation works (an older API server drops or rejects the field). The
# supported versions are declared in docs/kubernetes.md.
docs = open(f"{src}/docs/kubernetes.md").read()
m = re.search(r"Supported Kubernetes versions: \*\*(\d+)\.(\d+) and newer\*\*", docs)
check(m is not None, "docs/kubernetes.md must declare 'Supported Kubernetes versions: **1.N and newer**'")
min_version = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
annotation = f"container.apparmor.security.beta.kubernetes.io/{c.get('name')}"
if min_version >= (1, 30):
    check(sc.get("appArmorProfile") == {"type": "Unconfined"},
          f"supported from {min_version}: AppArmor through securityContext.appArmorProfile (GA in 1.30)")
    check(annotation not in pod_meta.get("annotations", {}), f"{annotation}: deprecated from 1.30, use the field")
else:
    check("appArmorProfile" not in sc, f"supported from {min_version}: appArmorProfile needs 1.30")
    check(pod_meta.get("annotations", {}).get(annotation) == "unconfined", f"supported from {min_version}: {annotation}")

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
# The unit's writable directories, on the node, read-write, named to the
# daemon as systemd names them.
for directive, env_name in (("CacheDirectory", "CACHE_DIRECTORY"), ("StateDirectory", "STATE_DIRECTORY")):
    unit_dir = re.search(rf"^{directive}=(\S+)$", unit, re.M)
    check(unit_dir is not None, f"unit: no {directive}=")
    path = ("/var/cache/" if directive == "CacheDirectory" else "/var/lib/") + (unit_dir.group(1) if unit_dir else "?")
    mount = [m for m in mounts.values() if m.get("mountPath") == path]
    check(len(mount) == 1 and not mount[0].get("readOnly"), f"{path} ({directive}) must be mounted read-write")
    if mount:
        check(volumes.get(mount[0]["name"], {}).get("hostPath", {}).get("path") == path,
              f"{path} must be the node's {path} (hostPath), as under systemd")
    check(env.get(env_name, {}).get("value") == path, f"env {env_name}={path}, as systemd sets it")
for name in mounts:
    check(name in volumes, f"mount {name} has no volume")
check(mounts.get("config", {}).get("mountPath") == "/etc/leakwatch", "config mounted at /etc/leakwatch")
cm_name = volumes.get("config", {}).get("configMap", {}).get("name")
configmaps = {m["metadata"]["name"]: m for m in by_kind(base).get("ConfigMap", [])}
check(cm_name in configmaps, f"config volume names ConfigMap {cm_name}, which is not rendered")
config_text = configmaps.get(cm_name, {}).get("data", {}).get("leakwatch.yaml", "")
check("--config" in c.get("args", []) and "/etc/leakwatch/leakwatch.yaml" in c.get("args", []),
      "run --config /etc/leakwatch/leakwatch.yaml")
config = yaml.safe_load(config_text) or {}
check(str(config.get("listen", "")).endswith(":9478") and not str(config.get("listen")).startswith("127."),
      "config must listen on 9478 beyond loopback, for Prometheus")
open(out_config, "w").write(config_text)

svc = one(base, "Service", where)
check(svc.get("spec", {}).get("selector") == selector.get("matchLabels"),
      f"Service selector {svc.get('spec', {}).get('selector')} must be the DaemonSet's {selector.get('matchLabels')}")
check(any(p.get("targetPort") in ("metrics", 9478) and p.get("port") == 9478 for p in svc.get("spec", {}).get("ports", [])),
      "Service port 9478 -> metrics")

# --- OPERATOR ---------------------------------------------------------------
operator = renders["operator"]
check(sorted(key(d) for d in operator) == sorted([("ConfigMap", ns_name, "leakwatch-grafana-dashboard"),
                                                  ("PodMonitor", ns_name, "leakwatch"),
                                                  ("PrometheusRule", ns_name, "leakwatch")]),
      f"prometheus-operator renders {sorted(key(d) for d in operator)}: exactly the PodMonitor, the PrometheusRule "
      f"and the dashboard ConfigMap, in {ns_name}")
for d in operator:
    if d["kind"] in ("PodMonitor", "PrometheusRule"):
        check(group(d) == CRD_GROUP, f"{d['kind']} apiVersion {d['apiVersion']}")
pm = one(operator, "PodMonitor", "prometheus-operator")
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

pr = one(operator, "PrometheusRule", "prometheus-operator")
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

dash = [m for m in by_kind(operator).get("ConfigMap", []) if m["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
check(len(dash) == 1, "one ConfigMap labelled grafana_dashboard: \"1\"")
if dash:
    data = dash[0].get("data", {})
    check(list(data) == ["leakwatch.json"], "the dashboard ConfigMap holds leakwatch.json")
    check(json.loads(data.get("leakwatch.json", "null")) == json.load(open(f"{src}/deploy/grafana/leakwatch.json")),
          "dashboard ConfigMap differs from deploy/grafana/leakwatch.json: run deploy/kubernetes/generate.sh")

# --- PRIORITY ---------------------------------------------------------------
priority = renders["priority"]
check([d["kind"] for d in priority] == ["PriorityClass"], f"priority-class renders {[key(d) for d in priority]}")
pc = priority[0] if priority else {}
pc_name = pc.get("metadata", {}).get("name", "")
check(pc.get("apiVersion") == "scheduling.k8s.io/v1", "PriorityClass apiVersion scheduling.k8s.io/v1")
check(not pc_name.startswith("system-"), f"PriorityClass {pc_name}: system- names are reserved")
check(0 < pc.get("value", 0) <= 1_000_000_000, f"PriorityClass value {pc.get('value')}: user classes go up to 1e9")
check(pc.get("preemptionPolicy") == "Never", "PriorityClass must never preempt running workloads")
check(pc.get("globalDefault") is False, "PriorityClass must not be the cluster's default")

# --- COMBINED ---------------------------------------------------------------
combined = renders["combined"]
expected = sorted(key(d) for d in base + operator + priority)
check(sorted(key(d) for d in combined) == expected,
      f"base + prometheus-operator + priority-class in one overlay renders {sorted(key(d) for d in combined)}, "
      f"expected {expected}")
cds = [d for d in combined if d["kind"] == "DaemonSet"]
check(len(cds) == 1 and cds[0]["spec"]["template"]["spec"].get("priorityClassName") == pc_name,
      f"the combined overlay's DaemonSet must run at priorityClassName {pc_name}")

# --- APPARMOR_LEGACY --------------------------------------------------------
if "apparmor_legacy" in renders:
    lds = [d for d in renders["apparmor_legacy"] if d["kind"] == "DaemonSet"]
    lpod = lds[0]["spec"]["template"] if lds else {}
    check("appArmorProfile" not in lpod.get("spec", {}).get("containers", [{}])[0].get("securityContext", {}),
          "the documented pre-1.30 patch must remove securityContext.appArmorProfile")
    check(lpod.get("metadata", {}).get("annotations", {}).get(annotation) == "unconfined",
          f"the documented pre-1.30 patch must set {annotation}: unconfined")

# --- SCRAPE_CONFIG ----------------------------------------------------------
# What Kubernetes service discovery (role pod) gives each container port of
# a pod, for the DaemonSet's pods and for a pod of another app.
def meta(labels, port_name, namespace):
    m = {f"__meta_kubernetes_pod_label_{re.sub(r'[^a-zA-Z0-9_]', '_', k)}": v for k, v in labels.items()}
    m.update({"__meta_kubernetes_pod_container_port_name": port_name, "__meta_kubernetes_namespace": namespace,
              "__meta_kubernetes_pod_node_name": "node-1"})
    return m


def kept(job, target):
    for r in job.get("relabel_configs", []):
        action = r.get("action", "replace")
        value = r.get("separator", ";").join(target.get(s, "") for s in r.get("source_labels", []))
        if action == "keep" and not re.fullmatch(r.get("regex", "(.*)"), value):
            return False
        if action == "drop" and re.fullmatch(r.get("regex", "(.*)"), value):
            return False
    return True


jobs = [j for j in (scrape_config or {}).get("scrape_configs", []) if j.get("job_name") == "leakwatch"]
check(len(jobs) == 1, "docs/kubernetes.md's prometheus.yml: one job named leakwatch (LeakwatchDown's up{job})")
if jobs:
    job = jobs[0]
    sd = job.get("kubernetes_sd_configs", [{}])
    check(sd[0].get("role") == "pod" and sd[0].get("namespaces", {}).get("names") == [ns_name],
          f"scrape config: kubernetes_sd role pod in namespace {ns_name}")
    check(kept(job, meta(pod_labels, "metrics", ns_name)), "scrape config must keep the DaemonSet's metrics port")
    for other in (meta(pod_labels, "other", ns_name), meta({"app.kubernetes.io/name": "web"}, "metrics", ns_name)):
        check(not kept(job, other), f"scrape config must drop {other}")
    targets = {r.get("target_label") for r in job.get("relabel_configs", [])}
    check(not targets & {"namespace", "pod", "container"},
          "scrape config must not set namespace/pod/container: leakwatch's own label the traced pod")

for e in errors:
    print("check_kubernetes:", e, file=sys.stderr)
print(f"check_kubernetes: base {len(base)} objects, prometheus-operator {len(operator)}, priority-class "
      f"{len(priority)}, combined {len(combined)}; supported from Kubernetes {min_version[0]}.{min_version[1]}: "
      + ("all checks passed" if not errors else f"{len(errors)} problems"))
sys.exit(1 if errors else 0)
