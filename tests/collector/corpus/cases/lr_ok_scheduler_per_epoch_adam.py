# expect: quiet
"""Fixed twin of lr_bug_scheduler_per_batch_params_stop: the same `StepLR(step_size=1,
gamma=0.8)` under Adam, stepped once per epoch as it was built for."""

import torch
from _setup import seeded_mlp, train

model = seeded_mlp(16, 64, 64, 1)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.8)
w = torch.randn(16, 1)


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(32, 16)
    return x, x @ w


def per_epoch(step: int) -> None:
    if step and step % 50 == 0:  # 4 epochs of 50 batches: the scheduler once per epoch
        sched.step()


train(model, opt, 200, batch, before=per_epoch)
