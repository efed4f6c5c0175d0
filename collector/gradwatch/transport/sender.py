"""Shipping spooled frames to a gradwatch server over HTTP (standard library only).

Ingest protocol (the server implements exactly this)::

    POST {server}/api/v1/ingest
    Content-Type: application/vnd.gradwatch.frames
    X-Gradwatch-Run: <run id>            (the run folder's name)
    X-Gradwatch-Schema: 1
    Authorization: Bearer <token>        (optional)
    body: concatenated frames, byte for byte as in the spool (see gradwatch.core.wire)

    200 {"run": "<run id>", "accepted": n, "duplicates": m}

The server deduplicates by (run, seq), so a replayed batch is harmless. The client retries
connection errors, timeouts, 408, 429 and 5xx with capped exponential backoff and jitter,
honouring ``Retry-After`` (seconds or an HTTP date). Any other status is a permanent
rejection: that run stops sending and the error text is kept (``sync`` shows it). After a
2xx the run's ``acked`` file advances to the batch's last seq. Frames are always read back
from the spool files, never kept in memory, so a long outage costs disk, not RAM.

Example::

    for result in sync_all(data_dir(), "http://127.0.0.1:8765"):
        print(result.run, result.sent, result.error)
"""

from __future__ import annotations

import contextlib
import email.utils
import http.client
import json
import math
import os
import random
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from gradwatch._version import __version__
from gradwatch.core.errors import ConfigError
from gradwatch.core.paths import runs_dir
from gradwatch.core.spool import (
    SpoolCursor,
    list_segments,
    read_acked,
    read_batch,
    write_acked,
)
from gradwatch.core.wire import FRAME_CONTENT_TYPE, SCHEMA_VERSION

INGEST_PATH = "/api/v1/ingest"
MAX_BATCH_BYTES = 1 << 20
MAX_BATCH_FRAMES = 2000
MAX_RESPONSE_BYTES = 4 << 20
BACKOFF_BASE = 0.5
BACKOFF_CAP = 30.0
RETRY_AFTER_CAP = 300.0
RETRYABLE = frozenset({408, 429})
TOKEN_ENV = "GRADWATCH_TOKEN"


class Headers(Mapping[str, str]):
    """Response headers with case-insensitive lookup."""

    def __init__(self, items: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        pairs = items.items() if isinstance(items, Mapping) else items
        self._items = {k.lower(): v for k, v in pairs}

    def __getitem__(self, key: str) -> str:
        return self._items[key.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


@dataclass(frozen=True)
class Response:
    """What a transport returns for one request."""

    status: int
    headers: Headers = field(default_factory=Headers)
    body: bytes = b""


class Transport(Protocol):
    """Anything that can POST bytes; raise OSError (or any error) when it cannot connect."""

    def post(self, path: str, body: bytes, headers: dict[str, str], timeout: float) -> Response:
        """Send one request and return the response."""
        ...


class HTTPTransport:
    """A keep-alive ``http.client`` connection to one server (http or https).

    Example: ``HTTPTransport("http://127.0.0.1:8765").post("/api/v1/ingest", body, {}, 10)``.
    """

    def __init__(self, base_url: str) -> None:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(
                f"server URL must look like http://host:port, got {base_url!r}; "
                "set --server or GRADWATCH_SERVER accordingly"
            )
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            self._conn = cls(self._host, self._port, timeout=timeout)
        self._conn.timeout = timeout
        if self._conn.sock is not None:
            self._conn.sock.settimeout(timeout)
        return self._conn

    def post(self, path: str, body: bytes, headers: dict[str, str], timeout: float) -> Response:
        """POST ``body``; the connection is dropped and recreated after any error.

        A kept-alive connection that the server closed meanwhile (e.g. it restarted) fails
        on first use; that one case is retried at once on a fresh connection (ingest is
        idempotent, so a resend is harmless). Timeouts are never retried here.
        """
        reused = self._conn is not None and self._conn.sock is not None
        try:
            return self._post(path, body, headers, timeout)
        except ConnectionError:
            if not reused:
                raise
        return self._post(path, body, headers, timeout)

    def _post(self, path: str, body: bytes, headers: dict[str, str], timeout: float) -> Response:
        conn = self._connection(timeout)
        try:
            conn.request("POST", self._prefix + path, body=body, headers=headers)
            reply = conn.getresponse()
            data = reply.read(MAX_RESPONSE_BYTES)
            if reply.will_close or not reply.isclosed():
                self.close()  # server closes, or an oversized reply we did not drain
        except BaseException:
            self.close()
            raise
        return Response(reply.status, Headers(reply.getheaders()), data)

    def close(self) -> None:
        """Close the connection (the next post reconnects)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


# --- one run's sending state ----------------------------------------------------------


@dataclass
class SyncResult:
    """What sending one run achieved; ``complete`` is True when nothing is left to send."""

    run: str
    already_acked: int = 0
    sent: int = 0
    accepted: int = 0
    duplicates: int = 0
    acked_seq: int = 0
    requests: int = 0
    failures: int = 0
    torn_tail_bytes: int = 0
    corrupt_frames: int = 0
    complete: bool = False
    rejected: bool = False
    error: str | None = None


@dataclass(frozen=True)
class Outcome:
    """The result of one ``RunSender.step``: what happened and how long to wait."""

    status: Literal["idle", "sent", "retry", "rejected"]
    frames: int = 0
    delay: float = 0.0
    more: bool = False  # the batch hit a size limit: more is probably waiting
    retry_after: bool = False  # ``delay`` is the server's Retry-After, not our backoff


def backoff_delay(attempt: int, rng: random.Random) -> float:
    """Capped exponential backoff with jitter: ~0.5 s, 1 s, 2 s, ... up to 30 s."""
    base = min(BACKOFF_CAP, BACKOFF_BASE * 2.0 ** max(attempt - 1, 0))
    return min(BACKOFF_CAP, base * (0.75 + 0.5 * rng.random()))


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta seconds or HTTP date)."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), RETRY_AFTER_CAP)


class RunSender:
    """Sends one run's unacknowledged frames, one batch per ``step``, reading the spool."""

    def __init__(
        self,
        run_dir: Path,
        transport: Transport,
        *,
        token: str | None = None,
        max_bytes: int = MAX_BATCH_BYTES,
        max_frames: int = MAX_BATCH_FRAMES,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.transport = transport
        self.max_bytes = max_bytes
        self.max_frames = max_frames
        acked = read_acked(self.run_dir)
        self.result = SyncResult(self.run_dir.name, already_acked=acked, acked_seq=acked)
        self._cursor = SpoolCursor()
        self._attempt = 0
        self._rng = random.Random(int.from_bytes(os.urandom(8), "little"))
        self._headers = {
            "Content-Type": FRAME_CONTENT_TYPE,
            "X-Gradwatch-Run": self.run_dir.name,
            "X-Gradwatch-Schema": str(SCHEMA_VERSION),
            "User-Agent": f"gradwatch/{__version__}",
        }
        if token:
            self._headers["Authorization"] = f"Bearer {token}"

    def step(self, timeout: float = 10.0) -> Outcome:
        """Read the next batch after the acked seq and post it once."""
        if self.result.rejected:
            return Outcome("rejected")
        batch = read_batch(
            self.run_dir,
            self._cursor,
            after_seq=self.result.acked_seq,
            max_bytes=self.max_bytes,
            max_frames=self.max_frames,
        )
        self.result.torn_tail_bytes = batch.torn_tail_bytes
        self.result.corrupt_frames = max(self.result.corrupt_frames, batch.corrupt_frames)
        if not batch.frames:
            self._cursor = batch.cursor
            self.result.complete = True
            return Outcome("idle")
        self.result.complete = False
        self.result.requests += 1
        body = b"".join(frame.raw for frame in batch.frames)
        try:
            response = self.transport.post(INGEST_PATH, body, dict(self._headers), timeout)
        except Exception as e:  # a transport failure of any kind is retried, never raised
            return self._retry(f"cannot reach the server: {type(e).__name__}: {e}", None)
        if 200 <= response.status < 300:
            self._cursor = batch.cursor
            return self._acknowledge(batch.last_seq, len(batch.frames), batch.limited, response)
        text = f"HTTP {response.status}: {response.body[:300].decode('utf-8', 'replace')}"
        if response.status in RETRYABLE or response.status >= 500:
            return self._retry(text, parse_retry_after(response.headers.get("Retry-After")))
        self.result.rejected = True
        self.result.error = f"server rejected run {self.result.run}: {text}"
        return Outcome("rejected")

    def _acknowledge(self, last_seq: int, frames: int, more: bool, response: Response) -> Outcome:
        self._attempt = 0
        self.result.sent += frames
        self.result.error = None
        self.result.acked_seq = max(self.result.acked_seq, last_seq)
        accepted, duplicates = _counts(response.body, frames)
        self.result.accepted += accepted
        self.result.duplicates += duplicates
        # On a disk error the in-memory ack still moves on; a later sync resends, harmlessly.
        with contextlib.suppress(OSError):
            write_acked(self.run_dir, self.result.acked_seq)
        return Outcome("sent", frames=frames, more=more)

    def _retry(self, error: str, retry_after: float | None) -> Outcome:
        self._attempt += 1
        self.result.failures += 1
        self.result.error = error
        delay = backoff_delay(self._attempt, self._rng)
        if retry_after is not None:
            delay = retry_after + 0.1 * self._rng.random()
        return Outcome("retry", delay=delay, retry_after=retry_after is not None)


def _counts(body: bytes, frames: int) -> tuple[int, int]:
    """(accepted, duplicates) from a 2xx reply, tolerating a reply that lacks them."""
    try:
        reply = json.loads(body)
        return int(reply["accepted"]), int(reply["duplicates"])
    except (ValueError, TypeError, KeyError):
        return frames, 0


# --- sync -----------------------------------------------------------------------------

Progress = Callable[[SyncResult], None]


def send_run(
    run_dir: Path,
    transport: Transport,
    *,
    token: str | None = None,
    deadline: float | None = None,
    progress: Progress | None = None,
    max_attempts: int = 4,
) -> SyncResult:
    """Send everything after the run's acked seq; stop when done, rejected or out of time.

    ``deadline`` is a ``time.monotonic()`` value; without one, a run gives up after
    ``max_attempts`` consecutive failed requests. ``progress`` is called after each batch.
    """
    sender = RunSender(run_dir, transport, token=token)
    failures = 0
    while True:
        left = math.inf if deadline is None else deadline - time.monotonic()
        if left <= 0:
            break
        outcome = sender.step(timeout=min(30.0, left))
        if outcome.status in ("idle", "rejected"):
            break
        if outcome.status == "sent":
            failures = 0
        else:
            failures += 1
            left = math.inf if deadline is None else deadline - time.monotonic()
            if (deadline is None and failures >= max_attempts) or outcome.delay >= left:
                break
            time.sleep(outcome.delay)
        if progress is not None:
            progress(sender.result)
    if progress is not None:
        progress(sender.result)
    return sender.result


def sync_all(
    data_dir: Path,
    server: str,
    *,
    token: str | None = None,
    progress: Progress | None = None,
    transport: Transport | None = None,
    max_attempts: int = 4,
) -> list[SyncResult]:
    """Send every run under ``data_dir/runs`` (sorted by run id); prints nothing.

    ``token`` defaults to ``$GRADWATCH_TOKEN``. The CLI passes a ``progress`` callback to
    show e.g. "run X: sent N frames (M already acknowledged)". Each run gets
    ``max_attempts`` consecutive failed requests (about 3.5 s of backoff at the default);
    once a run could send nothing, the remaining runs get one attempt each.
    """
    if token is None:
        token = os.environ.get(TOKEN_ENV) or None
    owned = transport is None
    client: Transport = HTTPTransport(server) if transport is None else transport
    results: list[SyncResult] = []
    try:
        for run_dir in _run_dirs(Path(data_dir)):
            result = send_run(
                run_dir, client, token=token, progress=progress, max_attempts=max_attempts
            )
            results.append(result)
            if result.failures and result.sent == 0 and not result.complete:
                max_attempts = 1  # the server looks unreachable: fail the others fast
    finally:
        if owned and isinstance(client, HTTPTransport):
            client.close()
    return results


def _run_dirs(data_dir: Path) -> list[Path]:
    root = runs_dir(data_dir)
    try:
        children = sorted(p for p in root.iterdir() if p.is_dir())
    except OSError:
        return []
    return [p for p in children if list_segments(p)]
