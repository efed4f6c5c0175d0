"""Stored data that cannot be read: noted, skipped, and reported in the reply.

Ingest validates everything it stores, but a database may hold rows written by an older
server (or edited by hand). A reader that meets such a row skips it and calls ``note``;
the route wraps its work in ``collecting()`` and returns the notes as ``problems``, so a
damaged run shows what can be read and says what is broken instead of answering 500.

Example::

    with collecting() as problems:
        data = select_series(...)
    return {"data": data, "problems": problems}
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

log = logging.getLogger("gradwatch_server")
MAX_NOTES = 20  # per reply: the first few say enough
_notes: ContextVar[list[str] | None] = ContextVar("gradwatch_problems", default=None)


def note(problem: str) -> None:
    """Record one unreadable piece of stored data (logged once per reply)."""
    found = _notes.get()
    if found is None:  # a background pass: it logs its own failures
        log.debug("unreadable stored data: %s", problem)
        return
    if problem in found or len(found) >= MAX_NOTES:
        return
    log.warning("unreadable stored data: %s", problem)
    found.append(problem)


@contextmanager
def collecting() -> Iterator[list[str]]:
    """The notes made inside the block (a fresh list per block)."""
    found: list[str] = []
    token = _notes.set(found)
    try:
        yield found
    finally:
        _notes.reset(token)
