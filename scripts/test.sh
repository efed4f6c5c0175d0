#!/usr/bin/env bash
# The README's test command (`make test` runs it after installing .venv): sets up what the
# suite needs (a C compiler, Chromium and its driver, PostgreSQL; see setup_test_env.sh),
# then lint, type-check and the whole test suite. Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/setup_test_env.sh
source scripts/setup_test_env.sh
trap gw_cleanup EXIT
gw_setup_test_env || exit 1
make lint typecheck
# Two workers (GW_TEST_WORKERS to change; 0 runs in this process), each test file kept on
# one worker so its module fixtures are built once.
.venv/bin/python -m pytest -n "${GW_TEST_WORKERS:-2}" --dist loadfile "$@"
