# expect: repeated-batch at step 5
"""Bug: a new DataLoader iterator is made at every step (``next(iter(loader))`` inside the
loop); with ``shuffle=False`` it always yields the first batch, so the model trains on
one batch of the 8 over and over."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x_all = torch.randn(256, 8)
y_all = x_all @ torch.linspace(-1, 1, 8).reshape(8, 1)
loader = DataLoader(TensorDataset(x_all, y_all), batch_size=32, shuffle=False)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(40):
    x, y = next(iter(loader))  # BUG: a fresh iterator each step, always its first batch
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
