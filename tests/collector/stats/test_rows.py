"""Rows of a window of CPU steps (``gradwatch.stats.rows.assemble``): losses, checksums and
statistics land in their columns, whatever mix of shapes and dtypes the steps left."""

from __future__ import annotations

import math

import pytest
import torch

from gradwatch.stats.batch_checksum import Deferred, checksum_of
from gradwatch.stats.rows import LEADING, HostStep, assemble
from gradwatch.stats.tensors import GRAD, PARAM, StepValues

NAN = float("nan")


def values(n: int, grad: list[float] | None, dtype: torch.dtype = torch.float32) -> StepValues:
    """Parameter and update norms 1..2n; gradient norms measured before the update."""
    v = StepValues(n, torch.arange(1, 2 * n + 1, dtype=dtype), PARAM)
    if grad is not None:
        v.grad_norm = torch.tensor(grad, dtype=dtype)
    return v


def test_losses_of_mixed_shapes_and_dtypes_and_missing_ones() -> None:
    losses = [
        torch.tensor(1.5),
        torch.tensor([2.5]),
        None,
        torch.tensor(3.0, dtype=torch.bfloat16),
        torch.tensor(float("inf")),
    ]
    rows = assemble([HostStep(values(2, [0.1, 0.2]), loss, None) for loss in losses], 2)
    assert rows[:, 0].tolist() == [1.5, 2.5, 0.0, 3.0, math.inf]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_loss_dtype_keeps_nan_and_inf(dtype: torch.dtype) -> None:
    losses = [torch.tensor(v, dtype=dtype) for v in (1.0, NAN, -math.inf)]
    rows = assemble([HostStep(values(1, [0.5]), loss, None) for loss in losses], 1)
    assert rows[0, 0] == 1.0 and math.isnan(rows[1, 0]) and rows[2, 0] == -math.inf


def test_a_single_tensor_model_and_gradient_norms_of_some_steps() -> None:
    steps = [HostStep(values(1, [0.5]), None, None), HostStep(values(1, None), None, None)]
    rows = assemble(steps, 1)
    stats = rows[:, LEADING:]
    assert stats[:, GRAD].tolist() == [0.5, 0.0]  # not measured before the update: zero here
    assert stats[:, PARAM].tolist() == [1.0, 1.0]


def test_gradient_norms_in_mixed_dtypes() -> None:
    steps = [
        HostStep(values(3, [1.0, NAN, 3.0]), None, None),
        HostStep(values(3, [4.0, 5.0, math.inf], torch.float64), None, None),
    ]
    grads = assemble(steps, 3)[:, LEADING : LEADING + 3]
    assert grads[0, 0] == 1.0 and math.isnan(grads[0, 1]) and grads[1].tolist()[2] == math.inf


def test_deferred_checksums_of_one_and_of_two_forwards() -> None:
    x, y = torch.randn(4, 3), torch.randn(4, 2)
    one = Deferred.of([x])
    two = Deferred.of([x])
    other = Deferred.of([y])
    assert one is not None and two is not None and other is not None
    rows = assemble(
        [HostStep(values(1, [0.5]), None, one), HostStep(values(1, [0.5]), None, two + other)], 1
    )
    expected_one = checksum_of([x]).to(torch.float64)
    expected_two = expected_one + checksum_of([y]).to(torch.float64)
    assert torch.equal(rows[0, 1:LEADING], expected_one)
    assert torch.equal(rows[1, 1:LEADING], expected_two)
