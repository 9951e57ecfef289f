#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# deploy/kubernetes: the generated PrometheusRule and dashboard ConfigMap are
# up to date; the base, prometheus-operator/ and priority-class/ render with
# the kubectl on PATH and with Debian 12's kubectl 1.20 (kustomize 2.0.3;
# unpacked by scripts/install-deps.sh --with-test-tools when the kubectl on
# PATH is another one), without a warning, and to the same objects; the
# overlays docs/kubernetes.md shows (its blocks marked `kubernetes_test:`)
# render too, each with the kubectl it is written for; the rendered objects
# pass check_kubernetes.py (plain-cluster base, operator parts, labels and
# selectors, priority, AppArmor, SELinux, the NetworkPolicy evaluated for the
# scraper and for other pods, kube-rbac-proxy's RBAC and documented overlay,
# the documented scrape config, ...); the built-in objects validate against
# Kubernetes' schemas from npm's kubernetes-models (k8s_validate.js; the
# base's strictly: no CRD); and the ConfigMap's config passes `leakwatch
# check-config`. Usage: kubernetes_test.sh SOURCE_DIR LEAKWATCH_BIN
set -euo pipefail
src=${1:?usage: kubernetes_test.sh SOURCE_DIR LEAKWATCH_BIN}
leakwatch=${2:?usage: kubernetes_test.sh SOURCE_DIR LEAKWATCH_BIN}
src=$(cd "$src" && pwd)
kubectl=${KUBECTL:-kubectl}
here=$(cd "$(dirname "$0")" && pwd)
missing=""
command -v "$kubectl" >/dev/null || missing+=" kubectl (kubernetes-client)"
command -v node >/dev/null || missing+=" node (nodejs)"
[ -d "$here/k8s-schemas/node_modules/kubernetes-models" ] || missing+=" kubernetes-models (npm ci in tests/deploy/k8s-schemas)"
# Debian 12's kubectl: the one on PATH if it is 1.20, else the unpacked one.
only_debian=0
if "$kubectl" version --client 2>/dev/null | grep -q 'v1\.20\.'; then
  kubectl_debian=$(command -v "$kubectl")
  only_debian=1
else
  kubectl_debian=${KUBECTL_DEBIAN:-$here/k8s-schemas/kubectl-debian/usr/bin/kubectl}
  [ -x "$kubectl_debian" ] || missing+=" Debian's kubectl 1.20 ($kubectl_debian)"
fi
if [ -n "$missing" ]; then
  echo "kubernetes_test: missing:$missing; run scripts/install-deps.sh --with-test-tools" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Generated files are current.
mkdir -p "$work/gen/deploy"
cp -r "$src/deploy/kubernetes" "$src/deploy/prometheus" "$src/deploy/grafana" "$work/gen/deploy/"
"$work/gen/deploy/kubernetes/generate.sh"
for f in prometheus-operator/prometheusrule.yaml prometheus-operator/grafana-dashboard.yaml; do
  if ! cmp -s "$work/gen/deploy/kubernetes/$f" "$src/deploy/kubernetes/$f"; then
    echo "kubernetes_test: deploy/kubernetes/$f is stale: run deploy/kubernetes/generate.sh" >&2
    exit 1
  fi
done

# kustomize DIR OUT with one kubectl: no warning (deprecations included).
render() {
  local k=$1 dir=$2 out=$3
  if ! "$k" kustomize "$dir" > "$out" 2> "$out.err"; then
    cat "$out.err" >&2; echo "kubernetes_test: $k kustomize $dir failed" >&2; exit 1
  fi
  if grep -qi 'warn\|deprecat' "$out.err"; then
    cat "$out.err" >&2; echo "kubernetes_test: $k kustomize $dir warns" >&2; exit 1
  fi
}
# The objects of a render, for comparing two kustomize versions.
canonical() { /usr/bin/python3 -c 'import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
print(json.dumps(sorted(docs, key=lambda d: (d["kind"], d["metadata"].get("namespace") or "", d["metadata"]["name"])), sort_keys=True))' "$1"; }

declare -A version=([current]="$kubectl" [debian]="$kubectl_debian")
for which in current debian; do
  k=${version[$which]}
  echo "kubernetes_test: $which: $k: $("$k" version --client 2>/dev/null | head -1)"
  mkdir -p "$work/$which"
  render "$k" "$src/deploy/kubernetes" "$work/$which/base.yaml"
  render "$k" "$src/deploy/kubernetes/prometheus-operator" "$work/$which/operator.yaml"
  render "$k" "$src/deploy/kubernetes/priority-class" "$work/$which/priority.yaml"
  render "$k" "$src/deploy/kubernetes/kube-rbac-proxy" "$work/$which/rbac.yaml"
done
for part in base operator priority rbac; do
  if [ "$(canonical "$work/current/$part.yaml")" != "$(canonical "$work/debian/$part.yaml")" ]; then
    diff <(canonical "$work/current/$part.yaml" | tr ',' '\n') <(canonical "$work/debian/$part.yaml" | tr ',' '\n') | head -20 >&2
    echo "kubernetes_test: $part renders differently with kubectl 1.20" >&2
    exit 1
  fi
done
echo "kubernetes_test: base, prometheus-operator, priority-class and kube-rbac-proxy render the same with both, without warnings"

# The overlays of docs/kubernetes.md, as a user writes them beside a copy of
# the repository: each block after a `<!-- kubernetes_test: DIR/FILE ... -->`
# line is written to those files.
mkdir -p "$work/user/leakwatch"
cp -r "$src/deploy" "$work/user/leakwatch/"
/usr/bin/python3 - "$src/docs/kubernetes.md" "$work/user" <<'EOF'
import os, re, sys
text = open(sys.argv[1]).read()
blocks = re.findall(r"<!-- kubernetes_test: ([^>]*?) -->\s*```[a-z]*\n(.*?)```", text, re.S)
for targets, body in blocks:
    for t in targets.split():
        path = os.path.join(sys.argv[2], t)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").write(body)
print(f"kubernetes_test: docs/kubernetes.md: {len(blocks)} blocks -> " + " ".join(sorted({t for ts, _ in blocks for t in ts.split()})))
EOF
for d in combined-current combined-kubectl-1.20 apparmor-before-1.30 rbac-proxy scraper-elsewhere; do
  [ -f "$work/user/$d/kustomization.yaml" ] || { echo "kubernetes_test: docs/kubernetes.md has no $d overlay" >&2; exit 1; }
done
render "$kubectl_debian" "$work/user/combined-kubectl-1.20" "$work/debian/combined.yaml"
if [ "$only_debian" = 1 ]; then
  # Debian's kubectl is the only one: it cannot read the overlays written
  # for current kustomize (resources: DIR, patches:).
  echo "kubernetes_test: only kubectl 1.20 here: docs/kubernetes.md's overlays for current kustomize not rendered"
  cp "$work/debian/combined.yaml" "$work/current/combined.yaml"
  apparmor=- rbac_overlay=- scraper_elsewhere=-
else
  render "$kubectl" "$work/user/combined-current" "$work/current/combined.yaml"
  render "$kubectl" "$work/user/apparmor-before-1.30" "$work/current/apparmor.yaml"
  apparmor="$work/current/apparmor.yaml"
  render "$kubectl" "$work/user/rbac-proxy" "$work/current/rbac-proxy.yaml"
  render "$kubectl" "$work/user/scraper-elsewhere" "$work/current/scraper-elsewhere.yaml"
  rbac_overlay="$work/current/rbac-proxy.yaml" scraper_elsewhere="$work/current/scraper-elsewhere.yaml"
  if [ "$(canonical "$work/current/combined.yaml")" != "$(canonical "$work/debian/combined.yaml")" ]; then
    echo "kubernetes_test: the documented combined overlays differ between current kustomize and kubectl 1.20" >&2
    exit 1
  fi
fi

/usr/bin/python3 "$here/check_kubernetes.py" "$src" "$work/leakwatch.yaml" "$work/current/base.yaml" \
  "$work/current/operator.yaml" "$work/current/priority.yaml" "$work/current/combined.yaml" "$apparmor" \
  "$work/user/prometheus/prometheus.yml" "$work/current/rbac.yaml" "$rbac_overlay" "$scraper_elsewhere"
to_json() { /usr/bin/python3 -c 'import json, sys, yaml; print(json.dumps([d for d in yaml.safe_load_all(sys.stdin) if d]))' < "$1"; }
to_json "$work/current/base.yaml" | node "$here/k8s_validate.js" --no-crds
to_json "$work/current/operator.yaml" | node "$here/k8s_validate.js"
to_json "$work/current/priority.yaml" | node "$here/k8s_validate.js" --no-crds
to_json "$work/current/rbac.yaml" | node "$here/k8s_validate.js" --no-crds
if [ "$rbac_overlay" != - ]; then
  to_json "$rbac_overlay" | node "$here/k8s_validate.js" --no-crds
  # The daemon's config behind the proxy (loopback) is valid too.
  /usr/bin/python3 -c 'import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "ConfigMap" and d["metadata"]["name"] == "leakwatch-config":
        open(sys.argv[2], "w").write(d["data"]["leakwatch.yaml"])' "$rbac_overlay" "$work/rbac-proxy-leakwatch.yaml"
  "$leakwatch" check-config "$work/rbac-proxy-leakwatch.yaml"
fi
"$leakwatch" check-config "$work/leakwatch.yaml"
echo "kubernetes_test: passed"
