# expect: quiet
"""Correct twin of lr_bug_adam_rate_x1000: the same net and clipping at AdamW's usual 1e-3,
with a hand-set linear warm-up over 20 steps (nanoGPT's get_lr)."""

import torch
from _setup import layernorm_net, regression, train

model = layernorm_net()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)


def warm_up(step: int) -> None:
    for group in opt.param_groups:
        group["lr"] = 1e-3 * min(1.0, (step + 1) / 21)


train(model, opt, 200, regression(16, inputs=4), clip=1.0, before=warm_up)
