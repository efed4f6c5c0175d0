"""The in-process checks of the catalogue (ids in :mod:`gradwatch.core.catalogue`); the engine
that runs them is :class:`gradwatch.checks.engine.CheckEngine`.

This package imports nothing itself: its torch-free modules (``incidents``, ``findings``)
are read by the server, which never imports torch.
"""
