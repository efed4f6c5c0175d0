# expect: quiet
"""Correct: a policy-gradient update (minimalRL's actor_critic.py, ppo.py) under Adam. The
objective is non-stationary and a rare episode's return is 50x the usual one, so the
gradient norm jumps 30-600x its median. Adam divides the spike by its running RMS: the
weights move by a few times their usual (tiny) step, far under 1% of their norm.
exploding-grad called it "49x its median" before it asked what the update did. Twin:
numerics_bug_sgd_return_spikes."""

import math

import torch
from torch import nn

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(4, 256), nn.ReLU(), nn.Linear(256, 2))
opt = torch.optim.Adam(net.parameters(), lr=2e-4)
for step in range(1, 201):
    states = torch.randn(16, 4)
    out = net(states)
    dist = torch.distributions.Categorical(logits=out)
    actions = dist.sample()
    ret = (1.0 + 0.5 * math.sin(step / 7.0)) * torch.randn(16)
    if step in (90, 160):
        ret = ret * 50.0  # a rare episode with a huge return
    loss = -(dist.log_prob(actions) * ret).mean()  # the policy-gradient term
    opt.zero_grad()
    loss.backward()
    opt.step()
