# expect: step-without-backward at step 31
"""Bug: the validation loop was copied from the training loop and kept optimizer.step():
after 30 training steps, each validation batch steps the optimizer with no backward
(momentum keeps moving the weights on data no gradient came from). Twin: ok_basic_sgd."""

import torch
from _setup import regression, seeded_mlp, train
from torch import nn

model = seeded_mlp(4, 16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
batch = regression()
for epoch in range(2):
    model.train()
    train(model, opt, 30, batch)
    model.eval()
    with torch.no_grad():
        for step in range(5):
            x, y = batch()
            val = nn.functional.mse_loss(model(x), y)
            opt.step()  # the bug, copied from the training loop
