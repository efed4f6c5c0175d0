"""Structure changes: a new regime that lasts is a change; periodic patterns are not."""

from __future__ import annotations

import random
from pathlib import Path

import torch
from torch import nn

import gradwatch
from gradwatch.core.structure.group import member
from gradwatch.core.structure.signature import lifecycle
from gradwatch.core.structure.timeline import SETTLE, WINDOW, changes, regime_changes
from tests.collector.core.structure.stored import stored


def no_errors(_: Path) -> bool:
    return False


def test_lifecycle_runs_repeats_together_and_leaves_out_gradwatchs_own_events() -> None:
    events = [("zero_grad", 0.0, ""), ("backward", 0.1, ""), ("backward", 0.2, "")]
    assert lifecycle(events) == "zero_grad backward×2"
    assert lifecycle([*events, ("skipped", 0.3, "by a gradwatch policy")]) == lifecycle(events)
    assert lifecycle([]) == "(nothing)"


def test_a_lasting_new_regime_is_one_change_at_its_first_step() -> None:
    values = ["a"] * 30 + ["b"] * 30
    found = regime_changes(values)
    assert [(c.index, c.before, c.after) for c in found] == [(30, {"a"}, {"b"})]


def test_periodic_patterns_and_short_excursions_are_not_changes() -> None:
    assert regime_changes(["a", "b"] * 40) == []  # alternation
    assert regime_changes(["a", "a", "a", "b"] * 20) == []  # every fourth step differs
    rng = random.Random(0)
    assert regime_changes([rng.random() < 0.8 for _ in range(200)]) == []  # intermittent
    # a different regime that reverts within the window is not a change
    assert regime_changes(["a"] * 30 + ["b"] * (WINDOW // 2) + ["a"] * 30) == []


def test_the_first_and_last_steps_are_never_a_change_on_their_own() -> None:
    assert regime_changes(["odd"] + ["a"] * 40) == []
    assert regime_changes(["a"] * 40 + ["b"] * (SETTLE - 1)) == []
    assert [c.index for c in regime_changes(["a"] * 40 + ["b"] * SETTLE)] == [40]


def _train(
    steps: int,
    *,
    freeze_at: int | None = None,
    zero_grad_until: int | None = None,
    alternate: bool = False,
    accumulate: int = 1,
) -> gradwatch.Run:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    heads = nn.ModuleList([nn.Linear(2, 1), nn.Linear(2, 1)])
    opt = torch.optim.SGD([*model.parameters(), *heads.parameters()], lr=0.01)
    with gradwatch.watch(nn.ModuleDict({"body": model, "heads": heads}), opt) as run:
        for step in range(1, steps + 1):
            if freeze_at is not None and step == freeze_at:
                model[0].requires_grad_(False)
            if zero_grad_until is None or step < zero_grad_until:
                opt.zero_grad()
            for _ in range(accumulate):
                head = heads[step % 2] if alternate else heads[0]
                head(model(torch.randn(8, 4))).pow(2).mean().backward()
            opt.step()
    return run


def _changes(run: gradwatch.Run, data_dir: Path) -> list[dict[str, object]]:
    found = stored(data_dir / "runs" / run.id)
    assert all(f["severity"] == "info" for f in found)
    return found


def test_a_layer_frozen_mid_run_is_one_info_event_at_its_step(data_dir: Path) -> None:
    run = _train(80, freeze_at=40)
    found = _changes(run, data_dir)
    assert [(f["check"], f["step"]) for f in found] == [("structure-change", 40)]
    message = str(found[0]["message"])
    assert message.startswith("From step 40, 2 tensors (body.0.weight, body.0.bias) no longer")


def test_zero_grad_dropped_mid_run_is_a_lifecycle_change(data_dir: Path) -> None:
    run = _train(80, zero_grad_until=50)
    found = [f for f in _changes(run, data_dir) if f["details"]["element"] == "lifecycle"]  # type: ignore[index]
    assert [f["step"] for f in found] == [50]
    assert "zero_grad is no longer called" in str(found[0]["message"])


def test_accumulation_and_alternating_heads_are_no_change(data_dir: Path) -> None:
    assert _changes(_train(60, alternate=True, accumulate=4), data_dir) == []


def test_member_reads_the_layout_and_one_shape_per_step(data_dir: Path) -> None:
    run = _train(12)
    m = member(data_dir / "runs" / run.id, no_errors)
    assert m.layout[0][:2] == ("body.0.weight", "body.0.bias") and m.status == "finished"
    assert [s.step for s in m.shapes[0]] == list(range(1, 13))
    assert {s.lifecycle for s in m.shapes[0][1:]} == {"zero_grad backward step"}
    assert changes(m.shapes[0], m.layout[0]) == []


def test_a_param_group_added_mid_run_is_said_once_with_its_hyperparameters() -> None:
    from gradwatch.core.structure.signature import StepShape
    from gradwatch.core.structure.timeline import state_changes

    one = (("hp:g0.momentum", "0.9"),)
    two = (*one, ("hp:g1.momentum", "0"), ("hp:g1.weight_decay", "0"))
    shapes = [StepShape(s, "zero_grad backward step", (True,), one if s <= 150 else two)
              for s in range(1, 301)]  # fmt: skip
    [found] = state_changes(shapes)
    assert found["step"] == 151
    assert found["message"] == ("From step 151, param group 1 is new (momentum 0, weight_decay 0).")
    back = [StepShape(s, "zero_grad backward step", (True,), two if s <= 150 else one)
            for s in range(1, 301)]  # fmt: skip
    [gone] = state_changes(back)
    assert gone["message"] == "From step 151, param group 1 is gone (momentum 0, weight_decay 0)."
