# expect: quiet
"""Correct: gradient surgery for multi-task learning (PCGrad's pc_backward): one backward
pass per task, each cleared before the next after its gradients were harvested; the
conflicting components projected out; the merged gradient written into ``p.grad`` by hand;
then the step applies it."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)
shared = nn.Sequential(nn.Linear(10, 32), nn.ReLU())
heads = nn.ModuleList([nn.Linear(32, 3), nn.Linear(32, 3)])
model = nn.ModuleDict({"shared": shared, "heads": heads})
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
params = list(model.parameters())
centers = torch.randn(3, 10) * 2
for step in range(80):
    y = torch.randint(0, 3, (16,))
    x = centers[y] + torch.randn(16, 10)
    rep = shared(x)
    losses = [F.cross_entropy(heads[0](rep), y), F.cross_entropy(heads[1](rep), (y + 1) % 3)]
    grads = []
    for loss in losses:
        opt.zero_grad(set_to_none=True)
        loss.backward(retain_graph=True)
        grads.append(
            torch.cat(
                [(torch.zeros_like(p) if p.grad is None else p.grad).flatten() for p in params]
            )
        )
    projected = []
    for i, g in enumerate(grads):
        g = g.clone()
        other = grads[1 - i]
        dot = torch.dot(g, other)
        if dot < 0:
            g -= dot * other / other.norm() ** 2
        projected.append(g)
    merged = torch.stack(projected).sum(dim=0)
    at = 0
    for p in params:
        p.grad = merged[at : at + p.numel()].view_as(p).clone()
        at += p.numel()
    opt.step()
