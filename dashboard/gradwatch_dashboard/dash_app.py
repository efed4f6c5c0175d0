"""``create_dash()``: the Dash app (navigation bar, pages, callbacks) and ``mount`` into FastAPI.

Pages are modules of :mod:`gradwatch_dashboard.pages`, each with a ``PATH``, a
``layout(**params)`` function and ``register(app)`` for its callbacks. The layout Dash asks
for as a page starts comes with the page of that address laid out (``first_layout``); a
router callback picks the page when the URL changes, so every app keeps its own callbacks
(several apps, e.g. in tests, never share a global registry). ``mount`` serves the Flask
app under the FastAPI app through ``a2wsgi``; the API routes registered before it keep
precedence.

Example::

    app = create_app(settings)        # gradwatch_server.app: the API, then mount(app)
    uvicorn.run(app)                  # http://127.0.0.1:8765/ is the dashboard
"""

from __future__ import annotations

import re
import threading
import urllib.parse
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from dash import Dash, Input, Output, State, dcc, html, no_update

from gradwatch_dashboard import figures, ids
from gradwatch_dashboard.bridge import bridge
from gradwatch_dashboard.callback_guard import CallbackGuard
from gradwatch_dashboard.components import empty_state
from gradwatch_dashboard.login import add_login
from gradwatch_dashboard.pages import alerts, compare, run, runs

if TYPE_CHECKING:
    from fastapi import FastAPI

PAGES: tuple[ModuleType, ...] = (runs, run, compare, alerts)
NAV = (("Runs", "/"), ("Compare", "/compare"), ("Alerts", "/alerts"))


def shell(page: Any = None) -> html.Div:
    """The frame every page is drawn in, with ``page`` in it when it is known."""
    return html.Div(
        [
            dcc.Location(id=ids.URL, refresh="callback-nav"),
            dcc.Store(id=ids.ROUTED, data=page is not None),
            html.Nav(
                [html.A("gradwatch", href="/", className="gw-brand")]
                + [dcc.Link(text, href=href) for text, href in NAV]
                + [html.A("API", href="/docs")],
                className="gw-nav",
            ),
            html.Main(page, id=ids.PAGE, className="gw-main"),
        ]
    )


def first_layout() -> html.Div:
    """Dash's layout, asked for by every page as it starts: the frame with the page of the
    page's own address (the request's ``Referer``) laid out in it, so the browser draws
    the page from that one reply, without a round trip to the router first. The frame
    alone in any other call (Dash checks the layout once at its first request) or when the
    address is not known (no same-origin ``Referer``)."""
    import flask

    if not flask.has_request_context() or not flask.request.path.endswith("/_dash-layout"):
        return shell()
    referrer = urllib.parse.urlsplit(flask.request.referrer or "")
    here = urllib.parse.urlsplit(flask.request.host_url)
    if referrer.netloc != here.netloc or referrer.scheme != here.scheme:
        return shell()
    return shell(route(referrer.path, referrer.query and f"?{referrer.query}"))


def routed(pathname: str | None, search: str | None, already: bool | None) -> list[Any]:
    """The router callback: ``[page, ROUTED]``. Its first call on a page whose layout came
    routed (``first_layout``) keeps that page; every later one routes."""
    if already:
        return [no_update, False]
    return [route(pathname, search), no_update]


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
    app.layout = first_layout
    app.callback(
        Output(ids.PAGE, "children"),
        Output(ids.ROUTED, "data"),
        Input(ids.URL, "pathname"),
        Input(ids.URL, "search"),
        State(ids.ROUTED, "data"),
    )(routed)
    for page in PAGES:
        page.register(app)
    add_login(app.server)
    load_scripts_early(app)
    ask_layout_early(app)
    keep_native_builtins(app)
    threading.Thread(target=figures.warm_up, name="gradwatch-figures-warm-up", daemon=True).start()
    return app


# scripts every page loads up front, from Dash's component suites at versioned addresses:
# (package, path in it, version); Plotly's is ``plotly_bundle()``
EARLY_SCRIPTS = (("dash", "dcc/async-graph.js", None),)
# plotly.js's cartesian bundle (scatter, bar, heatmap, ... : every trace the dashboard draws;
# no WebGL), 1.5 MB against the full bundle's 4.8 MB: ``make install`` puts it here from the
# npm registry (``scripts/fetch_plotly_bundle.py``, integrity-checked; not in git)
CARTESIAN = "vendor/plotly-cartesian.min.js"
# the trace types of the cartesian bundle (its README): a figure may hold no other
CARTESIAN_TRACES = frozenset(
    [
        "bar",
        "box",
        "contour",
        "heatmap",
        "histogram",
        "histogram2d",
        "histogram2dcontour",
        "image",
        "pie",
        "scatter",
        "scatterternary",
        "violin",
    ]
)


def plotly_bundle(package_dir: str | None = None) -> tuple[str, str, str]:
    """The Plotly script pages load: ``(package, path in it, version)``. The cartesian
    bundle when it is installed (under ``package_dir``, this package's folder by default)
    and is the plotly.js version the ``plotly`` package writes figures for (its header
    names it: ``plotly.js (cartesian - minified) v4.1.1``), else the full bundle that
    ``plotly`` ships."""
    import os

    from plotly.offline import get_plotlyjs_version

    version = str(get_plotlyjs_version())
    here = os.path.join(package_dir or os.path.dirname(__file__), CARTESIAN)
    try:
        with open(here, "rb") as f:
            head = f.read(200).decode("utf-8", "replace")
    except OSError:
        head = ""
    if f"(cartesian - minified) v{version}\n" in head:
        return "gradwatch_dashboard", CARTESIAN, version
    return "plotly", "package_data/plotly.min.js", version


def load_scripts_early(app: Dash) -> None:
    """Plotly (``plotly_bundle()``) and dcc.Graph's chunk in every page's HTML as deferred
    scripts at versioned addresses: the browser fetches and compiles them while Dash starts,
    not once the first graph is laid out, and keeps them for a year. (Dash puts neither in
    the page: dcc.Graph asks for them when it is first drawn, at addresses without a
    version that the browser revalidates with the server on every page load; it takes
    Plotly from ``window.Plotly`` when that is there, and its chunk when it is loaded.)"""
    import importlib
    import os

    from dash.fingerprint import build_fingerprint

    prefix = f"{app.config.requests_pathname_prefix}_dash-component-suites"
    srcs = []
    for package, path, version in (plotly_bundle(), *EARLY_SCRIPTS):
        module = importlib.import_module(package)
        where = os.path.join(os.path.dirname(str(module.__file__)), path)
        modified = int(os.stat(where).st_mtime)
        versioned: str = build_fingerprint(path, version or module.__version__, modified)  # type: ignore[no-untyped-call]
        app.registered_paths[package].add(path)  # Dash serves only the paths it knows
        srcs.append(f"{prefix}/{package}/{versioned}")
    tags = "\n".join(f'<script defer src="{src}"></script>' for src in srcs)
    app.index_string = app.index_string.replace("{%css%}", "{%css%}\n" + tags, 1)


# In every page's head, before any script: the layout is asked for at once, and Dash's first
# request for it (``GET {prefix}_dash-layout``, made once its scripts have run) is answered
# with that reply. Dash asks with its own headers (the CSRF token where there is one): a reply
# asked for with none is used only when the page has no CSRF cookie, as here.
EARLY_LAYOUT = """<script>
(function () {
  if (!window.fetch || /(^|;\\s*)_csrf_token=/.test(document.cookie)) return;
  var url = %s, early = fetch(url, {credentials: "same-origin"}), own = window.fetch;
  window.fetch = function (input, init) {
    if (early && input === url && (!init || !init.method || init.method === "GET")) {
      var reply = early;
      early = null;
      return reply.catch(function () { return own(input, init); });
    }
    return own.apply(this, arguments);
  };
})();
</script>"""


def ask_layout_early(app: Dash) -> None:
    """``EARLY_LAYOUT`` in every page's HTML: the page's layout (the page drawn, from
    ``first_layout``) is asked for as the HTML arrives, not after Dash's scripts have run
    (a tenth of a second and more on a busy machine), so a page the server has ready (read
    ahead, or kept: ``pages.run.Kept``) is drawn that much sooner."""
    import json

    url = json.dumps(f"{app.config.requests_pathname_prefix}_dash-layout")
    app.index_string = app.index_string.replace("{%css%}", (EARLY_LAYOUT % url) + "\n{%css%}", 1)


# Dash's babel polyfill (core-js 2, for old browsers) replaces built-ins whose native versions
# fail one of its 2019 feature tests: in current Chromium String.prototype.trim and the
# global parseInt and parseFloat (which Plotly calls for every number and label it reads)
# become JavaScript, and Function.prototype.toString is wrapped to call them native.
# SAVE_BUILTINS runs before it; RESTORE_BUILTINS, right after it, puts back what it replaced
# and removes what it added over a native one, keeping what it adds that the browser lacks.
SAVE_BUILTINS = """
window.__gwBuiltins = (function () {
  var names = ["Object", "Array", "String", "Number", "Boolean", "Symbol", "Math", "JSON",
    "Reflect", "Promise", "RegExp", "Map", "Set", "WeakMap", "WeakSet", "Date", "Function",
    "Error", "ArrayBuffer", "DataView", "Int8Array", "Uint8Array", "Uint8ClampedArray",
    "Int16Array", "Uint16Array", "Int32Array", "Uint32Array", "Float32Array", "Float64Array"];
  var typed = Object.getPrototypeOf(Int8Array), objects = [window, typed, typed.prototype];
  names.forEach(function (n) {
    var g = window[n];
    if (g) { objects.push(g); if (g.prototype) objects.push(g.prototype); }
  });
  return objects.map(function (o) {
    var own = new Map();
    Reflect.ownKeys(o).forEach(function (k) {
      var d = Object.getOwnPropertyDescriptor(o, k);
      if (o !== window || typeof d.value === "function") own.set(k, d);
    });
    return [o, own];
  });
})();
"""
RESTORE_BUILTINS = """
(function (saved) {
  if (!saved) return;
  var source = Function.prototype.toString;
  function script(f) {
    return typeof f === "function" && source.call(f).indexOf("[native code]") < 0;
  }
  saved.forEach(function (pair) {
    var o = pair[0], before = pair[1];
    before.forEach(function (was, k) {
      var now = Object.getOwnPropertyDescriptor(o, k);
      try {
        if (now && (was.value !== now.value || was.get !== now.get || was.set !== now.set)) {
          Object.defineProperty(o, k, was);
        }
      } catch (e) { /* a property that cannot be put back keeps the polyfill's version */ }
    });
    if (o === window) return;
    Reflect.ownKeys(o).forEach(function (k) {
      var now = Object.getOwnPropertyDescriptor(o, k);
      if (!before.has(k) && (script(now.value) || script(now.get))
          && k in Object.getPrototypeOf(o)) {
        try { delete o[k]; } catch (e) { /* as above */ }
      }
    });
  });
  delete window.__gwBuiltins;
})(window.__gwBuiltins);
"""


def keep_native_builtins(app: Dash) -> None:
    """Wrap Dash's polyfill script in ``SAVE_BUILTINS`` and ``RESTORE_BUILTINS`` (nothing
    when the page has no polyfill)."""
    interpolate: Callable[..., Any] = app.interpolate_index

    def interpolate_index(**kwargs: Any) -> str:
        scripts = str(kwargs.get("scripts", ""))
        polyfill = scripts.find("/deps/polyfill@")
        end = scripts.find("</script>", polyfill) + len("</script>")
        if polyfill >= 0 and end > polyfill:
            start = scripts.rfind("<script", 0, polyfill)
            kwargs["scripts"] = (
                f"{scripts[:start]}<script>{SAVE_BUILTINS}</script>\n{scripts[start:end]}"
                f"\n<script>{RESTORE_BUILTINS}</script>{scripts[end:]}"
            )
        return str(interpolate(**kwargs))

    app.interpolate_index = interpolate_index  # type: ignore[method-assign,assignment]


def mount(api: FastAPI) -> None:
    """Serve the dashboard at ``/`` of ``api``, after the routes it already has (the server
    registers its ``/api/...`` catch-all first, so an unknown API path never reaches a page);
    callback requests are checked first (:mod:`gradwatch_dashboard.callback_guard`)."""
    dash = create_dash()
    guarded = CallbackGuard(
        bridge(dash.server), dash.callback_map, dash.config.routes_pathname_prefix
    )
    api.mount("/", guarded)
