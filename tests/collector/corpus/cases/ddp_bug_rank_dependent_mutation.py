# launch: torchrun 2
# run-args: --project corpus-ddp
# expect: ddp-param-desync at step 50 role cause
"""Bug: a max-norm constraint applied by hand only on the main process (`if rank == 0:`,
as one would guard logging or saving). DDP averages gradients but never compares the
parameters, so from step 11 on rank 0's replica silently differs from rank 1's. The
ranks' parameters are compared every 50 steps: the first comparison after the edit, at
step 50, is a `ddp-param-desync` on rank 0. Twin: ddp_ok_same_mutation_on_every_rank."""

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
    if rank == 0 and step > 10:  # the bug: only one replica is constrained
        with torch.no_grad():
            model.module[0].weight.clamp_(-0.1, 0.1)
dist.destroy_process_group()
