"""Imports runs from the local data directory's spools, so nothing needs doing by hand.

On start and every ``interval`` seconds the server reads ``<data dir>/runs/*/spool-*.gws``
from its own per-run cursor (table ``spool_imports``; never the collector's ``acked``
file) and stores what is new through the same ``ingest_frames`` as HTTP, in the same
transaction as the cursor. Frames the collector also sent over HTTP are deduplicated like
any replay. A frame that fails validation is skipped (and reported once), not retried.

Example::

    importer = SpoolImporter(engine, data_dir, interval=2.0)
    importer.start(); ...; importer.stop()
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.engine import Engine
from sqlmodel import Session, col

from gradwatch.core import paths
from gradwatch.core.contract import DEFAULT_PROJECT
from gradwatch.core.spool import SpoolCursor, list_segments, read_batch, segment_path
from gradwatch.core.wire import Frame
from gradwatch_server.db import write_session
from gradwatch_server.exceptions import RequestError
from gradwatch_server.ingest.frame_rows import FrameRows
from gradwatch_server.ingest.frame_store import (
    check_run_id,
    ingest_frames,
    parse_frames,
    start_project,
    stored_project,
)
from gradwatch_server.models import Run, SpoolImport
from gradwatch_server.store import insert_ignore

log = logging.getLogger("gradwatch_server")
BATCH_BYTES = 4 << 20
RECHECK_ENDED = 8  # ended runs whose spool a pass looks at again, in turn


def _parse_tolerant(run_id: str, frames: list[Frame]) -> list[FrameRows]:
    try:
        return parse_frames(run_id, frames)
    except RequestError:
        good = []
        for frame in frames:
            try:
                good += parse_frames(run_id, [frame])
            except RequestError as e:
                log.warning("spool import: run %s: skipping a frame: %s", run_id, e.message)
        return good


def _cursor(session: Session, run_id: str) -> SpoolCursor:
    row = session.get(SpoolImport, run_id)
    return SpoolCursor() if row is None else SpoolCursor(row.segment, row.offset)


def _save_cursor(session: Session, run_id: str, cursor: SpoolCursor) -> None:
    row = {"run_id": run_id, "segment": cursor.segment, "offset": cursor.offset}
    insert_ignore(session, SpoolImport, [row])
    session.execute(
        update(SpoolImport)
        .where(col(SpoolImport.run_id) == run_id)
        .values(segment=cursor.segment, offset=cursor.offset)
    )


def import_run(engine: Engine, run_dir: Path) -> int:
    """Import what is new in one run folder; returns the number of frames read."""
    run_id = check_run_id(run_dir.name)
    with Session(engine) as session:
        cursor = _cursor(session, run_id)
    total = 0
    while True:
        batch = read_batch(run_dir, cursor, max_bytes=BATCH_BYTES)
        if batch.cursor == cursor and not batch.frames:
            return total
        parsed = _parse_tolerant(run_id, batch.frames)
        with write_session(engine) as session:
            if parsed:
                project = start_project(parsed) or stored_project(session, run_id)
                ingest_frames(session, run_id, parsed, project or DEFAULT_PROJECT)
            _save_cursor(session, run_id, batch.cursor)
        total += len(batch.frames)
        cursor = batch.cursor
        if not batch.limited:
            return total


class SpoolImporter:
    """Runs ``import_all`` on a daemon thread every ``interval`` seconds until ``stop``."""

    def __init__(self, engine: Engine, data_dir: Path, interval: float) -> None:
        self.engine = engine
        self.data_dir = data_dir
        self.interval = interval
        self._stop = threading.Event()
        self._seen: dict[str, tuple[tuple[int, int, int], ...]] = {}
        self._listing: tuple[int, list[Path]] = (-1, [])  # runs/ mtime and its folders
        self._ended: list[str] = []  # runs whose END was imported: re-checked a few a pass
        self._recheck = 0
        self.last_checked = 0  # run folders whose spool was looked at in the last pass
        self._thread = threading.Thread(target=self._loop, name="gradwatch-import", daemon=True)

    def start(self) -> None:
        """Import once now (in the background) and then periodically."""
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the current pass."""
        self._stop.set()
        self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.import_all()
            self._stop.wait(self.interval)

    def import_all(self) -> int:
        """One pass over every run folder whose spool changed; never raises.

        The cost of a pass does not grow with the finished runs: the folder listing is
        re-read only when ``runs/`` changed (a new run), and a run whose END record was
        imported is not looked at again, except ``RECHECK_ENDED`` of them per pass in
        turn (frames appended after an END are still imported, later).
        """
        total = 0
        root = paths.runs_dir(self.data_dir)
        try:
            mtime = root.stat().st_mtime_ns
            if mtime != self._listing[0]:
                self._listing = (mtime, sorted(p for p in root.iterdir() if p.is_dir()))
        except OSError:
            return 0
        ended = set(self._ended)
        live = [p for p in self._listing[1] if p.name not in ended]
        start = self._recheck % len(self._ended) if self._ended else 0
        again = (self._ended[start:] + self._ended[:start])[:RECHECK_ENDED]
        self._recheck = start + len(again)
        self.last_checked = 0
        for run_dir in live + [root / name for name in again]:
            if self._stop.is_set():
                break
            self.last_checked += 1
            signature = _signature(run_dir)
            if not signature or self._seen.get(run_dir.name) == signature:
                continue
            try:
                total += import_run(self.engine, run_dir)
                self._seen[run_dir.name] = signature
            except Exception as e:  # one bad folder or a database hiccup must not stop the loop
                log.warning("spool import: run folder %s: %s: %s", run_dir, type(e).__name__, e)
                continue
            if run_dir.name not in ended and _has_ended(self.engine, run_dir.name):
                self._ended.append(run_dir.name)
        return total


def _has_ended(engine: Engine, run_id: str) -> bool:
    """Whether the stored run has its END record."""
    with Session(engine) as session:
        return (
            session.execute(select(col(Run.end_status)).where(col(Run.id) == run_id)).scalar()
            is not None
        )


def _signature(run_dir: Path) -> tuple[tuple[int, int, int], ...]:
    """(segment, size, mtime) of each segment: unchanged means nothing new to read."""
    out = []
    for index in list_segments(run_dir):
        try:
            info = segment_path(run_dir, index).stat()
        except OSError:
            continue
        out.append((index, info.st_size, info.st_mtime_ns))
    return tuple(out)
