#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# deploy/kubernetes: the generated PrometheusRule and dashboard ConfigMap are
# up to date; `kubectl kustomize` renders the base (Debian's kubectl 1.20
# embeds kustomize 2.0.3: basic bases/overlays only); the rendered objects
# have the security context, volumes, ports, probes and labels the DaemonSet
# needs and the CRDs are well formed (check_kubernetes.py); the core objects
# validate against Kubernetes' schemas from npm's kubernetes-models
# (k8s_validate.js); and the ConfigMap's config passes `leakwatch
# check-config`. Usage: kubernetes_test.sh SOURCE_DIR LEAKWATCH_BIN
set -euo pipefail
src=${1:?usage: kubernetes_test.sh SOURCE_DIR LEAKWATCH_BIN}
leakwatch=${2:?usage: kubernetes_test.sh SOURCE_DIR LEAKWATCH_BIN}
kubectl=${KUBECTL:-kubectl}
here=$(cd "$(dirname "$0")" && pwd)
missing=""
command -v "$kubectl" >/dev/null || missing+=" kubectl (kubernetes-client)"
command -v node >/dev/null || missing+=" node (nodejs)"
[ -d "$here/k8s-schemas/node_modules/kubernetes-models" ] || missing+=" kubernetes-models (npm ci in tests/deploy/k8s-schemas)"
if [ -n "$missing" ]; then
  echo "kubernetes_test: missing:$missing; run scripts/install-deps.sh --with-test-tools" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Generated files are current.
mkdir -p "$work/deploy"
cp -r "$src/deploy/kubernetes" "$src/deploy/prometheus" "$src/deploy/grafana" "$work/deploy/"
"$work/deploy/kubernetes/generate.sh"
for f in prometheusrule.yaml grafana-dashboard.yaml; do
  if ! cmp -s "$work/deploy/kubernetes/$f" "$src/deploy/kubernetes/$f"; then
    echo "kubernetes_test: deploy/kubernetes/$f is stale: run deploy/kubernetes/generate.sh" >&2
    exit 1
  fi
done

echo "kubernetes_test: $("$kubectl" version --client 2>/dev/null | head -1)"
"$kubectl" kustomize "$src/deploy/kubernetes" > "$work/rendered.yaml"
/usr/bin/python3 "$here/check_kubernetes.py" "$src" "$work/leakwatch.yaml" < "$work/rendered.yaml"
/usr/bin/python3 -c 'import json, sys, yaml; print(json.dumps([d for d in yaml.safe_load_all(sys.stdin) if d]))' \
  < "$work/rendered.yaml" | node "$here/k8s_validate.js"
"$leakwatch" check-config "$work/leakwatch.yaml"
echo "kubernetes_test: passed"
