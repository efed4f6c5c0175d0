"""``gradwatch demo``: five real trainings, each telling its story in what it recorded."""

from __future__ import annotations

import subprocess
import sys

from gradwatch_dashboard.api_client import Api
from gradwatch_dashboard.values import floats
from tests.dashboard.conftest import DEMO_STEPS


def loss(api: Api, run_id: str) -> tuple[list[int], list[float]]:
    series = api.get(f"/runs/{run_id}/series", metric="loss", points=10_000)["data"][0]
    return series["steps"], floats(series["values"])


def checks(api: Api, run_id: str) -> dict[str, int]:
    found = api.get(f"/runs/{run_id}/findings")["data"]
    first: dict[str, int] = {}
    for f in found:
        first.setdefault(f["check"], f["step"])
    return first


def test_demo_records_five_runs_with_their_stories(demo_api: Api, demo_ids: dict[str, str]) -> None:
    assert sorted(demo_ids) == ["drifting", "nan-onset", "replicate-a", "replicate-b", "stale-grad"]
    runs = {r["name"]: r for r in demo_api.get("/runs")["data"]}
    assert {r["status"] for r in runs.values()} == {"finished"}
    assert {r["steps"] for r in runs.values()} == {DEMO_STEPS}
    # the three replicates share config and code; the buggy runs do not
    key = {name: (r["config_hash"], r["code_hash"]) for name, r in runs.items()}
    assert key["replicate-a"] == key["replicate-b"] == key["drifting"]
    assert key["stale-grad"] != key["replicate-a"] != key["nan-onset"]
    a, b, drift = (loss(demo_api, demo_ids[n]) for n in ("replicate-a", "replicate-b", "drifting"))
    assert a == b  # bit-identical replicates
    split = next(s for s, x, y in zip(a[0], a[1], drift[1], strict=True) if x != y)
    assert split == DEMO_STEPS // 3 + 1  # the silent reshuffle starts there
    assert checks(demo_api, demo_ids["replicate-a"]) == {}
    assert checks(demo_api, demo_ids["stale-grad"])["stale-grad"] == 2
    nan = checks(demo_api, demo_ids["nan-onset"])
    assert nan["nonfinite-loss"] >= DEMO_STEPS // 2 and "nonfinite-grad" in nan


def test_demo_help_and_bad_variant() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "gradwatch", "demo", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--no-serve" in out and "dashboard" in out
    bad = subprocess.run(
        [sys.executable, "-m", "gradwatch.demo.training", "no-such"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and "invalid choice: 'no-such'" in bad.stderr
