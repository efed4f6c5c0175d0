"""``create_dash()``: the Dash app (navigation bar, pages, callbacks) and ``mount`` into FastAPI.

Pages are modules of :mod:`gradwatch.dashboard.pages`, each with a ``PATH``, a
``layout(**params)`` function and ``register(app)`` for its callbacks. A router callback
picks the page from the URL, so every app keeps its own callbacks (several apps, e.g. in
tests, never share a global registry). ``mount`` serves the Flask app under the FastAPI
app through ``a2wsgi``; the API routes registered before it keep precedence.

Example::

    app = create_app(settings)        # gradwatch.server.app: the API, then mount(app)
    uvicorn.run(app)                  # http://127.0.0.1:8765/ is the dashboard
"""

from __future__ import annotations

import re
import urllib.parse
from types import ModuleType
from typing import TYPE_CHECKING, Any

from dash import Dash, Input, Output, dcc, html

from gradwatch.dashboard import ids
from gradwatch.dashboard.bridge import bridge
from gradwatch.dashboard.components import empty_state
from gradwatch.dashboard.login import add_login
from gradwatch.dashboard.pages import alerts, compare, run, runs

if TYPE_CHECKING:
    from fastapi import FastAPI

PAGES: tuple[ModuleType, ...] = (runs, run, compare, alerts)
NAV = (("Runs", "/"), ("Compare", "/compare"), ("Alerts", "/alerts"))


def shell() -> html.Div:
    """The frame every page is drawn in."""
    return html.Div(
        [
            dcc.Location(id=ids.URL, refresh="callback-nav"),
            html.Nav(
                [html.A("gradwatch", href="/", className="gw-brand")]
                + [dcc.Link(text, href=href) for text, href in NAV]
                + [html.A("API", href="/docs")],
                className="gw-nav",
            ),
            html.Main(id=ids.PAGE, className="gw-main"),
        ]
    )


def route(pathname: str | None, search: str | None) -> Any:
    """The layout of the page at ``pathname`` with the query ``search`` (``?a=1&b=2``)."""
    path = pathname or "/"
    params = {k: v[-1] for k, v in urllib.parse.parse_qs((search or "").lstrip("?")).items()}
    for page in PAGES:
        match = re.fullmatch(page.PATH, path)
        if match:
            return page.layout(**match.groupdict(), **params)
    return empty_state(f"No page at {path}. Start from the list of runs.", id="not-found")


def create_dash() -> Dash:
    """The dashboard app (a Flask server, ``app.server``)."""
    app = Dash(
        __name__,
        title="gradwatch",
        update_title="",
        suppress_callback_exceptions=True,
        serve_locally=True,
    )
    app.layout = shell()
    app.callback(
        Output(ids.PAGE, "children"), Input(ids.URL, "pathname"), Input(ids.URL, "search")
    )(route)
    for page in PAGES:
        page.register(app)
    add_login(app.server)
    load_scripts_early(app)
    return app


# scripts every page loads up front, from Dash's component suites at versioned addresses
EARLY_SCRIPTS = (("plotly", "package_data/plotly.min.js"), ("dash", "dcc/async-graph.js"))


def load_scripts_early(app: Dash) -> None:
    """Plotly (4.8 MB) and dcc.Graph's chunk in every page's HTML as deferred scripts at
    versioned addresses: the browser fetches and compiles them while Dash starts, not
    once the first graph is laid out, and keeps them for a year. (Dash puts neither in
    the page: dcc.Graph asks for them when it is first drawn, at addresses without a
    version that the browser revalidates with the server on every page load; it takes
    Plotly from ``window.Plotly`` when that is there, and its chunk when it is loaded.)"""
    import importlib
    import os

    from dash.fingerprint import build_fingerprint

    prefix = f"{app.config.requests_pathname_prefix}_dash-component-suites"
    srcs = []
    for package, path in EARLY_SCRIPTS:
        module = importlib.import_module(package)
        where = os.path.join(os.path.dirname(str(module.__file__)), path)
        modified = int(os.stat(where).st_mtime)
        versioned: str = build_fingerprint(path, module.__version__, modified)  # type: ignore[no-untyped-call]
        app.registered_paths[package].add(path)  # Dash serves only the paths it knows
        srcs.append(f"{prefix}/{package}/{versioned}")
    tags = "\n".join(f'<script defer src="{src}"></script>' for src in srcs)
    app.index_string = app.index_string.replace("{%css%}", "{%css%}\n" + tags, 1)


def mount(api: FastAPI) -> None:
    """Serve the dashboard at ``/`` of ``api``, after the routes it already has (the server
    registers its ``/api/...`` catch-all first, so an unknown API path never reaches a page)."""
    api.mount("/", bridge(create_dash().server))
