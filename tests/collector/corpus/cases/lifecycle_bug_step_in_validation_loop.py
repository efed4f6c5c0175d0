# expect: step-without-backward at step 31
"""Bug: the validation loop was copied from the training loop and kept optimizer.step():
after 30 training steps, each validation batch steps the optimizer with no backward
(momentum keeps moving the weights on data no gradient came from). Twin: ok_basic_sgd."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for epoch in range(2):
    model.train()
    for step in range(30):
        x = torch.randn(32, 4)
        y = x.sum(dim=1, keepdim=True)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        for step in range(5):
            x = torch.randn(32, 4)
            val = nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
            opt.step()
