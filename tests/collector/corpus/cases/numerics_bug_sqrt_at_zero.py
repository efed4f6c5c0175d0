# expect: nonfinite-grad at step 1
"""Bug: a distance computed as sqrt(sum of squares) is differentiated at zero (a sample
compared with itself): the gradient of sqrt at 0 is infinite, times 0 gives NaN."""

import torch
from _setup import regression, seeded_mlp, train


def spread_loss(z: torch.Tensor, _: torch.Tensor) -> torch.Tensor:
    dist = ((z.unsqueeze(0) - z.unsqueeze(1)) ** 2).sum(dim=-1).sqrt()  # zero diagonal
    return (dist.mean() - 1.0).pow(2)


model = seeded_mlp(8, 16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
train(model, opt, 20, regression(8), spread_loss)
