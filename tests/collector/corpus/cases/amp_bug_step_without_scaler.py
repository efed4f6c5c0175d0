# expect: exploding-grad at step 2 role cause
# expect: nonfinite-loss at step 3 role consequence
"""Bug: the loss is scaled for a GradScaler (`scaler.scale(loss).backward()`) but the
optimizer is stepped directly (`opt.step()` instead of `scaler.step(opt)`), so every update
applies gradients 65,536× too large: step 1 throws the weights far out, the gradient norm
of step 2 overflows float32 (every element still finite), and the loss of step 3 is
infinite. Fixed twin: amp_ok_bf16_autocast_gradscaler."""

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
scaler = torch.amp.GradScaler("cpu")
w = torch.randn(16, 1)
for step in range(1, 41):
    x = torch.randn(32, 16)
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = nn.functional.mse_loss(model(x).float(), x @ w)
    scaler.scale(loss).backward()
    opt.step()  # the bug: scaler.step(opt); scaler.update()
