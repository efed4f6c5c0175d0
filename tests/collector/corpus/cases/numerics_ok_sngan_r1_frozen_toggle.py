# expect: quiet
"""Correct: a GAN with spectral-normalised discriminator layers (parametrizations), the
discriminator frozen by requires_grad while the generator steps (CycleGAN's
set_requires_grad) and an R1 gradient penalty from autograd.grad on the real inputs."""

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.parametrizations import spectral_norm

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 2))
D = nn.Sequential(
    spectral_norm(nn.Linear(2, 64)), nn.LeakyReLU(0.2), spectral_norm(nn.Linear(64, 1))
)
opt_g = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))


def set_requires_grad(net, flag):
    for p in net.parameters():
        p.requires_grad = flag


for step in range(400):
    real = torch.randn(64, 2) * 0.3 + torch.tensor([1.0, -1.0])
    z = torch.randn(64, 8)
    # generator step with D frozen (CycleGAN's set_requires_grad)
    set_requires_grad(D, False)
    fake = G(z)
    g_loss = F.softplus(-D(fake)).mean()
    opt_g.zero_grad()
    g_loss.backward()
    opt_g.step()
    # discriminator step with an R1 penalty on real data
    set_requires_grad(D, True)
    real.requires_grad_(True)
    d_real = D(real)
    (grad,) = torch.autograd.grad(d_real.sum(), real, create_graph=True)
    r1 = grad.pow(2).sum(dim=1).mean()
    d_loss = F.softplus(-d_real).mean() + F.softplus(D(fake.detach())).mean() + 5.0 * r1
    opt_d.zero_grad()
    d_loss.backward()
    opt_d.step()
