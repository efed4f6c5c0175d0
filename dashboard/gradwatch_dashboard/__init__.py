"""gradwatch_dashboard — the Plotly Dash app served by ``gradwatch serve``.

It reads data only through the server's query layer (:mod:`gradwatch_server`).
"""
