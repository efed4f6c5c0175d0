"""Before/after of the run page's load time in one browser, the two versions' loads
interleaved, optionally behind an emulated network round trip.

Two ``gradwatch serve`` subprocesses (SQLite), one per interpreter (``--before``: another
checkout's venv; ``--after``: this one's), each ingest the 100k-step × 300-tensor run of
``dashboard.py``. One headless Chromium visits each runs page once, then loads the two run
pages in turn, ``--reps`` times each, timing each load until the page is drawn
(``dashboard.READY``: header shown, no callback in flight, all five graphs drawn). Taking
turns puts both versions on the same machine state, which on the shared 2-core machine
drifts within minutes by more than a small change does. ``--latency-ms L`` adds L ms to
every request the page makes (CDP ``Network.emulateNetworkConditions``; cached scripts come
from the browser's cache and are not delayed), as a server across a network would: the
number of round trips the page waits for one after the other then shows.

Usage::

    python benchmarks/run_page_ab.py --before /work/wt/old/.venv/bin/python
    python benchmarks/run_page_ab.py --before OLD_PY --latency-ms 50 --out /tmp/ab.json
"""

from __future__ import annotations

import argparse
import os
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

NAMES = ("before", "after")
STATE = """
return {
    title: !!document.getElementById('run-title'),
    loading: [...document.querySelectorAll('[data-dash-is-loading="true"]')].map(e => e.id),
    graphs: [...document.querySelectorAll('.js-plotly-plot')].map(
        g => [g.parentElement.id, !!g._fullLayout, g.__gwDrawnAt, g.__gwPending]),
    text: document.body.innerText.slice(0, 300),
};"""


def counted(times: list[float]) -> list[float]:
    """The loads that count: all but each version's first two (those compile Plotly without
    V8's code cache)."""
    return times[2:] or times


def summary(times: list[float]) -> dict[str, float]:
    """Median and slowest of the counted loads, in ms; and p95 of all loads, the cold first
    ones included (``dashboard.summary``'s rank)."""
    kept = counted(times)
    every = dashboard.summary([t / 1000 for t in times])
    return {
        "median_ms": round(statistics.median(kept)),
        "max_ms": round(max(kept)),
        "p95_all_ms": round(1000 * every["p95_s"]),
        "median_all_ms": round(1000 * every["median_s"]),
    }


def measure(urls: dict[str, tuple[str, str]], reps: int, latency_ms: float) -> dict[str, list]:
    """Load each version's run page ``reps`` times, taking turns; ms per load."""
    driver = chromium()
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": dashboard.DRAWINGS})
    if latency_ms:
        driver.execute_cdp_cmd("Network.enable", {})
        conditions = {"offline": False, "latency": latency_ms}
        conditions |= {"downloadThroughput": -1, "uploadThroughput": -1}
        driver.execute_cdp_cmd("Network.emulateNetworkConditions", conditions)
    times: dict[str, list] = {name: [] for name in urls}
    try:
        for url, _ in urls.values():
            driver.get(f"{url}/")
            time.sleep(2)
        for _ in range(reps):
            for name, (url, run) in urls.items():
                driver.get("about:blank")
                t0 = time.perf_counter()
                driver.get(f"{url}/runs/{run}")
                while not driver.execute_script(dashboard.READY):
                    if time.perf_counter() - t0 > 120:
                        state = driver.execute_script(STATE)
                        raise RuntimeError(
                            f"the {name} run page did not render within 120 s: {state}"
                        )
                    time.sleep(0.02)
                times[name].append(round(1000 * (time.perf_counter() - t0)))
        return times
    finally:
        driver.quit()


def markdown(report: dict[str, Any]) -> str:
    """The report: medians of the counted loads, and every load in order."""
    latency = report["latency_ms"]
    lines = [
        "# Run page: before and after, loads taking turns",
        "",
        f"`{report['command']}` ({report['date']}) on {report['machine']}",
        "",
        f"Run: {report['steps']:,} steps × {report['tensors']} tensors in each of two servers "
        f"(before: `{report['before']}`, after: `{report['after']}`); one headless Chromium "
        f"loads the two run pages in turn, {report['reps']} times each, "
        + (f"every request {latency:g} ms later (emulated)" if latency else "on loopback")
        + "; ms from the navigation until the page is drawn. Median and slowest of each "
        "version's loads after its first two; median and p95 of all its loads, the cold "
        f"first one included (p95: the {dashboard.p95_rank(report['reps'])} of "
        f"{report['reps']}).",
        "",
        "| version | median ms | slowest ms | all loads: median ms | all loads: p95 ms |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {name} | {report['summary'][name]['median_ms']:,} | "
        f"{report['summary'][name]['max_ms']:,} | "
        f"{report['summary'][name].get('median_all_ms', 0):,} | "
        f"{report['summary'][name].get('p95_all_ms', 0):,} |"
        for name in NAMES
    ]
    lines += [""]
    lines += [
        f"Loads in order, {name} (ms): " + ", ".join(f"{t:,}" for t in report["loads_ms"][name])
        for name in NAMES
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True, help="the interpreter of the version before")
    p.add_argument("--after", default=sys.executable, help="the interpreter of the version after")
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--tensors", type=int, default=300)
    p.add_argument("--reps", type=int, default=12)
    p.add_argument("--latency-ms", type=float, default=0.0)
    p.add_argument("--out", default=str(ROOT / "results" / "run_page_ab.json"))
    args = p.parse_args()
    servers: list[capacity.Server] = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            urls = {}
            for name, python in zip(NAMES, (args.before, args.after), strict=True):
                server = capacity.Server(
                    f"sqlite:///{Path(tmp) / f'{name}.db'}",
                    Path(tmp) / f"{name}-data",
                    Path(tmp) / f"{name}.log",
                    python,
                )
                servers.append(server)
                urls[name] = (server.url, dashboard.load_run(server.url, args.steps, args.tensors))
                dashboard.settle(server)
            load_avg = os.getloadavg()[0]
            times = measure(urls, args.reps, args.latency_ms)
            load_avg = max(load_avg, os.getloadavg()[0])
        finally:
            for server in servers:
                server.stop()
    report: dict[str, Any] = {
        **dashboard.report_head("run_page_ab.py", args),
        "latency_ms": args.latency_ms,
        "before": args.before,
        "after": args.after,
        "summary": {name: summary(times[name]) for name in NAMES},
        "loads_ms": times,
    }
    report["machine"] += f", load average {load_avg:.1f} (1 min, highest while measuring)"
    dashboard.write_report(report, Path(args.out), markdown)


if __name__ == "__main__":
    main()
