"""The in-process checks of the registry (each declared in its family's module of
:mod:`gradwatch.core.checks`); the engine that runs them is
:class:`gradwatch.checks.engine.CheckEngine`.

This package imports nothing itself: its torch-free modules (``incidents``, ``findings``)
are read by the server, which never imports torch.
"""
