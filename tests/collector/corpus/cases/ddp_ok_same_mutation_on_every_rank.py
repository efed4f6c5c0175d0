# launch: torchrun 2
# run-args: --project corpus-ddp
# expect: quiet
"""Fixed twin of ddp_bug_rank_dependent_mutation: the same max-norm constraint on every
rank keeps the replicas identical (an edit outside `step()` is only `info`)."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 2)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.Generator().manual_seed(100 + rank)  # each rank its own shard
for step in range(1, 61):
    x = torch.randn(16, 8, generator=data)
    y = x[:, :2] * 0.5
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    if step > 10:  # every replica is constrained alike
        with torch.no_grad():
            model.module[0].weight.clamp_(-0.1, 0.1)
dist.destroy_process_group()
