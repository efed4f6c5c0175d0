# expect: quiet
"""Correct: gradients clamped in place by a post-accumulate hook inside the backward pass,
cleared in place every step (``zero_grad(set_to_none=False)`` on even steps, ``p.grad.zero_()``
by hand on odd ones)."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 32), nn.Tanh(), nn.Linear(32, 1))


def clamp(p: torch.Tensor) -> None:
    assert p.grad is not None
    p.grad.clamp_(-1.0, 1.0)


for p in model.parameters():
    p.register_post_accumulate_grad_hook(clamp)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
w = torch.randn(10, 1)
for step in range(300):
    x = torch.randn(16, 10)
    loss = nn.functional.mse_loss(model(x), x @ w)
    if step % 2:
        for p in model.parameters():
            if p.grad is not None:
                p.grad.zero_()
    else:
        opt.zero_grad(set_to_none=False)
    loss.backward()
    opt.step()
