"""Reading a run from a gradwatch server over its HTTP API (``/api/v1``).

Series come from ``/runs/{id}/series``, downsampled by the server when ``points`` is given;
non-finite floats arrive as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` and are
turned back into floats, so the values are exactly those recorded.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gradwatch.analysis.selection import (
    INCIDENT_KEYS,
    Selection,
    Series,
    vector,
)
from gradwatch.commands.findings import UsageError, public, server_findings
from gradwatch.core.client import Api, NotFoundError, RefusedError

EVERY_POINT = 1_000_000  # the server's largest ``points``: no downsampling below that
TENSORS_PER_REQUEST = 64  # keeps the query string short on models with many tensors
LIFECYCLE_PAGE = 2000  # the server's largest lifecycle window


def get_json(server: str, path: str, token: str | None, **query: Any) -> Any:
    """``GET {server}/api/v1{path}?query`` as decoded JSON (:class:`gradwatch.core.client.Api`);
    ``LookupError`` for 404, ``PermissionError`` for 401/403, naming the fix."""
    with _explained(server, path):
        return Api(server, token).get(path, **query)


def get_pages(server: str, path: str, token: str | None, page: int, **query: Any) -> list[Any]:
    """Every item of the paged list at ``path``, ``page`` at a time; errors as :func:`get_json`."""
    with _explained(server, path):
        return Api(server, token).pages(path, page, **query)


@contextmanager
def _explained(server: str, path: str) -> Iterator[None]:
    try:
        yield
    except NotFoundError as exc:
        raise LookupError(f"the server {server} has nothing at {path}: {exc.detail}") from exc
    except RefusedError as exc:
        raise PermissionError(
            f"the server {server} refused {path} (HTTP {exc.status}); pass token= with a "
            f"read token of the run's project: {exc.detail}"
        ) from exc


class ServerSource:
    """One run on a gradwatch server."""

    def __init__(self, server: str, run_id: str, token: str | None) -> None:
        self.server = server
        self.run_id = run_id
        self.token = token
        self.where = f"{server.rstrip('/')} (run {run_id})"
        self._path = f"/runs/{urllib.parse.quote(run_id, safe='')}"
        self._info: dict[str, Any] | None = None

    def info(self) -> dict[str, Any]:
        """The run detail: status, steps, start record, merged fingerprint, end record."""
        if self._info is None:
            try:
                detail = get_json(self.server, self._path, self.token)
            except LookupError as exc:
                raise LookupError(f"the server {self.server} has no run {self.run_id!r}") from exc
            self._info = detail  # start/end/fingerprint: NaN tags decoded by the client
        return self._info

    def series(self, sel: Selection) -> list[Series]:
        """The selected series (tensors asked for in groups of 64 names)."""
        out: list[Series] = []
        names = sel.tensors
        for i in range(0, len(names), TENSORS_PER_REQUEST):
            out += self._series(tensor=names[i : i + TENSORS_PER_REQUEST], stat=sel.stats, sel=sel)
        if sel.metrics or sel.scalars:
            out += self._series(metric=sel.metrics, scalar=sel.scalars, stat=[], sel=sel)
        return out

    def _series(self, sel: Selection, **names: list[str]) -> list[Series]:
        reply = get_json(
            self.server,
            f"{self._path}/series",
            self.token,
            optimizer=sel.optimizer,
            start=sel.start,
            end=sel.end,
            points=sel.points or EVERY_POINT,
            **names,
        )
        return [
            Series(
                s["name"], s["kind"], vector(s["steps"], "i8"), vector(s["values"]), s.get("stat")
            )
            for s in reply["data"]
        ]

    def scalar_names(self) -> list[str]:
        """Keys logged with ``run.log`` (``/runs/{id}/scalars``)."""
        return [str(k) for k in get_json(self.server, f"{self._path}/scalars", self.token)["data"]]

    def findings(self) -> list[dict[str, Any]]:
        """The run's findings, all pages, in their ``findings --json`` form."""
        try:
            found = server_findings(self.server, self.run_id, self.token)[self.run_id]
        except UsageError as exc:  # the CLI's "no such run"
            raise LookupError(str(exc)) from None
        # details arrive decoded (NaN tags included) by the findings command's reader
        return [public(f) | {k: f[k] for k in INCIDENT_KEYS if k in f} for f in found]

    def lifecycle(self, optimizer: int, start: int, end: int) -> list[dict[str, Any]]:
        """Lifecycle rows of ``[start, end]``, read in windows of 2000 steps."""
        out: list[dict[str, Any]] = []
        first = max(start, 0)
        while first <= end:
            last = min(end, first + LIFECYCLE_PAGE - 1)
            reply = get_json(
                self.server,
                f"{self._path}/lifecycle",
                self.token,
                optimizer=optimizer,
                start=first,
                end=last,
                limit=LIFECYCLE_PAGE,
            )
            out += reply["data"]
            first = last + 1
        return out
