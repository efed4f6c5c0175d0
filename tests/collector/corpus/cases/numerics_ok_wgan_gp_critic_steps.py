# expect: quiet
"""Correct: WGAN-GP on a 2-D mixture: five critic steps per generator step, a gradient
penalty computed with create_graph=True (double backward), Adam(0.5, 0.9)."""

import math

import torch
from torch import nn

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 2))
D = nn.Sequential(nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 1))
og = torch.optim.Adam(G.parameters(), lr=1e-4, betas=(0.5, 0.9))
od = torch.optim.Adam(D.parameters(), lr=1e-4, betas=(0.5, 0.9))
centres = torch.tensor([[math.cos(a), math.sin(a)] for a in torch.arange(8) * math.pi / 4])
for it in range(320):
    real = centres[torch.randint(0, 8, (64,))] * 2 + 0.05 * torch.randn(64, 2)
    fake = G(torch.randn(64, 4)).detach()
    a = torch.rand(64, 1)
    mix = (a * real + (1 - a) * fake).requires_grad_(True)
    grad = torch.autograd.grad(D(mix).sum(), mix, create_graph=True)[0]
    gp = ((grad.norm(dim=1) - 1) ** 2).mean()
    d_loss = D(fake).mean() - D(real).mean() + 10 * gp
    od.zero_grad()
    d_loss.backward()
    od.step()
    if it % 5 == 0:
        g_loss = -D(G(torch.randn(64, 4))).mean()
        og.zero_grad()
        g_loss.backward()
        og.step()
