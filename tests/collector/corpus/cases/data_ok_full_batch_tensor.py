# expect: quiet
"""Correct: full-batch gradient descent on a fixed tensor (a small regression, as in PINN
scripts): the same batch at every step on purpose, and no DataLoader. A validation
DataLoader is walked to its end every 10 steps."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.linspace(-2, 2, 128).reshape(-1, 1)
y = torch.sin(3 * x)
val = DataLoader(TensorDataset(torch.randn(64, 1), torch.randn(64, 1)), batch_size=16)
model = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for step in range(60):
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    if step % 10 == 0:
        with torch.no_grad():
            val_loss = sum(nn.functional.mse_loss(model(a), b) for a, b in val)
