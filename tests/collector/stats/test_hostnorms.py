"""The fused CPU norm kernel (gradwatch.stats.hostnorms): its arithmetic against float64
references, its determinism, the snapshot copy, the loader's fallbacks, and StepStats on
the kernel path against the stock-ops path on a real model."""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path

import pytest
import torch

from gradwatch.core.drift.fingerprint_diff import fingerprint_diff
from gradwatch.fingerprint import take as fingerprint
from gradwatch.stats import hostnorms
from gradwatch.stats.tensors import GRAD, PARAM, UPDATE, StepStats


@pytest.fixture(scope="module")
def kernel() -> hostnorms.Kernel:
    loaded, why = hostnorms.load()
    assert loaded is not None, why  # CI installs a C compiler (.ci/run)
    return loaded


def _ref(a: list[torch.Tensor], b: list[torch.Tensor] | None = None) -> list[float]:
    out = [float((t.double() ** 2).sum()) for t in a]
    if b is not None:
        out += [float(((y.double() - x.double()) ** 2).sum()) for x, y in zip(a, b, strict=True)]
    return out


SIZES = [1, 15, 16, 17, 2047, 2048, 2049, 70_001, 0, 3]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("threads", [1, 3])
def test_sums_match_float64_reference(
    kernel: hostnorms.Kernel, dtype: torch.dtype, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hostnorms, "MIN_PER_THREAD", 1000)  # split ranges across tensors
    g = torch.Generator().manual_seed(3)
    a = [torch.randn(n, generator=g, dtype=dtype) * 10 for n in SIZES]
    b = [x + torch.randn(x.shape, generator=g, dtype=dtype) * 1e-3 for x in a]
    got = kernel.sumsq(a, b, threads).tolist()
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    for value, expected in zip(got, _ref(a, b), strict=True):
        assert value == pytest.approx(expected, rel=tol, abs=1e-300)
    assert kernel.sumsq(a, None, threads).tolist() == got[: len(a)]  # bit for bit


def test_more_accurate_than_a_float32_norm(kernel: hostnorms.Kernel) -> None:
    """Updates much smaller than the parameters: the kernel's relative error stays near
    float32 rounding of the inputs, below the stock norm's."""
    g = torch.Generator().manual_seed(0)
    theta = torch.randn(1_000_000, generator=g)
    after = theta + torch.randn(1_000_000, generator=g) * 1e-4
    exact = math.sqrt(_ref([after], [theta])[1])
    ours = math.sqrt(float(kernel.sumsq([after], [theta])[1]))
    stock = float(torch._foreach_norm([theta - after])[0])
    assert abs(ours - exact) / exact < 1e-6
    assert abs(ours - exact) <= abs(stock - exact)


def test_threads_and_runs_give_the_same_bits(
    kernel: hostnorms.Kernel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hostnorms, "MIN_PER_THREAD", 4096)
    g = torch.Generator().manual_seed(1)
    a = [torch.randn(n, generator=g) for n in (50_000, 7, 33_333)]
    b = [x * 0.999 for x in a]
    for threads in (1, 2, 4):
        first = kernel.sumsq(a, b, threads)
        assert torch.equal(first, kernel.sumsq(a, b, threads))
        assert torch.equal(first[:3], kernel.sumsq(a, None, threads))


@pytest.mark.parametrize("spawn_at", [0, 1 << 40])
def test_ranges_on_the_calling_thread_give_the_threads_bits(
    kernel: hostnorms.Kernel, spawn_at: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ranges summed one after another (small models) or on threads of their own (large
    ones) are added in the same order: the same bits, sums and copy alike."""
    monkeypatch.setattr(hostnorms, "MIN_PER_THREAD", 4096)
    g = torch.Generator().manual_seed(2)
    a = [torch.randn(n, generator=g) for n in (40_000, 5, 21_111)]
    b = [x * 1.001 for x in a]
    monkeypatch.setattr(hostnorms, "SPAWN_PER_THREAD", 0)
    spawned = kernel.sumsq(a, b, 3)
    monkeypatch.setattr(hostnorms, "SPAWN_PER_THREAD", spawn_at)
    assert torch.equal(kernel.sumsq(a, b, 3), spawned)
    assert not torch.equal(kernel.sumsq(a, b, 1), spawned)  # the split, not the threads, counts
    dst = [torch.empty_like(x) for x in a]
    kernel.copy(dst, a, threads=3)
    assert all(torch.equal(d, x) for d, x in zip(dst, a, strict=True))


def test_nan_and_inf_are_data(kernel: hostnorms.Kernel) -> None:
    a = [torch.tensor([1.0, float("nan"), 2.0]), torch.ones(40), torch.ones(3)]
    b = [torch.ones(3), torch.ones(40), torch.tensor([1.0, float("inf"), 1.0])]
    a[1][17] = float("inf")
    b[1][17] = float("inf")  # inf - inf
    sums = kernel.sumsq(a, b).tolist()
    assert math.isnan(sums[0]) and math.isinf(sums[1]) and sums[2] == 3.0
    assert math.isnan(sums[3]) and math.isnan(sums[4]) and math.isinf(sums[5])


@pytest.mark.parametrize("offset", [0, 1, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_copy_is_exact(
    kernel: hostnorms.Kernel, offset: int, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Streaming stores with an unaligned head and a tail, split over threads."""
    monkeypatch.setattr(hostnorms, "MIN_PER_THREAD", 5000)
    g = torch.Generator().manual_seed(2)
    src = [torch.randn(n, generator=g, dtype=dtype) for n in (1, 4095, 20_011, 9_000)]
    src[2][5] = float("nan")
    bufs = [torch.zeros(t.numel() + offset, dtype=dtype) for t in src]
    dst = [buf[offset:] for buf in bufs]  # contiguous, start not 16-byte aligned
    kernel.copy(dst, src, threads=3)
    for d, s, buf in zip(dst, src, bufs, strict=True):
        assert torch.equal(d.view(torch.int8), s.view(torch.int8))  # bits, NaN included
        assert torch.count_nonzero(buf[:offset]) == 0  # nothing written before the view


def test_what_it_cannot_read(kernel: hostnorms.Kernel) -> None:
    t = torch.randn(4, 5)
    assert kernel.fits([t], torch.float32)
    assert not kernel.fits([t.t()], torch.float32)  # not contiguous
    assert not kernel.fits([t.double()], torch.float32)
    assert not kernel.fits([t.bfloat16()], torch.bfloat16)
    assert kernel.fits([], torch.float64)
    with pytest.raises(ValueError, match="sizes and dtype"):
        kernel.sumsq([t], [torch.randn(19)])
    with pytest.raises(ValueError, match="sizes and dtype"):
        kernel.copy([torch.empty(19)], [t])


# -- the loader ----------------------------------------------------------------------------


def test_cached_library_is_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRADWATCH_CACHE", str(tmp_path))
    first, why = hostnorms._load()
    assert first is not None, why
    assert first.path.parent == tmp_path / "kernels" and first.path.exists()
    stamp = first.path.stat().st_mtime_ns
    second, _ = hostnorms._load()
    assert second is not None and second.path == first.path
    assert first.path.stat().st_mtime_ns == stamp  # not rebuilt
    assert not [p for p in (tmp_path / "kernels").iterdir() if p.name.startswith(".build-")]


def test_switched_off_by_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(hostnorms.ENV, "0")
    assert hostnorms._load() == (None, "torch ops (GRADWATCH_CPU_KERNEL=0)")


def test_no_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("GRADWATCH_CACHE", str(tmp_path))
    kernel, why = hostnorms._load()
    assert kernel is None and "no C compiler found" in why and "set CC" in why


def test_compiler_that_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "cc"
    broken.write_text("#!/bin/sh\necho 'cc: internal error: out of coffee' >&2\nexit 4\n")
    broken.chmod(broken.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CC", str(broken))
    monkeypatch.setenv("GRADWATCH_CACHE", str(tmp_path / "cache"))
    kernel, why = hostnorms._load()
    assert kernel is None
    assert why == f"torch ops (compiling the CPU norm kernel with {broken} failed: " + (
        "cc: internal error: out of coffee)"
    )
    assert not list((tmp_path / "cache" / "kernels").iterdir())  # nothing half-written


# -- StepStats on the kernel path -------------------------------------------------------------


def _model() -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 300), torch.nn.Tanh(), torch.nn.Linear(300, 5))
    return model, torch.optim.Adam(model.parameters(), 1e-2), torch.randn(8, 20), torch.randn(8, 5)


def _steps(use_kernel: bool, steps: int = 5) -> list[torch.Tensor]:
    model, opt, x, y = _model()
    stats = StepStats(list(model.parameters()), torch.device("cpu"), grads_after=True)
    assert (stats._kernel is not None) or not use_kernel
    if not use_kernel:
        stats._kernel = None
    rows = []
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        pre = stats.before_step()
        opt.step()
        values = stats.after_step(pre)
        out = torch.zeros(4 * stats.n, dtype=torch.float64)
        values.write(out, zeroed=True)
        rows.append(out)
        if use_kernel:  # what the mutation check compares: the same bits
            assert values.norms.dtype == torch.float64
            assert torch.equal(values.param_norm, stats.param_norms())
    return rows


def test_stepstats_kernel_matches_stock_ops() -> None:
    kernel_rows, torch_rows = _steps(True), _steps(False)
    for k, t in zip(kernel_rows, torch_rows, strict=True):
        n = len(k) // 4
        for stat_index in (GRAD, PARAM, UPDATE):
            part = slice(stat_index * n, (stat_index + 1) * n)
            assert torch.allclose(k[part], t[part], rtol=2e-5, atol=0), stat_index
        assert torch.equal(k[3 * n :], t[3 * n :])  # non-finite counts
        assert (k[UPDATE * n : (UPDATE + 1) * n] > 0).all()


def test_stepstats_falls_back_when_a_parameter_changes_layout() -> None:
    """A ``.data`` assignment that leaves a parameter non-contiguous: that step takes the
    stock ops (no error, no stray read), and the values stay right."""
    model, opt, x, y = _model()
    params = list(model.parameters())
    stats = StepStats(params, torch.device("cpu"), grads_after=True)
    assert stats._kernel is not None
    weight = params[0]
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    pre = stats.before_step()
    weight.data = weight.data.t().contiguous().t()  # same values, transposed strides
    assert not weight.is_contiguous()
    before = [p.detach().clone() for p in params]
    opt.step()
    values = stats.after_step(pre)
    update = torch.tensor(
        [
            float((p.detach().double() - b.double()).norm())
            for p, b in zip(params, before, strict=True)
        ],
        dtype=torch.float64,
    )
    n = len(params)
    assert values.first == GRAD
    assert torch.allclose(values.norms[2 * n :].double(), update, rtol=1e-4)
    assert stats._layout(params) is None


def test_grads_kernel_and_non_contiguous_gradient() -> None:
    """A gradient the kernel cannot read is measured with the stock ops, the parameters
    and updates still with the kernel."""
    model, opt, x, y = _model()
    params = list(model.parameters())
    stats = StepStats(params, torch.device("cpu"), grads_after=True)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    grad = params[0].grad
    assert grad is not None
    params[0].grad = grad.t().contiguous().t()
    pre = stats.before_step()
    opt.step()
    values = stats.after_step(pre)
    n = len(params)
    expected = torch.tensor(
        [float(p.grad.double().norm()) for p in params],  # type: ignore[union-attr]
        dtype=torch.float64,
    )
    assert torch.allclose(values.norms[:n].double(), expected, rtol=1e-5)
    assert values.norms.dtype == torch.float64


# -- the fingerprint ------------------------------------------------------------------------


def test_fingerprint_records_the_kernel(kernel: hostnorms.Kernel) -> None:
    cpu = fingerprint.collect_fast([torch.zeros(3)], config={})
    assert cpu["device"]["stats_kernel"] == "c"
    other = {**cpu, "device": {**cpu["device"], "stats_kernel": "torch"}}
    diff = fingerprint_diff(cpu, other)
    assert {
        "field": "device.stats_kernel",
        "section": "environment",
        "a": "c",
        "b": "torch",
    } in diff
    older = {**cpu, "device": {k: v for k, v in cpu["device"].items() if k != "stats_kernel"}}
    assert not fingerprint_diff(cpu, older)  # a fingerprint without the field: unknown


def test_env_off_in_a_fresh_process(tmp_path: Path) -> None:
    """The switch as a user sets it: a fresh interpreter, the run's start record says why."""
    import subprocess
    import sys

    code = (
        "import torch, gradwatch, json\n"
        "m = torch.nn.Linear(3, 2)\n"
        "o = torch.optim.SGD(m.parameters(), 0.1)\n"
        f"run = gradwatch.watch(m, o, data_dir={str(tmp_path)!r})\n"
        "run.close()\n"
        "from gradwatch.core.local_reader import load_run\n"
        "r = load_run(run.dir)\n"
        "fp = r.fingerprint['device']['stats_kernel']\n"
        "print(json.dumps([r.start.get('stats_kernel'), fp]))\n"
    )
    env = {**os.environ, hostnorms.ENV: "0"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == (
        '["torch ops (GRADWATCH_CPU_KERNEL=0)", "torch"]'
    )


def test_stepstats_keeps_the_parameters_layout_until_they_move() -> None:
    """The parameters' layout is taken in full once and reused while their addresses and
    element counts stay; a view at the same address (``p.data = p.data.t()``) holds the
    same elements and keeps the kernel, with values that stay right; storage of another
    size is looked at anew."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 20), torch.nn.Tanh(), torch.nn.Linear(20, 5))
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    x, y = torch.randn(8, 20), torch.randn(8, 5)
    params = list(model.parameters())
    stats = StepStats(params, torch.device("cpu"))
    first = stats._params_layout()
    assert first is not None and stats._params_layout() is first
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    pre = stats.before_step()  # the snapshot is made here, contiguous
    opt.step()
    stats.after_step(pre)
    assert stats._params_layout() is first
    weight = params[0]
    weight.data = weight.data.t()  # square: same storage, address and count, other strides
    assert not weight.is_contiguous()
    assert stats._params_layout() is first
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    before = [p.detach().double().clone() for p in params]
    pre = stats.before_step()
    opt.step()
    values = stats.after_step(pre)
    assert values.norms.dtype == torch.float64  # the kernel's
    n = len(params)
    after = torch.tensor([float(p.detach().double().norm()) for p in params], dtype=torch.float64)
    update = torch.tensor(
        [float((p.detach().double() - b).norm()) for p, b in zip(params, before, strict=True)],
        dtype=torch.float64,
    )
    assert torch.allclose(values.param_norm, after, rtol=1e-5)
    assert torch.allclose(values.norms[-n:], update, rtol=1e-4)
    weight.data = weight.data[:1].clone()  # other storage, other size
    moved = stats._params_layout()
    assert moved is not first and moved is not None and moved.sizes[0] == weight.numel()


def test_norms_are_the_roots_of_the_sums_and_count_what_is_not_finite(
    kernel: hostnorms.Kernel,
) -> None:
    """``norms_at``: the square roots of ``sumsq_at`` bit for bit (torch's sqrt and C's are
    both correctly rounded), and the number of norms that are not finite."""
    g = torch.Generator().manual_seed(3)
    a = [torch.randn(n, generator=g) for n in (1, 17, 5000, 40000)]
    b = [torch.randn(n, generator=g) for n in (1, 17, 5000, 40000)]
    at, bt = kernel.layout(a, torch.float32), kernel.layout(b, torch.float32)
    assert at is not None and bt is not None
    for second in (None, bt):
        norms, bad = kernel.norms_at(at, second)
        assert torch.equal(norms, kernel.sumsq_at(at, second).sqrt_())
        assert bad == 0
    a[1][4] = float("nan")
    b[2][9] = float("inf")
    a[3][0] = 3e20  # finite, but its square overflows the float32 lanes: a norm of inf
    norms, bad = kernel.norms_at(at, bt)
    assert bad == 5  # a[1], a[3] and the differences of tensors 1, 2 and 3
    assert math.isnan(norms[1]) and math.isinf(norms[3]) and math.isinf(norms[4 + 2])
    assert torch.equal(norms.isfinite(), kernel.sumsq_at(at, bt).sqrt_().isfinite())
