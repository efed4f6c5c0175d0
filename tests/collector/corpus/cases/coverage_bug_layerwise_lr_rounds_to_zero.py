# expect: param-not-updated at step 3
"""Bug: layer-wise learning rates computed with integer division (``base * (depth // 4)``):
the lower layers get a rate of exactly 0 and never move, although their gradients are not
zero."""

import torch
from _setup import regression, seeded_mlp, train

model = seeded_mlp(8, 32, 32, 1)
base = 0.05
groups = [{"params": model[2 * i].parameters(), "lr": base * ((i + 1) // 3)} for i in range(3)]
opt = torch.optim.SGD(groups, lr=base)
train(model, opt, 30, regression(8, inputs=1))
