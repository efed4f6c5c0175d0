# expect: quiet
"""Correct twin of numerics_bug_sqrt_at_zero: the square root of the sum of squares plus a
small epsilon is differentiable everywhere."""

import torch
from _setup import regression, seeded_mlp, train


def spread_loss(z: torch.Tensor, _: torch.Tensor) -> torch.Tensor:
    dist = (((z.unsqueeze(0) - z.unsqueeze(1)) ** 2).sum(dim=-1) + 1e-8).sqrt()
    return (dist.mean() - 1.0).pow(2)


model = seeded_mlp(8, 16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
train(model, opt, 60, regression(8), spread_loss)
