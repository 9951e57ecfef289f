#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Points the alerts' runbook_url at the copy of docs/runbooks.md your
# on-call can open: prints RULES (default: leakwatch-rules.yml next to this
# script) with every runbook_url's base replaced by BASE_URL, the anchor
# kept (BASE_URL#leakwatchdown). The shipped base is the file the Debian
# package installs, file:///usr/share/doc/leakwatch/runbooks.md; leakwatch
# runs no website of its own, so no other default would be true
# (docs/runbooks.md, "Where the runbook links point").
#   set-runbook-url.sh https://wiki.example.net/leakwatch/runbooks > /etc/prometheus/rules/leakwatch-rules.yml
# BASE_URL: http://, https:// or file:// and no blank, quote, '#' or '\'.
set -euo pipefail
base=${1:-}
rules=${2:-$(dirname "$0")/leakwatch-rules.yml}
if [[ ! $base =~ ^(https?|file)://[^[:space:]\"\'#\\]+$ ]]; then
  echo "usage: set-runbook-url.sh BASE_URL [RULES_FILE] (BASE_URL: http://, https:// or file://, no blank, quote, '#' or '\\')" >&2
  exit 2
fi
if ! grep -q 'runbook_url: "file:///usr/share/doc/leakwatch/runbooks.md#' "$rules"; then
  echo "set-runbook-url.sh: $rules has no runbook_url with the shipped base (already rewritten?)" >&2
  exit 1
fi
# '|' cannot occur in BASE_URL's sed replacement unescaped: escape it and '&'.
escaped=$(printf '%s' "$base" | sed 's/[|&]/\\&/g')
sed "s|runbook_url: \"file:///usr/share/doc/leakwatch/runbooks.md#|runbook_url: \"$escaped#|" "$rules"
