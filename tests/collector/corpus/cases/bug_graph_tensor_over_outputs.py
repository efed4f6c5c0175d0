# expect: param-no-grad at step 1
"""Bug: torch.tensor(...) over the model's outputs makes a new leaf: the loss is cut
from the model."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(20):
    x = torch.randn(32, 4)
    y = x.sum(dim=1, keepdim=True)
    opt.zero_grad()
    out = model(x)
    pred = torch.tensor(out.detach().numpy(), requires_grad=True)  # a numpy round trip
    loss = nn.functional.mse_loss(pred, y)
    loss.backward()
    opt.step()
