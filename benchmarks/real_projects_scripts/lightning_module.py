"""A small classifier as a `LightningModule`, trained by `Trainer(max_steps=...)`.

Synthetic, seeded data (a noisy teacher network's labels); Adam (or SGD with momentum) with
a StepLR decayed once per epoch, the schedule most Lightning tutorials show. Run: `python
lightning_module.py --max-steps 400 --seed 0 [--optimizer sgd]`.
"""

import argparse

import torch
from lightning import LightningModule, Trainer, seed_everything
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

NAN_AT_BATCH = -1


class Classifier(LightningModule):
    def __init__(self, dim: int = 32, classes: int = 4, optimizer: str = "adam") -> None:
        super().__init__()
        self.optimizer = optimizer
        self.net = nn.Sequential(
            nn.Linear(dim, 128), nn.BatchNorm1d(128), nn.ReLU(),
            nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, classes),
        )  # fmt: skip

    def training_step(self, batch, batch_idx):
        x, y = batch
        if self.global_step == NAN_AT_BATCH:
            x = x.clone()
            x[0, 0] = float("nan")
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, prog_bar=False)
        return loss

    def configure_optimizers(self):
        if self.optimizer == "sgd":  # plain SGD takes a large rate on a net this small
            opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        else:
            opt = torch.optim.Adam(self.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.8)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}


def data(seed: int, n: int = 2000, dim: int = 32, classes: int = 4) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    teacher = torch.randn(dim, classes, generator=g)
    y = (x @ teacher + 0.5 * torch.randn(n, classes, generator=g)).argmax(1)
    return TensorDataset(x, y)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    args = parser.parse_args()
    seed_everything(args.seed)
    loader = DataLoader(data(args.seed), batch_size=50, shuffle=True)
    trainer = Trainer(
        max_steps=args.max_steps, accelerator="cpu", devices=1, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(Classifier(optimizer=args.optimizer), loader)


if __name__ == "__main__":
    main()
