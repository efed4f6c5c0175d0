"""The Lightning callback with the real ``lightning`` package on a tiny module."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as lit
import pytest
import torch
from torch import nn

from gradwatch.core.errors import ConfigError
from gradwatch.core.local_reader import load_run
from gradwatch.integrations.lightning import GradwatchCallback

# lightning 2.6 on torch 2.13 warns about its own use of torch._pytree, and about tiny loaders
pytestmark = pytest.mark.filterwarnings(
    "ignore::UserWarning",
    "ignore::DeprecationWarning",
    r"ignore:`isinstance\(treespec:FutureWarning",
)


class Tiny(lit.LightningModule):
    def __init__(self, lr: float = 0.05, fail_at: int = -1, nan_at: int = -1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
        self.grad_norms: list[float] = []

    def training_step(self, batch: Any, index: int) -> torch.Tensor:
        if index == self.hparams["fail_at"]:
            raise RuntimeError("boom")
        x, y = batch
        if self.global_step + 1 == self.hparams["nan_at"]:
            x = x.clone()
            x[0, 0] = float("nan")  # a bad sample in the batch of that step
        loss = nn.functional.mse_loss(self.net(x), y)
        self.log("train/loss", loss)
        self.log("train/batch", float(index))
        return loss

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        grads = [p.grad for p in self.net[0].parameters()]
        self.grad_norms.append(float(grads[0].norm()))  # 0.weight, as Lightning applies it

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams["lr"])


def fit(tmp_path: Path, module: Tiny, accumulate: int = 1, **options: Any) -> GradwatchCallback:
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(64, 6), torch.randn(64, 2))
    callback = GradwatchCallback(project="lightning", data_dir=tmp_path / "gw", **options)
    trainer = lit.Trainer(
        max_epochs=2,
        callbacks=[callback],
        accumulate_grad_batches=accumulate,
        default_root_dir=tmp_path,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=16))
    return callback


def test_records_every_step_with_its_own_gradients(tmp_path: Path) -> None:
    module = Tiny()
    callback = fit(tmp_path, module)
    assert callback.run is not None and callback.run.closed
    run = load_run(callback.run.dir)
    assert run.tensor_names == ["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"]
    assert run.start["config"] == {"lr": 0.05, "fail_at": -1, "nan_at": -1}
    assert run.end is not None and run.end["status"] == "finished"
    rows = run.steps[0]
    assert [r.step for r in rows] == list(range(1, 9))  # 2 epochs x 4 batches
    # Lightning steps with a closure: the statistics are those of the gradients it applies
    assert [r.stats[0][0] for r in rows] == pytest.approx(module.grad_norms, rel=1e-6)
    assert all(r.loss is not None and r.n_backward == 1 for r in rows)
    assert callback.run.findings == []


def test_training_step_calling_self_net_is_captured_on_net(tmp_path: Path) -> None:
    """Lightning never calls the LightningModule's own forward: from the second backward
    pass on the batch checksum and the NaN-origin capture sit on ``self.net``, the
    outermost module that runs, and a NaN batch at step 3 is traced to its input."""
    module = Tiny(nan_at=3)
    checks = {"all": "record", "nonfinite-loss": "warn", "nonfinite-grad": "warn"}
    callback = fit(tmp_path, module, checks=checks)
    assert callback.run is not None
    assert callback.run.context.model_hooks.moved == {"": ["net"]}
    hashes = [r.batch_hash for r in load_run(callback.run.dir).steps[0]]
    assert hashes[0] is None and all(hashes[1:])  # step 1 ran before net was known
    found = [f for f in callback.run.findings if f.check == "nonfinite-loss"]
    origin = found[0].details["origin"]
    assert found[0].step == 3 and origin["found"], origin
    assert (origin["phase"], origin["module"], origin["batch"]["argument"]) == (
        "input",
        "net.0",
        "args[0]",
    )
    hooks = [len(m._forward_pre_hooks) + len(m._forward_hooks) for m in module.modules()]
    assert sum(hooks) == 0  # every hook off once training ended


def test_gradient_accumulation_is_declared(tmp_path: Path) -> None:
    callback = fit(tmp_path, Tiny(), accumulate=2)
    assert callback.run is not None
    assert callback.run.context.options.accumulation_steps == 2
    assert [r.n_backward for r in load_run(callback.run.dir).steps[0]] == [2] * 4
    assert callback.run.findings == []


def test_an_exception_closes_the_run_as_failed(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        fit(tmp_path, Tiny(fail_at=2))
    run = load_run(next((tmp_path / "gw" / "runs").iterdir()))
    assert run.end is not None and run.end["status"] == "failed" and "boom" in run.end["error"]


def test_bad_options_fail_when_the_callback_is_built() -> None:
    with pytest.raises(ConfigError, match="unknown option"):
        GradwatchCallback(projet="typo")
    with pytest.raises(ConfigError, match="every must be a positive integer"):
        GradwatchCallback(every=0)


def test_what_the_module_logs_is_the_runs_own_metrics(tmp_path: Path) -> None:
    callback = fit(tmp_path, Tiny())
    assert callback.run is not None
    run = load_run(callback.run.dir)
    batch = sorted((step, value) for step, key, value in run.scalars if key == "train/batch")
    # one value per optimizer step, as self.log gave it (4 batches an epoch, 2 epochs)
    assert [v for _, v in batch] == [0.0, 1.0, 2.0, 3.0] * 2
    assert [s for s, _ in batch] == sorted({s for s, _ in batch})  # each on its own step
    losses = {step: v for step, key, v in run.scalars if key == "train/loss"}
    # each logged loss sits on the step whose loss it is
    assert losses == pytest.approx({r.step: r.loss for r in run.steps[0]}, rel=1e-6)
