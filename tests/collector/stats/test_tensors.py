"""Every per-tensor statistic against a naive per-tensor reference, NaN/±Inf included."""

from __future__ import annotations

import math

import pytest
import torch

from gradwatch.stats import tensors as stats
from gradwatch.stats.rows import LEADING, HostStep, assemble

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


def stat_rows(vec: torch.Tensor, n: int) -> list[list[float]]:
    """The stat-major ``4·T`` vector as one ``[grad, param, update, nonfinite]`` per tensor."""
    return vec.reshape(4, n).T.tolist()


@pytest.mark.parametrize("bad", [None, *NONFINITE], ids=["finite", "nan", "inf", "-inf"])
@pytest.mark.parametrize("grads_after", [False, True], ids=["before", "after"])
@pytest.mark.parametrize("all_grads", [False, True], ids=["some-grads", "all-grads"])
@pytest.mark.parametrize("grads_only", [False, True], ids=["all-stats", "grad-norms"])
def test_step_stats_match_naive_reference(
    bad: float | None, grads_after: bool, all_grads: bool, grads_only: bool
) -> None:
    """Both paths (gradients read before the update, or after it with the fused norm) and
    both row kinds (zero-filled or reused) give the naive reference's values; with
    ``stats="grad-norms"`` the parameter and update norms are NaN (not measured)."""
    params = make_params()
    g = torch.Generator().manual_seed(1)
    for p in params if all_grads else params[:-1]:
        p.grad = torch.randn(p.shape, generator=g)
    if bad is not None:
        params[0].grad[2, 3] = bad
        params[2].grad[0, 0, 1] = bad
        params[2].grad[1, 1, 0] = bad
    before = [p.detach().clone() for p in params]
    engine = stats.StepStats(
        params, torch.device("cpu"), grads_after=grads_after, grads_only=grads_only
    )
    pre = engine.before_step()
    assert (pre.grad_norm is None) == (grads_after and all_grads)
    opt = torch.optim.SGD(params, lr=0.1)
    opt.step()
    values = engine.after_step(pre)
    for zeroed in (True, False):  # a fresh zero row, then a reused one
        out = torch.zeros(4 * len(params), dtype=torch.float64)
        if not zeroed:
            out.fill_(7.0)  # every value must be overwritten
        values.write(out, zeroed)
        check_rows(params, pre, before, stat_rows(out, len(params)), grads_only)
    rows = assemble([HostStep(values, None, None)] * 2, len(params))
    assert rows.shape == (2, LEADING + 4 * len(params))
    check_rows(params, pre, before, stat_rows(rows[1, LEADING:], len(params)), grads_only)


def check_rows(
    params: list[torch.nn.Parameter],
    pre: stats.PreStep,
    before: list[torch.Tensor],
    rows: list[list[float]],
    grads_only: bool = False,
) -> None:
    for i, (p, row) in enumerate(zip(params, rows, strict=True)):
        if p.grad is None:
            assert pre.has_grad[i] is False
            assert row[stats.GRAD] == 0.0 and row[stats.NONFINITE] == 0.0
        else:
            assert pre.has_grad[i] is True
            assert same(row[stats.GRAD], naive_norm(p.grad))
            assert row[stats.NONFINITE] == naive_nonfinite(p.grad)
        if grads_only:
            assert math.isnan(row[stats.PARAM]) and math.isnan(row[stats.UPDATE])
            continue
        assert same(row[stats.PARAM], naive_norm(p))
        assert same(row[stats.UPDATE], naive_norm(p.detach() - before[i]))


def test_grads_are_read_after_the_update_only_for_optimizers_that_leave_them_alone() -> None:
    p = torch.nn.Parameter(torch.ones(2))
    assert stats.grads_untouched_by_step(torch.optim.Adam([p]))
    assert stats.grads_untouched_by_step(torch.optim.SGD([p], lr=0.1, momentum=0.9))
    assert not stats.grads_untouched_by_step(torch.optim.LBFGS([p]))
    assert not stats.grads_untouched_by_step(torch.optim.Adam([p], differentiable=True))

    class Custom(torch.optim.SGD):
        pass

    assert not stats.grads_untouched_by_step(Custom([p], lr=0.1))


def test_low_precision_parameters_take_the_fused_path_in_float32() -> None:
    p = torch.nn.Parameter(torch.full((1000,), 300.0, dtype=torch.float16))
    p.grad = torch.full((1000,), 300.0, dtype=torch.float16)
    engine = stats.StepStats([p], torch.device("cpu"), grads_after=True)
    pre = engine.before_step()
    vec = torch.zeros(4)
    engine.after_step(pre).write(vec, zeroed=True)
    # 300² · 1000 = 9e7 overflows float16 (max 65504) but not the float32 accumulator
    assert vec[stats.GRAD].item() == pytest.approx(math.sqrt(9e7))
    assert vec[stats.PARAM].item() == pytest.approx(math.sqrt(9e7))
    assert vec[stats.NONFINITE].item() == 0.0


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
    vec = torch.zeros(4, dtype=torch.float64)
    engine.after_step(pre).write(vec, zeroed=True)
    assert vec[stats.UPDATE].item() == 5.0


def test_snapshot_is_released() -> None:
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.ones(3)
    engine = stats.StepStats([p], torch.device("cpu"))
    engine.before_step()
    assert engine._snapshot is not None
    engine.release()
    assert engine._snapshot is None


@pytest.mark.parametrize("grads_after", [False, True])
@pytest.mark.parametrize("bad", [None, float("nan")])
def test_a_sparse_gradient_is_measured_as_its_coalesced_values(
    grads_after: bool, bad: float | None
) -> None:
    # nn.Embedding(sparse=True): an uncoalesced COO gradient with a repeated row; its norm
    # is that of the summed rows, and a NaN in it is counted (the fused norm has no sparse
    # kernel: the statistics of such an optimizer were an internal error before)
    emb = torch.nn.Embedding(10, 3, sparse=True)
    dense = torch.nn.Linear(3, 1)
    emb(torch.tensor([1, 4, 1])).sum().backward()
    dense.weight.grad = torch.ones(1, 3)
    dense.bias.grad = torch.ones(1)
    assert emb.weight.grad is not None and emb.weight.grad.is_sparse
    if bad is not None:
        emb.weight.grad = (
            torch.sparse_coo_tensor(
                torch.tensor([[1]]),
                torch.tensor([[bad, 0.0, 0.0]]),
                (10, 3),
                check_invariants=True,
            )
            + emb.weight.grad
        )
    params = [emb.weight, dense.weight, dense.bias]
    expected = emb.weight.grad.to_dense().norm().item()
    engine = stats.StepStats(params, torch.device("cpu"), grads_after=grads_after)
    pre = engine.before_step()
    torch.optim.SGD(params, lr=0.1).step()
    values = engine.after_step(pre)
    out = torch.zeros(4 * len(params), dtype=torch.float64)
    values.write(out, True)
    grad, nonfinite = (
        stat_rows(out, len(params))[0][stats.GRAD],
        stat_rows(out, 3)[0][stats.NONFINITE],
    )
    if bad is None:
        assert grad == pytest.approx(expected) == pytest.approx(math.sqrt(15))  # rows 2,2,2,1,1,1
        assert nonfinite == 0
    else:
        assert not math.isfinite(grad) and nonfinite == 1
