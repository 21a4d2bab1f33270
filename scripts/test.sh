#!/usr/bin/env bash
# `pnpm test`: typecheck, lint and dependency rules, then every package's tests. Installs nothing:
# a test that needs something missing (python3 with numpy) is skipped, naming the command that
# enables it, except under CI=true, where it fails (.ci/run installs what the tests need).
set -euo pipefail
cd "$(dirname "$0")/.."
# Colours only on a terminal (eslint, vitest and depcruise honour NO_COLOR).
if [ ! -t 1 ] && [ -z "${FORCE_COLOR:-}" ]; then export NO_COLOR=1; fi
# One tsc program and one eslint run over every package (the root tsconfig includes them all):
# a fraction of the CPU of a tsc and an eslint per package, each re-reading core's sources.
# They run beside the tests, at the lowest CPU priority (nice 19): they take the time the tests
# leave idle while they wait on timers and children, not the CPU of tests whose deadlines and
# leases run on a loaded machine (docs/architecture.md, "Build, test and packaging"). Their output
# is printed when they pass, or after the tests' when they fail.
checks_log=$(mktemp)
trap 'rm -f "$checks_log"' EXIT
checks() {
  nice -n 19 tsc -b &&
    nice -n 19 prettier --check . --log-level warn &&
    nice -n 19 eslint packages tests examples scripts *.ts *.js &&
    nice -n 19 depcruise packages tests examples --config .dependency-cruiser.cjs
}
{ checks >"$checks_log" 2>&1 && cat "$checks_log"; } &
checks=$!
tests=0
vitest run --reporter=default --reporter=./scripts/plain-summary-reporter.ts || tests=$?
if ! wait "$checks"; then
  cat "$checks_log"
  echo "typecheck, format, lint or dependency rules failed" >&2
  exit 1
fi
exit "$tests"
