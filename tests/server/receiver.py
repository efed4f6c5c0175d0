"""A real HTTP webhook receiver on 127.0.0.1 (random port) that records what it gets.

Paths choose the answer: ``/flaky`` answers 500 to the first request and 200 after,
``/down`` always 503, anything else 200. With ``check``, a request that ``check(headers,
body)`` refuses is answered 401 (a receiver that verifies signatures).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    """One request: path, headers, raw body and the status it was answered with."""

    path: str
    headers: dict[str, str]
    body: bytes
    status: int

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body)


@dataclass
class Receiver:
    """The running receiver: its base URL and every request so far."""

    url: str
    requests: list[Received] = field(default_factory=list)

    def to(self, path: str) -> list[Received]:
        """The requests to one path."""
        return [r for r in self.requests if r.path == path]


@contextmanager
def receiver(check: Callable[[dict[str, str], bytes], bool] | None = None) -> Iterator[Receiver]:
    """Serve until the block ends."""
    seen: list[Received] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with lock:
                earlier = sum(1 for r in seen if r.path == self.path)
                status = {"/flaky": 500 if earlier == 0 else 200, "/down": 503}.get(self.path, 200)
                if check is not None and not check(dict(self.headers.items()), body):
                    status = 401
                seen.append(Received(self.path, dict(self.headers.items()), body, status))
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="test-receiver", daemon=True)
    thread.start()
    try:
        yield Receiver(f"http://127.0.0.1:{server.server_address[1]}", seen)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
