# expect: stale-grad at step 3
"""Bug: gradients edited in place inside the backward pass (a post-accumulate hook that
clamps each gradient, as per-parameter clipping in backward does; a neural ODE's adjoint
method adds to them once per time interval) and no zero_grad: every step applies the sum
of all earlier gradients. The pass moves each gradient's version by more than one add, which
a clear in place (``zero_()``) followed by the pass's add would too: what the version was
right before the pass tells them apart (from the third step, once the tensors are followed)."""

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
for step in range(40):
    x = torch.randn(16, 10)
    loss = nn.functional.mse_loss(model(x), x @ w)
    loss.backward()  # the bug: no opt.zero_grad()
    opt.step()
