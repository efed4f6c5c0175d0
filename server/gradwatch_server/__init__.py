"""gradwatch_server — the FastAPI + SQLModel service (installed with ``gradwatch[server]``).

Modules, by role: ``settings`` (Settings), ``db`` (engines; SQLite in WAL mode),
``migrate`` (packaged Alembic migrations), ``models`` (tables), ``schemas`` (what the API
returns), ``frame_rows`` + ``validate`` (wire frames to rows, all input checked), ``store``
(idempotent inserts), ``frame_ingest`` (idempotent storage by ``(run, seq)``), ``series`` +
``overview`` (chunked series, min/max downsampling, the overview heatmap), ``step_events``
(the optimizer lifecycle per step), ``incident_regroup``, ``alerting`` + ``webhooks``,
``live_drift`` + ``monitor`` (the background passes), ``status``
(running/finished/failed/crashed/stalled), ``auth`` (per-project tokens), ``spool_import``
(runs from the local data directory), ``crud`` (queries), ``api`` (routes), ``app``
(``create_app(settings)``) and ``cli_actions`` (what ``gradwatch serve`` / ``gradwatch
runs`` call). The wire schema is :mod:`gradwatch.wire`; nothing here copies it.

Example::

    from gradwatch_server.app import create_app
    from gradwatch_server.settings import Settings
    app = create_app(Settings.from_env())       # then: uvicorn.run(app, port=8765)

API (``/docs`` for the OpenAPI UI): ``POST /api/v1/ingest``, ``GET /api/v1/runs``,
``/api/v1/runs/{id}``, ``/findings``, ``/series``, ``/overview``, ``/api/v1/health``.
Non-finite floats in responses are the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``.
"""
