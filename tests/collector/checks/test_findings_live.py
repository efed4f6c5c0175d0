"""Live incidents: the collector stores each finding with its incident and role, and its
stderr line of a consequence sits under the cause and names it (the fix is the cause's)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import gradwatch
from gradwatch.checks.findings import finding
from gradwatch.core.wire import Kind
from tests.conftest import records


def test_a_consequence_is_printed_under_its_cause_and_spooled_with_its_incident(
    capsys: pytest.CaptureFixture[str],
) -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradwatch.watch(model, opt) as run:
        for _ in range(3):  # zero_grad is missing: stale-grad at step 2
            model(torch.randn(8, 3)).pow(2).mean().backward()
            opt.step()
        run.context.sink.report(finding("loss-diverging", 3, "loss doubled.", "lower the LR."))
    err = [x for x in capsys.readouterr().err.splitlines() if "stale-grad" in x]
    assert err[0].startswith("gradwatch: [error] stale-grad at step 2: ")
    assert err[1] == (
        "gradwatch:   then [warning] loss-diverging at step 3: loss doubled. "
        "(a consequence of stale-grad@2)"
    )
    spooled = [f for r in records(run.dir, Kind.FINDINGS) for f in r.meta["findings"]]
    assert [(f["check"], f["incident"], f["role"]) for f in spooled] == [
        ("stale-grad", "stale-grad@2", "cause"),
        ("loss-diverging", "stale-grad@2", "consequence"),
    ]
