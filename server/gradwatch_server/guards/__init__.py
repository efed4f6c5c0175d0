"""ASGI guards: the layers :func:`gradwatch_server.app.create_app` wraps around the
application, which answer a request before routing, JSON parsing or the token check:
``hostcheck`` (the Host header), ``bodylimit`` (body size and read time) and ``nul`` (NUL in
a path or query).
"""
