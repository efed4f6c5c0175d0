"""Run-page render time in a real browser, for a 100k-step × 300-tensor run.

A ``gradwatch serve`` subprocess (SQLite) ingests one run of ``--steps`` (100,000) steps ×
``--tensors`` (300) tensors × 5 statistics over HTTP (the frames of ``ingest.py``, with a
burst of NaN and +Inf gradients in one layer so the marks are drawn too). Headless Chromium
(Debian's ``chromium`` + ``chromium-driver``) then opens ``/runs/<id>`` ``--reps`` times,
each in a fresh page load. Render time: from the navigation to the moment the header holds
the run and all five Plotly graphs hold their data (polled every 20 ms), as the user sees
it. Also reported: the server time of the page's data requests (the callback).

Usage::

    python benchmarks/dashboard.py                          # full size, results/dashboard.*
    python benchmarks/dashboard.py --quick --out /tmp/d.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent
sys.path[:0] = [str(ROOT), str(ROOT.parent)]

from ingest import Server, headers, start_record, steps_record  # noqa: E402

from gradwatch.transport.sender import INGEST_PATH, HTTPTransport  # noqa: E402
from gradwatch.wire import encode_frame  # noqa: E402
from tests.dashboard.browser import chromium  # noqa: E402

PER_FRAME = 500
READY = """
const header = document.getElementById('run-title');
const busy = document.querySelector('[data-dash-is-loading="true"]');
const graphs = [...document.querySelectorAll('.js-plotly-plot')];
return Boolean(header) && !busy && graphs.length === 5 && graphs.every(g => g._fullLayout)
    && graphs.slice(0, 4).every(g => g.data && g.data.length);
"""


def load_run(url: str, steps: int, tensors: int) -> str:
    """Ingest one run; NaN and +Inf gradients in tensor 7 around the middle."""
    run = f"dash-{uuid.uuid4().hex[:8]}"
    rng = np.random.default_rng(3)
    transport = HTTPTransport(url)
    transport.post(INGEST_PATH, encode_frame(1, start_record(run, tensors)), headers(run), 60)
    for i in range(steps // PER_FRAME):
        record = steps_record(1 + i * PER_FRAME, PER_FRAME, tensors, rng)
        if i == steps // PER_FRAME // 2:
            stats = np.frombuffer(record.arrays["stats"].data, dtype="<f4").copy()
            stats = stats.reshape(PER_FRAME, tensors, -1)
            stats[100:, 7, 0] = np.nan
            stats[50:100, 7, 0] = np.inf
            record.arrays["stats"] = type(record.arrays["stats"]).from_buffer(
                "f4", stats.shape, stats.tobytes()
            )
        transport.post(INGEST_PATH, encode_frame(2 + i, record), headers(run), 300)
    transport.close()
    return run


def render_times(url: str, run: str, reps: int) -> list[float]:
    """Seconds from navigation to a fully drawn run page, ``reps`` fresh loads."""
    driver = chromium()
    try:
        driver.get(f"{url}/")  # warm the browser cache of Dash's scripts, as a user would
        time.sleep(2)
        out = []
        for _ in range(reps):
            driver.get("about:blank")
            t0 = time.perf_counter()
            driver.get(f"{url}/runs/{run}")
            while not driver.execute_script(READY):
                if time.perf_counter() - t0 > 120:
                    raise RuntimeError("the run page did not render within 120 s")
                time.sleep(0.02)
            out.append(time.perf_counter() - t0)
        return out
    finally:
        driver.quit()


def callback_times(url: str, run: str, reps: int) -> list[float]:
    """Seconds the run page's data requests take (the callback's work, no browser)."""
    from gradwatch.dashboard.api import Api
    from gradwatch.dashboard.pages.run import fetch, view

    api, out = Api(url), []
    for _ in range(reps):
        t0 = time.perf_counter()
        view(fetch(api, run, None))
        out.append(time.perf_counter() - t0)
    return out


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "median_s": round(statistics.median(ordered), 3),
        "p95_s": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 3),
        "max_s": round(ordered[-1], 3),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--tensors", type=int, default=300)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="5,000 steps, 3 reps (a smoke run)")
    p.add_argument("--out", default=str(ROOT / "results" / "dashboard.json"))
    args = p.parse_args()
    if args.quick:
        args.steps, args.reps = 5000, 3
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(f"sqlite:///{Path(tmp) / 'bench.db'}", Path(tmp) / "data")
        try:
            t0 = time.perf_counter()
            run = load_run(server.url, args.steps, args.tensors)
            load_s = time.perf_counter() - t0
            browser = render_times(server.url, run, args.reps)
            callback = callback_times(server.url, run, args.reps)
        finally:
            server.stop()
    report: dict[str, Any] = {
        "command": "python benchmarks/dashboard.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}",
        "steps": args.steps,
        "tensors": args.tensors,
        "load_seconds": round(load_s, 1),
        "reps": args.reps,
        "browser_render": summary(browser),
        "callback": summary(callback),
        "goal_s": 2.0,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    b, c = report["browser_render"], report["callback"]
    md = (
        "# Dashboard run-page render time\n\n"
        f"`{report['command']}` on {report['machine']}\n\n"
        f"Run: {args.steps:,} steps × {args.tensors} tensors (ingested in {report['load_seconds']}"
        " s). Headless Chromium, fresh page load each time; the goal is ≤ 2 s.\n\n"
        "| what | median | p95 | max |\n|---|---:|---:|---:|\n"
        f"| run page drawn in the browser | {b['median_s']} s | {b['p95_s']} s | {b['max_s']} s |\n"
        f"| its data requests + figures (server side) | {c['median_s']} s | {c['p95_s']} s | "
        f"{c['max_s']} s |\n"
    )
    out.with_suffix(".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
