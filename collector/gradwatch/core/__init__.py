"""The torch-free core that the collector, the server and the dashboard share.

Standard library only (``import gradwatch.core`` loads nothing else): the exceptions
(:mod:`~gradwatch.core.errors`), the one JSON encoding of non-finite floats
(:mod:`~gradwatch.core.nonfinite`) and the one HTTP client of the server's API
(:mod:`~gradwatch.core.client`). The server and the dashboard import the collector only
through this package.
"""
