#!/usr/bin/env bash
# mypy --strict over the installed package layout. The source folders are mapped
# (collector/ -> gradwatch, server/ -> gradwatch.server, dashboard/ -> gradwatch.dashboard),
# so mypy gets a link tree with the import names, rebuilt on every run.
set -euo pipefail
cd "$(dirname "$0")/.."
MYPY=${MYPY:-.venv/bin/mypy}
tree=build/typecheck
rm -rf "$tree" && mkdir -p "$tree/gradwatch"
for f in collector/*; do
  case "$f" in *__pycache__*) continue ;; esac
  ln -s "../../../$f" "$tree/gradwatch/"
done
ln -s ../../../server "$tree/gradwatch/server"
ln -s ../../../dashboard "$tree/gradwatch/dashboard"
cd "$tree"
exec "../../$MYPY" --config-file ../../pyproject.toml -p gradwatch "$@"
