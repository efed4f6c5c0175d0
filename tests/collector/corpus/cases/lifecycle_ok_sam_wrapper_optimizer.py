# expect: quiet
"""Correct: sharpness-aware minimisation written as a wrapper optimizer (the form of the
popular SAM implementations): ``SAM`` is a torch.optim.Optimizer that shares its param
groups with an inner SGD; ``first_step`` perturbs the weights along the gradient and
clears it, the second backward pass runs at the perturbed point, ``second_step`` restores
the weights (``p.data = old``) and steps the inner SGD. SAM's own ``step`` never runs."""

import torch
from torch import nn


class SAM(torch.optim.Optimizer):
    def __init__(self, params, base_optimizer, rho=0.05, **kwargs):
        super().__init__(params, dict(rho=rho, **kwargs))
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups

    @torch.no_grad()
    def first_step(self, zero_grad=False):
        norm = torch.norm(
            torch.stack(
                [
                    p.grad.norm()
                    for g in self.param_groups
                    for p in g["params"]
                    if p.grad is not None
                ]
            )
        )
        for group in self.param_groups:
            scale = group["rho"] / (norm + 1e-12)
            for p in group["params"]:
                if p.grad is None:
                    continue
                self.state[p]["old_p"] = p.data.clone()
                p.add_(p.grad * scale)
        if zero_grad:
            self.zero_grad()

    @torch.no_grad()
    def second_step(self, zero_grad=False):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                p.data = self.state[p]["old_p"]
        self.base_optimizer.step()
        if zero_grad:
            self.zero_grad()


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 1))
opt = SAM(model.parameters(), torch.optim.SGD, rho=0.05, lr=0.05, momentum=0.9)
w = torch.randn(10, 1)
for step in range(300):
    x = torch.randn(32, 10)
    y = x @ w + 0.1 * torch.randn(32, 1)
    nn.functional.mse_loss(model(x), y).backward()
    opt.first_step(zero_grad=True)
    nn.functional.mse_loss(model(x), y).backward()
    opt.second_step(zero_grad=True)
