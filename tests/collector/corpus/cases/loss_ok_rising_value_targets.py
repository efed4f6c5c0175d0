# expect: quiet
"""Correct: an actor-critic-like value regression whose objective moves as the policy
improves: episodes grow longer (10 -> 200 steps), so the discounted returns the value net
regresses onto, and the loss summed over an episode, grow many times while the net keeps
learning at its usual pace (pytorch/examples reinforcement_learning/actor_critic.py)."""

import torch
from torch import nn

torch.manual_seed(0)
value = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.Adam(value.parameters(), lr=3e-3)
for episode in range(300):
    length = 10 + 190 * episode // 300  # the policy balances the pole longer and longer
    t = torch.arange(length, dtype=torch.float32)
    returns = (1 - 0.99 ** (length - t)) / 0.01  # discounted sum of the rewards still to come
    states = torch.stack(
        [t / 200, torch.randn(length), torch.randn(length), torch.randn(length)], 1
    )
    loss = nn.functional.smooth_l1_loss(value(states).squeeze(1), returns, reduction="sum")
    opt.zero_grad()
    loss.backward()
    opt.step()
