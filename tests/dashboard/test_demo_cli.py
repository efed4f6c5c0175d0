"""After the demo, the CLI finds its runs with no flags, the drifting run's ``repro-drift``
finding (made by the server) is in ``gradwatch findings``, and the demo's alert rule makes
the Alerts page list the drift and the NaN run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gradwatch import cli
from gradwatch.dashboard.api_client import Api
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
