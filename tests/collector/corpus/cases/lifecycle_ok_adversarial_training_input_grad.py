# expect: quiet
"""Correct: adversarial training ("fast" FGSM, and PGD on every third batch): a forward and
backward pass for the perturbation's gradient (``delta.grad``), which also fills the
model's gradients; they are cleared before the training pass, whose gradient the step
applies. The cleared passes were made for the input, not lost micro-batches."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
centers = torch.randn(4, 20) * 2
eps, alpha = 0.3, 0.1
for step in range(60):
    y = torch.randint(0, 4, (32,))
    x = centers[y] + torch.randn(32, 20)
    if step % 3 == 2:  # PGD: several signed-gradient steps, each clears the gradients first
        delta = torch.zeros_like(x)
        for _ in range(3):
            delta.requires_grad = True
            loss = F.cross_entropy(model(x + delta), y)
            opt.zero_grad()
            loss.backward()
            delta = (delta + alpha * delta.grad.sign()).clamp(-eps, eps).detach()
    else:  # FGSM from a random start
        delta = torch.zeros_like(x).uniform_(-eps, eps)
        delta.requires_grad = True
        F.cross_entropy(model(x + delta), y).backward()
        delta = (delta + alpha * delta.grad.detach().sign()).clamp(-eps, eps).detach()
    loss = F.cross_entropy(model(x + delta), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
