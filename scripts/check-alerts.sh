#!/usr/bin/env bash
# check-alerts.sh checks the chart's PrometheusRule with promtool, for
# `make lint`: the rule file rendered from the chart with its defaults
# (tools/chart -prometheus-rules) passes `promtool check rules`, and its
# alerts fire as tools/alerts/testdata/rules_test.yaml says (`promtool test
# rules`, on the rules without their annotations, which the test would
# otherwise have to repeat word for word).
#
# Usage: scripts/check-alerts.sh PROMTOOL
set -euo pipefail

PROMTOOL=${1:?usage: check-alerts.sh PROMTOOL}
GO=${GO:-go}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/podwire-check-alerts.XXXXXX)
trap 'rm -rf "$work"' EXIT

"$GO" -C "$root/tools/chart" run . -root "$root" -prometheus-rules "$work/full.yaml"
"$PROMTOOL" check rules "$work/full.yaml"
"$GO" -C "$root/tools/chart" run . -root "$root" -prometheus-rules "$work/rules.yaml" -bare
cp "$root/tools/alerts/testdata/rules_test.yaml" "$work/"
"$PROMTOOL" test rules "$work/rules_test.yaml"
