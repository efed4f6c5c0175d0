"""``loss-at-chance``: a classification loss that sits at ln C while the parameters change —
the bug (inputs and labels shuffled apart) in a real training loop, and its correct twins."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import nn

import gradwatch
from gradwatch.checks import chance
from gradwatch.checks.chance import BAND, WARMUP, WINDOW, LossKind, smoothing_floor
from gradwatch.session.handle import Run
from tests.collector.checks.common import assert_quiet, first, of

C, DIM, BATCH, N = 10, 12, 50, 1000
Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def data(priors: list[float] | None = None, signal: float = 3.0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    classes = len(priors) if priors else C
    if priors:
        y = torch.multinomial(torch.tensor(priors), N, replacement=True, generator=g)
    else:
        y = torch.arange(N) % classes
    centers = torch.randn(classes, DIM, generator=g) * signal
    return centers[y] + torch.randn(N, DIM, generator=g), y


def classify(
    steps: int,
    *,
    apart: bool = False,
    priors: list[float] | None = None,
    signal: float = 3.0,
    loss: Loss | None = None,
    lr: float = 1e-3,
    head_scale: float = 1.0,
    evaluate_every: int = 0,
) -> Run:
    """``steps`` Adam steps of an MLP classifier over shuffled batches; ``apart``: the labels
    get their own permutation (the bug); ``evaluate_every``: a test pass every that many
    steps, in eval mode with gradients on and a summed loss (network slimming's)."""
    x, y = data(priors, signal)
    classes = int(y.max()) + 1 if priors else C
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(DIM, 32), nn.ReLU(), nn.Linear(32, classes))
    with torch.no_grad():
        model[2].weight.mul_(head_scale)  # > 1: the loss starts above ln C
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    run = gradwatch.watch(model, opt)
    loss = loss or (lambda out, y: nn.functional.cross_entropy(out, y))  # looked up now
    try:
        step = 0
        while step < steps:
            order = torch.randperm(N)
            labels = y[torch.randperm(N)] if apart else y[order]
            for i in range(0, N, BATCH):
                opt.zero_grad()
                loss(model(x[order[i : i + BATCH]]), labels[i : i + BATCH]).backward()
                opt.step()
                step += 1
                if evaluate_every and step % evaluate_every == 0:
                    model.eval()
                    nn.functional.cross_entropy(model(x[:BATCH]), y[:BATCH], reduction="sum")
                    model.train()
                if step == steps:
                    break
    finally:
        run.close()
    return run


@pytest.fixture
def short(monkeypatch: pytest.MonkeyPatch) -> int:
    """A shorter warm-up and window (the same rule on fewer steps); returns the first step
    at which the check can hold."""
    monkeypatch.setattr(chance, "WARMUP", 30)
    monkeypatch.setattr(chance, "WINDOW", 60)
    return 90


@pytest.mark.slow
def test_labels_shuffled_apart_sit_at_ln_c_and_are_found() -> None:
    run = classify(WARMUP + WINDOW + 20, apart=True)
    f = first(run, "loss-at-chance")
    assert f.severity == "warning" and f.step == WARMUP + WINDOW
    assert f.details["classes"] == C
    assert f.details["chance_loss"] == pytest.approx(math.log(C))
    assert "ln(10) = 2.30" in f.message and f"for {WINDOW} steps" in f.message
    assert len(of(run, "loss-at-chance")) == 1


def test_a_test_pass_with_gradients_on_does_not_switch_the_check_off(short: int) -> None:
    """Network slimming's test pass: model.eval(), no no_grad, a summed cross-entropy. Its
    loss is no training loss (every watched model is in eval mode), so the run's training
    loss is still compared with ln C."""
    found = of(classify(short + 20, apart=True, evaluate_every=10), "loss-at-chance")
    assert [f.severity for f in found] == ["warning"]


def test_nll_loss_module_over_log_softmax_is_seen_too(short: int) -> None:
    nll = nn.NLLLoss()

    def loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nll(torch.log_softmax(out, dim=1), y)

    f = first(classify(short, apart=True, loss=loss), "loss-at-chance")
    assert f.step == short


def test_softmax_probabilities_given_to_cross_entropy_are_named_as_the_cause(short: int) -> None:
    """A Softmax before ``CrossEntropyLoss`` (InfoGAN's categorical head in PyTorch-GAN):
    inputs and labels are paired, but every input lies in [0, 1], so the loss hardly
    leaves ln C; the finding names the softmax, not a pairing of inputs and labels."""

    def double(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(torch.softmax(out, dim=1), y)

    f = first(classify(short, loss=double, lr=1e-4), "loss-at-chance")
    assert f.step == short and f.details["softmax_input"]
    assert f.message.startswith("the classification loss is given softmax probabilities")
    assert "remove the Softmax" in f.hint


def test_a_run_shorter_than_warm_up_and_window_is_quiet(short: int) -> None:
    assert_quiet(classify(short - 1, apart=True))


def test_a_classifier_that_learns_is_quiet(short: int) -> None:
    assert_quiet(classify(short + 20))


def test_imbalanced_labels_at_the_priors_entropy_are_quiet(short: int) -> None:
    assert_quiet(classify(short + 20, priors=[0.8, 0.15, 0.05], signal=0.0))


def test_label_smoothing_to_the_max_is_quiet(short: int) -> None:
    def smoothed(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out, y, label_smoothing=1.0)

    assert_quiet(classify(short + 20, loss=smoothed))


def test_a_summed_loss_is_not_compared_with_ln_c(short: int) -> None:
    def summed(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out, y, reduction="sum") / len(y)

    assert_quiet(classify(short + 20, apart=True, loss=summed))


def test_smoothing_floor_is_the_entropy_of_the_smoothed_target() -> None:
    assert smoothing_floor(10, 0.0) == 0.0
    assert smoothing_floor(10, 1.0) == pytest.approx(math.log(10))
    top, rest = 0.91, 0.01
    assert smoothing_floor(10, 0.1) == pytest.approx(
        -top * math.log(top) - 9 * rest * math.log(rest)
    )


def test_loss_kind_compares_only_one_class_count_of_mean_hard_label_losses() -> None:
    kind = LossKind()
    assert kind.level is None
    kind.note(10, 0.1, True, False)
    assert kind.level == pytest.approx(math.log(10))
    kind.note(10, 0.99, True, False)  # floor within twice the band of ln C
    assert smoothing_floor(10, 0.99) >= (1 - 2 * BAND) * math.log(10) and kind.level is None
    for facts in [(10, 0.0, False, False), (10, 0.0, True, True), (1, 0.0, True, False)]:
        other = LossKind()
        other.note(*facts)
        assert other.level is None, facts
    mixed = LossKind()
    mixed.note(10, 0.0, True, False)
    mixed.note(5, 0.0, True, False)
    assert mixed.level is None


def test_labels_apart_fitted_with_a_large_step_sit_above_ln_c_and_are_found(short: int) -> None:
    """A large learning rate fits the labels' noise: the loss sits above ln C, chunks of it
    beyond the band — learning nothing (pytorch/examples mnist_rnn's, shuffled)."""
    run = classify(short, apart=True, lr=0.2)
    f = first(run, "loss-at-chance")
    assert f.step == short and f.details["largest_shortfall"] < BAND * math.log(C)


class _Sink:
    """What LossAtChance reports into: the findings, kept."""

    def __init__(self) -> None:
        self.reported: list[object] = []

    def report(self, f: object) -> None:
        self.reported.append(f)

    def clear(self, *_: object) -> None:
        pass

    def flush(self) -> None:
        pass


def _check(root: str) -> tuple[chance.LossAtChance, _Sink]:
    """The check alone, its run's loss a mean cross-entropy over C classes whose backward
    roots are ``root`` nodes."""
    kind = LossKind()
    kind.note(C, 0.0, True, False)
    kind.root(root)
    sink = _Sink()
    check = chance.LossAtChance(sink)  # type: ignore[arg-type]
    check.kind = kind
    return check, sink


def _above(own: bool) -> list[object]:
    """A window of losses that sit 20 % above ln C with no trend (the lottery-ticket MLP's
    2.7-3.1 against ln 10 = 2.30 with its labels shuffled apart: Adam fitting the noise),
    judged with every backward root the classification loss's own, or not."""
    check, sink = _check(chance.OWN_ROOT if own else "AddBackward0")
    rows = WARMUP + WINDOW
    level = 1.2 * math.log(C)
    losses = [level + (0.3 if i % 2 else -0.3) for i in range(rows)]
    check.observe_rows(0, list(range(1, rows + 1)), losses, [True] * rows)
    return sink.reported


def test_a_loss_far_above_ln_c_is_found_when_it_is_the_classification_loss_alone() -> None:
    """Every backward pass starts at cross_entropy's own output: the level above ln C is
    that loss's own, a model that learns nothing of its labels."""
    (f, *_) = _above(own=True)
    assert "stayed above ln(10) = 2.30" in getattr(f, "message", "")


def test_the_same_level_with_another_term_in_the_loss_is_not_read_as_above_chance() -> None:
    """The step's loss is a sum (an auxiliary loss, a penalty, a GAN's other terms): a level
    above ln C may be the other terms', so only a level at ln C itself tells."""
    assert _above(own=False) == []


def test_a_backward_root_is_the_classification_loss_only_when_it_is_its_output(
    short: int,
) -> None:
    """What the run's root listener reads: cross_entropy(...).backward() is the loss's own
    root; the same loss plus a penalty is not (and one such pass is enough)."""
    run = classify(short, apart=True)
    kind = run.context.checks.chance.kind
    assert kind.own and kind.own_roots == short

    def with_penalty(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out, y) + 1e-3 * out.square().mean()

    other = classify(short, apart=True, loss=with_penalty).context.checks.chance.kind
    assert not other.own and other.other_roots == short


def test_one_finding_for_the_run_when_each_round_builds_a_new_optimizer() -> None:
    """The lottery ticket's loop: a new Adam every pruning round, the labels shuffled apart
    in all of them. It is one loss at chance, not one per optimizer: the first optimizer's
    finding tells it, the later ones' windows do not add findings of their own."""
    check, sink = _check(chance.OWN_ROOT)
    rows = WARMUP + WINDOW
    for o in range(3):  # three rounds, each optimizer's own rows at ln C
        steps = list(range(o * rows + 1, (o + 1) * rows + 1))
        check.observe_rows(o, steps, [math.log(C)] * rows, [True] * rows)
    assert len(sink.reported) >= 1
    assert {getattr(f, "optimizer", None) for f in sink.reported} == {0}


def test_a_classifier_that_learns_with_a_large_step_is_quiet(short: int) -> None:
    assert_quiet(classify(short, lr=0.2))


def test_a_slow_learner_falling_through_ln_c_from_above_is_quiet(short: int) -> None:
    """Weak signal, a head initialised large: the loss starts above ln C and declines
    through it during the window (every chunk above the band's floor, its mean near ln C)."""
    assert of(classify(short, signal=0.3, head_scale=4.0), "loss-at-chance") == []


def test_a_contrastive_loss_over_the_batch_at_ln_c_is_quiet(short: int) -> None:
    """InfoNCE whose classes are the batch's other rows (SimCLR's 2N x (2N-1) logits, the
    positive always at index 0): labels the loss builds itself cannot be shuffled apart
    from the inputs. Views with nothing in common keep the loss at ln(2N-1): not this check."""
    torch.manual_seed(0)
    encoder = nn.Linear(16, 8)
    opt = torch.optim.SGD(encoder.parameters(), lr=0.05)
    run = gradwatch.watch(encoder, opt)
    try:
        for _ in range(short + 20):
            z = nn.functional.normalize(encoder(torch.randn(16, 16)), dim=1)
            sim = (z @ z.t())[~torch.eye(16, dtype=torch.bool)].view(16, 15)
            opt.zero_grad()
            nn.functional.cross_entropy(sim * 0.2, torch.zeros(16, dtype=torch.long)).backward()
            opt.step()
    finally:
        run.close()
    assert of(run, "loss-at-chance") == []


def test_loss_kind_is_off_while_every_call_is_over_the_batchs_rows() -> None:
    kind = LossKind()
    kind.note(15, 0.0, True, False, in_batch=True)
    assert kind.level is None
    kind.note(15, 0.0, True, False, in_batch=False)  # a classifier's call: fixed classes
    assert kind.level == pytest.approx(math.log(15))
