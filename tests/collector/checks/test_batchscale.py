"""Outlier input batches: a wildly scaled batch is named as the cause of the symptom it makes
at its step; shuffles, augmentation and data of widely varying scale never are."""

from __future__ import annotations

import random

import pytest
import torch
from torch import nn

import gradwatch
from gradwatch.checks.batchscale import BatchScales, clause
from gradwatch.checks.findings import finding
from gradwatch.core.incidents import kind_of
from tests.collector.checks.common import of, train


def flagged(scales: list[float]) -> list[int]:
    seen = BatchScales()
    steps = list(range(1, len(scales) + 1))
    seen.observe(0, steps, scales)
    return [s for s in steps if seen.outlier(0, s) is not None]


def augmented(n: int, seed: int = 0) -> list[float]:
    """Mean |x| of normalised images under random brightness/contrast, noise and ragged
    batches: within a factor 2 of each other."""
    rng = random.Random(seed)
    return [0.8 * rng.uniform(0.5, 2.0) * rng.uniform(0.9, 1.1) for _ in range(n)]


def test_augmentation_and_shuffles_are_never_outliers() -> None:
    for seed in range(5):
        assert flagged(augmented(400, seed)) == []


def test_data_whose_scale_varies_by_decades_has_no_outlier() -> None:
    rng = random.Random(1)
    mixed = [10 ** rng.uniform(-1.0, 1.0) for _ in range(300)]  # sources of unequal scale
    mixed[150] *= 100
    assert flagged(mixed) == []


def test_a_batch_a_thousand_times_the_usual_scale_is_an_outlier() -> None:
    scales = augmented(200)
    scales[120] *= 1000
    seen = BatchScales()
    seen.observe(0, list(range(1, 201)), scales)
    info = seen.outlier(0, 121)
    assert info is not None and 300 < info["factor"] < 3000
    assert [s for s in range(1, 201) if seen.outlier(0, s)] == [121]
    assert clause(info).startswith("the input batch of this step is an outlier (mean |x| ")


def test_too_little_history_is_no_evidence() -> None:
    scales = augmented(40)
    scales[5] *= 1000  # only 5 batches before it
    assert flagged(scales) == []


def test_integer_inputs_and_empty_steps_have_no_scale() -> None:
    seen = BatchScales()
    seen.observe(0, list(range(1, 61)), [None] * 30 + [0.0] * 30)
    assert all(seen.outlier(0, s) is None for s in range(1, 61))


def test_only_symptoms_of_the_same_step_and_optimizer_are_annotated() -> None:
    seen = BatchScales()
    scales = augmented(60)
    scales[49] *= 1e4
    seen.observe(0, list(range(1, 61)), scales)
    spike = finding("exploding-grad", 50, "the gradient norm jumped.", "", optimizer=0)
    led = seen.annotate(spike)
    assert led.details["batch_outlier"]["step"] == 50
    assert led.message.startswith("the input batch of this step is an outlier")
    assert kind_of(led.to_meta()) == "input-batch"
    assert "batch_outlier" not in seen.annotate(finding("exploding-grad", 51, "m", "")).details
    other = finding("exploding-grad", 50, "m", "", optimizer=1)
    assert "batch_outlier" not in seen.annotate(other).details
    plateau = finding("loss-plateau", 50, "m", "", optimizer=0)
    assert "batch_outlier" not in seen.annotate(plateau).details


def _seeded_mlp() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def _outlier_at_120(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch ``i`` (its own generator); batch 120 is the same inputs × 1000."""
    g = torch.Generator().manual_seed(i)
    x = torch.randn(32, 16, generator=g)
    y = x[:, :4].sum(dim=1, keepdim=True)
    return (x * 1000 if i == 120 else x), y


def test_a_run_names_the_outlier_batch_as_the_cause_of_the_spike() -> None:
    model, opt = _seeded_mlp()

    run = train(model, opt, 160, data=_outlier_at_120)
    (spike,) = of(run, "exploding-grad")
    assert spike.step == 121 and spike.role == "cause"
    assert spike.details["batch_outlier"]["factor"] > 300
    assert kind_of(spike.to_meta()) == "input-batch"


@pytest.mark.parametrize("policy", ["skip", "checkpoint", "raise"])
def test_an_acting_policy_still_names_the_outlier_batch_as_the_cause(policy: str) -> None:
    """A value check whose policy acts before the update (skip, checkpoint, raise) runs
    on the training thread before the I/O thread reads the batch: the batch's scale is
    read then, so the finding is led by the outlier batch as under ``warn``."""
    model, opt = _seeded_mlp()

    run = gradwatch.watch(model, opt, checks={"exploding-grad": policy})
    try:
        for i in range(160):
            x, y = _outlier_at_120(i)
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    except gradwatch.IntegrityError:
        assert policy != "skip"
    finally:
        run.close()
    (spike,) = of(run, "exploding-grad")
    assert spike.step == 121 and spike.role == "cause"
    assert spike.details["batch_outlier"]["factor"] > 300
    assert spike.message.startswith("the input batch of this step is an outlier")
    assert kind_of(spike.to_meta()) == "input-batch"
