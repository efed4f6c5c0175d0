# expect: lr-too-large at step 1 role cause
# expect: loss-diverging role consequence
"""Bug: Adam at 1000 on a transformer-style net: the loss diverges. lr-too-large names the
rate at step 1 (a warning), and once the loss diverges the rate is proven to break training:
the finding becomes an error, so `gradwatch findings --fail-on error` fails the run (it
passed before: the rate stayed a warning)."""

import torch
from _setup import layernorm_net, regression, train

model = layernorm_net()
opt = torch.optim.Adam(model.parameters(), lr=1e3)
train(model, opt, 60, regression(16, inputs=4))
