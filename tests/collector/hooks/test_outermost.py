"""The per-batch capture moves to the outermost submodules that run when the watched model's
own ``forward()`` never runs (``model.backbone(x)`` then ``model.head(h)``), and stays a
single pair of hooks on the root of a model that is called itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import gradwatch
from gradwatch.checks.repeated import REPEAT_STEPS
from gradwatch.nan.origin import NO_FORWARD
from gradwatch.session.handle import Run
from gradwatch.stats.batch_checksum import checksum_of
from gradwatch.transport.record_builder import batch_hash
from tests.collector.checks.common import first, of
from tests.collector.steps import steps

D_IN, HIDDEN, D_OUT, N = 6, 8, 3, 16
BAD = 5  # the step whose batch or head goes non-finite
NAN_CHECKS = {"all": "record", "nonfinite-loss": "warn", "nonfinite-grad": "warn"}


class Head(nn.Module):
    """A linear head whose log goes non-finite when ``poisoned`` (a log of negatives)."""

    def __init__(self) -> None:
        super().__init__()
        self.out = nn.Linear(HIDDEN, D_OUT)
        self.poisoned = False

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        out = self.out(h)
        return torch.log(-out.abs() - 1.0) if self.poisoned else out


class Split(nn.Module):
    """A wrapper whose own forward is never called: training calls its parts."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Sequential(nn.Linear(D_IN, HIDDEN), nn.ReLU())
        self.head = Head()
        self.loss = nn.MSELoss()  # no parameter: not a capture point

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise AssertionError("never called in these tests")


class Whole(Split):
    """The twin that is called itself."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))  # type: ignore[no-any-return]


def data(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + i)
    return torch.randn(N, D_IN, generator=g), torch.randn(N, D_OUT, generator=g)


Batches = Callable[[int], tuple[torch.Tensor, torch.Tensor]]


def train(model: Split, batches: Batches = data, steps_: int = 8, **kw: Any) -> tuple[Run, Split]:
    """``steps_`` steps that call the parts (``Split``) or the model (``Whole``)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    run = gradwatch.watch(model, opt, **kw)
    try:
        for i in range(steps_):
            x, y = batches(i)
            opt.zero_grad()
            out = model(x) if isinstance(model, Whole) else model.head(model.backbone(x))
            model.loss(out, y).backward()
            opt.step()
            if i == 2:
                hooks = hook_count(model)
                model.eval()
                with torch.no_grad():  # an evaluation pass: no capture, no probe
                    model.head(model.backbone(x))
                model.train()
                assert hook_count(model) == hooks
    finally:
        run.close()
    return run, model


def hook_count(model: nn.Module) -> dict[str, int]:
    """Forward pre-hooks plus forward hooks per module that has any."""
    counts = {
        name or "<root>": len(m._forward_pre_hooks) + len(m._forward_hooks)
        for name, m in model.named_modules()
    }
    return {name: n for name, n in counts.items() if n}


def test_a_model_called_itself_keeps_exactly_its_two_root_hooks() -> None:
    model = Whole()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradwatch.watch(model, opt) as run:
        for i in range(4):
            x, y = data(i)
            opt.zero_grad()
            model.loss(model(x), y).backward()
            opt.step()
            if i >= 1:  # param-no-grad's module hooks came off at the first backward
                assert hook_count(model) == {"<root>": 2}
        assert run.context.model_hooks.moved == {} and not run.context.model_hooks._probes


def test_the_capture_moves_to_the_outermost_modules_that_run() -> None:
    model = Split()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    run = gradwatch.watch(model, opt)
    counts = []
    try:
        for i in range(4):
            x, y = data(i)
            opt.zero_grad()
            model.loss(model.head(model.backbone(x)), y).backward()
            opt.step()
            counts.append(hook_count(model))
        assert run.context.model_hooks.moved == {"": ["backbone", "head"]}
    finally:
        run.close()
    # step 1: the root's pair plus the probe's pair on each module holding a trained
    # parameter (the loss module has none); after the second backward the probe is off
    # and the capture pair sits on the two outermost modules that ran
    assert counts[0] == {
        "<root>": 2, "backbone": 2, "backbone.0": 2, "head": 2, "head.out": 2,
    }  # fmt: skip
    assert counts[1:] == [{"<root>": 2, "backbone": 2, "head": 2}] * 3
    assert hook_count(model) == {}  # every hook off at close


def test_batch_checksums_are_those_of_the_batch_not_of_the_features() -> None:
    run, _ = train(Split())
    sig = [f"float32[{N}, {D_IN}]"]  # x only: the head's input is the backbone's output
    recorded = [s["batch_hash"] for s in steps(run.dir)]
    assert recorded[0] is None  # step 1 trained before the modules that run were known
    for i, got in enumerate(recorded[1:], start=1):
        x, _ = data(i)
        assert got == batch_hash(checksum_of([x]).double().tolist()[:2], sig), i
    twin, _ = train(Whole())
    assert [s["batch_hash"] for s in steps(twin.dir)][1:] == recorded[1:]


def test_a_repeated_batch_is_found_when_the_model_is_not_called_itself() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8 * N, D_IN, generator=g)
    loader = DataLoader(TensorDataset(x, torch.randn(8 * N, D_OUT)), batch_size=N)
    drawn: list[torch.Tensor] = []

    def once(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not drawn:  # drawn once, at the first step; never again
            drawn.extend(next(iter(loader)))
        return drawn[0], drawn[1]

    run, _ = train(Split(), once, steps_=12)
    f = first(run, "repeated-batch")
    assert f.details["why"] == "drawn-once"
    assert f.step == REPEAT_STEPS + 1  # the checksums start at step 2
    fresh, _ = train(Split(), steps_=12)
    assert of(fresh, "repeated-batch") == []


def nan_run(poison: str) -> Run:
    """NaN at step ``BAD``: in the input batch, or made by the head's log."""
    model = Split()

    def batches(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = data(i)
        if i + 1 == BAD and poison == "input":
            x[0, 1] = float("nan")
        model.head.poisoned = i + 1 == BAD and poison == "head"
        return x, y

    return train(model, batches, checks=NAN_CHECKS)[0]


def origin(run: Run) -> dict[str, Any]:
    f = first(run, "nonfinite-loss")
    found: dict[str, Any] = f.details["origin"]
    assert f.step == BAD and found["found"], found
    return found


def test_nan_made_in_a_submodule_is_traced_to_its_module_and_operation() -> None:
    found = origin(nan_run("head"))
    assert (found["phase"], found["module"], found["op"]) == ("forward", "head", "log")
    assert found["module_type"] == "Head"


def test_nan_in_the_batch_is_the_input_of_the_first_module_not_a_feature() -> None:
    found = origin(nan_run("input"))
    assert found["phase"] == "input" and found["module"] == "backbone.0"
    assert found["batch"]["argument"] == "args[0]" and found["batch"]["nan"] == 1


def test_a_nan_before_the_modules_are_known_says_so() -> None:
    bad = 1
    model = Split()

    def batches(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = data(i)
        if i + 1 == bad:
            x[0, 0] = float("nan")
        return x, y

    run, _ = train(model, batches, steps_=3, checks=NAN_CHECKS)
    f = first(run, "nonfinite-loss")
    assert f.step == bad and f.details["origin"]["reason"] == NO_FORWARD


def test_activation_checkpointing_recomputation_is_not_a_forward() -> None:
    """``checkpoint(model.backbone, x)`` runs the backbone again inside the backward pass:
    neither the probe nor the capture counts that run, so the checksum is still x's."""
    from torch.utils.checkpoint import checkpoint

    model = Split()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradwatch.watch(model, opt) as run:
        for i in range(4):
            x, y = data(i)
            opt.zero_grad()
            h = checkpoint(model.backbone, x, use_reentrant=False)
            model.loss(model.head(h), y).backward()
            opt.step()
        assert run.context.model_hooks.moved == {"": ["backbone", "head"]}
    sig = [f"float32[{N}, {D_IN}]"]
    recorded = [s["batch_hash"] for s in steps(run.dir)][1:]
    expected = [batch_hash(checksum_of([data(i)[0]]).double().tolist()[:2], sig) for i in (1, 2, 3)]
    assert recorded == expected


def test_a_forward_called_as_a_method_is_said_so() -> None:
    """``layer.forward(x)`` (the forward-forward example's layers train that way) runs no
    module hook at all: the probe never sees a call, and the NaN finding says why."""
    from gradwatch.nan.origin import NO_HOOKS

    torch.manual_seed(0)
    layer = nn.Linear(D_IN, D_OUT)
    opt = torch.optim.SGD(layer.parameters(), lr=0.01)
    with gradwatch.watch(layer, opt, checks=NAN_CHECKS) as run:
        for i in range(4):
            x, y = data(i)
            if i == 2:
                x[0, 0] = float("nan")
            opt.zero_grad()
            nn.functional.mse_loss(layer.forward(x), y).backward()
            opt.step()
    found = first(run, "nonfinite-loss")
    assert found.step == 3 and found.details["origin"]["reason"] == NO_HOOKS
