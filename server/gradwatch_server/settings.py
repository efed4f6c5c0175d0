"""Server settings: where the database is, what to bind, limits and timeouts.

Everything has a default that works on one machine with no setup: SQLite in the data
directory (``gradwatch.core.paths.data_dir()``), 127.0.0.1:8765, no tokens. ``GRADWATCH_DB``
(or ``--db``) switches the database, e.g. ``postgresql://user@host/gradwatch``.

Example::

    settings = Settings.from_env(db="sqlite:////tmp/gw.db")
    app = create_app(settings)
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gradwatch.core import paths
from gradwatch_server.exceptions import ServerConfigError

#: the names, besides loopback and the bind address, the server answers as ``Host``
#: (:mod:`gradwatch_server.guards.hostcheck`, which needs starlette; settings must not: the
#: collector's commands read them without the web stack)
ALLOWED_HOSTS_ENV = "GRADWATCH_ALLOWED_HOSTS"


def parse_allowed_hosts(text: str) -> tuple[str, ...]:
    """``GRADWATCH_ALLOWED_HOSTS``: comma-separated names (spaces and empty entries ignored)."""
    return tuple(h.strip() for h in text.split(",") if h.strip())


DB_ENV = "GRADWATCH_DB"
ALLOW_PRIVATE_ENV = "GRADWATCH_ALLOW_PRIVATE_WEBHOOKS"
REQUIRE_TOKENS_ENV = "GRADWATCH_REQUIRE_TOKENS"
PREPARE_HELPER_ENV = "GRADWATCH_PREPARE_HELPER"
PREPARE_HELPER_POLICIES = ("off", "busy", "on")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
DB_FILE = "gradwatch.db"


def default_db_url(data_dir: Path) -> str:
    """The SQLite database in the data directory."""
    return f"sqlite:///{data_dir / DB_FILE}"


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``; False for anything else (0.0.0.0 too)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Settings:
    """Everything ``create_app`` needs; immutable, so one app never sees another's values.

    ``require_tokens`` is forced on for a non-loopback ``host``; on loopback it is off
    unless asked for (``--require-tokens``, ``GRADWATCH_REQUIRE_TOKENS=1``): every
    process of the host can reach a loopback server, a same-host reverse proxy too.
    ``max_body_bytes`` bounds an ingest request, ``max_json_bytes`` any other request
    body, ``body_timeout`` the seconds a body may take to arrive (see
    :mod:`gradwatch_server.guards.bodylimit`); ingest answers 503 with ``Retry-After`` while more
    than ``ingest_backlog_bytes`` of requests wait for the ingest writer. ``import_interval`` is the
    period of the local spool import in seconds (``None`` turns it off); ``monitor_interval``
    the period of the live drift comparison, seed envelopes and webhook deliveries (``None``
    turns them off). Webhook targets on loopback/private/link-local addresses are refused
    unless ``allow_private_webhooks`` (``GRADWATCH_ALLOW_PRIVATE_WEBHOOKS=1``). ``dashboard``
    mounts the Dash app at ``/``. ``prepare_helper`` (``GRADWATCH_PREPARE_HELPER``): when
    ingest bodies are decoded and validated in a helper process instead of a thread of
    the server's (``busy``: once requests queue up; ``on``; ``off``; see
    :mod:`gradwatch_server.ingest.prepare_helper`). ``allowed_hosts``: host names the server
    answers besides its loopback and bind addresses (``--allowed-host``,
    ``GRADWATCH_ALLOWED_HOSTS``; see :mod:`gradwatch_server.guards.hostcheck`).
    """

    db_url: str
    data_dir: Path
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    require_tokens: bool = False
    max_body_bytes: int = 64 << 20  # one ingest request (a batch of frames)
    max_json_bytes: int = 1 << 20  # any other request body, API and dashboard
    ingest_backlog_bytes: int = 64 << 20  # queued ingest bodies beyond which ingest is 503
    body_timeout: float = 30.0  # seconds for a whole request body to arrive
    stalled_after: float = 120.0
    crashed_after: float = 3600.0
    import_interval: float | None = 2.0
    monitor_interval: float | None = 1.0
    allow_private_webhooks: bool = False
    webhook_attempts: int = 5
    webhook_backoff: float = 1.0
    webhook_timeout: float = 5.0
    dashboard: bool = True
    prepare_helper: str = "busy"
    allowed_hosts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.prepare_helper not in PREPARE_HELPER_POLICIES:
            raise ServerConfigError(
                f"prepare helper {self.prepare_helper!r}: use one of "
                f"{', '.join(PREPARE_HELPER_POLICIES)} ({PREPARE_HELPER_ENV})"
            )
        if not is_loopback(self.host) and not self.require_tokens:
            object.__setattr__(self, "require_tokens", True)

    @classmethod
    def from_env(cls, *, db: str | None = None, data_dir: str | None = None, **kw: Any) -> Settings:
        """Settings from arguments, then ``$GRADWATCH_DB`` / ``$GRADWATCH_DIR``, then defaults."""
        root = paths.data_dir(data_dir)
        url = db or os.environ.get(DB_ENV) or default_db_url(root)
        if os.environ.get(ALLOW_PRIVATE_ENV, "") not in ("", "0"):
            kw.setdefault("allow_private_webhooks", True)
        if os.environ.get(REQUIRE_TOKENS_ENV, "") not in ("", "0"):
            kw.setdefault("require_tokens", True)
        if os.environ.get(ALLOWED_HOSTS_ENV):
            named = parse_allowed_hosts(os.environ[ALLOWED_HOSTS_ENV])
            kw["allowed_hosts"] = tuple(kw.get("allowed_hosts", ())) + named
        if os.environ.get(PREPARE_HELPER_ENV):
            kw.setdefault("prepare_helper", os.environ[PREPARE_HELPER_ENV].strip().lower())
        return cls(db_url=url, data_dir=root, **kw)

    def with_(self, **changes: Any) -> Settings:
        """A copy with some fields changed."""
        return replace(self, **changes)
