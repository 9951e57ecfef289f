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
The base's NetworkPolicy admits the scraper (kube-prometheus' Prometheus)
on the metrics port and refuses other pods and ports; SCRAPER_ELSEWHERE,
docs/kubernetes.md's patch for a scraper elsewhere, admits that one instead.
RBAC (deploy/kubernetes/kube-rbac-proxy): the proxy's ClusterRole
(TokenReviews, SubjectAccessReviews) bound to leakwatch's ServiceAccount,
and the scrapers' leakwatch-metrics-reader. RBAC_OVERLAY: docs/kubernetes.md's
overlay behind kube-rbac-proxy: the daemon on loopback, the proxy's upstream,
the metrics port and the probes on the proxy (HTTPS, /healthz passed
through), the API token in the proxy container only.
("-" for the two overlays where only kubectl 1.20 is at hand.)
And no kustomization.yaml under deploy/kubernetes uses a field that current
kustomize deprecates or the kustomize of Debian's kubectl 1.20 lacks.
Writes the rendered leakwatch.yaml to OUT_CONFIG for `leakwatch check-config`.
Usage: check_kubernetes.py SOURCE_DIR OUT_CONFIG BASE OPERATOR PRIORITY COMBINED APPARMOR_LEGACY SCRAPE_CONFIG
       RBAC RBAC_OVERLAY SCRAPER_ELSEWHERE"""
import glob
import json
import re
import sys

import yaml

src, out_config = sys.argv[1], sys.argv[2]
renders = {}
if len(sys.argv) != 12:
    sys.exit(__doc__)
for name, path in zip(("base", "operator", "priority", "combined", "apparmor_legacy", "rbac", "rbac_overlay",
                       "scraper_elsewhere"), sys.argv[3:8] + sys.argv[9:12]):
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
check(len(kustomizations) == 4,
      f"expected base, prometheus-operator, priority-class and kube-rbac-proxy kustomizations, found {kustomizations}")
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
check(set(by_kind(base)) == {"Namespace", "ServiceAccount", "DaemonSet", "Service", "ConfigMap", "NetworkPolicy"},
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
for name in ("base", "operator", "priority", "rbac"):
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

# The NetworkPolicy: only the scraper (kube-prometheus' Prometheus: label
# app.kubernetes.io/name=prometheus in namespace monitoring) reaches the
# metrics port. Evaluated as the API defines it, for a few clients.
netpol = one(base, "NetworkPolicy", where)
np_spec = netpol.get("spec", {})
check(np_spec.get("podSelector", {}).get("matchLabels", {}).items() <= pod_labels.items()
      and np_spec.get("podSelector", {}).get("matchLabels"),
      "NetworkPolicy must select the DaemonSet's pods (and not every pod: an empty podSelector)")
check(np_spec.get("policyTypes") == ["Ingress"], f"NetworkPolicy policyTypes {np_spec.get('policyTypes')}: Ingress only")


def selects(selector, labels):
    if selector is None:
        return True
    if set(selector) - {"matchLabels"}:
        errors.append(f"NetworkPolicy selector {selector}: only matchLabels is evaluated here")
    return selector.get("matchLabels", {}).items() <= labels.items()


def admitted(ns_labels, labels, port, policy_spec=None):
    for rule in (policy_spec or np_spec).get("ingress", []):
        peers = rule.get("from")
        peer_ok = peers is None or any(
            "ipBlock" not in p and (("namespaceSelector" in p and selects(p["namespaceSelector"], ns_labels))
                                    or ("namespaceSelector" not in p and ns_labels.get("kubernetes.io/metadata.name") == ns_name))
            and selects(p.get("podSelector"), labels) for p in peers)
        port_ok = rule.get("ports") is None or any(
            p.get("port") in (port, next((n for n, q in ports.items() if q.get("containerPort") == port), None))
            and p.get("protocol", "TCP") == "TCP" for p in rule["ports"])
        if peer_ok and port_ok:
            return True
    return False


PROMETHEUS = {"app.kubernetes.io/name": "prometheus"}
MONITORING = {"kubernetes.io/metadata.name": "monitoring"}
check(admitted(MONITORING, {**PROMETHEUS, "prometheus": "k8s"}, 9478),
      "NetworkPolicy must admit kube-prometheus' Prometheus (monitoring, app.kubernetes.io/name=prometheus) on 9478")
for what, ns_labels, labels, port in (
        ("a pod in another namespace", {"kubernetes.io/metadata.name": "team-a"}, {"app": "web"}, 9478),
        ("a pod labelled prometheus in another namespace", {"kubernetes.io/metadata.name": "team-a"}, PROMETHEUS, 9478),
        ("another pod of the monitoring namespace", MONITORING, {"app.kubernetes.io/name": "grafana"}, 9478),
        ("another pod of leakwatch's namespace", {"kubernetes.io/metadata.name": ns_name}, {"app": "debug"}, 9478),
        ("the scraper on another port", MONITORING, PROMETHEUS, 22)):
    check(not admitted(ns_labels, labels, port), f"NetworkPolicy admits {what}")
for rule in np_spec.get("ingress", []):
    check(rule.get("from") and rule.get("ports"), "every NetworkPolicy ingress rule names its peers and ports")

# SELinux: spc_t, as Inspektor Gadget (container_t may not load BPF).
check(sc.get("seLinuxOptions") == {"type": "spc_t"}, "securityContext.seLinuxOptions.type spc_t (docs/kubernetes.md, SELinux)")

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

# --- RBAC (kube-rbac-proxy) ---------------------------------------------------
rbac = renders["rbac"]
check(sorted(key(d) for d in rbac) == [("ClusterRole", None, "leakwatch-kube-rbac-proxy"),
                                       ("ClusterRole", None, "leakwatch-metrics-reader"),
                                       ("ClusterRoleBinding", None, "leakwatch-kube-rbac-proxy")],
      f"kube-rbac-proxy renders {sorted(key(d) for d in rbac)}")
roles = {d["metadata"]["name"]: d for d in rbac if d["kind"] == "ClusterRole"}
proxy_rules = roles.get("leakwatch-kube-rbac-proxy", {}).get("rules", [])
for grp, res in (("authentication.k8s.io", "tokenreviews"), ("authorization.k8s.io", "subjectaccessreviews")):
    check(any(grp in r.get("apiGroups", []) and res in r.get("resources", []) and r.get("verbs") == ["create"]
              for r in proxy_rules), f"kube-rbac-proxy's ClusterRole must create {res}.{grp}, and only that")
check(len(proxy_rules) == 2, "kube-rbac-proxy's ClusterRole: the two reviews only")
binding = one(rbac, "ClusterRoleBinding", "kube-rbac-proxy")
check(binding.get("roleRef", {}).get("name") == "leakwatch-kube-rbac-proxy"
      and binding.get("subjects") == [{"kind": "ServiceAccount", "name": sa.get("metadata", {}).get("name"),
                                       "namespace": ns_name}],
      "kube-rbac-proxy's ClusterRoleBinding must bind its role to leakwatch's ServiceAccount only")
check(roles.get("leakwatch-metrics-reader", {}).get("rules") == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
      "leakwatch-metrics-reader: get /metrics only")

if "rbac_overlay" in renders:
    ro = renders["rbac_overlay"]
    check(sorted(key(d) for d in ro) == sorted(key(d) for d in base + rbac),
          f"the kube-rbac-proxy overlay renders {sorted(key(d) for d in ro)}: base + kube-rbac-proxy")
    rds = one(ro, "DaemonSet", "kube-rbac-proxy overlay")
    rpod = rds.get("spec", {}).get("template", {}).get("spec", {})
    rc = {x["name"]: x for x in rpod.get("containers", [])}
    daemon, proxy = rc.get(c.get("name"), {}), rc.get("kube-rbac-proxy", {})
    check(set(rc) == {c.get("name"), "kube-rbac-proxy"}, f"kube-rbac-proxy overlay containers {sorted(rc)}")
    rcms = {m["metadata"]["name"]: m for m in by_kind(ro).get("ConfigMap", [])}
    rconfig = yaml.safe_load(rcms.get(cm_name, {}).get("data", {}).get("leakwatch.yaml", "") or "{}") or {}
    listen = str(rconfig.get("listen", ""))
    check(listen.startswith("127.0.0.1:"), f"behind kube-rbac-proxy the daemon listens on loopback, not '{listen}'")
    args = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in proxy.get("args", []) if "=" in a}
    check(args.get("--upstream") == f"http://{listen}/", f"proxy --upstream {args.get('--upstream')}, daemon on {listen}")
    pports = {p.get("name"): p for p in proxy.get("ports", [])}
    check(pports.get("metrics", {}).get("containerPort") == 9478
          and args.get("--secure-listen-address", "").endswith(":9478"),
          "the proxy serves the metrics port 9478 (the PodMonitor, Service and NetworkPolicy name it)")
    check(not daemon.get("ports") and "readinessProbe" not in daemon and "livenessProbe" not in daemon,
          "behind the proxy the daemon declares no port and no probe of its own")
    for probe in ("readinessProbe", "livenessProbe"):
        get = proxy.get(probe, {}).get("httpGet", {})
        check(get.get("scheme") == "HTTPS" and get.get("port") == "metrics"
              and get.get("path") in args.get("--ignore-paths", "").split(","),
              f"the proxy's {probe}: HTTPS on metrics, a path passed through without a token (--ignore-paths)")
    check(rpod.get("automountServiceAccountToken") is False, "the overlay must not mount the API token into every container")
    token_mounts = [(x["name"], m["name"]) for x in rc.values() for m in x.get("volumeMounts", [])
                    if m.get("mountPath") == "/var/run/secrets/kubernetes.io/serviceaccount"]
    check([n for n, _ in token_mounts] == ["kube-rbac-proxy"], f"API token mounted in {token_mounts}: the proxy only")
    check(one(ro, "NetworkPolicy", "kube-rbac-proxy overlay").get("spec") == np_spec, "the overlay keeps the NetworkPolicy")

if "scraper_elsewhere" in renders:
    se = one(renders["scraper_elsewhere"], "NetworkPolicy", "scraper-elsewhere overlay").get("spec", {})
    check(admitted({"kubernetes.io/metadata.name": "observability"}, {"app": "prometheus"}, 9478, se),
          "docs/kubernetes.md's patch must admit the scraper it names (observability, app=prometheus)")
    check(not admitted(MONITORING, PROMETHEUS, 9478, se) and not admitted(MONITORING, {"app": "prometheus"}, 9478, se),
          "docs/kubernetes.md's patch must admit only the scraper it names")

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
