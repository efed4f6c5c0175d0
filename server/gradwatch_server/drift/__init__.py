"""Drift between runs on the server: ``comparison`` (the comparison and envelope services
of the API) and ``live`` (the monitor's live comparison and seed envelopes). Both reuse the
collector's numpy-only drift core, read runs through :mod:`gradwatch_server.read` and raise
alerts through :mod:`gradwatch_server.alerts.rules`.
"""
