# expect: quiet
"""Correct: sharpness-aware minimisation: two forward/backward passes per step; the first
perturbs the weights along the gradient, the second computes the gradient at the
perturbed point, the weights are restored and the base SGD steps."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
w = torch.randn(10, 1)
rho = 0.05
for step in range(300):
    x = torch.randn(32, 10)
    y = x @ w + 0.1 * torch.randn(32, 1)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    with torch.no_grad():
        norm = torch.norm(torch.stack([p.grad.norm() for p in model.parameters()]))
        eps = [rho * p.grad / (norm + 1e-12) for p in model.parameters()]
        for p, e in zip(model.parameters(), eps):
            p.add_(e)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    with torch.no_grad():
        for p, e in zip(model.parameters(), eps):
            p.sub_(e)
    opt.step()
