"""Every per-tensor statistic against a naive per-tensor reference, NaN/±Inf included."""

from __future__ import annotations

import math

import pytest
import torch

from gradwatch import stats

NONFINITE = [float("nan"), float("inf"), float("-inf")]


def naive_norm(t: torch.Tensor) -> float:
    return math.sqrt(sum(float(v) ** 2 for v in t.detach().double().flatten().tolist()))


def naive_nonfinite(t: torch.Tensor) -> int:
    return sum(1 for v in t.detach().double().flatten().tolist() if not math.isfinite(v))


def same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)


def make_params() -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(0)
    shapes = [(7, 5), (5,), (3, 4, 2), (1,)]
    return [torch.nn.Parameter(torch.randn(s, generator=g)) for s in shapes]


@pytest.mark.parametrize("bad", [None, *NONFINITE], ids=["finite", "nan", "inf", "-inf"])
def test_step_stats_match_naive_reference(bad: float | None) -> None:
    params = make_params()
    g = torch.Generator().manual_seed(1)
    for p in params[:-1]:
        p.grad = torch.randn(p.shape, generator=g)
    if bad is not None:
        params[0].grad[2, 3] = bad
        params[2].grad[0, 0, 1] = bad
        params[2].grad[1, 1, 0] = bad
    before = [p.detach().clone() for p in params]
    engine = stats.StepStats(params, torch.device("cpu"))
    pre = engine.before_step()
    opt = torch.optim.SGD(params, lr=0.1)
    opt.step()
    matrix = engine.after_step(pre)
    assert matrix.shape == (len(params), 4)
    assert matrix.dtype == torch.float64
    for i, p in enumerate(params):
        row = matrix[i].tolist()
        if p.grad is None:
            assert pre.has_grad[i] is False
            assert row[stats.GRAD] == 0.0 and row[stats.NONFINITE] == 0.0
        else:
            assert pre.has_grad[i] is True
            assert same(row[stats.GRAD], naive_norm(p.grad))
            assert row[stats.NONFINITE] == naive_nonfinite(p.grad)
        assert same(row[stats.PARAM], naive_norm(p))
        assert same(row[stats.UPDATE], naive_norm(p.detach() - before[i]))


@pytest.mark.parametrize("bad", NONFINITE, ids=["nan", "inf", "-inf"])
def test_device_path_nonfinite_counts_match_reference(bad: float) -> None:
    """The fused on-device count (used on accelerators) agrees with the naive count."""
    t = [torch.zeros(4, 3), torch.ones(10), torch.randn(2, 2)]
    t[0][1, 2] = bad
    t[1][0] = bad
    t[1][9] = bad
    counts = stats.nonfinite_counts(t, torch.device("cpu")).tolist()
    assert counts == [naive_nonfinite(x) for x in t] == [1, 2, 0]


def test_norm_overflow_is_not_a_nonfinite_element() -> None:
    """A finite tensor whose float32 norm overflows has an infinite norm and 0 bad elements."""
    big = torch.full((4,), 3e38)
    norms = stats.fused_norms([big], torch.device("cpu"))
    assert stats.host_nonfinite_counts([big], norms).tolist() == [0.0]
    assert stats.nonfinite_counts([big], torch.device("cpu")).tolist() == [0.0]


def test_mixed_dtypes_are_grouped_and_low_precision_accumulates_in_float32() -> None:
    tensors = [
        torch.full((1000,), 300.0, dtype=torch.float16),
        torch.ones(3, dtype=torch.float64),
        torch.ones(4),
    ]
    norms = stats.fused_norms(tensors, torch.device("cpu")).tolist()
    # 300² · 1000 = 9e7 overflows float16 (max 65504) but not the float32 accumulator
    assert norms[0] == pytest.approx(math.sqrt(9e7))
    assert norms[1:] == pytest.approx([math.sqrt(3), 2.0])


def test_update_norm_is_exact_not_approximate() -> None:
    """‖θ_after − θ_before‖ from the snapshot: bit-exact for a known update."""
    p = torch.nn.Parameter(torch.tensor([1.0, 2.0, 3.0]))
    p.grad = torch.tensor([3.0, 0.0, 4.0])
    engine = stats.StepStats([p], torch.device("cpu"))
    pre = engine.before_step()
    torch.optim.SGD([p], lr=1.0).step()
    assert engine.after_step(pre)[0, stats.UPDATE].item() == 5.0


def test_snapshot_is_released() -> None:
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.ones(3)
    engine = stats.StepStats([p], torch.device("cpu"))
    engine.before_step()
    assert engine._snapshot is not None
    engine.release()
    assert engine._snapshot is None
