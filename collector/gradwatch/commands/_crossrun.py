"""Findings of the server's cross-run checks (``repro-drift``, ``seed-envelope``) for a run
read from the local data directory.

The training process never sees them: a server that watched the run (``gradwatch demo``,
``gradwatch serve`` on the data directory) stores them in its database. When that database
is the data directory's default SQLite file, ``gradwatch findings`` reads them from there,
so the local record and the dashboard agree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gradwatch.core import paths


def cross_run_findings(run_dir: Path) -> list[dict[str, Any]]:
    """The server-made findings of the run in ``run_dir`` (a ``<data dir>/runs/<id>``
    folder) from the data directory's SQLite database; none without one, or without the
    server package."""
    if run_dir.parent.name != paths.RUNS:
        return []
    try:
        from gradwatch_server.cli_actions import DB_FILE, default_db_url, server_findings
    except ImportError:
        return []
    root = run_dir.parent.parent
    if not (root / DB_FILE).is_file():
        return []
    return server_findings(default_db_url(root), run_dir.name)
