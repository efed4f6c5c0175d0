"""gradwatch_dashboard — the Plotly Dash app served by ``gradwatch serve``.

It reads data only through the server's query layer (:mod:`gradwatch_server`).
"""

from gradwatch._version import __version__  # Dash logs it when it serves vendor/ files

__all__ = ["__version__"]
