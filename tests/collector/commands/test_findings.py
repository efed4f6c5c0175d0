"""``gradwatch findings``: reads the local spool, prints text or JSON, gates CI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

import gradwatch
from gradwatch import cli


def train(steps: int, *, zero_grad: bool, name: str | None = None) -> gradwatch.Run:
    """A tiny run in this process; without ``zero_grad`` it has a stale-grad error."""
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradwatch.watch(model, opt, checks={"stale-grad": "record"}, name=name) as run:
        for _ in range(steps):
            if zero_grad:
                opt.zero_grad()
            model(torch.randn(8, 3)).pow(2).mean().backward()
            opt.step()
    return run


def findings(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["findings", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_empty_data_dir_is_a_usage_error_with_a_hint(
    capsys: pytest.CaptureFixture[str], data_dir: Path
) -> None:
    code, out, err = findings(capsys, "--fail-on", "error")
    assert (code, out) == (2, "")
    assert str(data_dir / "runs") in err and "gradwatch run -- python train.py" in err


def test_unknown_run_is_a_usage_error_naming_the_known_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = train(2, zero_grad=True)
    code, _, err = findings(capsys, "20000101T000000-00000000")
    assert code == 2
    assert "no run '20000101T000000-00000000'" in err and run.id in err


def test_text_output_leads_each_incident_with_one_sentence_then_its_findings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = train(3, zero_grad=False)
    code, out, _ = findings(capsys)
    assert code == 0  # without --fail-on the listing never fails
    lines = out.splitlines()
    assert lines[0].startswith("error   incident stale-grad@2: stale-grad at step 2: ")
    assert lines[0].count(". ") == 0 and lines[0].endswith(".")  # one sentence
    assert lines[1].startswith("  error   stale-grad step 2: ") and "Fix: " in lines[1]
    assert lines[-1].startswith(f"run {run.id}: 1 error, 0 warnings,")
    assert lines[-1].endswith(" in 1 incident")


@pytest.mark.parametrize(
    ("zero_grad", "fail_on", "expected"),
    [(False, "error", 1), (False, "warning", 1), (True, "error", 0), (True, "warning", 0)],
)
def test_fail_on_gates_on_severity(
    capsys: pytest.CaptureFixture[str], zero_grad: bool, fail_on: str, expected: int
) -> None:
    run = train(3, zero_grad=zero_grad)
    assert findings(capsys, run.id, "--fail-on", fail_on)[0] == expected


def test_json_is_a_list_with_exactly_the_public_keys(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = train(3, zero_grad=False)
    code, out, _ = findings(capsys, str(run.dir), "--json", "--fail-on", "error")
    assert code == 1
    items = json.loads(out)
    assert isinstance(items, list) and items
    for item in items:
        assert set(item) == {
            "run",
            "check",
            "severity",
            "step",
            "param",
            "message",
            "details",
            "source",
            "confirmed",
            "confirmed_by",
            "incident",
            "role",
        }
        assert item["run"] == run.id and isinstance(item["details"], dict)
        assert (item["source"], item["confirmed"], item["confirmed_by"]) == ("runtime", None, None)
    stale = [i for i in items if i["check"] == "stale-grad"]
    assert [(i["severity"], i["step"]) for i in stale] == [("error", 2)]
    assert (stale[0]["incident"], stale[0]["role"]) == ("stale-grad@2", "cause")


def test_unreachable_server_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = findings(capsys, "some-run", "--server", "http://127.0.0.1:9")
    assert code == 2
    assert "cannot read findings from http://127.0.0.1:9" in err


def test_server_findings_equal_the_local_ones(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, data_dir: Path
) -> None:
    pytest.importorskip("uvicorn")
    from gradwatch_server.settings import Settings
    from tests.server.live import live_server

    run = train(3, zero_grad=False)
    local = findings(capsys, run.id, "--json")[1]
    settings = Settings(
        db_url=f"sqlite:///{tmp_path / 'server.db'}", data_dir=data_dir, import_interval=None
    )
    with live_server(settings) as url:
        assert cli.main(["sync", "--server", url, "-q"]) == 0
        capsys.readouterr()
        code, remote, _ = findings(capsys, run.id, "--json", "--server", url, "--fail-on", "error")
        assert code == 1
        assert json.loads(remote) == json.loads(local)
        code, _, err = findings(capsys, "no-such-run", "--server", url)
        assert code == 2 and "has no run 'no-such-run'" in err
        code, out, err = findings(capsys, "--server", url)
        assert out.splitlines()[-1].startswith(f"run {run.id}:"), err


def test_a_run_is_found_by_its_name_or_a_prefix_of_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    stale = train(3, zero_grad=False, name="stale-grad")
    train(3, zero_grad=True, name="clean-one")
    code, out, err = findings(capsys, "stale-grad", "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert rows and {r["run"] for r in rows} == {stale.id}
    code, out, _ = findings(capsys, "stale", "--json")
    assert code == 0 and {r["run"] for r in json.loads(out)} == {stale.id}


def test_an_ambiguous_prefix_lists_the_candidates(capsys: pytest.CaptureFixture[str]) -> None:
    a = train(2, zero_grad=True, name="replicate-a")
    b = train(2, zero_grad=True, name="replicate-b")
    code, out, err = findings(capsys, "replicate")
    assert (code, out) == (2, "")
    assert "matches 2 runs" in err and f"replicate-a ({a.id})" in err
    assert f"replicate-b ({b.id})" in err


def test_a_name_shared_by_runs_reads_the_newest_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    train(2, zero_grad=True, name="again")
    newest = train(3, zero_grad=False, name="again")
    code, out, err = findings(capsys, "again", "--json")
    assert code == 0 and {r["run"] for r in json.loads(out)} == {newest.id}
    assert f"2 runs are named 'again'; reading the newest, {newest.id}" in err
