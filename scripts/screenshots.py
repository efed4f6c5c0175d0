"""README screenshots of every dashboard page, from a real demo run.

Records the demo's five trainings (``gradwatch demo --no-serve``) and the structure runs
of ``tests/server/structure_runs.py`` (clipping dropped at step 30; a replicate group of
three, one with a frozen embedding), serves them with
``gradwatch serve`` and photographs each page in headless Chromium into
``docs/screenshots/``.

Usage::

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots] [--steps 300]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.dashboard.browser import chromium, drawn, wait  # noqa: E402
from tests.server.structure_runs import record  # noqa: E402

WIDTH = 1400


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> dict:  # type: ignore[type-arg]
    with urllib.request.urlopen(url, timeout=30) as reply:
        return dict(json.loads(reply.read()))


def shoot(driver, url: str, path: Path, graphs: int, ready: str) -> None:  # type: ignore[no-untyped-def]
    driver.set_window_size(WIDTH, 1000)
    driver.get(url)
    shown = lambda: driver.find_elements("id", ready) and driver.find_element("id", ready).text  # noqa: E731
    wait(driver, shown, ready)
    if graphs:
        drawn(driver, graphs)
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(WIDTH, min(max(int(height) + 40, 900), 5000))
    time.sleep(1.5)  # let Plotly resize to the new window
    driver.save_screenshot(str(path))
    print(f"wrote {path}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    p.add_argument("--steps", type=int, default=300)
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        gw = [sys.executable, "-m", "gradwatch"]
        subprocess.run([*gw, "demo", "--no-serve", "--data-dir", tmp, "--steps", str(args.steps)],
                       check=True)  # fmt: skip
        structure = record(data)  # clipping dropped at step 30; a replicate group of three
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = subprocess.Popen([*gw, "serve", "--port", str(port), "--data-dir", tmp],
                                  stderr=subprocess.DEVNULL)  # fmt: skip
        driver = chromium(WIDTH, 1000)
        try:
            wait(driver, lambda: _count(url) == 5 + len(structure), "the runs", 120)
            # the server's cross-run check (the drifting run's repro-drift) and its alert
            wait(driver, lambda: "repro-drift" in _alerted(url), "the drift alert", 120)
            runs = {r["name"]: r for r in get(f"{url}/api/v1/runs")["data"]}
            group = f"{runs['drifting']['config_hash']}:{runs['drifting']['code_hash']}"
            shoot(driver, f"{url}/", out / "runs.png", 0, "runs-list")
            shoot(driver, f"{url}/runs/{runs['nan-onset']['id']}", out / "run-nan-onset.png", 7,
                  "run-explain")  # fmt: skip
            shoot(driver, f"{url}/runs/{runs['stale-grad']['id']}?step=2",
                  out / "run-stale-grad.png", 7, "run-explain")  # fmt: skip
            shoot(driver, f"{url}/runs/{runs['drifting']['id']}", out / "run-drifting.png", 7,
                  "run-explain")  # fmt: skip
            shoot(driver, f"{url}/compare?group={group}", out / "compare.png", 3, "cmp-words")
            shoot(driver, f"{url}/runs/{structure['clip-dropped']}", out / "run-structure.png", 5,
                  "run-structure-list")  # fmt: skip
            replicates = ",".join(structure[f"twin-{x}"] for x in "abc")
            shoot(driver, f"{url}/compare?runs={replicates}", out / "compare-invariants.png", 3,
                  "cmp-breaks")  # fmt: skip
            shoot(driver, f"{url}/alerts", out / "alerts.png", 0, "alerts-table")
        finally:
            driver.quit()
            server.terminate()
            server.wait(30)
        del data


def _alerted(url: str) -> set[str]:
    try:
        return {str(a["check"]) for a in get(f"{url}/api/v1/alerts")["data"]}
    except OSError:
        return set()


def _count(url: str) -> int:
    try:
        return int(get(f"{url}/api/v1/runs")["count"])
    except OSError:
        return -1


if __name__ == "__main__":
    main()
