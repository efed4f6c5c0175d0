"""``lr-too-large``: an Adam-type learning rate far above the size of the weights it trains —
from the first step, built up by a hand-set warm-up, or planned by a scheduler — and the
correct settings that must stay quiet (fine-tuning, from-scratch rates, warm-up, zero-init
and norm tensors, SGD with a large rate)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.optim import lr_scheduler as sch

from gradwatch.checks import lrscale
from gradwatch.core.incidents import group
from tests.collector.checks.common import assert_quiet, of, standard, train


def wide(seed: int = 0, d_in: int = 6, hidden: int = 256, d_out: int = 3) -> nn.Module:
    """An MLP whose hidden matrix has PyTorch's default size, RMS ≈ 1/√(3·256) ≈ 0.036."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, d_out),
    )  # fmt: skip


def gpt_like(seed: int = 0, width: int = 64) -> nn.Module:
    """Matrices drawn with std 0.02 (GPT-2/BERT initialisation), LayerNorm, zero biases."""
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(6, width), nn.LayerNorm(width), nn.GELU(), nn.Linear(width, width),
        nn.LayerNorm(width), nn.GELU(), nn.Linear(width, 3),
    )  # fmt: skip
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            nn.init.zeros_(m.bias)
    return model


def test_adam_rate_far_above_the_weights_is_found_at_the_first_step() -> None:
    model = gpt_like()
    opt = torch.optim.AdamW(model.parameters(), lr=1.0)  # 1e-3 with a factor 1000 too many
    run = train(model, opt, 20)
    (f,) = of(run, "lr-too-large")
    assert (f.step, f.severity, f.optimizer) == (1, "warning", 0)
    assert f.details["group"] == 0 and f.details["lr"] == 1.0
    assert f.details["optimizer_class"] == "AdamW"
    assert f.details["weight_rms"] == pytest.approx(0.02, rel=0.1)
    assert f.details["ratio"] == pytest.approx(50, rel=0.1)
    assert "group 0 is set to 1, 50× the typical size" in f.message
    assert "AdamW moves every weight" in f.message


def test_the_rate_a_scheduler_was_built_for_is_read_at_the_first_step() -> None:
    # Hugging Face's linear warm-up: 0 at the first step, the peak (initial_lr) later
    model = gpt_like()
    opt = torch.optim.AdamW(model.parameters(), lr=0.5)
    sched = sch.LambdaLR(opt, lambda s: min(1.0, s / 20))

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        standard(i, model, opt, x, y)
        sched.step()

    run = train(model, opt, 10, step)
    (f,) = of(run, "lr-too-large")
    assert f.step == 1 and f.details["scheduled_peak"] is True
    assert f.details["scheduler"] == "LambdaLR" and f.details["lr"] == 0.5
    assert "is scheduled to reach 0.5 by LambdaLR" in f.message


def test_a_hand_set_warm_up_is_found_when_the_rate_passes_the_weights() -> None:
    # nanoGPT's get_lr(): learning_rate * (it + 1) / (warmup_iters + 1), set by hand
    model = gpt_like()
    opt = torch.optim.Adam(model.parameters(), lr=0.0)

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        for g in opt.param_groups:
            g["lr"] = 1.0 * (i + 1) / 101
        standard(i, model, opt, x, y)

    run = train(model, opt, 20, step)
    (f,) = of(run, "lr-too-large")
    # 3 × 0.02 = 0.06 < 7/101: the seventh step, whose rate is 0.069
    assert f.step == 7 and f.details["scheduled_peak"] is False


def test_the_finding_is_the_cause_of_what_the_rate_does_next() -> None:
    model = gpt_like()
    opt = torch.optim.Adam(model.parameters(), lr=1e3)
    run = train(model, opt, 60)
    found = [f.to_meta() for f in run.findings if f.severity != "info"]
    assert found[0]["check"] == "lr-too-large"
    roles = group(found)
    assert roles[0][1] == "cause"
    assert all(inc == roles[0][0] for inc, _ in roles), found


QUIET: dict[str, Any] = {
    "Adam 1e-3 from scratch": lambda: (wide(), lambda p: torch.optim.Adam(p, lr=1e-3)),
    "AdamW 6e-4 on GPT-like init": lambda: (gpt_like(), lambda p: torch.optim.AdamW(p, lr=6e-4)),
    "AdamW 5e-5 fine-tuning": lambda: (gpt_like(), lambda p: torch.optim.AdamW(p, lr=5e-5)),
    "Adam 1e-2 on a small net": lambda: (wide(), lambda p: torch.optim.Adam(p, lr=1e-2)),
    "SGD 0.2 on a small net": lambda: (wide(), lambda p: torch.optim.SGD(p, lr=0.2)),
    "SGD 0.02 momentum": lambda: (wide(), lambda p: torch.optim.SGD(p, lr=0.02, momentum=0.9)),
    "Adadelta 1.0 (its default)": lambda: (wide(), lambda p: torch.optim.Adadelta(p, lr=1.0)),
    "Adadelta 0.1": lambda: (wide(), lambda p: torch.optim.Adadelta(p, lr=0.1)),
    "RMSprop 1e-2 (its default)": lambda: (wide(), lambda p: torch.optim.RMSprop(p, lr=1e-2)),
    "RMSprop 5e-5 (a WGAN's)": lambda: (gpt_like(), lambda p: torch.optim.RMSprop(p, lr=5e-5)),
    "Adagrad 0.1": lambda: (wide(), lambda p: torch.optim.Adagrad(p, lr=0.1)),
}


def test_an_rmsprop_rate_far_above_the_weights_is_found_at_the_first_step() -> None:
    """torchdiffeq's ODE demo: RMSprop at 1e-3, a factor 1000 too many (its weights drawn
    with std 0.1): NaN at the third step, with nothing said of the rate before."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 50), nn.Tanh(), nn.Linear(50, 3))
    for m in model:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.1)
    (f,) = of(train(model, torch.optim.RMSprop(model.parameters(), lr=1.0), 5), "lr-too-large")
    assert (f.step, f.details["optimizer_class"]) == (1, "RMSprop")
    assert f.details["ratio"] == pytest.approx(10, rel=0.1)


def test_an_adadelta_rate_far_above_its_natural_one_is_found_at_the_first_step() -> None:
    """pytorch/examples mnist: Adadelta at 1.0, a factor 1000 too many."""
    model = wide()
    opt = torch.optim.Adadelta(model.parameters(), lr=1000.0)
    (f,) = of(train(model, opt, 5), "lr-too-large")
    assert (f.step, f.details["optimizer_class"], f.details["ratio"]) == (1, "Adadelta", 1000.0)
    assert "1,000× Adadelta's natural rate of 1" in f.message


@pytest.mark.parametrize("name", list(QUIET))
def test_correct_rates_are_quiet(name: str) -> None:
    model, make = QUIET[name]()
    opt = make(model.parameters())
    run = train(model, opt, 30)
    assert of(run, "lr-too-large") == []
    assert_quiet(run)


def test_zero_initialised_matrices_norm_weights_and_biases_have_no_size() -> None:
    torch.manual_seed(0)
    head = nn.Linear(8, 3)
    nn.init.zeros_(head.weight)  # a fresh zero-initialised head (LoRA's B, ControlNet's convs)
    norm = nn.LayerNorm(8)
    model = nn.Sequential(nn.Linear(6, 8), norm, head)
    params = [
        {"params": [head.weight], "lr": 1e-3},  # only zero matrices: never judged
        {"params": [*norm.parameters(), head.bias], "lr": 0.5},  # no matrices at all
        {"params": [model[0].weight, model[0].bias], "lr": 1e-3},
    ]
    opt = torch.optim.Adam(params)
    run = train(model, opt, 10)
    assert of(run, "lr-too-large") == []


def test_which_optimizers_take_steps_of_about_the_learning_rate() -> None:
    p = [nn.Parameter(torch.zeros(2, 2))]
    assert lrscale.scale_free(torch.optim.Adam(p)) == "Adam"
    assert lrscale.scale_free(torch.optim.NAdam(p)) == "NAdam"
    assert lrscale.scale_free(torch.optim.SGD(p, lr=0.1)) is None
    assert lrscale.scale_free(torch.optim.Adadelta(p)) is None  # lr=1.0 is its default
    assert lrscale.multiplier(torch.optim.Adadelta(p)) == "Adadelta"
    assert lrscale.multiplier(torch.optim.Adam(p)) is None
    assert lrscale.scale_free(torch.optim.RMSprop(p)) == "RMSprop"  # divides by its rms
    assert lrscale.scale_free(torch.optim.Adagrad(p)) is None  # its steps shrink as lr/√t

    class DAdaptAdam(torch.optim.Adam):  # a learning-rate multiplier, 1.0 by default
        pass

    class Wrapper:
        def __init__(self, inner: torch.optim.Optimizer) -> None:
            self.optimizer = inner

    assert lrscale.scale_free(DAdaptAdam(p)) is None
    assert lrscale.scale_free(Wrapper(torch.optim.AdamW(p))) == "AdamW"


def test_a_too_large_rate_that_makes_the_loss_diverge_becomes_an_error() -> None:
    """The divergence is the evidence that the rate breaks training: the finding is raised
    to an error (once), so ``gradwatch findings --fail-on error`` fails such a run."""
    model = gpt_like()
    opt = torch.optim.Adam(model.parameters(), lr=1e3)
    run = train(model, opt, 60)
    found = of(run, "lr-too-large")
    assert [f.severity for f in found] == ["warning", "error"], [f.line() for f in found]
    diverged = [f for f in run.findings if f.check in ("loss-diverging", "nonfinite-loss")]
    onset = min(f.step or 0 for f in diverged)
    assert found[1].step == 1 and found[1].details["diverged_at_step"] == onset
    assert f"at step {onset}, after the learning rate was found too large at step 1" in (
        found[1].message
    )
    roles = group([f.to_meta() for f in found])
    assert roles == [(roles[0][0], "cause"), (roles[0][0], "consequence")]


def test_a_too_large_rate_whose_loss_does_not_diverge_stays_a_warning() -> None:
    model = gpt_like()
    opt = torch.optim.AdamW(model.parameters(), lr=1.0)
    run = train(model, opt, 20)
    assert [f.severity for f in of(run, "lr-too-large")] == ["warning"]
    assert not [f for f in run.findings if f.check in ("loss-diverging", "nonfinite-loss")]
