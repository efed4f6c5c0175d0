"""Where a run page's load time goes in the browser: when its data arrive and how long each
Plotly drawing takes, for the 100k-step × 300-tensor run of ``dashboard.py`` (no load).

A ``gradwatch serve`` subprocess (SQLite) ingests the run (``dashboard.load_run``); headless
Chromium visits the runs page once, then loads ``/runs/<id>`` ``--reps`` times. A script
injected into every page records, on the page's own clock (ms from the navigation): when
``DOMContentLoaded`` fired, when Plotly was defined, and for each graph how long its
``Plotly.react``/``newPlot`` call took to return (the synchronous drawing work). The
browser's resource timing gives when the reply with the figures (the largest
``/_dash-layout`` or ``/_dash-update-component`` answer) arrived, and CDP's
``Performance.getMetrics`` the renderer's main-thread task and script time per load. The
report gives, per phase, the median over the loads after the first two (the first ones
compile Plotly without V8's code cache) and the loads in order.

Usage::

    python benchmarks/run_page_timeline.py                 # 100,000 steps, 10 loads
    python benchmarks/run_page_timeline.py --reps 4 --out /tmp/t.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
sys.path[:0] = [str(ROOT), str(ROOT.parent)]

import capacity  # noqa: E402

import dashboard  # noqa: E402
from tests.dashboard.browser import chromium  # noqa: E402

# after dashboard.DRAWINGS (which READY relies on) in every page: marks on the page's clock,
# and each Plotly drawing's synchronous time per graph (the graph's container id)
MARKS = """
window.__gwMarks = [];
document.addEventListener('DOMContentLoaded',
    () => window.__gwMarks.push(['dom', '', performance.now(), 0]));
(window.__gwOnPlotly = window.__gwOnPlotly || []).push(function (P) {
    window.__gwMarks.push(['plotly', '', performance.now(), 0]);
    for (const name of ['newPlot', 'react']) {
        const counted = P[name];
        P[name] = function (gd, ...rest) {
            const t0 = performance.now();
            const drawing = counted.call(this, gd, ...rest);
            const id = gd && gd.parentElement ? gd.parentElement.id : '';
            window.__gwMarks.push(['draw', id, t0, performance.now() - t0]);
            return drawing;
        };
    }
});
"""
DATA_AT = """
const replies = performance.getEntriesByType('resource')
    .filter(r => r.name.includes('/_dash-update-component') || r.name.includes('/_dash-layout'));
let biggest = null;
for (const r of replies) {
    if (!biggest || r.encodedBodySize > biggest.encodedBodySize) { biggest = r; }
}
return biggest ? biggest.responseEnd : null;
"""


def phases(
    marks: list[list[Any]], data_at: float | None, total_ms: float, metrics: dict[str, float]
) -> dict[str, float]:
    """One load's phases in ms."""
    out: dict[str, float] = {}
    first_draw = None
    for kind, graph, at, took in marks:
        if kind == "dom":
            out["DOMContentLoaded"] = at
        elif kind == "plotly":
            out["Plotly defined"] = at
        elif kind == "draw":
            first_draw = at if first_draw is None else min(first_draw, at)
            key = f"draw {graph}"
            out[key] = out.get(key, 0.0) + took
    out["drawing, all graphs (sync)"] = sum(v for k, v in out.items() if k.startswith("draw "))
    if data_at is not None:
        out["figures' reply arrived"] = data_at
        if first_draw is not None:
            out["reply to first drawing"] = first_draw - data_at
    out["renderer main thread busy"] = 1000 * metrics.get("TaskDuration", 0.0)
    out["of which script"] = 1000 * metrics.get("ScriptDuration", 0.0)
    out["page drawn (READY)"] = total_ms
    return out


def measure(url: str, run: str, reps: int) -> list[dict[str, float]]:
    """``phases`` of ``reps`` fresh loads of the run page, after one visit of ``/``."""
    driver = chromium()
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": dashboard.DRAWINGS})
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": MARKS})
    try:
        driver.get(f"{url}/")
        time.sleep(2)
        loads = []
        for _ in range(reps):
            driver.get("about:blank")
            driver.execute_cdp_cmd("Performance.enable", {})  # its counters start at 0
            t0 = time.perf_counter()
            driver.get(f"{url}/runs/{run}")
            while not driver.execute_script(dashboard.READY):
                if time.perf_counter() - t0 > 120:
                    raise RuntimeError("the run page did not render within 120 s")
                time.sleep(0.02)
            total = 1000 * (time.perf_counter() - t0)
            got = driver.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]
            driver.execute_cdp_cmd("Performance.disable", {})
            metrics = {m["name"]: m["value"] for m in got}
            marks = driver.execute_script("return window.__gwMarks")
            loads.append(phases(marks, driver.execute_script(DATA_AT), total, metrics))
        return loads
    finally:
        driver.quit()


def markdown(report: dict[str, Any]) -> str:
    """The report as a table of medians, and the loads in order."""
    lines = [
        "# Run page: where the load time goes",
        "",
        f"`{report['command']}` ({report['date']}) on {report['machine']}",
        "",
        f"Run: {report['steps']:,} steps × {report['tensors']} tensors, no other load. "
        f"Headless Chromium, {report['reps']} fresh loads after one visit of the runs page; "
        "ms from the navigation (the page's clock), median of the loads after the first two "
        '(those compile Plotly without V8\'s code cache). A "draw" row is the synchronous '
        "work of the graph's `Plotly.react` call; the main thread's busy and script time "
        "are CDP's `TaskDuration` and `ScriptDuration`.",
        "",
        "| phase | median ms |",
        "|---|---:|",
    ]
    lines += [f"| {k} | {v:,.0f} |" for k, v in report["median_ms"].items()]
    lines += ["", "Whole loads in order (ms): " + ", ".join(f"{t:,}" for t in report["loads"])]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--tensors", type=int, default=300)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--out", default=str(ROOT / "results" / "run_page_timeline.json"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = capacity.Server(
            f"sqlite:///{Path(tmp) / 'bench.db'}",
            Path(tmp) / "data",
            Path(tmp) / "server.log",
            sys.executable,
        )
        try:
            run = dashboard.load_run(server.url, args.steps, args.tensors)
            dashboard.settle(server)
            loads = measure(server.url, run, args.reps)
        finally:
            server.stop()
    counted = loads[2:] or loads
    keys = [k for k in loads[-1] if all(k in load for load in counted)]
    report: dict[str, Any] = {
        **dashboard.report_head("run_page_timeline.py", args),
        "median_ms": {k: round(statistics.median(d[k] for d in counted), 1) for k in keys},
        "loads": [round(d["page drawn (READY)"]) for d in loads],
        "per_load_ms": [{k: round(v, 1) for k, v in d.items()} for d in loads],
    }
    dashboard.write_report(report, Path(args.out), markdown)


if __name__ == "__main__":
    main()
