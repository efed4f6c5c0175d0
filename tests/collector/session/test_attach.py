"""``gradwatch.watch()`` end to end on real tiny models: what is recorded per step."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

import gradwatch
from gradwatch.core.structure.signature import STATE_KINDS
from gradwatch.core.wire import Kind
from tests.collector.stats.test_tensors import naive_nonfinite, naive_norm, same
from tests.collector.steps import steps
from tests.conftest import records


def mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))


def batch(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + i)
    return torch.randn(5, 6, generator=g), torch.randn(5, 3, generator=g)


def train_step(model: nn.Module, opt: torch.optim.Optimizer, i: int) -> None:
    """One plain step on ``batch(i)``: zero_grad, MSE loss, backward, step."""
    opt.zero_grad()
    x, y = batch(i)
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()


@pytest.mark.parametrize(
    "bad", [None, float("nan"), float("inf"), float("-inf")], ids=["finite", "nan", "inf", "-inf"]
)
def test_every_stat_of_every_step_matches_a_naive_reference(bad: float | None) -> None:
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    expected = []
    with gradwatch.watch(model, opt) as run:
        for i in range(4):
            opt.zero_grad()
            x, y = batch(i)
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            if bad is not None and i == 2:
                model[2].weight.grad[1, 4] = bad
            params = list(model.parameters())
            before = [p.detach().clone() for p in params]
            grads = [p.grad.clone() for p in params]
            opt.step()
            expected.append(
                (
                    loss.item(),
                    [
                        (
                            naive_norm(g),
                            naive_norm(p),
                            naive_norm(p.detach() - b),
                            naive_nonfinite(g),
                        )
                        for g, p, b in zip(grads, params, before, strict=True)
                    ],
                )
            )
    got = steps(run.dir)
    assert [s["step"] for s in got] == [1, 2, 3, 4]
    for step, (loss, per_tensor) in zip(got, expected, strict=True):
        assert step["has_loss"]
        assert step["loss"] == pytest.approx(loss, rel=1e-6, nan_ok=True)
        for row, ref in zip(step["stats"], per_tensor, strict=True):
            assert all(same(a, b) for a, b in zip(row, ref, strict=True)), (row, ref)
    if bad is not None:
        assert got[2]["stats"][2][3] == 1.0
        assert not math.isfinite(got[2]["stats"][2][0])


def test_run_start_names_every_tensor_as_named_parameters() -> None:
    model = mlp()
    opt = torch.optim.SGD(
        [{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.5}], lr=0.1
    )
    with gradwatch.watch(model, opt, project="p", name="n", tags=["a"], config={"lr": 0.1}) as run:
        pass
    (start,) = records(run.dir, Kind.RUN_START)
    assert [t["name"] for t in start.meta["tensors"]] == [n for n, _ in model.named_parameters()]
    assert [t["group"] for t in start.meta["tensors"]] == [0, 0, 1, 1]
    assert start.meta["project"] == "p" and start.meta["name"] == "n"
    assert start.meta["tags"] == ["a"] and start.meta["config"] == {"lr": 0.1}
    assert start.meta["optimizers"][0]["groups"][1]["lr"] == 0.5


def test_loss_is_captured_and_backward_passes_counted_with_accumulation() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    with gradwatch.watch(model, opt, accumulation_steps=3) as run:
        for step in range(2):
            opt.zero_grad()
            total = 0.0
            for micro in range(3):
                x, y = batch(step * 3 + micro)
                loss = nn.functional.mse_loss(model(x), y) / 3
                loss.backward()
                total += loss.item()
            losses.append(total)
            opt.step()
    got = steps(run.dir)
    assert [s["n_backward"] for s in got] == [3, 3]
    # the recorded loss is the sum of the backward roots: the objective whose gradient is applied
    assert [s["loss"] for s in got] == pytest.approx(losses, rel=1e-6)
    assert [e[0] for e in got[0]["events"] if e[0] not in STATE_KINDS] == [
        "zero_grad",
        "backward",
        "backward",
        "backward",
        "step",
    ]


def kinds(run_dir: Path) -> list[list[tuple[str, str]]]:
    return [[(e[0], e[2]) for e in s["events"] if e[0] not in STATE_KINDS] for s in steps(run_dir)]


def test_zero_grad_position_relative_to_backward_and_step_is_recorded() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradwatch.watch(model, opt) as run:
        x, y = batch(0)
        opt.zero_grad()  # correct
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        nn.functional.mse_loss(model(x), y).backward()  # misplaced: cleared before step
        opt.zero_grad()
        opt.step()
        nn.functional.mse_loss(model(x), y).backward()  # missing zero_grad entirely
        opt.step()
        model.zero_grad()  # through the model
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        for p in model.parameters():  # by hand, before backward (correct)
            p.grad = None
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        nn.functional.mse_loss(model(x), y).backward()
        for p in model.parameters():  # by hand, between backward and step (a bug)
            p.grad = None
        opt.step()
    assert kinds(run.dir) == [
        [("zero_grad", "optimizer"), ("backward", ""), ("step", "")],
        [("backward", ""), ("zero_grad", "optimizer"), ("step", "")],
        [("backward", ""), ("step", "")],
        [("zero_grad", "model"), ("backward", ""), ("step", "")],
        [("zero_grad", "by hand"), ("backward", ""), ("step", "")],
        [("backward", ""), ("zero_grad", "by hand: 4 tensors"), ("step", "")],
    ]
    got = steps(run.dir)
    assert got[1]["has_grad"] == [False] * 4
    assert got[5]["has_grad"] == [False] * 4


def test_gradient_clipping_is_recorded_as_an_in_place_edit() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradwatch.watch(model, opt) as run:
        x, y = batch(0)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
        opt.step()
    assert kinds(run.dir)[0][-2] == ("grad_modified", "4 tensors")


def test_gan_with_two_models_and_two_optimizers() -> None:
    gen, disc = mlp(1), nn.Sequential(nn.Linear(3, 1))
    opt_g = torch.optim.Adam(gen.parameters(), lr=1e-3)
    opt_d = torch.optim.Adam(disc.parameters(), lr=1e-3)
    d_losses: list[float] = []
    with gradwatch.watch({"G": gen, "D": disc}, [opt_g, opt_d]) as run:
        for i in range(3):
            z, _ = batch(i)
            opt_d.zero_grad()
            d_loss = disc(gen(z).detach()).mean()
            d_loss.backward()
            d_losses.append(d_loss.item())
            opt_d.step()
            opt_g.zero_grad()
            g_loss = -disc(gen(z)).mean()
            g_loss.backward()
            opt_g.step()
    (start,) = records(run.dir, Kind.RUN_START)
    names = [(t["name"], t["optimizer"]) for t in start.meta["tensors"]]
    assert names[:2] == [("G.0.weight", 0), ("G.0.bias", 0)]
    assert names[-2:] == [("D.0.weight", 1), ("D.0.bias", 1)]
    g_steps, d_steps = steps(run.dir, 0), steps(run.dir, 1)
    assert len(g_steps) == len(d_steps) == 3
    assert all(s["n_backward"] == 1 and s["has_loss"] for s in g_steps)
    # G's loss also reaches D; D's zero_grad clears that before D's own backward, so the
    # recorded loss of D's step is D's loss alone
    assert [e[0] for e in d_steps[1]["events"]] == ["backward", "zero_grad", "backward", "step"]
    assert [s["n_backward"] for s in d_steps] == [1, 2, 2]
    assert d_steps[-1]["loss"] == pytest.approx(d_losses[-1], rel=1e-6)
    assert run.step == 3


def test_every_n_collects_every_nth_step_and_lr_follows_the_scheduler() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    with gradwatch.watch(model, opt, every=3) as run:
        for i in range(7):
            train_step(model, opt, i)
            sched.step()
    got = steps(run.dir)
    assert [s["step"] for s in got] == [1, 4, 7]
    assert [s["lr"] for s in got] == [[1.0], [0.125], [0.5**6]]


def test_user_scalars_attach_to_the_current_step() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradwatch.watch(model, opt) as run:
        run.log({"before": 1})
        for i in range(2):
            opt.zero_grad()
            x, y = batch(i)
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            run.log({"acc": torch.tensor(0.5 + i), "nan": float("nan")})
        run.log({"bad": "text"})  # type: ignore[dict-item]
    got = []
    for rec in records(run.dir, Kind.SCALARS):
        keys = rec.meta["keys"]
        got += list(
            zip(
                rec.arrays["step"].to_list(),
                [keys[k] for k in rec.arrays["key"].to_list()],
                rec.arrays["value"].to_list(),
                strict=True,
            )
        )
    assert got[:3] == [
        (0, "before", 1.0),
        (1, "acc", 0.5),
        (1, "nan", pytest.approx(math.nan, nan_ok=True)),
    ]
    assert got[3] == (2, "acc", 1.5)
    assert "bad" not in {k for _, k, _ in got}


def test_close_detaches_every_hook_and_restores_what_it_wrapped() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    original_backward = torch.autograd.backward
    original_zero_grad = nn.Module.zero_grad
    run = gradwatch.watch(model, opt)
    assert torch.autograd.backward is not original_backward
    # the model's zero_grad is seen through the class (nothing on the model to pickle)
    assert "zero_grad" in opt.__dict__ and nn.Module.zero_grad is not original_zero_grad
    run.close()
    run.close()  # idempotent
    assert torch.autograd.backward is original_backward
    assert "zero_grad" not in opt.__dict__ and nn.Module.zero_grad is original_zero_grad
    assert not opt._optimizer_step_pre_hooks and not opt._optimizer_step_post_hooks
    assert not model._forward_pre_hooks and not model._forward_hooks
    assert all(not p._post_accumulate_grad_hooks for p in model.parameters())
    (end,) = records(run.dir, Kind.END)
    assert end.meta["status"] == "finished" and end.meta["steps"] == [0]


def test_exception_in_the_with_block_ends_the_run_as_failed() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(KeyError), gradwatch.watch(model, opt) as run:
        raise KeyError("boom")
    (end,) = records(run.dir, Kind.END)
    assert end.meta["status"] == "failed" and "KeyError" in end.meta["error"]


def test_fingerprint_and_batch_checksum_are_recorded() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradwatch.watch(model, opt, config={"seed": 0}) as run:
        for i in (0, 1, 0):
            train_step(model, opt, i)
    phases = {r.meta["phase"]: r.meta for r in records(run.dir, Kind.FINGERPRINT)}
    assert set(phases) == {"fast", "slow"}
    assert phases["fast"]["init_params_hash"] and phases["fast"]["config"] == {"seed": 0}
    assert "packages_hash" in phases["slow"] and "code_hash" in phases["slow"]
    hashes = [s["batch_hash"] for s in steps(run.dir)]
    assert hashes[0] == hashes[2] != hashes[1]


def test_rows_are_transferred_in_batches_of_transfer_every_steps() -> None:
    """One STEPS record per ``transfer_every`` steps; the remainder is flushed by close()."""
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradwatch.watch(model, opt, transfer_every=4) as run:
        for i in range(10):
            train_step(model, opt, i)
            if i == 6:
                assert sum(
                    len(r.arrays["step"].to_list()) for r in records(run.dir, Kind.STEPS)
                ) in (0, 4)
    sizes = [len(r.arrays["step"].to_list()) for r in records(run.dir, Kind.STEPS)]
    assert sizes == [4, 4, 2]
    assert [s["step"] for s in steps(run.dir)] == list(range(1, 11))


def test_progressive_unfreezing_is_followed() -> None:
    """A layer frozen at watch() and unfrozen later gets its backward hook then."""
    model = mlp()
    for p in model[0].parameters():
        p.requires_grad_(False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradwatch.watch(model, opt) as run:
        for i in range(4):
            if i == 2:
                for p in model[0].parameters():
                    p.requires_grad_(True)
            opt.zero_grad()
            x, y = batch(i)
            nn.functional.mse_loss(model(x), y).backward()
            for p in model[0].parameters():  # clearing by hand is only seen on hooked tensors
                p.grad = None
            opt.step()
    got = steps(run.dir)
    assert [s["has_grad"][:2] for s in got] == [[False, False]] * 4
    assert [e[2] for e in got[1]["events"] if e[0] == "zero_grad"] == ["optimizer"]
    assert [e[2] for e in got[3]["events"] if e[0] == "zero_grad"] == [
        "optimizer",
        "by hand: 2 tensors",
    ]


def test_events_without_a_step_stay_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradwatch.watch(model, opt) as run:
        for _ in range(1000):  # e.g. zero_grad in an evaluation loop that never steps
            opt.zero_grad()
        x, y = batch(0)
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.add_param_group({"params": [nn.Parameter(torch.ones(2))]})
        opt.step()
    (first, _) = steps(run.dir)
    assert len([e for e in first["events"] if e[0] not in STATE_KINDS]) == 256 + 2
    assert first["events"][-2][0] == "dropped" and first["events"][-2][2] == str(1000 - 256 + 1)
    assert "tensors added later are not followed" in capsys.readouterr().err


def test_grad_norms_mode_records_gradients_only_and_turns_off_the_checks_that_need_more() -> None:
    """``stats="grad-norms"``: exact gradient norms, NaN (not measured) parameter and update
    norms, no snapshot, and no finding from a check that would read the missing values."""
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with gradwatch.watch(model, opt, stats="grad-norms") as run:
        assert run.context.options.policy("update-ratio") == "off"
        assert run.context.options.policy("nonfinite-param") == "off"
        for i in range(5):
            opt.zero_grad()
            x, y = batch(i)
            nn.functional.mse_loss(model(x), y).backward()
            expected = [float(p.grad.norm()) for p in model.parameters()]  # type: ignore[union-attr]
            opt.step()
            assert run.context.watches[0].stats._snapshot is None
    (start,) = records(run.dir, Kind.RUN_START)
    assert start.meta["options"]["stats"] == "grad-norms"
    rows = steps(run.dir)
    assert len(rows) == 5
    last = rows[-1]["stats"]
    for (grad, param, update, nonfinite), want in zip(last, expected, strict=True):
        assert math.isclose(grad, want, rel_tol=1e-6)
        assert math.isnan(param) and math.isnan(update) and nonfinite == 0
    assert not [f for f in run.findings if f.check in ("nonfinite-param", "update-ratio")]
