"""gradwatch.server — the FastAPI + SQLModel service (installed with ``gradwatch[server]``).

Ingest, storage, queries, drift and alerts are built on the collector's wire schema
(:mod:`gradwatch.wire`); see the project's issue tracker for what has landed.
"""
