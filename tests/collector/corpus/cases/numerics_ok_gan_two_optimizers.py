# expect: quiet
"""Correct: a GAN on a 2-D Gaussian mixture with two Adam optimizers (discriminator on
detached fakes, then generator): the generator's loss rises as the discriminator learns."""

import math

import torch
from torch import nn

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
D = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
opt_g = torch.optim.Adam(G.parameters(), lr=1e-3, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(D.parameters(), lr=1e-3, betas=(0.5, 0.999))
bce = nn.BCEWithLogitsLoss()
centres = torch.tensor([[math.cos(a), math.sin(a)] for a in torch.arange(8) * math.pi / 4])
for step in range(300):
    real = centres[torch.randint(0, 8, (64,))] * 2 + 0.05 * torch.randn(64, 2)
    fake = G(torch.randn(64, 4))
    opt_d.zero_grad()
    d_loss = bce(D(real), torch.ones(64, 1)) + bce(D(fake.detach()), torch.zeros(64, 1))
    d_loss.backward()
    opt_d.step()
    opt_g.zero_grad()
    bce(D(fake), torch.ones(64, 1)).backward()
    opt_g.step()
