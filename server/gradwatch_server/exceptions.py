"""Errors of the server; each becomes a clear HTTP status or a CLI message.

::

    ServerError
    ├── ServerConfigError   bad settings (database URL, bind address without tokens)
    └── RequestError        bad input: ``status`` is the 4xx to answer, ``message`` says why
"""

from __future__ import annotations


class ServerError(Exception):
    """Base class of the server's errors."""


class ServerConfigError(ServerError):
    """The server cannot start with these settings; the message says how to fix them."""


class RequestError(ServerError):
    """A request the server refuses; answered with ``status`` and ``{"detail": message}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
