"""gradwatch.server — the FastAPI + SQLModel service (installed with ``gradwatch[server]``).

Modules, by role: ``config`` (Settings), ``db`` (engines; SQLite in WAL mode),
``migrate`` (packaged Alembic migrations), ``models`` (tables), ``schemas`` (what the API
returns), ``records`` + ``validate`` (wire frames to rows, all input checked), ``ingest``
(idempotent storage by ``(run, seq)``), ``series`` + ``summary`` (chunked series, min/max
downsampling, the overview heatmap), ``status`` (running/finished/failed/crashed/stalled),
``auth`` (per-project tokens), ``spool_import`` (runs from the local data directory),
``crud`` (queries), ``api`` (routes), ``app`` (``create_app(settings)``) and ``main``
(what ``gradwatch serve`` / ``gradwatch runs`` call). The wire schema is
:mod:`gradwatch.wire`; nothing here copies it.

Example::

    from gradwatch.server.app import create_app
    from gradwatch.server.config import Settings
    app = create_app(Settings.from_env())       # then: uvicorn.run(app, port=8765)

API (``/docs`` for the OpenAPI UI): ``POST /api/v1/ingest``, ``GET /api/v1/runs``,
``/api/v1/runs/{id}``, ``/findings``, ``/series``, ``/overview``, ``/api/v1/health``.
Non-finite floats in responses are the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``.
"""
