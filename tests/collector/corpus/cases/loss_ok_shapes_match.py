# expect: quiet
"""Correct twin of loss_bug_shape_mismatch: the prediction is squeezed to (N,)."""

import torch
from _setup import regression, seeded_mlp, train
from torch import nn

model = seeded_mlp(4, 16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)


def squeezed_mse(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(out.squeeze(-1), y)  # the fix: (N, 1) -> (N,)


train(model, opt, 60, regression(keepdim=False), squeezed_mse)
