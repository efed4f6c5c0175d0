# expect: quiet
"""Correct: a dataset of one batch — each epoch of the DataLoader is that batch, the same
at every step (``shuffle=False``); and a second set concatenated from a DataLoader of
several batches into one tensor, then trained on whole."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x_all = torch.randn(48, 8)
y_all = x_all @ torch.linspace(-1, 1, 8).reshape(8, 1)
loader = DataLoader(TensorDataset(x_all, y_all), batch_size=64, shuffle=False)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(30):
    for x, y in loader:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
pairs = list(DataLoader(TensorDataset(x_all, y_all), batch_size=16))
x = torch.cat([a for a, _ in pairs])
y = torch.cat([b for _, b in pairs])
for step in range(30):
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
