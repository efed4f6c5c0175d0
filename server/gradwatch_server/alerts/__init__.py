"""Alerts: ``rules`` (matching findings against alert rules, raising alerts), ``queries``
(alerts, rules and the delivery log for the API), ``webhooks`` (signed deliveries),
``targets`` (which webhook addresses may be reached) and ``incident_regroup`` (the incidents
of stored findings, regrouped where findings are stored). Imports only the shared modules at
the top of :mod:`gradwatch_server`, so ingest and drift may raise alerts.
"""
