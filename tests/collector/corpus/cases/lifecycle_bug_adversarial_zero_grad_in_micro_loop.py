# expect: accumulation-wiped at step 2
"""Bug: adversarial training with gradient accumulation, zero_grad inside the micro-batch
loop: the perturbation's pass is for the input, but each training micro-batch's gradient is
cleared by the next one, so each step applies only the last micro-batch."""

import torch
from torch import nn
from torch.nn import functional as F

K = 4  # micro-batches per optimizer step
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
centers = torch.randn(4, 20) * 2
eps, alpha = 0.3, 0.1
for step in range(30):
    for micro in range(K):
        y = torch.randint(0, 4, (32,))
        x = centers[y] + torch.randn(32, 20)
        delta = torch.zeros_like(x).uniform_(-eps, eps)
        delta.requires_grad = True
        F.cross_entropy(model(x + delta), y).backward()
        delta = (delta + alpha * delta.grad.detach().sign()).clamp(-eps, eps).detach()
        opt.zero_grad()  # clears the perturbation pass (fine) and the last micro-batch (the bug)
        (F.cross_entropy(model(x + delta), y) / K).backward()
    opt.step()
