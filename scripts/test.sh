#!/usr/bin/env bash
# `pnpm test`: typecheck, lint and dependency rules, then every package's tests. Installs nothing:
# a test that needs something missing (python3 with numpy) is skipped, naming the command that
# enables it, except under CI=true, where it fails (.ci/run installs what the tests need).
set -euo pipefail
cd "$(dirname "$0")/.."
# Colours only on a terminal (turbo, vitest and depcruise honour NO_COLOR); no turbo banners.
if [ ! -t 1 ] && [ -z "${FORCE_COLOR:-}" ]; then export NO_COLOR=1; fi
export TURBO_TELEMETRY_DISABLED=1 TURBO_NO_UPDATE_NOTIFIER=1 TURBO_PRINT_VERSION_DISABLED=1
turbo run typecheck lint --output-logs=errors-only
depcruise packages tests examples --config .dependency-cruiser.cjs
vitest run --reporter=default --reporter=./scripts/plain-summary-reporter.ts
