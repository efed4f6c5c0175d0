"""The layers of the code, declared once. ``tests/test_architecture.py`` enforces them and
``docs/architecture.md`` shows this declaration (``tests/test_docs.py`` checks it is the
same text).

A module belongs to the layer of the longest package prefix listed; it may import modules
of its own layer and of the layers below it, never above; imports inside functions count.
"""

from __future__ import annotations

# --- layers: begin (quoted in docs/architecture.md) ---
#: the collector's layers, top (what users call) to bottom (what every part shares)
COLLECTOR_LAYERS: dict[str, tuple[str, ...]] = {
    "public surface": (
        "gradwatch",  # the lazy package surface: watch, Run, open_run, runs
        "gradwatch.__main__",
        "gradwatch.cli",
        "gradwatch.commands",
        "gradwatch.integrations",
        "gradwatch.analysis",
        "gradwatch.reader",
        "gradwatch.checkpoint",
        "gradwatch.demo",
        "gradwatch.lint",
    ),
    "session": ("gradwatch.session",),
    "nan provenance, ddp": ("gradwatch.nan", "gradwatch.ddp"),
    "hooks": ("gradwatch.hooks",),
    "checks": ("gradwatch.checks",),
    "statistics": ("gradwatch.stats",),
    "transport": ("gradwatch.transport",),
    "fingerprint": ("gradwatch.fingerprint",),
    "core": ("gradwatch.core", "gradwatch._version"),
}
#: what the server and the dashboard may import of the collector
SHARED_CORE: tuple[str, ...] = ("gradwatch.core", "gradwatch._version")
#: the server's folders by role -> the other role folders each may import; every folder
#: may import the flat shared modules at the top of gradwatch_server
SERVER_ROLES: dict[str, set[str]] = {
    "ingest": {"alerts"},  # ingest raises alerts as it stores findings; never the read side
    "drift": {"read", "alerts"},
    "read": set(),
    "alerts": set(),
    "guards": set(),
}
#: the only modules that speak HTTP to a server (the query client; the ingest sender;
#: the server's webhook delivery)
HTTP_CLIENTS: frozenset[str] = frozenset(
    {
        "gradwatch.core.client",
        "gradwatch.transport.sender",
        "gradwatch_server.alerts.targets",
        "gradwatch_server.alerts.webhooks",
    }
)
#: the only modules that decide what a read-back record means (the decoder; the spool and
#: frame format; the server's validating ingest)
RECORD_DECODERS: frozenset[str] = frozenset(
    {
        "gradwatch.core.records",
        "gradwatch.core.spool",
        "gradwatch.core.wire",
        "gradwatch_server.ingest.frame_rows",
    }
)
# --- layers: end ---
