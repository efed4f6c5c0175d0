"""``torch.compile``d models (wrapped or compiled in place) and bf16 autocast on the CPU:
same names, same statistics and batch checksums as eager, no findings, no graph breaks."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters

import gradwatch
from gradwatch.core.local_reader import LocalRun, load_run

STEPS = 5


def train(tmp_path: Path, how: str, backend: str = "aot_eager") -> tuple[LocalRun, gradwatch.Run]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    watched: nn.Module = model
    if how == "wrapped":
        watched = torch.compile(model, backend=backend)  # type: ignore[assignment]
    elif how == "in place":
        model.compile(backend=backend)
    data = torch.Generator().manual_seed(1)
    with gradwatch.watch(watched, opt, data_dir=tmp_path) as run:
        for _ in range(STEPS):
            x, y = torch.randn(16, 6, generator=data), torch.randn(16, 3, generator=data)
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=how == "bf16"):
                out = watched(x)
            nn.functional.mse_loss(out.float(), y).backward()
            opt.step()
    return load_run(run.dir), run


@pytest.fixture(scope="module")
def eager(tmp_path_factory: pytest.TempPathFactory) -> LocalRun:
    return train(tmp_path_factory.mktemp("eager"), "eager")[0]


def _same_as_eager(got: LocalRun, eager: LocalRun, rel: float) -> None:
    assert got.tensor_names == eager.tensor_names == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert len(got.steps[0]) == STEPS
    for row, ref in zip(got.steps[0], eager.steps[0], strict=True):
        assert row.batch_hash == ref.batch_hash  # the hooks saw the same batches, eagerly
        assert row.n_backward == 1
        assert row.loss == pytest.approx(ref.loss, rel=rel)
        for stats, ref_stats in zip(row.stats, ref.stats, strict=True):
            assert stats == pytest.approx(ref_stats, rel=rel, abs=1e-6)


@pytest.mark.parametrize("how", ["wrapped", "in place"])
def test_compiled_model(tmp_path: Path, eager: LocalRun, how: str) -> None:
    torch._dynamo.reset()
    counters.clear()
    got, run = train(tmp_path, how)
    _same_as_eager(got, eager, rel=1e-5)
    assert run.findings == []
    assert not counters["graph_break"]  # gradwatch's hooks are not traced into the graph


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_inductor_in_place(tmp_path: Path, eager: LocalRun) -> None:
    """The default backend (C++ code generation): about 15 s on a busy 2-core machine."""
    torch._dynamo.reset()
    got, run = train(tmp_path, "in place", backend="inductor")
    _same_as_eager(got, eager, rel=1e-4)
    assert run.findings == []


def test_bf16_autocast_on_cpu(tmp_path: Path, eager: LocalRun) -> None:
    got, run = train(tmp_path, "bf16")
    assert run.findings == []
    assert run._scaler_watch is None  # autocast alone: no scaler, nothing adopted
    assert got.tensor_names == eager.tensor_names and len(got.steps[0]) == STEPS
    for row, ref in zip(got.steps[0], eager.steps[0], strict=True):
        assert row.batch_hash == ref.batch_hash
        assert row.loss == pytest.approx(ref.loss, rel=0.05)  # bf16 matmuls: close, not equal
        for (grad, param, update, nonfinite), ref_stats in zip(row.stats, ref.stats, strict=True):
            assert 0 < grad < 10 and update > 0 and nonfinite == 0
            assert param == pytest.approx(ref_stats[1], rel=0.01)  # fp32 master weights
