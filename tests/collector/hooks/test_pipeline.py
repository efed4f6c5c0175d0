"""The step pipeline (gradwatch.hooks.pipeline): when the integrity checks fall behind
training, finite windows are written unchecked (said once, in a NOTICE record and on
stderr) and windows holding a NaN are still checked; every step stays in the spool either
way."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import gradwatch
from gradwatch.core.local_reader import load_run
from gradwatch.core.spool import read_spool
from gradwatch.core.wire import Kind
from gradwatch.hooks import pipeline


@pytest.fixture(autouse=True)
def _no_provenance(monkeypatch: pytest.MonkeyPatch) -> None:
    """NaN provenance looks at gradients before the update; without it a NaN is found by
    the row checks on the I/O thread, the path under test."""
    monkeypatch.setenv("GRADWATCH_NAN_ORIGIN", "0")


def _train(tmp_path: Path, steps: int, nan_at: int | None = None) -> gradwatch.Run:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    run = gradwatch.watch(model, opt, data_dir=tmp_path)
    for step in range(1, steps + 1):
        opt.zero_grad()
        loss = (model(torch.randn(8, 6)) - torch.randn(8, 2)).pow(2).mean()
        if step == nan_at:
            loss = loss * float("nan")
        loss.backward()
        opt.step()
    run.close()
    return run


def _notices(run: gradwatch.Run) -> list[dict[str, object]]:
    frames = read_spool(run.dir).frames
    return [f.record.meta for f in frames if f.record.kind == Kind.NOTICE]


def test_finite_windows_are_written_unchecked_when_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(pipeline, "CHECKS_BACKLOG", -1)  # every window counts as behind
    run = _train(tmp_path, 40)
    assert run.unchecked_steps == 40
    local = load_run(run.dir)
    assert [row.step for row in local.steps[0]] == list(range(1, 41))  # nothing lost
    notices = _notices(run)
    assert [n["notice"] for n in notices] == ["checks-behind"]
    err = capfd.readouterr().err
    assert err.count("the integrity checks fell behind training") == 1
    assert "watch(every=K)" in err


def test_a_window_with_nan_is_checked_even_when_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pipeline, "CHECKS_BACKLOG", -1)
    run = _train(tmp_path, 30, nan_at=17)
    assert any(f.check == "nonfinite-grad" and f.step == 17 for f in run.findings)
    assert run.unchecked_steps < 30


def test_checks_run_when_not_behind(tmp_path: Path) -> None:
    run = _train(tmp_path, 30, nan_at=17)
    assert run.unchecked_steps == 0
    assert not _notices(run)
    assert any(f.check == "nonfinite-grad" and f.step == 17 for f in run.findings)
