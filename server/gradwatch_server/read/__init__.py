"""The read side: queries behind the API and the dashboard; nothing here writes data.

``runs`` (runs, findings, incidents), ``series`` (stored statistics back to matrices),
``step_events`` (the lifecycle of each step), ``status`` (a run's state), ``groups``
(replicate groups, baselines, references), ``overview`` (heatmaps of long runs) and
``runload`` (a run's data for a comparison). It imports only the shared modules at the top of
:mod:`gradwatch_server`.
"""
