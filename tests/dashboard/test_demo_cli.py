"""After the demo, the CLI finds its runs with no flags, the drifting run's ``repro-drift``
finding (made by the server) is in ``gradwatch findings``, and the demo's alert rule makes
the Alerts page list the drift and the NaN run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gradwatch import cli
from gradwatch.commands.demo import alert_rule
from gradwatch.dashboard.api import Api
from gradwatch.server.config import default_db_url
from tests.dashboard.conftest import serve
from tests.server.live import wait_for


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    cli.main([*argv, "--json"])
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def served_demo(demo_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The demo's runs in the default data directory, after a server (with the demo's alert
    rule) has watched them and made its cross-run findings."""
    root = tmp_path / "data"
    shutil.copytree(demo_dir, root, ignore=shutil.ignore_patterns("gradwatch.db*"))
    monkeypatch.setenv("GRADWATCH_DIR", str(root))
    assert alert_rule(default_db_url(root)) and alert_rule(default_db_url(root))
    for url in serve(root / "gradwatch.db", root):
        api = Api(url)
        wait_for(lambda a=api: {"drifting", "nan-onset"} <= alerted(a), "the demo's alerts", 120)
        assert "replicate-a" not in alerted(api) and "replicate-b" not in alerted(api)
        assert len(api.get("/alert-rules")["data"]) == 1  # the demo made one, not two
    return root


def alerted(api: Api) -> set[str]:
    """The names of the runs with an alert."""
    names = {r["id"]: r["name"] for r in api.get("/runs")["data"]}
    return {names[a["run"]] for a in api.get("/alerts", project="demo")["data"]}


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
