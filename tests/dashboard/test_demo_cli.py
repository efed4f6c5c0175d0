"""After the demo, the CLI finds its runs with no flags, the drifting run's ``repro-drift``
finding (made by the server) is in ``gradwatch findings``, and the demo's alert rule makes
the Alerts page list the drift and the NaN run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gradwatch import cli
from gradwatch.core import incidents as views_of
from gradwatch_dashboard.api_client import Api
from tests.dashboard.served_demo import alerted, watched_demo


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    cli.main([*argv, "--json"])
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def served_demo(demo_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The demo's runs in the default data directory, after a server (with the demo's alert
    rule) has watched them and made its cross-run findings."""
    root = tmp_path / "data"
    monkeypatch.setenv("GRADWATCH_DIR", str(root))
    for url in watched_demo(demo_dir, root):
        api = Api(url)
        assert "replicate-a" not in alerted(api) and "replicate-b" not in alerted(api)
        assert len(api.get("/alert-rules")["data"]) == 1  # the demo made one, not two
    return root


def test_runs_findings_and_compare_find_the_demo_with_no_flags(
    served_demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = cli_json(capsys, "runs")
    assert isinstance(runs, list)
    ids = {r["name"]: r["id"] for r in runs}
    assert sorted(ids) == ["drifting", "nan-onset", "replicate-a", "replicate-b", "stale-grad"]
    found = cli_json(capsys, "findings", ids["drifting"])
    assert isinstance(found, list)
    assert [f["check"] for f in found] == ["repro-drift"]
    assert found[0]["source"] == "server" and "cause: data-order" in found[0]["message"]
    assert cli.main(["compare", ids["replicate-a"], ids["replicate-b"]]) == 0
    assert capsys.readouterr().out.startswith("identical:")
    assert cli.main(["compare", ids["replicate-a"], ids["drifting"]]) == 1
    assert "data-order" in capsys.readouterr().out


@pytest.mark.slow
def test_the_default_demo_tells_each_story_in_at_most_two_incidents(tmp_path: Path) -> None:
    """Issue 18's acceptance on `gradwatch demo` as shipped (300 steps): the stale-gradient
    run shows at most 2 warning/error incidents, the first caused by `stale-grad`; the NaN
    run at most 2, the first naming the learning-rate jump; the agreeing replicates none."""
    root = tmp_path / "data"
    cmd = [sys.executable, "-m", "gradwatch", "demo", "--no-serve", "--data-dir", str(root)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr

    def gw(*argv: str) -> Any:
        cmd = [sys.executable, "-m", "gradwatch", *argv, "--json", "--data-dir", str(root)]
        return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)

    def loud(run_id: str) -> list[views_of.View]:
        found = views_of.views(gw("findings", run_id))
        return [v for v in found if v.severity in ("warning", "error")]

    ids = {r["name"]: r["id"] for r in gw("runs")}
    stale = loud(ids["stale-grad"])
    assert 1 <= len(stale) <= 2 and stale[0].cause["check"] == "stale-grad"
    nan = loud(ids["nan-onset"])
    assert 1 <= len(nan) <= 2 and nan[0].cause["check"] == "lr-jump"
    assert "learning rate jumped" in nan[0].sentence() and "10,000" in nan[0].sentence()
    assert loud(ids["replicate-a"]) == [] and loud(ids["replicate-b"]) == []
    # the closing message's commands work as printed, pasted in another directory
    lines = done.stdout.splitlines()
    printed = [s.strip() for s in lines if "--data-dir" in s and " serve " not in s]
    assert len(printed) == 3, done.stdout
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for line in printed:
        ran = subprocess.run(line, shell=True, cwd=elsewhere, capture_output=True, text=True)
        assert ran.returncode in (0, 1) and ran.stdout and not ran.stderr, (line, ran.stderr)
        assert "nan-onset" not in line or "learning rate jumped" in ran.stdout
