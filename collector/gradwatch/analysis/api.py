"""``gradwatch.open_run`` and ``gradwatch.runs``: runs as pandas DataFrames."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradwatch.analysis._deps import require
from gradwatch.analysis.frames import runs_frame
from gradwatch.analysis.rundata import RunData

if TYPE_CHECKING:
    from pandas import DataFrame

FILTERS = ("status", "tag", "config_hash", "group", "ddp_group")
PAGE = 1000  # the server's largest page of runs


def _server(server: str | None, token: str | None) -> tuple[str | None, str | None]:
    """The server and token to read from: the arguments, else ``$GRADWATCH_SERVER`` and
    ``$GRADWATCH_TOKEN`` (as ``gradwatch runs`` and ``findings`` do)."""
    return server or os.environ.get("GRADWATCH_SERVER") or None, token or os.environ.get(
        "GRADWATCH_TOKEN"
    )


def open_run(
    run: str | os.PathLike[str] | Any | None = None,
    *,
    server: str | None = None,
    token: str | None = None,
    data_dir: str | os.PathLike[str] | None = None,
) -> RunData:
    """A run's data: ``run`` is a run id, a run folder or a live :class:`gradwatch.Run`
    (None: the latest run). Read from ``server`` over HTTP when given (or
    ``$GRADWATCH_SERVER``), else from the local data directory. ``LookupError`` when there
    is no such run; ``ImportError`` naming the extra when pandas is missing."""
    require("pandas")
    server, token = _server(server, token)
    if run is not None and hasattr(run, "dir") and hasattr(run, "id"):
        run = Path(run.dir) if server is None else str(run.id)
    if server is not None:
        from gradwatch.analysis.remote import ServerSource, get_json

        run_id = str(run) if run is not None else _newest(server, token, get_json)
        return RunData(ServerSource(server, run_id, token))
    from gradwatch.analysis.local import LocalSource
    from gradwatch.commands.findings import UsageError, local_run_dir

    try:
        run_dir = local_run_dir(None if run is None else str(run), _text(data_dir))
    except UsageError as exc:
        raise LookupError(str(exc)) from None
    return RunData(LocalSource(run_dir))


def _text(path: str | os.PathLike[str] | None) -> str | None:
    return None if path is None else os.fspath(path)


def _newest(server: str, token: str | None, get_json: Any) -> str:
    newest = get_json(server, "/runs", token, limit=1)["data"]
    if not newest:
        raise LookupError(f"the server {server} has no runs yet")
    return str(newest[0]["id"])


def runs(
    project: str | None = None,
    *,
    server: str | None = None,
    token: str | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    **filters: str,
) -> DataFrame:
    """The run list, newest first, with the ``gradwatch runs --json`` fields (plus
    ``errors`` and ``warnings``). ``filters``: ``status``, ``tag``, ``config_hash``,
    ``group`` (replicates) and ``ddp_group`` (every rank of a DDP job)."""
    require("pandas")
    unknown = sorted(set(filters) - set(FILTERS))
    if unknown:
        raise TypeError(f"runs() got unknown filter(s) {unknown}; known: {list(FILTERS)}")
    server, token = _server(server, token)
    if server is not None:
        return runs_frame(_server_runs(server, project, token, filters))
    return runs_frame([r for r in _local_runs(project, data_dir) if _matches(r, filters)])


def _server_runs(
    server: str, project: str | None, token: str | None, filters: dict[str, str]
) -> list[dict[str, Any]]:
    from gradwatch.analysis.remote import get_pages

    return get_pages(server, "/runs", token, PAGE, project=project, **filters)


def _local_runs(project: str | None, data_dir: str | os.PathLike[str] | None) -> list[Any]:
    """Runs of the data directory, summarised by the server's code into a local database
    (as ``gradwatch runs`` without ``--server`` does)."""
    try:
        from gradwatch_server.cli_actions import Settings, local_runs
    except ImportError as exc:
        raise ImportError(
            f"listing local runs needs the server package ({exc}); "
            "pip install 'gradwatch[server]', or pass server=URL"
        ) from exc
    return local_runs(Settings.from_env(data_dir=_text(data_dir)), project)


def _matches(run: dict[str, Any], filters: dict[str, str]) -> bool:
    """The server's filters, applied to a locally listed run."""
    for key, wanted in filters.items():
        if key == "tag" and wanted not in run.get("tags", []):
            return False
        if key != "tag" and run.get(key) != wanted:
            return False
    return True
