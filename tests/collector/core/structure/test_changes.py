"""Minimal reproductions of each kind of structure change, and of the periodic patterns and
by-design changes that must stay info (or be no change at all)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

import gradwatch
from tests.collector.core.structure.stored import stored

Findings = list[dict[str, Any]]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.1), nn.BatchNorm1d(8), nn.Linear(8, 2))


def _loss(model: nn.Module) -> torch.Tensor:
    return model(torch.randn(8, 4)).pow(2).mean()


def _run(
    data_dir: Path,
    model: nn.Module,
    opt: torch.optim.Optimizer | list[torch.optim.Optimizer],
    steps: int,
    body: Callable[[int], None],
) -> Findings:
    """Train ``steps`` iterations of ``body`` under gradwatch; the run's structure findings."""
    opts = opt if isinstance(opt, list) else [opt]
    with gradwatch.watch(model, opts) as run:
        for step in range(1, steps + 1):
            body(step)
    return stored(data_dir / "runs" / run.id)


def _plain_loop(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    *,
    clip: Callable[[int], bool] = lambda s: False,
    sched: Any = None,
    sched_step: Callable[[int], bool] = lambda s: True,
    after: Callable[[int], None] = lambda s: None,
) -> Callable[[int], None]:
    def body(step: int) -> None:
        opt.zero_grad()
        _loss(model).backward()
        if clip(step):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if sched is not None and sched_step(step):
            sched.step()
        after(step)

    return body


def _seen(found: Findings) -> list[tuple[str, str, int]]:
    return [(f["severity"], f["check"], f["step"]) for f in found]


# ---- safeguards dropped: warnings ------------------------------------------------------


def test_clipping_that_stops_for_the_rest_of_the_run_is_a_warning_at_its_step(
    data_dir: Path,
) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    found = _run(data_dir, model, opt, 80, _plain_loop(model, opt, clip=lambda s: s < 40))
    assert _seen(found) == [("warning", "structure-safeguard", 40)]
    message = found[0]["message"]
    assert message.startswith("From step 40, clip_grad_norm_ is no longer called before step()")
    assert "the last 41 steps of the run are not clipped" in message


def test_clipping_switched_on_after_warm_up_is_info(data_dir: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    found = _run(data_dir, model, opt, 80, _plain_loop(model, opt, clip=lambda s: s > 30))
    assert _seen(found) == [("info", "structure-change", 31)]
    assert "clip_grad_norm_ is called now" in found[0]["message"]


def test_a_scheduler_that_stops_while_its_rate_still_moves_is_a_warning(data_dir: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 200)
    body = _plain_loop(model, opt, sched=sched, sched_step=lambda s: s < 40)
    found = _run(data_dir, model, opt, 80, body)
    assert _seen(found) == [("warning", "structure-safeguard", 41)]
    assert "no scheduler steps the learning rate any more" in found[0]["message"]
    assert found[0]["details"]["safeguard"] == "scheduler"


def test_a_warm_up_scheduler_stopped_once_its_rate_is_flat_is_info(data_dir: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=10)
    body = _plain_loop(model, opt, sched=sched, sched_step=lambda s: s < 30)
    found = _run(data_dir, model, opt, 80, body)
    assert _seen(found) == [("info", "structure-change", 31)]
    assert "(a warm-up that ended)" in found[0]["message"]


def test_a_warm_up_scheduler_stepped_only_during_the_warm_up_is_info(data_dir: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=10)
    body = _plain_loop(model, opt, sched=sched, sched_step=lambda s: s <= 10)
    found = _run(data_dir, model, opt, 60, body)
    assert _seen(found) == [("info", "structure-change", 12)]


def test_a_module_left_in_eval_after_a_validation_is_a_warning(data_dir: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def validate(step: int) -> None:
        if step % 20 == 0:
            model.eval()
            with torch.no_grad():
                _loss(model)
            # the helper switches back only the layers it knows about: from step 40 on, the
            # dropout and the BatchNorm stay in eval()
            if step < 40:
                model.train()
            else:
                model.train(False)
                model[0].train()
                model[3].train()

    found = _run(data_dir, model, opt, 80, _plain_loop(model, opt, after=validate))
    safeguards = [f for f in found if f["check"] == "structure-safeguard"]
    assert [f["step"] for f in safeguards] == [41]
    assert "1 (Dropout), 2 (BatchNorm1d), the model are in eval() mode" in str(
        safeguards[0]["message"]
    )
    assert safeguards[0]["details"]["safeguard"] == "train-mode"


# ---- changes that are info ---------------------------------------------------------------


def test_weight_decay_set_to_zero_mid_run_is_an_info_change(data_dir: Path) -> None:
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.05)

    def drop_decay(step: int) -> None:
        if step == 30:
            opt.param_groups[0]["weight_decay"] = 0.0

    found = _run(data_dir, model, opt, 60, _plain_loop(model, opt, after=drop_decay))
    assert _seen(found) == [("info", "structure-change", 31)]
    assert found[0]["message"] == (
        "From step 31, param group 0's weight_decay is 0.0 instead of 0.05."
    )


def test_param_groups_rebuilt_without_their_hyperparameters_is_an_info_change(
    data_dir: Path,
) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)

    def rebuild(step: int) -> None:
        if step == 30:  # an "unfreeze" helper that rebuilds the groups from scratch
            opt.param_groups.clear()
            opt.add_param_group({"params": list(model.parameters()), "momentum": 0.0})

    found = _run(data_dir, model, opt, 60, _plain_loop(model, opt, after=rebuild))
    assert _seen(found) == [("info", "structure-change", 31)]
    assert "momentum is 0.0 instead of 0.9" in found[0]["message"]


def test_a_dtype_change_mid_run_is_an_info_change(data_dir: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def body(step: int) -> None:
        if step == 30:
            model.double()
        opt.zero_grad()
        x = torch.randn(8, 4, dtype=next(model.parameters()).dtype)
        model(x).pow(2).mean().backward()
        opt.step()

    found = _run(data_dir, model, opt, 70, body)
    assert _seen(found) == [("info", "structure-change", 30)]  # the first step in float64
    assert "'params float64; grads float64' instead of 'params float32" in found[0]["message"]


# ---- periodic patterns and by-design changes: no warning -------------------------------------


def test_evaluation_every_n_steps_with_train_restored_is_no_change(data_dir: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def validate(step: int) -> None:
        if step % 10 == 0:
            model.eval()
            with torch.no_grad():
                _loss(model)
            model.train()

    assert _run(data_dir, model, opt, 70, _plain_loop(model, opt, after=validate)) == []


def test_accumulation_with_clipping_every_k_micro_batches_is_no_change(data_dir: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def body(step: int) -> None:
        for micro in range(4):
            (_loss(model) / 4).backward()
            if micro == 3:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad()

    assert _run(data_dir, model, opt, 60, body) == []


def test_gan_alternation_with_n_critic_steps_is_no_change(data_dir: Path) -> None:
    torch.manual_seed(0)
    gen, critic = nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt_g = torch.optim.Adam(gen.parameters(), lr=1e-3)
    opt_c = torch.optim.Adam(critic.parameters(), lr=1e-3)

    def body(step: int) -> None:
        for _ in range(5):  # n_critic
            opt_c.zero_grad()
            fake = gen(torch.randn(8, 4)).detach()
            (critic(fake).mean() - critic(torch.randn(8, 4)).mean()).backward()
            torch.nn.utils.clip_grad_value_(critic.parameters(), 0.01)
            opt_c.step()
        opt_g.zero_grad()
        (-critic(gen(torch.randn(8, 4))).mean()).backward()
        opt_g.step()

    both = nn.ModuleDict({"gen": gen, "critic": critic})
    found = _run(data_dir, both, [opt_g, opt_c], 30, body)
    assert [f for f in found if f["severity"] != "info"] == []
    assert [f for f in found if f["details"]["element"] == "lifecycle"] == []


def test_progressive_unfreezing_on_a_schedule_stays_info(data_dir: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(8, 2))
    model[0].requires_grad_(False)
    model[1].requires_grad_(False)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def unfreeze(step: int) -> None:
        if step == 30:
            model[1].requires_grad_(True)
        if step == 60:
            model[0].requires_grad_(True)

    def body(step: int) -> None:
        unfreeze(step)
        opt.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        opt.step()

    found = _run(data_dir, model, opt, 90, body)
    assert _seen(found) == [("info", "structure-change", 30), ("info", "structure-change", 60)]
    assert all("(unfrozen?)" in f["message"] for f in found)


def test_warm_up_then_cosine_is_no_change(data_dir: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=20)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 60)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, cosine], milestones=[20])
    found = _run(data_dir, model, opt, 80, _plain_loop(model, opt, sched=sched))
    assert [f for f in found if f["severity"] != "info"] == []
    assert [f for f in found if f["details"]["element"] == "lifecycle"] == []


def test_one_cycle_momentum_is_a_schedule_not_a_change(data_dir: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=100)
    assert _run(data_dir, model, opt, 80, _plain_loop(model, opt, sched=sched)) == []


def test_a_per_epoch_scheduler_is_a_period_not_a_change(data_dir: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)
    body = _plain_loop(model, opt, sched=sched, sched_step=lambda s: s % 10 == 0)
    assert _run(data_dir, model, opt, 80, body) == []


def test_a_step_that_bypasses_the_grad_scaler_is_an_info_change(data_dir: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0)

    def body(step: int) -> None:
        opt.zero_grad()
        scaler.scale(_loss(model)).backward()
        if step <= 30:
            scaler.step(opt)
            scaler.update()
        else:  # a resumed loop that calls the optimizer itself: gradients still scaled
            opt.step()

    found = _run(data_dir, model, opt, 60, body)
    assert _seen(found) == [("info", "structure-change", 31)]
    assert "the GradScaler's part is 'scaled' instead of 'unscaled'" in found[0]["message"]


def test_a_loop_that_updates_by_hand_records_its_structure_too(data_dir: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.1), nn.Linear(8, 2))
    with gradwatch.watch(model) as run:  # no optimizer: the update is made by hand
        for step in range(1, 61):
            model.zero_grad()
            _loss(model).backward()
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(p.grad, alpha=-0.01)
            if step == 30:
                model.eval()  # left in eval() after a "validation"
    found = stored(data_dir / "runs" / run.id)
    assert _seen(found) == [("warning", "structure-safeguard", 31)]


# ---- autocast --------------------------------------------------------------------------------


def _autocast_loop(
    model: nn.Module, opt: torch.optim.Optimizer, on: Callable[[int], bool]
) -> Callable[[int], None]:
    def body(step: int) -> None:
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=on(step)):
            loss = model(torch.randn(8, 4)).float().pow(2).mean()
        loss.backward()
        opt.step()
        if step % 10 == 0:  # an evaluation without autocast: no training forward
            model.eval()
            with torch.no_grad():
                _loss(model)
            model.train()

    return body


def test_autocast_switched_off_mid_run_is_an_info_change(data_dir: Path) -> None:
    """Autocast is no safeguard (without it the forward runs in float32): its end is a
    change, not a warning."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    found = _run(data_dir, model, opt, 70, _autocast_loop(model, opt, lambda s: s < 35))
    assert _seen(found) == [("info", "structure-change", 35)]
    assert found[0]["message"] == (
        "From step 35, the training forward runs without autocast instead of under "
        "autocast (cpu, bfloat16)."
    )
    assert found[0]["details"]["changed"] == ["autocast"]


def test_autocast_on_every_step_with_evaluation_outside_it_is_no_change(data_dir: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradwatch.watch(model, opt) as run:
        body = _autocast_loop(model, opt, lambda s: True)
        for step in range(1, 61):
            body(step)
    run_dir = data_dir / "runs" / run.id
    assert stored(run_dir) == []
    from gradwatch.core.structure.group import member

    values = {s.value("autocast") for s in member(run_dir, lambda _: False).shapes[0]}
    assert values == {"cpu bfloat16"}


def test_autocast_on_alternate_steps_is_a_period_not_a_change(data_dir: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    found = _run(data_dir, model, opt, 60, _autocast_loop(model, opt, lambda s: s % 2 == 0))
    assert found == []
