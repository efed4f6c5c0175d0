"""gradwatch_server — the FastAPI + SQLModel service (installed with ``gradwatch[server]``).

Folders by role, each with its own docstring: ``ingest/`` (frames in: the writer thread,
the prepare helper, frame decoding and validation, the overview summaries, the spool
import), ``read/`` (runs, findings, series, step events, status, groups, overviews),
``drift/`` (comparisons, live drift) and ``alerts/`` (rules, queries, webhooks, targets,
incident regrouping); ``guards/`` holds the ASGI layers in front of the app and ``api/`` the
routes. Flat, shared by the folders: ``settings`` (Settings), ``db`` (engines; SQLite in WAL
mode), ``migrate`` (packaged Alembic migrations), ``models`` (tables), ``schemas`` (what the
API returns), ``store`` (idempotent inserts), ``blobcodec`` (packed statistics),
``jsontext`` (stored JSON text), ``groupkey`` (a replicate group's key), ``problems``,
``exceptions``, ``jsonresp``, ``auth`` (per-project tokens); and the wiring: ``monitor``
(the background drift and webhook passes), ``startup``, ``app`` (``create_app(settings)``)
and ``cli_actions`` (what ``gradwatch serve`` / ``gradwatch runs`` call). Ingest never
imports the read side; nothing imports the routes but ``app`` (``tests/test_architecture.py``).
The wire schema is :mod:`gradwatch.core.wire`; nothing here copies it.

Example::

    from gradwatch_server.app import create_app
    from gradwatch_server.settings import Settings
    app = create_app(Settings.from_env())       # then: uvicorn.run(app, port=8765)

API (``/docs`` for the OpenAPI UI): ``POST /api/v1/ingest``, ``GET /api/v1/runs``,
``/api/v1/runs/{id}``, ``/findings``, ``/series``, ``/overview``, ``/api/v1/health``.
Non-finite floats in responses are the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``.
"""
