# expect: grad-zeroed-before-step at step 1
"""Bug: zero_grad() moved between backward() and step() (meant as "clean up before the next
batch"): every step applies zero gradients and the model never trains. Twin: ok_basic_sgd."""

import torch
from _setup import regression, seeded_mlp
from torch import nn

model = seeded_mlp(4, 16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
batch = regression()
for step in range(40):
    x, y = batch()
    nn.functional.mse_loss(model(x), y).backward()
    opt.zero_grad()  # the bug: clears the gradients step() was about to apply
    opt.step()
