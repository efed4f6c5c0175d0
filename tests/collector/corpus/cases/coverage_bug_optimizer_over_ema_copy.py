# expect: param-not-in-optimizer at step 1
"""Bug: the optimizer is built over the parameters of the EMA copy of the model, not of the
model that runs in forward(): nothing trains. The tensors the loss reaches belong to the
trained model, which no optimizer holds; the optimizer's belong to a second copy of it
(before: "no module holds them: made in forward()?")."""

import copy

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
ema = copy.deepcopy(model)
for p in ema.parameters():
    p.requires_grad_(False)
opt = torch.optim.AdamW(ema.parameters(), lr=1e-3)  # meant: model.parameters()
for step in range(10):
    x = torch.randn(16, 8)
    opt.zero_grad()
    nn.functional.mse_loss(model(x), x.sum(-1, keepdim=True)).backward()
    opt.step()
    with torch.no_grad():
        for e, p in zip(ema.parameters(), model.parameters(), strict=True):
            e.lerp_(p, 0.01)
