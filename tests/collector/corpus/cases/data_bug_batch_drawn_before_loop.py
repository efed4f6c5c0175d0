# expect: repeated-batch at step 5
"""Bug: one batch is drawn from the DataLoader before the loop and the loop trains on it
at every step; the other 7 batches are never seen."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x_all = torch.randn(256, 8)
y_all = x_all @ torch.linspace(-1, 1, 8).reshape(8, 1)
loader = DataLoader(TensorDataset(x_all, y_all), batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = next(iter(loader))  # BUG: drawn once, outside the loop
for step in range(40):
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
