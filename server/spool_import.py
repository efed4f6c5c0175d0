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

from sqlalchemy import update
from sqlalchemy.engine import Engine
from sqlmodel import Session, col

from gradwatch import paths
from gradwatch.server.db import write_session
from gradwatch.server.errors import RequestError
from gradwatch.server.ingest import (
    DEFAULT_PROJECT,
    check_run_id,
    ingest_frames,
    insert_ignore,
    parse_frames,
    start_project,
    stored_project,
)
from gradwatch.server.models import SpoolImport
from gradwatch.server.records import FrameRows
from gradwatch.transport.spool import SpoolCursor, list_segments, read_batch, segment_path
from gradwatch.wire import Frame

log = logging.getLogger("gradwatch.server")
BATCH_BYTES = 4 << 20


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
        """One pass over every run folder whose spool changed; never raises."""
        total = 0
        root = paths.runs_dir(self.data_dir)
        try:
            run_dirs = sorted(p for p in root.iterdir() if p.is_dir())
        except OSError:
            return 0
        for run_dir in run_dirs:
            if self._stop.is_set():
                break
            signature = _signature(run_dir)
            if not signature or self._seen.get(run_dir.name) == signature:
                continue
            try:
                total += import_run(self.engine, run_dir)
                self._seen[run_dir.name] = signature
            except Exception as e:  # one bad folder or a database hiccup must not stop the loop
                log.warning("spool import: run folder %s: %s: %s", run_dir, type(e).__name__, e)
        return total


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
