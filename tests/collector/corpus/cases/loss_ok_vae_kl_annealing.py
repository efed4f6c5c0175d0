# expect: quiet
"""Correct: a VAE whose KL term is annealed from weight 0 to 1 over 300 steps: the total
loss rises while the KL weight grows, by design."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(0)


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(30, 64), nn.ReLU(), nn.Linear(64, 16))
        self.dec = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 30))

    def forward(self, x):
        mu, logvar = self.enc(x).chunk(2, dim=1)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        return self.dec(z), mu, logvar


model = VAE()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
basis = torch.randn(4, 30)
for step in range(500):
    x = torch.randn(64, 4) @ basis
    recon, mu, logvar = model(x)
    rec = F.mse_loss(recon, x, reduction="sum") / 64
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / 64
    beta = min(1.0, step / 300)  # KL annealing: the KL term's weight grows from 0 to 1
    loss = rec + beta * kl
    opt.zero_grad()
    loss.backward()
    opt.step()
