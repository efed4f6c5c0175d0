# expect: loss-diverging at steps 150-200
"""Bug: mini-batch linear regression whose rate is raised 4.1x at step 100 (under
lr-jump's 10x), just past the stable range of the steepest direction (lr·λ = 2.05): the
loss creeps up from its best, and after 30 losses at 10-200x its best it has not yet
reached 1000x its first value. What makes it a divergence rather than a harder objective
is the weights: the updates over those 30 losses add up to tens of times their norm
(the correct twins, loss_ok_curriculum_rising_noise, loss_ok_rising_value_targets and
loss_ok_new_task_every_step, rise as far with weights that move at their usual pace)."""

import torch
from torch import nn

torch.manual_seed(0)
x = torch.randn(1024, 8)
y = x @ torch.linspace(-1, 1, 8).unsqueeze(1) + 0.1 * torch.randn(1024, 1)
model = nn.Linear(8, 1)
lam = float(torch.linalg.eigvalsh(2 * x.T @ x / len(x)).max())
opt = torch.optim.SGD(model.parameters(), lr=0.5 / lam)
for step in range(300):
    if step == 100:
        opt.param_groups[0]["lr"] = 2.05 / lam  # a schedule's peak set 4x too high
    i = torch.randint(0, len(x), (64,))
    opt.zero_grad()
    nn.functional.mse_loss(model(x[i]), y[i]).backward()
    opt.step()
