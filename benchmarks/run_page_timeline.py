"""Where a run page's load time goes in the browser: when its data arrive and how long each
Plotly drawing takes, for the 100k-step × 300-tensor run of ``dashboard.py`` (no load).

A ``gradwatch serve`` subprocess (SQLite) ingests the run (``dashboard.load_run``); headless
Chromium visits the runs page once, then loads ``/runs/<id>`` ``--reps`` times. A script
injected into every page records, on the page's own clock (ms from the navigation): when
``DOMContentLoaded`` fired, when Plotly was defined, and for each graph how long its
``Plotly.react``/``newPlot`` call took to return (the synchronous drawing work). The
browser's resource timing gives when the reply with the figures (the largest
``/_dash-layout`` or ``/_dash-update-component`` answer) arrived, and CDP's
``Performance.getMetrics`` the renderer's main-thread task, script, layout and style time
per load. Figures that depend less on the machine's load are reported too: the bytes of
the reply with the figures, and the CPU time (``/proc``) of the server process and of
Chromium's processes by kind (renderer, GPU, browser, utility) from the navigation until
the page is drawn (for the server: the HTML, the layout with its figures, the callbacks
meanwhile). The report gives, per phase, the first load (Plotly compiled without V8's code
cache), the median over the loads after the first two, and the loads in order;
``--browsers B`` repeats the loads in B fresh browsers (the first load's figures are then
the median of their first loads). ``--server-only`` skips the browser: it asks for the
page's HTML and its layout (``/_dash-layout`` with the page as ``Referer``, as the browser
does) ``--reps`` times and reports the layout's bytes and the server's CPU time per page,
the first (nothing cached) apart.

Usage::

    python benchmarks/run_page_timeline.py                 # 100,000 steps, 10 loads
    python benchmarks/run_page_timeline.py --reps 4 --out /tmp/t.json
    python benchmarks/run_page_timeline.py --reps 3 --browsers 4   # 4 cold first loads
    python benchmarks/run_page_timeline.py --server-only --reps 20 --out /tmp/s.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
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
return biggest ? [biggest.responseEnd, biggest.encodedBodySize] : null;
"""


def phases(
    marks: list[list[Any]],
    data_at: float | None,
    total_ms: float,
    metrics: dict[str, float],
    reply_bytes: int | None = None,
    server_cpu_s: float | None = None,
    browser_cpu_s: dict[str, float] | None = None,
) -> dict[str, float]:
    """One load's phases in ms (and the reply's bytes, when given)."""
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
    if "LayoutDuration" in metrics:
        out["of which layout"] = 1000 * metrics["LayoutDuration"]
        out["of which style"] = 1000 * metrics.get("RecalcStyleDuration", 0.0)
    if reply_bytes is not None:
        out["figures' reply, bytes"] = float(reply_bytes)
    if server_cpu_s is not None:
        out["server CPU during the load"] = 1000 * server_cpu_s
    if browser_cpu_s is not None:
        out["browser CPU during the load"] = 1000 * sum(browser_cpu_s.values())
        for kind, seconds in sorted(browser_cpu_s.items()):
            out[f"of which {kind}"] = 1000 * seconds
    out["page drawn (READY)"] = total_ms
    return out


def measure(
    url: str, run: str, reps: int, cpu: Callable[[], float] | None = None
) -> list[dict[str, float]]:
    """``phases`` of ``reps`` fresh loads of the run page, after one visit of ``/``; with
    ``cpu`` (the server's CPU seconds so far), the server's CPU time of each load."""
    driver = chromium()
    browser = driver.service.process.pid  # chromedriver: Chromium's processes are its own
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": dashboard.DRAWINGS})
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": MARKS})
    try:
        driver.get(f"{url}/")
        time.sleep(2)
        loads = []
        for _ in range(reps):
            driver.get("about:blank")
            driver.execute_cdp_cmd("Performance.enable", {})  # its counters start at 0
            time.sleep(0.3)  # the previous page's last requests answered
            cpu0 = cpu() if cpu else 0.0
            browser0 = cpu_by_kind(browser)
            t0 = time.perf_counter()
            driver.get(f"{url}/runs/{run}")
            while not driver.execute_script(dashboard.READY):
                if time.perf_counter() - t0 > 120:
                    raise RuntimeError("the run page did not render within 120 s")
                time.sleep(0.02)
            total = 1000 * (time.perf_counter() - t0)
            server_cpu = cpu() - cpu0 if cpu else None
            time.sleep(0.3)  # and the relayout dcc.Graph asks for 100 ms after each drawing
            browser1 = cpu_by_kind(browser)
            browser_cpu = {k: v - browser0.get(k, 0.0) for k, v in browser1.items()}
            got = driver.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]
            driver.execute_cdp_cmd("Performance.disable", {})
            metrics = {m["name"]: m["value"] for m in got}
            marks = driver.execute_script("return window.__gwMarks")
            reply = driver.execute_script(DATA_AT)
            at, size = reply if reply else (None, None)
            loads.append(phases(marks, at, total, metrics, size, server_cpu, browser_cpu))
        return loads
    finally:
        driver.quit()


def cpu_by_kind(root: int) -> dict[str, float]:
    """CPU seconds so far of ``root``'s descendants by Chromium process kind (``--type=``:
    renderer, gpu-process, utility; the browser process is ``browser``)."""
    out: dict[str, float] = {}
    for pid in dashboard._Watched(root).pids():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").split()
        except OSError:
            continue
        if pid == root or not argv or b"chrom" not in argv[0]:  # Chromium sets its title:
            continue  # its arguments are one string there
        kind = next((a[7:].decode() for a in argv if a.startswith(b"--type=")), "browser")
        ticks = int(fields[11]) + int(fields[12])
        out[kind] = out.get(kind, 0.0) + ticks / os.sysconf("SC_CLK_TCK")
    return out


def server_only(url: str, run: str, reps: int, cpu: Callable[[], float]) -> list[dict[str, float]]:
    """Per page: the server's CPU ms for the page's HTML and its layout (as the browser
    asks for them: the HTML first, which starts reading the page ahead, then
    ``/_dash-layout`` with the page as ``Referer``), the layout's bytes, and the wall time."""
    page = f"{url}/runs/{run}"
    out = []
    for _ in range(reps):
        time.sleep(0.3)
        cpu0, t0 = cpu(), time.perf_counter()
        with urllib.request.urlopen(page) as reply:
            reply.read()
        ask = urllib.request.Request(f"{url}/_dash-layout", headers={"Referer": page})
        with urllib.request.urlopen(ask) as reply:
            size = len(reply.read())
        wall = time.perf_counter() - t0
        out.append(
            {
                "server CPU, HTML + layout": 1000 * (cpu() - cpu0),
                "layout, bytes": float(size),
                "HTML + layout, wall": 1000 * wall,
            }
        )
    return out


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
        "| phase | first load | median ms |",
        "|---|---:|---:|",
    ]
    first = report.get("first_ms") or {}
    lines += [
        f"| {k} | {first[k]:,.0f} | {v:,.0f} |" if k in first else f"| {k} | | {v:,.0f} |"
        for k, v in report["median_ms"].items()
    ]
    lines += ["", "Whole loads in order (ms): " + ", ".join(f"{t:,}" for t in report["loads"])]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--tensors", type=int, default=300)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--server-only", action="store_true", help="no browser: the layout's cost")
    p.add_argument(
        "--browsers", type=int, default=1, help="fresh browsers, each loading the page --reps times"
    )
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
            if args.server_only:
                loads = server_only(server.url, run, args.reps, server.cpu)
            else:
                loads, firsts = [], []
                for _ in range(args.browsers):
                    got = measure(server.url, run, args.reps, server.cpu)
                    loads += got if not loads else got[1:]
                    firsts.append(got[0])
        finally:
            server.stop()
    if args.server_only:
        later = loads[1:] or loads
        keys = list(loads[0])
        report = {
            **dashboard.report_head("run_page_timeline.py", args),
            "first": {k: round(v, 1) for k, v in loads[0].items()},
            "median_after_first": {
                k: round(statistics.median(d[k] for d in later), 1) for k in keys
            },
            "mean_after_first": {k: round(statistics.mean(d[k] for d in later), 1) for k in keys},
            "per_load": [{k: round(v, 1) for k, v in d.items()} for d in loads],
        }
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
        print(json.dumps(report, indent=2))
        return
    counted = loads[2:] or loads
    keys = [k for k in loads[-1] if all(k in load for load in counted)]
    report: dict[str, Any] = {
        **dashboard.report_head("run_page_timeline.py", args),
        "first_ms": {
            k: round(statistics.median(f[k] for f in firsts), 1)
            for k in firsts[0]
            if all(k in f for f in firsts)
        },
        "first_loads": [round(f["page drawn (READY)"]) for f in firsts],
        "median_ms": {k: round(statistics.median(d[k] for d in counted), 1) for k in keys},
        "loads": [round(d["page drawn (READY)"]) for d in loads],
        "per_load_ms": [{k: round(v, 1) for k, v in d.items()} for d in loads],
    }
    dashboard.write_report(report, Path(args.out), markdown)


if __name__ == "__main__":
    main()
