"""Correct training code written the usual ways must produce no warning or error finding
(info findings such as ``nondeterminism-risk`` are allowed): gradient accumulation,
the ways of clearing gradients, GANs, frozen backbones, schedulers, bf16 autocast with a
GradScaler, DataLoader workers, buffers and tied weights, clipping, multi-loss, LBFGS and the
common optimizers. Every test is a real training of at least 30 optimizer steps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import gradwatch
from tests.collector.checks.common import (
    D_IN,
    D_OUT,
    HIDDEN,
    assert_quiet,
    batch,
    mlp,
    mse,
    standard,
    train,
)

STEPS = 30
K = 4  # micro-batches per optimizer step


def sgd(model: nn.Module, **kw: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=kw.pop("lr", 0.05), **kw)


# -- gradient accumulation -------------------------------------------------------------------
def accumulate(zero_grad_at: str) -> Callable[..., None]:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        if zero_grad_at == "top" and i % K == 0:
            opt.zero_grad()
        (mse(model(x), y) / K).backward()
        if (i + 1) % K == 0:
            opt.step()
            if zero_grad_at == "after step":
                opt.zero_grad()

    return step


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "undeclared"])
@pytest.mark.parametrize("zero_grad_at", ["top", "after step"])
def test_gradient_accumulation(zero_grad_at: str, declared: bool) -> None:
    model = mlp()
    kw = {"accumulation_steps": K} if declared else {}
    run = train(model, sgd(model), STEPS * K, accumulate(zero_grad_at), **kw)
    assert run.step == STEPS
    assert_quiet(run)


def test_gradient_accumulation_with_a_short_last_accumulation_per_epoch() -> None:
    """Epochs of 10 micro-batches with K=4: the last step of each epoch applies only 2."""

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        j = i % 10
        (mse(model(x), y) / K).backward()
        if (j + 1) % K == 0 or j == 9:
            opt.step()
            opt.zero_grad()

    model = mlp()
    run = train(model, sgd(model), 100, step, accumulation_steps=K)
    assert run.step == 30
    assert_quiet(run)


# -- clearing gradients ----------------------------------------------------------------------
@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad_set_to_none(set_to_none: bool) -> None:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad(set_to_none=set_to_none)
        mse(model(x), y).backward()
        opt.step()

    model = mlp()
    assert_quiet(train(model, sgd(model, momentum=0.9), STEPS, step))


@pytest.mark.parametrize("owner", ["model", "optimizer"])
def test_model_zero_grad_or_optimizer_zero_grad(owner: str) -> None:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        (model if owner == "model" else opt).zero_grad()
        mse(model(x), y).backward()
        opt.step()

    model = mlp()
    assert_quiet(train(model, sgd(model), STEPS, step))


def clear_by_hand(how: str, where: str) -> Callable[..., None]:
    def clear(model: nn.Module) -> None:
        for p in model.parameters():
            if how == "None":
                p.grad = None
            elif p.grad is not None and how == "zero_":
                p.grad.zero_()
            elif p.grad is not None and how == "data.zero_":
                p.grad.data.zero_()  # torch 0.3's idiom: no version counter moves
            elif p.grad is not None:
                p.grad.data.fill_(0)

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        if where == "top":
            clear(model)
        mse(model(x), y).backward()
        opt.step()
        if where == "after step":
            clear(model)

    return step


@pytest.mark.parametrize("where", ["top", "after step"])
@pytest.mark.parametrize(
    "how",
    ["None", "zero_", "data.zero_", "data.fill_"],
    ids=["p.grad = None", "p.grad.zero_()", "p.grad.data.zero_()", "p.grad.data.fill_(0)"],
)
def test_clearing_gradients_by_hand(how: str, where: str) -> None:
    model = mlp()
    assert_quiet(train(model, sgd(model), STEPS, clear_by_hand(how, where)))


# -- GAN -------------------------------------------------------------------------------------
@pytest.mark.parametrize("toggle_d", [False, True], ids=["detach", "detach+requires_grad"])
def test_gan_with_two_optimizers_and_detached_fakes(toggle_d: bool) -> None:
    torch.manual_seed(0)
    g = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    d = nn.Sequential(nn.Linear(2, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    opt_g = torch.optim.Adam(g.parameters(), lr=1e-3, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(d.parameters(), lr=1e-3, betas=(0.5, 0.999))
    bce = nn.BCEWithLogitsLoss()

    def step(i: int, models: Any, opts: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        real = x[:, :2] * 0.5 + 1.0
        z = torch.randn(real.shape[0], 4, generator=torch.Generator().manual_seed(i))
        fake = g(z)
        ones, zeros = torch.ones(len(real), 1), torch.zeros(len(real), 1)
        # discriminator
        if toggle_d:
            d.requires_grad_(True)
        opt_d.zero_grad()
        loss_d = bce(d(real), ones) + bce(d(fake.detach()), zeros)
        loss_d.backward()
        opt_d.step()
        # generator
        if toggle_d:
            d.requires_grad_(False)
        opt_g.zero_grad()
        bce(d(fake), ones).backward()
        opt_g.step()

    run = train({"G": g, "D": d}, [opt_g, opt_d], STEPS, step)
    assert run.step == STEPS
    assert_quiet(run)


# -- frozen backbone -------------------------------------------------------------------------
def test_frozen_backbone_with_a_head_only_optimizer() -> None:
    model = mlp()
    model[0].requires_grad_(False)
    opt = torch.optim.SGD(model[2].parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    assert_quiet(train(model, opt, STEPS))


# -- schedulers ------------------------------------------------------------------------------
SCHEDULERS: dict[str, Callable[[torch.optim.Optimizer], Any]] = {
    "StepLR": lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=10, gamma=0.1),
    "OneCycleLR": lambda o: torch.optim.lr_scheduler.OneCycleLR(
        o, max_lr=0.02, total_steps=STEPS, pct_start=0.3
    ),
    "CosineAnnealingLR": lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=STEPS),
}


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_lr_schedulers(name: str) -> None:
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = SCHEDULERS[name](opt)

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        standard(i, model, opt, x, y)
        sched.step()

    assert_quiet(train(model, opt, STEPS, step))


# -- mixed precision -------------------------------------------------------------------------
@pytest.mark.parametrize("scaler", [False, True], ids=["autocast", "autocast+GradScaler"])
def test_cpu_autocast_bf16(scaler: bool) -> None:
    grad_scaler = torch.amp.GradScaler("cpu") if scaler else None

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = mse(model(x).float(), y)
        if grad_scaler is None:
            loss.backward()
            opt.step()
        else:
            grad_scaler.scale(loss).backward()
            grad_scaler.unscale_(opt)
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            grad_scaler.step(opt)
            grad_scaler.update()

    model = mlp()
    assert_quiet(train(model, torch.optim.AdamW(model.parameters(), lr=0.01), STEPS, step))


# -- data loading ----------------------------------------------------------------------------
def test_dataloader_with_two_workers() -> None:
    xs, ys = zip(*(batch(i) for i in range(STEPS)), strict=True)
    dataset = torch.utils.data.TensorDataset(torch.cat(xs), torch.cat(ys))
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=len(xs[0]),
        shuffle=True,
        num_workers=2,
        generator=torch.Generator().manual_seed(0),
    )
    batches = iter(loader)
    model = mlp()
    run = train(model, sgd(model), STEPS, data=lambda i: next(batches))
    assert run.step == STEPS
    assert_quiet(run)


# -- buffers and tied weights ----------------------------------------------------------------
class TinyLM(nn.Module):
    """Embedding -> BatchNorm -> output layer tied to the embedding."""

    def __init__(self, vocab: int = 16, dim: int = 8) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(vocab, dim)
        self.norm = nn.BatchNorm1d(dim)
        self.out = nn.Linear(dim, vocab, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.norm(self.emb(tokens))))


def tokens(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    t = torch.randint(0, 16, (32,), generator=torch.Generator().manual_seed(i))
    return t, (t + 1) % 16


def test_model_with_batchnorm_buffers_and_tied_embedding_weights() -> None:
    model = TinyLM()
    assert len(list(model.parameters())) == 3  # emb.weight (tied), norm.weight, norm.bias

    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    run = train(model, torch.optim.Adam(model.parameters(), lr=0.01), STEPS, step, data=tokens)
    assert model.norm.num_batches_tracked.item() == STEPS
    assert_quiet(run)


def test_linear_with_bias_before_batchnorm() -> None:
    """The default ``nn.Linear`` (bias=True) before a BatchNorm: the bias gradient is zero
    up to rounding (BatchNorm removes the mean). Redundant, but correct training code."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(D_IN, HIDDEN), nn.BatchNorm1d(HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, D_OUT)
    )
    assert_quiet(train(model, sgd(model, momentum=0.9), STEPS))


# -- clipping, multi-loss, optimizers --------------------------------------------------------
@pytest.mark.parametrize("clip", ["norm", "value"])
def test_gradient_clipping(clip: str) -> None:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        mse(model(x), y).backward()
        if clip == "norm":
            nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
        else:
            nn.utils.clip_grad_value_(model.parameters(), clip_value=0.05)
        opt.step()

    model = mlp()
    assert_quiet(train(model, sgd(model), STEPS, step))


@pytest.mark.parametrize("graphs", ["two forwards", "retain_graph"])
def test_multi_loss_two_backward_calls_per_step(graphs: str) -> None:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        if graphs == "two forwards":
            mse(model(x), y).backward()
            (0.1 * model(x).abs().mean()).backward()  # an auxiliary loss
        else:
            out = model(x)
            mse(out, y).backward(retain_graph=True)
            (0.1 * out.abs().mean()).backward()
        opt.step()

    model = mlp()
    assert_quiet(train(model, sgd(model), STEPS, step))


def test_lbfgs_with_a_closure() -> None:
    def step(i: int, model: nn.Module, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = mse(model(x), y)
            loss.backward()
            return loss

        opt.step(closure)

    model = mlp()
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)
    assert_quiet(train(model, opt, STEPS, step))


OPTIMIZERS: dict[str, Callable[[nn.Module], torch.optim.Optimizer]] = {
    "SGD momentum+wd": lambda m: torch.optim.SGD(
        m.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4
    ),
    "SGD nesterov": lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, nesterov=True),
    "Adam": lambda m: torch.optim.Adam(m.parameters(), lr=1e-2),
    "AdamW": lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=1e-2),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_common_optimizers(name: str) -> None:
    model = mlp()
    assert_quiet(train(model, OPTIMIZERS[name](model), STEPS))


def test_conv_bias_before_batchnorm_is_not_an_exploding_gradient() -> None:
    """The bias of a conv feeding BatchNorm has a gradient that is zero up to rounding;
    its relative jumps are noise, not an explosion (nor a vanishing gradient)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 8 * 8, 4),
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(16, 3, 8, 8), torch.randint(0, 4, (16,))
    with gradwatch.watch(model, opt) as run:
        for _ in range(60):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    assert [f for f in run.findings if f.check in ("exploding-grad", "vanishing-grad")] == []


def test_embedding_rows_updated_only_when_their_tokens_appear() -> None:
    """SGD on a 5,000-row embedding moves only the rows of the batch's tokens: the
    whole-matrix update ratio is tiny on correct code (issue 23, item 3)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential()
    model.add_module("emb", torch.nn.EmbeddingBag(5000, 32, mode="mean"))
    model.add_module("head", torch.nn.Linear(32, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)

    def data(i: int) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.randint(0, 5000, (16, 12), generator=torch.Generator().manual_seed(i))
        return tokens, (tokens < 2500).float().mean(dim=1).round().long()

    def step(i: int, model: Any, opt: Any, x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    assert_quiet(train(model, opt, 60, step, data=data))


def test_a_fresh_zero_initialised_head_is_not_an_update_ratio_finding() -> None:
    """A zero-initialised head's first updates are as large as the head itself."""
    model = mlp()
    torch.nn.init.zeros_(model[2].weight)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    assert_quiet(train(model, opt, 60))
