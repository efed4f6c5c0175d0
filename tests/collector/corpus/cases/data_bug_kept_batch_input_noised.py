# expect: repeated-batch at step 6
"""Bug: the loop draws a batch at every step but keeps training on the first one it drew
(a stale variable). Noise is added to the input at every step (as adversarial training,
denoising or mixup do), so the model's input never repeats; the loss is given the same
label tensor the loader yielded for step 1 on every step."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x_all = torch.randn(512, 8)
y_all = (x_all[:, 0] > 0).long() + (x_all[:, 1] > 0).long()
loader = DataLoader(TensorDataset(x_all, y_all), batch_size=32, shuffle=True)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
kept = None
for epoch in range(3):
    for x, y in loader:
        if kept is None:
            kept = (x, y)
        x, y = kept  # BUG: the batch just drawn is dropped
        opt.zero_grad()
        noisy = x + 0.1 * torch.randn_like(x)
        nn.functional.cross_entropy(model(noisy), y).backward()
        opt.step()
