"""The collector's structure record (gradwatch.core.structure.recorder) on real training runs: steps
alike are kept as one entry, periodic patterns as one entry a step but no finding, and a
run past the record's bounds stores nothing and leaves the readers to derive it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import gradwatch
from gradwatch.commands.findings import local_findings, structure_findings
from gradwatch.core.local_reader import load_run
from gradwatch.core.structure import recorder
from tests.collector.core.structure.stored import stored


def _train(steps: int, *, clip_until: int = 0, alternate: bool = False) -> gradwatch.Run:
    torch.manual_seed(0)
    model = nn.ModuleDict({"a": nn.Linear(4, 1), "b": nn.Linear(4, 1)})
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradwatch.watch(model, opt) as run:
        for step in range(1, steps + 1):
            opt.zero_grad()
            x = torch.randn(8, 4)
            heads = ["a" if step % 2 else "b"] if alternate else ["a", "b"]
            sum(model[h](x).pow(2).mean() for h in heads).backward()
            if step < clip_until:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
    return run


def test_steps_alike_are_one_entry_and_a_change_starts_another(data_dir: Path) -> None:
    run = _train(120, clip_until=60)
    rec = run.context.pipeline.structure[0]  # type: ignore[index]
    # step 1 (its forward is not captured: no autocast state yet), steps 2-59 clipped, 60-120
    assert (rec.steps, rec.entries) == (120, 3)
    found = stored(data_dir / "runs" / run.id)
    assert [(f["check"], f["step"]) for f in found] == [("structure-safeguard", 60)]
    assert load_run(data_dir / "runs" / run.id).end["structure"] == "stored"  # type: ignore[index]


def test_alternating_heads_are_an_entry_a_step_and_no_finding(data_dir: Path) -> None:
    run = _train(80, alternate=True)
    rec = run.context.pipeline.structure[0]  # type: ignore[index]
    assert (rec.steps, rec.entries) == (80, 80)
    assert stored(data_dir / "runs" / run.id) == []


def test_a_run_past_the_records_bounds_stores_nothing_and_is_derived_when_read(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recorder, "MAX_SIGNATURES", 2)  # 2 heads x clipped or not: 4
    run = _train(80, clip_until=40, alternate=True)
    assert run.context.pipeline.structure[0].given_up  # type: ignore[index]
    run_dir = data_dir / "runs" / run.id
    assert "structure" not in (load_run(run_dir).end or {})
    assert [f for f in local_findings(run_dir) if f["check"].startswith("structure")] == []
    derived = structure_findings(run_dir)
    assert [(f["check"], f["step"]) for f in derived] == [("structure-safeguard", 40)]
