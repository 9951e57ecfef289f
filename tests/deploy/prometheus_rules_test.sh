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
