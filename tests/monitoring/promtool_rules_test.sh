#!/usr/bin/env bash
# The shipped alert rules pass `promtool check rules` (syntax, templates, lint: no duplicate
# rule) and their unit tests, `promtool test rules` (contrib/prometheus/outbox-alerts.test.yml).
#   promtool_rules_test.sh PROMTOOL|"" RULES TESTS
# Without promtool (Debian's prometheus package): 77 (SKIP), 1 under OUTBOX_REQUIRE_SERVICES=1.
set -euo pipefail
promtool=$1 rules=$2 tests=$3
if [[ -z $promtool ]]; then
    if [[ ${OUTBOX_REQUIRE_SERVICES:-} == 1 ]]; then echo "promtool is not installed: FAIL" >&2; exit 1; fi
    echo "promtool is not installed (Debian: prometheus): SKIP" >&2
    exit 77
fi
"$promtool" --version 2>&1 | head -n 1
"$promtool" check rules "$rules"
# The test file names its rule files relative to itself.
cd "$(dirname "$tests")"
"$promtool" test rules "$(basename "$tests")"
