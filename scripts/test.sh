#!/usr/bin/env bash
# Same as `make test`: lint, type-check and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
exec make test
