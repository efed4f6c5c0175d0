#!/usr/bin/env bash
# mypy --strict over the three packages. Each top folder holds packages whose import names are
# their paths below it (collector/gradwatch, server/gradwatch_server,
# dashboard/gradwatch_dashboard), so mypy reads the sources in place.
set -euo pipefail
cd "$(dirname "$0")/.."
MYPY=${MYPY:-.venv/bin/mypy}
export MYPYPATH=collector:server:dashboard
exec "$MYPY" --config-file pyproject.toml -p gradwatch -p gradwatch_server -p gradwatch_dashboard "$@"
