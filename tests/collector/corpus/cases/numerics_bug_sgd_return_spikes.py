# expect: exploding-grad at step 90
"""Bug twin of numerics_ok_actor_critic_return_spikes: the same rare 50x return under plain
SGD, which passes the gradient spike on to the update in full — the weights jump by far
more than their usual step, more than 1% of their norm: exploding-grad at that step."""

import math

import torch
from torch import nn

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(4, 256), nn.ReLU(), nn.Linear(256, 2))
opt = torch.optim.SGD(net.parameters(), lr=0.02)
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
