"""Page callbacks as plain functions, against a real server holding the demo's runs."""

from __future__ import annotations

import re
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import plotly
import plotly.graph_objects as go
import pytest
from dash import html, no_update

import gradwatch_dashboard
from gradwatch_dashboard import ids
from gradwatch_dashboard.api_client import Api, ApiError
from gradwatch_dashboard.dash_app import CARTESIAN_TRACES, create_dash, plotly_bundle, route
from gradwatch_dashboard.dash_app import routed as routed_call
from gradwatch_dashboard.pages import alerts, compare, run, runs
from tests.dashboard.conftest import DEMO_STEPS

pytestmark = pytest.mark.slow  # the demo's five trainings run once per session


def texts(component: Any) -> list[str]:
    """Every string inside a Dash component tree."""
    if isinstance(component, str):
        return [component]
    if isinstance(component, (list, tuple)):
        return [t for c in component for t in texts(c)]
    children = getattr(component, "children", None)
    return texts(children) if children is not None else []


def test_runs_table_lists_every_run_with_health_and_group(demo_api: Api) -> None:
    table, projects = runs.runs_view(demo_api, None, None, None)
    words = texts(table)
    assert projects == [{"label": "demo", "value": "demo"}]
    for name in ("replicate-a", "replicate-b", "drifting", "stale-grad", "nan-onset"):
        assert name in words
    # the replicates are healthy; the drifting run is too until the server's live
    # comparison stores its repro-drift finding (a warning), which may already have happened
    assert words.count("ok") in (2, 3) and "1 error" in words
    # the replicate group by its runs' names, on each of its runs
    groups = [w for w in words if w.count(", ") == 2]
    assert len(groups) == 3 and set(groups[0].split(", ")) == {
        "replicate-a",
        "replicate-b",
        "drifting",
    }
    rows = table.children[1].children  # project, run, status, steps, duration, final loss, …
    header = texts(table.children[0])
    assert header[4:6] == ["duration", "final loss"]
    by_name = {texts(r.children[1])[0]: texts(r) for r in rows}
    assert by_name["nan-onset"][5] == "NaN"  # its last loss: blown up
    assert float(by_name["replicate-a"][5]) < 1 and by_name["replicate-a"][4].endswith(" s")
    errors, _ = runs.runs_view(demo_api, None, None, None, "error")
    names = {w for w in texts(errors) if w in DEMO_NAMES}
    assert names == {"stale-grad", "nan-onset"}
    warned, _ = runs.runs_view(demo_api, None, None, None, "warning")
    assert {"stale-grad", "nan-onset"} <= {w for w in texts(warned) if w in DEMO_NAMES}
    assert "replicate-a" not in texts(warned)
    filtered, _ = runs.runs_view(demo_api, "demo", "finished", "nan")
    assert "nan-onset" in texts(filtered) and "stale-grad" not in texts(filtered)
    none, _ = runs.runs_view(demo_api, "nope", None, None)
    assert texts(none) == ["No runs yet. Train with gradwatch (or run `gradwatch demo`)."]


DEMO_NAMES = ("replicate-a", "replicate-b", "replicate-c", "drifting", "stale-grad", "nan-onset")


def test_runs_table_shows_the_newest_rows_first_and_more_on_demand(demo_api: Api) -> None:
    everything, _, left = runs.runs_page(demo_api, None, None, None, 1000)
    names = [w for w in texts(everything) if w in DEMO_NAMES]
    assert not left and len(names) >= 5
    first, _, left = runs.runs_page(demo_api, None, None, None, 2)
    words = texts(first)
    assert left and [w for w in words if w in DEMO_NAMES] == names[:2]
    assert f"Showing 2 of {len(names)} runs, newest first; " in "".join(words)


def test_run_page_of_the_nan_onset(demo_api: Api, demo_ids: dict[str, str]) -> None:
    data = run.fetch(demo_api, demo_ids["nan-onset"], None)
    parts = run.view(data)
    words = " ".join(texts(parts[ids.RUN_HEADER]))
    first = min(f["step"] for f in data["findings"]["data"] if f["check"].startswith("nonfinite"))
    assert f"First NaN/Inf at step {first} in 0.weight." in words
    assert first >= DEMO_STEPS // 2
    heat = parts[ids.RUN_HEATMAP]
    assert list(heat.data[0].y) == [
        "0.weight",
        "0.bias",
        "2.weight",
        "2.bias",
        "4.weight",
        "4.bias",
    ]
    assert len(heat.data[0].x) == DEMO_STEPS  # a short run is drawn at full resolution
    assert any(t.name == "NaN" for t in heat.data)
    nonfinite = parts[ids.RUN_NONFINITE]
    assert any(
        a.text.startswith(f"first non-finite: step {first}") for a in nonfinite.layout.annotations
    )


def test_run_page_draws_the_users_own_metrics_by_prefix_and_its_config(
    demo_api: Api, demo_ids: dict[str, str]
) -> None:
    parts = run.view(run.fetch(demo_api, demo_ids["nan-onset"], None))
    charts = {
        c.to_plotly_json()["props"]["data-group"]: c.children[0].figure
        for c in parts[ids.RUN_METRICS]
    }
    assert list(charts) == ["train", "val"]  # one chart per prefix, first logged first
    train, val = charts["train"], charts["val"]
    lines = {t.name: t for t in train.data if t.mode == "lines"}
    assert set(lines) == {"loss", "mae"} and len(lines["loss"].x) == DEMO_STEPS
    assert list(val.data[0].x) == list(range(10, DEMO_STEPS + 1, 10))  # every VAL_EVERY steps
    assert {t.name for t in val.data if t.mode != "markers"} == {"loss", "mae"}
    # the blown-up loss: its NaN steps marked, and named in the legend
    marks = [t for t in train.data if t.mode == "markers"]
    marked = {t.name for t in marks}
    assert {"loss: NaN", "loss above the axis"} <= marked  # the blow-up at the axis' edge
    assert train.layout.showlegend and val.layout.showlegend
    config = parts[ids.RUN_FINGERPRINT].children[0]
    assert config.id == "run-config"
    rows = dict(zip(texts(config)[2::2], texts(config)[3::2], strict=True))
    assert rows["lr"] == "0.01" and rows["script"] == "nan-onset"
    assert texts(parts[ids.RUN_FINGERPRINT].children[1])[0].startswith("details: ")


def test_a_gradient_norms_only_run_says_its_update_ratio_was_not_recorded(
    demo_api: Api, demo_ids: dict[str, str]
) -> None:
    """``watch(stats="grad-norms")`` leaves parameter and update norms unmeasured (NaN):
    the update-ratio panel says so instead of marking every cell non-finite."""
    data = run.fetch(demo_api, demo_ids["replicate-a"], None)
    full = run.view(data)[ids.RUN_RATIO]
    assert full.data  # a normal run draws its heatmap
    start = data["detail"]["start"]
    data["detail"]["start"] = {**start, "options": {**start["options"], "stats": "grad-norms"}}
    ratio = run.view(data)[ids.RUN_RATIO]
    assert not ratio.data
    assert any("stats='grad-norms'" in a.text for a in ratio.layout.annotations)


def test_run_page_of_the_stale_gradient_run(demo_api: Api, demo_ids: dict[str, str]) -> None:
    data = run.fetch(demo_api, demo_ids["stale-grad"], 2)
    parts = run.view(data)
    # one sentence per incident, led by its root cause
    assert "stale-grad at step 2: " in " ".join(texts(parts[ids.RUN_HEADER]))
    lanes = {t.name: t for t in parts[ids.RUN_LIFECYCLE].data}
    assert "zero_grad" not in lanes and len(lanes["backward"].x) == len(lanes["step"].x)
    assert list(lanes["finding"].x) == [2]  # step 2 marked, at 2
    assert data["lifecycle"]["start"] == 0  # focused on step 2
    clean = run.view(run.fetch(demo_api, demo_ids["replicate-a"], None))
    assert "zero_grad" in {t.name for t in clean[ids.RUN_LIFECYCLE].data}


def test_run_page_polls_cheaply_and_redraws_once_per_change(
    demo_api: Api, demo_ids: dict[str, str]
) -> None:
    outputs = [ids.RUN_HEADER, *run.GRAPHS, ids.RUN_FINDINGS, ids.RUN_FINGERPRINT]
    key = {"run": demo_ids["replicate-a"], "focus": None}
    # a page laid out without its drawing (no request to read with) asks for one
    asked = run.poll(demo_api, key, "initial", None)[0]
    assert asked[0] == DEMO_STEPS
    drawn = run.draw(demo_api, key, "initial", outputs)[-1]
    assert drawn["token"] == "initial" and drawn["version"][0] == DEMO_STEPS
    # while a redraw is in flight (its token is not the drawn one), polling asks for nothing
    assert run.poll(demo_api, key, asked, drawn)[0] is no_update
    # drawn and unchanged (a finished run): no redraw, and polling stops
    pending, line, disabled = run.poll(demo_api, key, "initial", drawn)
    assert pending is no_update and disabled is True
    assert re.fullmatch(rf"finished at [-0-9]+ [:0-9]+ · {DEMO_STEPS} steps", line)
    # the run changed since it was drawn: one redraw is requested
    stale = {"token": "initial", "version": [1, 1, [], "running"]}
    assert run.poll(demo_api, key, "initial", stale)[0] == drawn["version"]
    missing = run.draw(demo_api, {"run": "no-such-run", "focus": None}, "initial", outputs)
    assert "Cannot show run no-such-run" in texts(missing[0])[0]


class Counting(Api):
    """The real API client, counting its requests."""

    def __init__(self, base_url: str, token: str | None = None) -> None:
        super().__init__(base_url, token)
        self.requests = 0

    def request(self, *args: Any, **kwargs: Any) -> Any:
        self.requests += 1
        return super().request(*args, **kwargs)


def test_the_first_drawing_takes_the_page_read_ahead_once(
    demo_url: str, demo_ids: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = [ids.RUN_HEADER, *run.GRAPHS, ids.RUN_FINDINGS, ids.RUN_FINGERPRINT]
    run_id = demo_ids["nan-onset"]
    key = {"run": run_id, "focus": None}
    once = Counting(demo_url)
    fresh = run.draw(once, key, "initial", outputs)
    ahead, api = run.Ahead(), Counting(demo_url)
    ahead.ask(api, run_id, None)
    ahead.ask(api, run_id, None)  # asked twice (the HTML, then the router): read once
    got = run.draw(api, key, "initial", outputs, ahead)
    read = api.requests
    assert read == once.requests  # the drawing asked for nothing more
    assert texts(got[0]) == texts(fresh[0]) and got[-1] == fresh[-1]
    for drawn, again in zip(got[1:6], fresh[1:6], strict=True):
        assert drawn.figure == again.figure  # as sent: dicts with base64 typed arrays
    run.draw(api, key, "initial", outputs, ahead)  # taken once: the next drawing reads
    assert api.requests > read
    # a redraw (a poll's token) reads afresh even with a page read ahead
    ahead.ask(api, run_id, None)
    before = api.requests
    run.draw(api, key, [3, 1, [], "running"], outputs, ahead)
    assert api.requests > before
    # another token (or focus) never gets the page read for the first one
    other = Counting(demo_url, token="someone-else")
    assert run.draw(other, key, "initial", outputs, ahead)[-1] == fresh[-1]
    assert other.requests > 0
    # read too long ago: read again
    monkeypatch.setattr(run, "AHEAD_S", 0.0)
    ahead.ask(api, run_id, 5)
    before = api.requests
    run.draw(api, {"run": run_id, "focus": 5}, "initial", outputs, ahead)
    assert api.requests > before


def test_an_unchanged_runs_page_is_drawn_again_from_what_was_kept(
    demo_url: str, demo_ids: dict[str, str]
) -> None:
    outputs = [ids.RUN_HEADER, *run.GRAPHS, ids.RUN_FINDINGS, ids.RUN_FINGERPRINT]
    run_id = demo_ids["nan-onset"]
    key = {"run": run_id, "focus": None}
    ahead = run.Ahead()
    first = run.draw(Counting(demo_url), key, "initial", outputs, ahead)
    api = Counting(demo_url)
    again = run.draw(api, key, "initial", outputs, ahead)
    assert api.requests == 1  # the run's detail, unchanged: nothing else read or built
    assert again[0] is first[0] and again[-1] == first[-1]
    assert [g.figure for g in again[1:6]] == [g.figure for g in first[1:6]]
    before = api.requests
    ahead.ask(api, run_id, None)  # the page read ahead (its HTML asked for) is kept too
    assert run.draw(api, key, "initial", outputs, ahead)[0] is first[0]
    assert api.requests == before + 1
    # another token or focus is another page; a changed detail draws the page afresh
    other = Counting(demo_url, token="someone-else")
    assert run.draw(other, key, "initial", outputs, ahead)[0] is not first[0]
    at = (demo_url, None, run_id, None)
    detail = Api(demo_url).get(f"/runs/{run_id}")
    ahead.kept.put(at, {**detail, "frames": detail["frames"] - 1}, {})  # drawn before a frame
    before = api.requests
    redrawn = run.draw(api, key, "initial", outputs, ahead)
    assert api.requests > before + 1 and texts(redrawn[0]) == texts(first[0])


def test_the_router_lays_the_run_page_out_drawn(demo_url: str, demo_ids: dict[str, str]) -> None:
    # in a dashboard request the router's reply is the drawn page: no second round trip
    app = create_dash()
    where = urllib.parse.urlsplit(demo_url)
    server = {"SERVER_NAME": where.hostname, "SERVER_PORT": str(where.port)}
    run_id = demo_ids["nan-onset"]
    with app.server.test_request_context(f"/runs/{run_id}", environ_overrides=server):
        page = route(f"/runs/{run_id}", "")
    slots = {c.id: c for c in walk(page) if getattr(c, "id", None)}
    assert slots[ids.RUN_PENDING].data == run.INITIAL
    drawn = slots[ids.RUN_VERSION].data
    assert drawn["token"] == run.INITIAL and drawn["version"][0] == DEMO_STEPS
    for graph_id in run.GRAPHS:
        assert slots[f"{graph_id}-graph"].figure["data"]  # every chart comes with its traces
    assert "First NaN/Inf at step" in " ".join(texts(slots[ids.RUN_HEADER]))
    # a run that is not there: the page says so, and polling has nothing to redraw
    with app.server.test_request_context("/runs/nope", environ_overrides=server):
        missing = {c.id: c for c in walk(route("/runs/nope", "")) if getattr(c, "id", None)}
    assert "Cannot show run nope" in texts(missing[ids.RUN_HEADER])[0]
    assert missing[ids.RUN_VERSION].data is None


def test_the_first_layout_comes_with_the_page_of_its_address(
    demo_url: str, demo_ids: dict[str, str]
) -> None:
    app = create_dash()
    client = app.server.test_client()
    run_id = demo_ids["nan-onset"]

    def layout(referrer: str | None) -> Any:
        headers = {"Referer": referrer} if referrer else {}
        reply = client.get("/_dash-layout", base_url=demo_url, headers=headers)
        assert reply.status_code == 200
        return reply.get_json()

    def ids_in(tree: Any) -> dict[str, Any]:
        found = {}
        stack = [tree]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                props = node.get("props") or {}
                if isinstance(props.get("id"), str):
                    found[props["id"]] = props
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
        return found

    routed = ids_in(layout(f"{demo_url}/runs/{run_id}?step=3"))
    assert routed[ids.ROUTED]["data"] is True
    assert routed[ids.RUN_KEY]["data"] == {"run": run_id, "focus": 3}
    assert routed[f"{ids.RUN_LOSS}-graph"]["figure"]["data"]  # drawn, in this one reply
    assert routed[ids.RUN_VERSION]["data"]["token"] == run.INITIAL
    for foreign in (None, f"http://elsewhere.example/runs/{run_id}"):
        frame = ids_in(layout(foreign))
        assert frame[ids.ROUTED]["data"] is False and ids.RUN_KEY not in frame
    # the router keeps the page the layout came with once, then routes every change
    assert routed_call("/runs/abc", "", True) == [no_update, False]
    page, again = routed_call("/runs/abc", "?step=2", False)
    assert page.children[0].data == {"run": "abc", "focus": 2} and again is no_update


def walk(component: Any) -> list[Any]:
    """``component`` and everything under it."""
    children = getattr(component, "children", None)
    kids = children if isinstance(children, list) else [children] if children is not None else []
    return [component] + [c for kid in kids if hasattr(kid, "to_plotly_json") for c in walk(kid)]


def test_a_page_read_ahead_that_failed_fails_its_drawing_the_same_way(demo_url: str) -> None:
    outputs = [ids.RUN_HEADER, *run.GRAPHS, ids.RUN_FINDINGS, ids.RUN_FINGERPRINT]
    ahead = run.Ahead()
    ahead.ask(Api(demo_url), "no-such-run", None)
    key = {"run": "no-such-run", "focus": None}
    got = run.draw(Api(demo_url), key, "initial", outputs, ahead)
    assert texts(got[0]) == texts(run.draw(Api(demo_url), key, "initial", outputs)[0])
    assert "Cannot show run no-such-run" in texts(got[0])[0]
    ahead.ask(Api(demo_url), "no-such-run", None)
    with pytest.raises(ApiError):
        ahead.take(Api(demo_url), "no-such-run", None)


def test_every_page_loads_plotly_up_front_from_an_address_cached_for_a_year(
    demo_url: str,
) -> None:
    with urllib.request.urlopen(f"{demo_url}/runs/anything") as reply:
        page = reply.read().decode()
    srcs = re.findall(r'<script defer src="([^"]+)"></script>', page)
    package, path, _ = plotly_bundle()  # the cartesian bundle where make install put it
    name = path.rsplit("/", 1)[-1].split(".")[0]
    assert [s.rsplit("/", 1)[-1].split(".")[0] for s in srcs] == [name, "async-graph"]
    assert f"/_dash-component-suites/{package}/" in srcs[0]
    module = gradwatch_dashboard if package == "gradwatch_dashboard" else plotly
    plotly_js = Path(module.__file__).parent / path
    for src in srcs:
        with urllib.request.urlopen(demo_url + src) as reply:
            assert reply.headers["Cache-Control"] == "max-age=31536000"
            body = reply.read()
        assert len(body) > 10_000
    with urllib.request.urlopen(demo_url + srcs[0]) as reply:
        assert reply.read() == plotly_js.read_bytes()
    # the layout is asked for from the head, before any script is loaded
    early = page.index("/_dash-layout")
    assert early < page.index("<script defer") and early < page.index("<script src")


def test_compare_view_of_the_replicate_group(demo_api: Api, demo_ids: dict[str, str]) -> None:
    group = runs.group_of(demo_api.get(f"/runs/{demo_ids['drifting']}"))
    got = compare.compare_view(demo_api, group, [])
    assert set(got["runs"]) == {demo_ids[n] for n in ("replicate-a", "replicate-b", "drifting")}
    curves = got[ids.CMP_CURVES]
    assert {t.name for t in curves.data} == {"replicate-a", "replicate-b", "drifting"}
    assert got[ids.CMP_FINGERPRINT].children[0].id == "fingerprint-diff"
    picked = [demo_ids[n] for n in ("replicate-a", "replicate-b", "drifting")]
    got = compare.compare_view(demo_api, None, picked)
    assert got["runs"] == picked
    diff = got[ids.CMP_DIFF]  # the difference, not overlaid curves: identical in words
    split = DEMO_STEPS // 3 + 1
    assert [t.name for t in diff.data] == [f"drifting (identical before step {split})"]
    assert diff.layout.yaxis.type == "log" and min(diff.data[0].x) == split
    words = [a.text for a in diff.layout.annotations]
    assert words == [f"replicate-b: identical to replicate-a on all {DEMO_STEPS} shared steps"]
    heat = got[ids.CMP_TENSORS]  # drifting vs replicate-a, tensors × steps
    assert heat.data[0].type == "heatmap" and "drifting vs replicate-a" in heat.layout.title.text
    assert f"first differs: step {split}" in [a.text for a in heat.layout.annotations]
    table = got[ids.CMP_FINGERPRINT].children[0]
    header = [th.children for th in table.children[0].children.children]
    assert header == ["field", "replicate-a", "replicate-b", "drifting"]  # every run a column
    same = compare.compare_view(demo_api, None, picked[:2])
    assert "identical" in same[ids.CMP_DIFF].layout.annotations[0].text
    assert "identical" in same[ids.CMP_TENSORS].layout.annotations[0].text
    empty = compare.compare_view(demo_api, None, [demo_ids["replicate-a"]])
    assert texts(empty[ids.CMP_VERDICT]) == ["Pick a replicate group, or two or more runs."]


def test_alerts_view_says_what_is_missing_or_shows_tables(demo_api: Api) -> None:
    table, _, _ = alerts.alerts_view(demo_api)
    assert alerts.add_rule(demo_api, "", None, None, None) == "A rule needs a project."
    try:
        demo_api.get("/alert-rules")
    except ApiError as e:  # this branch has no alerts API yet (issue 5)
        missing = e.status
    else:
        missing = 0
    if missing:
        assert missing == 404
        assert texts(table) == ["Alerts are not available: this server has no alerts API."]
    else:
        assert texts(table) == ["No alerts yet."]


def test_router_picks_pages_and_says_when_there_is_none() -> None:
    assert isinstance(route("/", ""), html.Div)
    page = route("/runs/abc", "?step=12")
    store = page.children[0]
    assert store.data == {"run": "abc", "focus": 12}
    assert texts(route("/nowhere", None)) == ["No page at /nowhere. Start from the list of runs."]


def figures_in(part: Any) -> list[go.Figure]:
    """Every figure in a page's parts: figures, and graphs' figures in components."""
    if isinstance(part, go.Figure):
        return [part]
    if part is None or isinstance(part, str | int | float):
        return []
    if isinstance(part, dict):
        return [f for v in part.values() for f in figures_in(v)]
    if isinstance(part, list | tuple):
        return [f for v in part for f in figures_in(v)]
    found = figures_in(getattr(part, "figure", None)) if hasattr(part, "figure") else []
    return found + figures_in(getattr(part, "children", None))


def test_every_trace_of_the_demo_pages_is_one_the_pages_plotly_bundle_draws(
    demo_api: Api, demo_ids: dict[str, str]
) -> None:
    # invariant: Plotly skips a trace type its bundle lacks (a chart silently missing it),
    # so every run page's and the comparison's traces are of the cartesian bundle's types
    figs = [
        f for i in demo_ids.values() for f in figures_in(run.view(run.fetch(demo_api, i, None)))
    ]
    group = runs.group_of(demo_api.get(f"/runs/{demo_ids['drifting']}"))
    figs += figures_in(compare.compare_view(demo_api, group, []))
    types = {t.type for f in figs for t in f.data}
    assert {"scatter", "heatmap", "bar"} <= types <= CARTESIAN_TRACES


def test_pages_load_the_cartesian_bundle_only_when_it_is_the_plotly_js_of_the_figures(
    tmp_path: Path,
) -> None:
    # invariant: figures written for one plotly.js version are drawn by that version; the
    # full bundle of the plotly package otherwise (missing or another version's bundle)
    from plotly.offline import get_plotlyjs_version

    version = get_plotlyjs_version()
    full = ("plotly", "package_data/plotly.min.js", version)
    assert plotly_bundle(str(tmp_path)) == full  # not installed
    bundle = tmp_path / "vendor" / "plotly-cartesian.min.js"
    bundle.parent.mkdir()
    bundle.write_text("/**\n* plotly.js (cartesian - minified) v0.0.1\n*/\n")
    assert plotly_bundle(str(tmp_path)) == full  # another version
    bundle.write_text(f"/**\n* plotly.js (cartesian - minified) v{version}\n*/\n")
    got = plotly_bundle(str(tmp_path))
    assert got == ("gradwatch_dashboard", "vendor/plotly-cartesian.min.js", version)
