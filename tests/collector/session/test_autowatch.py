"""The in-process half of ``gradwatch run``: finding the models that own an optimizer's
parameters, attaching at the first forward, and the start-up bootstrap."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from gradwatch import Run
from gradwatch.session import autowatch


@pytest.fixture
def installed() -> Iterator[list[Run]]:
    """autowatch installed in this process; removed, and its runs closed, afterwards."""
    autowatch.install()
    try:
        yield autowatch._state.runs
    finally:
        autowatch.uninstall()
        for run in autowatch._state.runs:
            run.close()
        autowatch._state.runs.clear()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
        self.head = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.backbone(x))
        return out


def test_the_root_of_a_head_only_optimizer_is_the_whole_model() -> None:
    model = Net()
    model.backbone.requires_grad_(False)
    opt = torch.optim.SGD(model.head.parameters(), lr=0.1)
    assert autowatch.owning_roots([opt]) == [model]


def test_two_models_are_two_roots_named_after_their_variables() -> None:
    generator, critic = nn.Linear(2, 2), nn.Linear(2, 1)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (generator, critic)]
    roots = autowatch.owning_roots(opts)
    assert roots == [generator, critic]
    assert autowatch.root_names(roots) == ["generator", "critic"]
    assert autowatch.root_names([nn.Linear(1, 1), nn.Linear(1, 1)]) == ["Linear", "Linear_"]


def train(steps: int = 3) -> tuple[Net, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(5, 3)).pow(2).mean().backward()
        opt.step()
    return model, opt


def test_attaches_at_the_first_forward_with_the_models_names(
    installed: list[Run],
) -> None:
    model, _ = train()
    assert len(installed) == 1
    run = installed[0]
    assert [run.context.names[id(p)] for p in model.parameters()] == [
        n for n, _ in model.named_parameters()
    ]
    assert run.step == 3  # the first step was seen too
    assert not [f for f in run.findings if f.severity != "info"]


def test_training_is_bit_identical_with_and_without_autowatch() -> None:
    plain, _ = train()
    plain_rng = torch.get_rng_state()
    autowatch.install()
    try:
        watched, _ = train()
        watched_rng = torch.get_rng_state()
    finally:
        autowatch.uninstall()
        for run in autowatch._state.runs:
            run.close()
        autowatch._state.runs.clear()
    assert torch.equal(plain_rng, watched_rng)
    for a, b in zip(plain.parameters(), watched.parameters(), strict=True):
        assert torch.equal(a, b)


def test_an_optimizer_built_later_gets_its_own_run(installed: list[Run]) -> None:
    train(1)
    _, opt = train(1)
    assert len(installed) == 2
    assert installed[1]._watches[0].optimizer is opt


def test_raw_tensors_without_a_module_are_not_watched(
    installed: list[Run], capsys: pytest.CaptureFixture[str]
) -> None:
    w = torch.zeros(2, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    nn.Identity()(w)
    assert installed == [] and opt.param_groups
    assert "holds parameters of no nn.Module; not watched" in capsys.readouterr().err


def bootstrap(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -c CODE`` with the bootstrap first on its path and a pre-existing
    ``sitecustomize`` behind it."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir()
    theirs.mkdir()
    (ours / "sitecustomize.py").write_text(autowatch.SITECUSTOMIZE)
    (theirs / "sitecustomize.py").write_text("import builtins\nbuiltins.THEIRS = 42\n")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ours), str(theirs)]),
        autowatch.ENV_ON: "1",
    }
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )


def test_bootstrap_keeps_python_without_torch_light_and_chains_sitecustomize(
    tmp_path: Path,
) -> None:
    out = bootstrap(tmp_path, "import sys; print('torch' in sys.modules, THEIRS)")
    assert (out.returncode, out.stdout, out.stderr) == (0, "False 42\n", "")
