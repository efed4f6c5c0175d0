"""Policy ``checkpoint``: a real script run under ``gradwatch run`` stops before the bad
update with the last good state on disk, and training resumes from it bit for bit."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

import gradwatch
from gradwatch import cli
from gradwatch.hooks.checkpoint_policy import FORMAT, restore
from gradwatch.session.options import resolve
from tests.collector.scripts import nan_train

SCRIPT = Path(__file__).parents[1] / "scripts" / "nan_train.py"

BAD, STEPS = 5, 8


@pytest.mark.slow
def test_checkpoint_then_resume_is_bit_exact(capfd: pytest.CaptureFixture[str]) -> None:
    flags = ["--check", "nonfinite-loss=checkpoint"]
    args = [sys.executable, str(SCRIPT), "nan-input", "--steps", str(STEPS)]
    code = cli.main(["run", *flags, "--", *args, "--bad-step", str(BAD)])
    err = capfd.readouterr().err
    assert code == 1 and "IntegrityError" in err  # stopped by the policy
    line = next(x for x in err.splitlines() if x.startswith("gradwatch: [error] nonfinite-loss"))
    # one line: the step, the layer and operation, and where the last good state is
    assert f"at step {BAD}" in line and "module 'body.0' (Linear), linear → AddmmBackward0" in line
    path = Path(re.findall(r"Last good state saved to (\S+\.pt)\.", line)[0])

    saved = torch.load(path, weights_only=True)
    assert saved["format"] == FORMAT and saved["check"] == "nonfinite-loss"
    assert saved["step"] == BAD and saved["completed_steps"] == [BAD - 1]
    assert saved["batch_signature"] == ["float32[32, 6]"]
    assert saved["batch_checksum"][0] != saved["batch_checksum"][0]  # the NaN batch's sum

    # the same BAD-1 good steps without gradwatch (the script's --reference mode)
    expected, expected_opt = nan_train.build("nan-input")
    for step in range(1, BAD):
        nan_train.train_step("nan-input", expected, expected_opt, step, BAD)
    for key, tensor in expected.state_dict().items():
        assert torch.equal(saved["models"][""][key], tensor), key
    assert _flat(saved["optimizers"][0]) == _flat(expected_opt.state_dict())

    # resume: restore, then train the remaining steps on good batches; equal to a run that
    # never met the bad batch
    model, opt = nan_train.build("nan-input")
    restore(path, model, opt)
    for step in range(BAD, STEPS + 1):
        nan_train.train_step("nan-input", model, opt, step, bad_step=0)
    clean, clean_opt = nan_train.build("nan-input")
    for step in range(1, STEPS + 1):
        nan_train.train_step("nan-input", clean, clean_opt, step, bad_step=0)
    for (name, a), b in zip(model.state_dict().items(), clean.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def _flat(state: dict[str, object]) -> list[object]:
    """An optimizer state dict as comparable values (tensors as lists)."""
    out: list[object] = []
    for value in state["state"].values():  # type: ignore[attr-defined]
        out += [v.tolist() if isinstance(v, torch.Tensor) else v for v in value.values()]
    return [*out, state["param_groups"]]


def test_checkpoint_is_refused_for_checks_that_run_after_the_update() -> None:
    with pytest.raises(gradwatch.ConfigError, match=r"'nonfinite-param'.*runs after"):
        resolve(checks={"nonfinite-param": "checkpoint"})
    checks = resolve(checks={"all": "checkpoint"}).checks
    assert checks["nonfinite-loss"] == checks["stale-grad"] == "checkpoint"
    assert checks["nonfinite-param"] == checks["loss-plateau"] == "raise"


def test_lifecycle_check_checkpoints_too() -> None:
    """stale-grad=checkpoint: the state before the update that would apply stale gradients."""
    model, opt = nan_train.build("log-softmax")
    run = gradwatch.watch(model, opt, checks={"stale-grad": "checkpoint"})
    x, y = nan_train.batch("log-softmax", 1, 0)
    torch.nn.functional.nll_loss(model(x), y).backward()
    opt.step()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.nn.functional.nll_loss(model(x), y).backward()  # no zero_grad
    with pytest.raises(gradwatch.IntegrityError, match="Last good state saved to"):
        opt.step()
    run.close("failed")
    f = next(f for f in run.findings if f.check == "stale-grad")
    state = restore(f.details["checkpoint"], nan_train.build("log-softmax")[0], rng=False)
    assert state["step"] == 2 and state["check"] == "stale-grad"
    for key, tensor in before.items():
        assert torch.equal(state["models"][""][key], tensor), key


def test_checkpoint_after_a_bad_update_saves_the_state_before_that_update() -> None:
    """The learning rate jumps to 1e38 at step BAD: that update overflows the weights, and
    the loss of step BAD+1 is the first non-finite value. The last good state is the one
    before update BAD (BAD-1 steps done), not the current one, which holds the bad update."""
    with pytest.raises(gradwatch.IntegrityError, match="Last good state saved to") as caught:
        nan_train.train("huge-lr", STEPS, BAD, checks={"nonfinite-loss": "checkpoint"})
    run = caught.value.run  # type: ignore[attr-defined]
    f = next(f for f in run.findings if f.check == "nonfinite-loss")
    assert f.step == BAD + 1
    saved = torch.load(f.details["checkpoint"], weights_only=True)
    assert saved["step"] == saved["bad_update_step"] == BAD
    assert saved["completed_steps"] == [BAD - 1] and saved["check"] == "nonfinite-loss"
    expected, expected_opt = nan_train.build("huge-lr")
    for step in range(1, BAD):
        nan_train.train_step("huge-lr", expected, expected_opt, step, BAD)
    for key, tensor in expected.state_dict().items():
        assert torch.isfinite(saved["models"][""][key]).all(), key
        assert torch.equal(saved["models"][""][key], tensor), key
    # the optimizer as it was before that update: with the learning rate that broke it
    (group,) = saved["optimizers"][0]["param_groups"]
    assert group["lr"] == 1e38


def test_checkpoint_after_a_bad_batch_keeps_the_current_state() -> None:
    """A NaN batch at step BAD spoils only that step: the state before its update is the
    last good one, also while the previous states are kept."""
    with pytest.raises(gradwatch.IntegrityError) as caught:
        nan_train.train("nan-input", STEPS, BAD, checks={"nonfinite-loss": "checkpoint"})
    run = caught.value.run  # type: ignore[attr-defined]
    f = next(f for f in run.findings if f.check == "nonfinite-loss")
    saved = torch.load(f.details["checkpoint"], weights_only=True)
    assert (f.step, saved["step"], saved["completed_steps"]) == (BAD, BAD, [BAD - 1])
    assert "bad_update_step" not in saved
