"""The ingest prepare helper: decoding and validating request bodies in a child process.

A busy server spends about a third of an ingest request's CPU decoding and validating
its frames (``prepare_body``: the frame scan and CRCs, record decoding, the checks, the
rows and blobs). On the server's own thread that work holds the server process's one
GIL, which the event loop and the writer need too: under a few hundred live runs the
GIL, not the cores, was what every request waited for. ``PrepareHelper`` runs the same
``prepare_body`` in a child process (``python -m gradwatch_server.ingest.prepare_helper``) and
hands back its rows, so that work runs on the other core.

Nothing changes in what is stored or answered: the child runs the very function the
thread would, a refused body comes back as the same ``RequestError`` (status and
message), and anything else (an unexpected exception, a child that died or is not ready
yet) makes the caller prepare the job on its own thread as before (``HelperUnavailableError``),
which raises the same exception it always did. The child keeps nothing between requests
and touches no database or file; it exits when its stdin closes (the server stopped, or
died: SIGKILL included), and on Linux also when the server process dies.

Protocol (pipes, native lengths): request ``<I run-id length><Q body length>`` + run id +
body; reply ``<B status><Q length>`` + payload (0: a pickle of the rows; 1: a pickle of
``(status, message)``; 2: the text of an unexpected error). The child writes one byte
``R`` once its imports are done.

Example::

    helper = PrepareHelper.start()
    rows = helper.prepare("run-1", body)  # or RequestError, or HelperUnavailableError
    helper.stop()
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
from typing import Any

_REQUEST = struct.Struct("<IQ")
_REPLY = struct.Struct("<BQ")
_OK, _REFUSED, _FAILED = 0, 1, 2
_READY = b"R"
#: bytes a pipe holds before its writer waits (Linux, up to /proc/sys/fs/pipe-max-size)
PIPE_BYTES = 1 << 20


class HelperUnavailableError(Exception):
    """The helper could not prepare this job (not ready, died, or failed unexpectedly):
    prepare it on the caller's thread."""


def prepare_body(run_id: str, body: bytes) -> Any:
    """Decode and validate one ingest body: its rows (``list[FrameRows]``), or
    ``RequestError`` (400 for damaged frames, 422 for bad records)."""
    from gradwatch_server.ingest.frame_store import decode_body, parse_frames

    return parse_frames(run_id, decode_body(body))


class PrepareHelper:
    """One child process and its two pipes; used by one thread at a time."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        assert proc.stdin is not None and proc.stdout is not None
        self._to = proc.stdin.fileno()
        self._from = proc.stdout
        self.ready = False
        self.dead = False
        self.prepared = 0
        self._starting = threading.Lock()  # is_ready from the server's start and a thread

    @classmethod
    def start(cls) -> PrepareHelper:
        """Start the child (returns at once; ``prepare`` is unavailable until it is
        ready). Raises OSError when no process can be started."""
        proc = subprocess.Popen(
            [sys.executable, "-m", "gradwatch_server.ingest.prepare_helper"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            close_fds=True,
        )
        helper = cls(proc)
        for fd in (helper._to, helper._from.fileno()):
            _widen(fd)
        return helper

    def is_ready(self) -> bool:
        """Whether the child has finished starting (never blocks)."""
        if self.ready or self.dead:
            return self.ready
        with self._starting:
            self._poll_ready()
        return self.ready

    def _poll_ready(self) -> None:
        """Read the child's ready byte if it came (another thread may have read it)."""
        if self.ready or self.dead:
            return
        readable, _, _ = select.select([self._from], [], [], 0)
        if readable:
            if self._from.read(1) == _READY:
                self.ready = True
            else:
                self._died()
        elif self.proc.poll() is not None:
            self._died()

    def prepare(self, run_id: str, body: bytes) -> Any:
        """``prepare_body(run_id, body)`` in the child: its rows, or the same
        ``RequestError``; ``HelperUnavailableError`` for anything else."""
        if not self.is_ready():
            raise HelperUnavailableError("the prepare helper is not ready")
        try:
            self.send(run_id, body)
            status, payload = self.receive()
        except (OSError, EOFError, ValueError) as e:
            self._died()
            raise HelperUnavailableError(f"the prepare helper stopped ({e})") from e
        return self.decode(status, payload)

    def send(self, run_id: str, body: bytes) -> None:
        """Queue one body to the child (its reply comes in order, ``receive``); OSError
        when the child is gone. Blocks while the pipe is full."""
        name = run_id.encode("utf-8")
        _write(self._to, _REQUEST.pack(len(name), len(body)) + name)
        _write(self._to, body)

    def receive(self) -> tuple[int, bytes]:
        """The next reply, (status, payload); EOFError/OSError when the child ended."""
        status, length = _REPLY.unpack(_read(self._from, _REPLY.size))
        return status, _read(self._from, length)

    def decode(self, status: int, payload: bytes) -> Any:
        """A reply as the rows, the ``RequestError``, or ``HelperUnavailableError``."""
        from gradwatch_server.exceptions import RequestError

        self.prepared += 1
        if status == _OK:
            return pickle.loads(payload)
        if status == _REFUSED:
            code, message = pickle.loads(payload)
            raise RequestError(code, message)
        raise HelperUnavailableError(payload.decode("utf-8", "replace"))

    def close_input(self) -> None:
        """No more requests: the child answers those sent, then exits."""
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]

    def kill(self) -> None:
        """End the child now (its pending replies never come: ``receive`` ends)."""
        with contextlib.suppress(OSError):
            self.proc.kill()

    def stop(self, timeout: float = 5.0) -> None:
        """Close its stdin (the child exits) and wait for it; kill it if it does not."""
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            self._from.close()
        self.dead = True

    def died(self) -> None:
        """Mark the child dead, end it and close its pipes."""
        self._died()

    def _died(self) -> None:
        self.dead = True
        self.ready = False
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(Exception):
            self.proc.wait(1)
        for pipe in (self.proc.stdin, self._from):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()


def _widen(fd: int) -> None:
    """A larger pipe buffer where the system allows one (a body is then written in one
    go while the child reads the one before it)."""
    import fcntl

    setpipe = getattr(fcntl, "F_SETPIPE_SZ", None)
    if setpipe is not None:
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, setpipe, PIPE_BYTES)


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read(stream: Any, n: int) -> bytes:
    """Exactly ``n`` bytes (EOFError when the stream ends first)."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = stream.readinto(view[got:])
        if not k:
            raise EOFError(f"pipe closed after {got} of {n} bytes")
        got += k
    return bytes(buf)


def _die_with_parent() -> None:
    """On Linux, have the kernel kill this process when the server that started it
    dies (stdin's EOF covers the rest)."""
    with contextlib.suppress(Exception):
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)


def main() -> None:
    """The child: answer requests on stdin/stdout until stdin closes."""
    _die_with_parent()
    requests = os.fdopen(os.dup(0), "rb", buffering=0)
    replies = os.dup(1)
    os.dup2(2, 1)  # a stray print goes to the server's stderr, not into the protocol
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    try:
        from gradwatch_server.exceptions import RequestError
        from gradwatch_server.ingest.frame_store import decode_body, parse_frames  # noqa: F401

        _write(replies, _READY)
        while True:
            try:
                head = _read(requests, _REQUEST.size)
            except EOFError:
                return
            name_len, body_len = _REQUEST.unpack(head)
            run_id = _read(requests, name_len).decode("utf-8")
            body = _read(requests, body_len)
            try:
                rows = prepare_body(run_id, body)
            except RequestError as e:
                status, payload = _REFUSED, pickle.dumps((e.status, e.message), protocol=5)
            except Exception as e:
                status, payload = _FAILED, f"{type(e).__name__}: {e}".encode()[:4000]
            else:
                status, payload = _OK, pickle.dumps(rows, protocol=5)
            _write(replies, _REPLY.pack(status, len(payload)))
            _write(replies, payload)
    except (OSError, EOFError, KeyboardInterrupt):
        pass  # the server went away: nothing to answer, nothing to report
    finally:
        os._exit(0)


if __name__ == "__main__":
    main()
