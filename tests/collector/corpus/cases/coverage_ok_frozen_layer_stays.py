# expect: quiet
"""Correct twin of coverage_bug_frozen_layer_keeps_moving: gradients cleared to None, so the
optimizer skips the frozen layer (its momentum and weight decay no longer apply)."""

import torch
from _setup import freeze_at, regression, seeded_mlp, train

model = seeded_mlp(8, 32, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-2)
train(model, opt, 60, regression(8, inputs=1), before=freeze_at(model[0], 20), set_to_none=True)
