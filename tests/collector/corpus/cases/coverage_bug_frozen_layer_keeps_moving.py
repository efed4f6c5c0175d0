# expect: frozen-param-changed at step 21
"""Bug: the first layer is frozen after 20 steps (requires_grad_(False)) but zero_grad keeps
zero tensors (set_to_none=False) and SGD's momentum and weight decay go on moving it."""

import torch
from _setup import freeze_at, regression, seeded_mlp, train

model = seeded_mlp(8, 32, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-2)
train(model, opt, 60, regression(8, inputs=1), before=freeze_at(model[0], 20), set_to_none=False)
