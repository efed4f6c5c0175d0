"""A loopback HTTP fault proxy (asyncio, in a thread): latency, resets, 503 + Retry-After.

It sits between a collector and a server on 127.0.0.1 and applies, per request, one of
the faults Toxiproxy would (Toxiproxy itself cannot be installed here):

- ``latency`` ± ``jitter`` seconds before the request is forwarded;
- ``reset_before``: the connection is reset before the request reaches the server;
- ``reset_after``: the request is forwarded and stored, then the reply is lost (reset) --
  the case that makes a client resend what the server already has;
- ``unavailable``: the proxy answers ``503`` with ``Retry-After: retry_after`` itself.

The draw comes from a seeded RNG (after an optional fixed ``script`` for the first
requests, so that every fault surely happens at least once). Every request is logged
(time, run header, fault) so a test can check that the client honoured ``Retry-After``.
Plain HTTP/1.1 with ``Content-Length`` bodies, which is what the collector and uvicorn
speak.

Example::

    with FaultProxy(upstream_port=8765, seed=1, reset_before=0.1) as proxy:
        watch(..., server=proxy.url)
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType

FAULTS = ("reset_before", "reset_after", "unavailable")


@dataclass
class Logged:
    """One request the proxy saw."""

    t: float  # time.monotonic() when the request had fully arrived
    run: str
    fault: str  # "ok" or one of FAULTS
    status: int = 0  # what the client got (0: a reset)


@dataclass
class FaultProxy:
    """See the module docstring; use as a context manager."""

    upstream_port: int
    seed: int = 0
    latency: float = 0.0
    jitter: float = 0.0
    reset_before: float = 0.0
    reset_after: float = 0.0
    unavailable: float = 0.0
    retry_after: int = 1
    script: tuple[str, ...] = ()  # faults for the first requests, in order; then random
    log: list[Logged] = field(default_factory=list)
    port: int = 0

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        assert self._ready.wait(10), "the fault proxy did not start"
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._client, "127.0.0.1", 0)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        self._server.close()
        tasks = asyncio.all_tasks(self._loop)
        for task in tasks:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self._loop.close()

    def _draw(self) -> str:
        if len(self.log) < len(self.script):
            return self.script[len(self.log)]
        x = self._rng.random()
        for name in FAULTS:
            p: float = getattr(self, name)
            if x < p:
                return name
            x -= p
        return "ok"

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await _read_message(reader)
                if request is None:
                    break
                head, _ = request
                fault = self._draw()
                entry = Logged(time.monotonic(), _header(head, b"x-gradwatch-run"), fault)
                self.log.append(entry)
                if fault == "reset_before":
                    _reset(writer)
                    return
                if fault == "unavailable":
                    body = b'{"detail": "injected by the fault proxy"}'
                    writer.write(
                        b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                        + f"retry-after: {self.retry_after}\r\n".encode()
                        + f"content-length: {len(body)}\r\n\r\n".encode()
                        + body
                    )
                    await writer.drain()
                    entry.status = 503
                    continue
                delay = self.latency + self.jitter * (2 * self._rng.random() - 1)
                await asyncio.sleep(max(delay, 0.0))
                reply = await _forward(self.upstream_port, request)
                if reply is None or fault == "reset_after":
                    _reset(writer)
                    return
                entry.status = int(reply.split(b" ", 2)[1])
                writer.write(reply)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def _read_message(reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
    """(head, body) of one HTTP/1.1 message, or None at a clean end of stream."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if e.partial:
            raise
        return None
    length = _header(head, b"content-length")
    body = await reader.readexactly(int(length)) if length else b""
    return head, body


async def _forward(port: int, request: tuple[bytes, bytes]) -> bytes | None:
    """Send one request upstream on a fresh connection; the whole reply, or None."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return None
    try:
        writer.write(request[0] + request[1])
        await writer.drain()
        reply = await _read_message(reader)
        return None if reply is None else reply[0] + reply[1]
    except (ConnectionError, asyncio.IncompleteReadError):
        return None
    finally:
        writer.close()


def _header(head: bytes, name: bytes) -> str:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip().decode("latin-1")
    return ""


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0) rather than FIN: the client sees a connection reset."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
