#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# deploy/prometheus: the rules load (promtool check rules), every promtool
# test case passes (each alert firing and silent; a plateauing cache and a
# one-time warm-up never fire), and every alert is documented and linked to
# its runbook (check_rules.py). Usage: prometheus_rules_test.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: prometheus_rules_test.sh SOURCE_DIR}
if ! command -v promtool >/dev/null; then
  echo "promtool not installed: run scripts/install-deps.sh --with-test-tools" >&2
  exit 1
fi
promtool check rules "$src/deploy/prometheus/leakwatch-rules.yml"
(cd "$src/deploy/prometheus" && promtool test rules leakwatch-rules.test.yml)
/usr/bin/python3 "$src/tests/deploy/check_rules.py" "$src"
# set-runbook-url.sh: every alert's runbook_url gets the base, the anchors
# stay, the result still loads; a bad base is refused.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
base='https://wiki.example.net/ops|leakwatch&runbooks'
"$src/deploy/prometheus/set-runbook-url.sh" "$base" > "$tmp/rules.yml"
promtool check rules "$tmp/rules.yml"
alerts=$(grep -c '^      - alert: ' "$src/deploy/prometheus/leakwatch-rules.yml")
rewritten=$(grep -cF "runbook_url: \"$base#leakwatch" "$tmp/rules.yml")
if [ "$alerts" -ne "$rewritten" ] || grep -q 'runbook_url: "file:' "$tmp/rules.yml"; then
  echo "set-runbook-url.sh: $rewritten of $alerts runbook_urls rewritten to $base" >&2
  exit 1
fi
for bad in 'wiki.example.net' 'https://a b' 'https://a"b' 'https://a#b'; do
  if "$src/deploy/prometheus/set-runbook-url.sh" "$bad" > /dev/null 2>&1; then
    echo "set-runbook-url.sh accepted the base '$bad'" >&2
    exit 1
  fi
done
echo "set-runbook-url.sh: $alerts runbook_urls rewritten, bad bases refused"
