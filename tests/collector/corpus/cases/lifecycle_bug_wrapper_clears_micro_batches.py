# expect: accumulation-wiped at steps 2-3
"""Bug: the twin of lifecycle_ok_sam_wrapper_optimizer: a wrapper optimizer that shares its
param groups with an inner SGD clears the gradients before every micro-batch of four, and
only the inner SGD steps; nothing uses the gradients between the clears (no perturbation,
no update), so each step applies the last micro-batch only."""

import torch
from torch import nn


class Wrapper(torch.optim.Optimizer):
    def __init__(self, params, base_optimizer, **kwargs):
        super().__init__(params, dict(kwargs))
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1))
opt = Wrapper(model.parameters(), torch.optim.SGD, lr=0.05, momentum=0.9)
w = torch.randn(10, 1)
for step in range(300):
    for micro in range(4):
        x = torch.randn(8, 10)
        y = x @ w + 0.1 * torch.randn(8, 1)
        opt.zero_grad()
        (nn.functional.mse_loss(model(x), y) / 4).backward()
    opt.base_optimizer.step()
