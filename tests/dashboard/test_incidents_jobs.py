"""The run page lists findings by incident (the root cause's sentence first); the runs list
shows the runs of one launch (job) together, the other ranks under the first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import gradwatch
from gradwatch_dashboard.api_client import Api
from gradwatch_dashboard.components import findings_list
from gradwatch_dashboard.pages import runs
from gradwatch_server.settings import Settings
from tests.dashboard.test_components import texts
from tests.server.live import live_server, sqlite_with
from tests.server.training import job_of_two, train


def f(check: str, step: int, severity: str, message: str, hint: str = "") -> dict[str, Any]:
    return {
        "check": check,
        "severity": severity,
        "step": step,
        "param": None,
        "message": message,
        "hint": hint,
        "details": {},
        "source": "runtime",
    }


def test_findings_are_listed_by_incident_with_the_root_cause_first() -> None:
    found = [
        f("loss-diverging", 20, "warning", "loss doubled.", "lower the learning rate"),
        f("stale-grad", 2, "error", "gradients are not being cleared.", "call zero_grad()"),
        f("eval-mode-training", 1, "warning", "dropout in eval mode.", "call train()"),
    ]
    words = texts(findings_list("r1", found))
    sentence = (
        "stale-grad at step 2: gradients are not being cleared; then loss-diverging at step 20."
    )
    assert sentence in words
    order = [w for w in words if w in ("eval-mode-training", "stale-grad", "loss-diverging")]
    assert order == ["eval-mode-training", "stale-grad", "loss-diverging"]
    assert "↳ " in words  # the consequence is marked
    assert "call zero_grad()" in words and "lower the learning rate" not in words


def _train() -> gradwatch.Run:
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradwatch.watch(model, opt, project="jobs") as run:
        train(run, model, opt, 2, shape=(4, 3))
    return run


def test_the_runs_list_shows_one_job_with_its_runs_under_it(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second, alone = job_of_two(_train, monkeypatch, "job-7")
    db_url, engine = sqlite_with(tmp_path / "d.db", first.dir, second.dir, alone.dir)
    engine.dispose()
    settings = Settings(db_url=db_url, data_dir=data_dir, import_interval=None)
    with live_server(settings) as url:
        table, _ = runs.runs_view(Api(url), None, None, None)
        cut, _, left = runs.runs_page(Api(url), None, None, None, 2)
    # the rows are cut inside a job, not after it: a job of hundreds of ranks stays paged
    cut_names = [w for w in texts(cut) if w in (first.id, second.id, alone.id)]
    assert cut_names == [alone.id, first.id] and left
    words = texts(table)
    names = [w for w in words if w in (first.id, second.id, alone.id)]
    assert names == [alone.id, first.id, second.id]  # newest job first, its runs together
    assert words[words.index(second.id) - 1] == "└ "
    assert words[words.index(first.id) - 1] != "└ "
