# expect: lr-too-large at step 1 role cause
"""Bug: a transformer-style net (weights drawn with std 0.02, LayerNorm, gradients clipped at
1.0) trained by AdamW at 1.0 — the usual 1e-3 with a factor 1000 too many. Clipping hides
the gradient's size and Adam normalises it away, so every weight moves by about 1.0 per
step, 50x its own size: lr-too-large names the rate at the first step."""

import torch
from _setup import layernorm_net, regression, train

model = layernorm_net()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3 * 1e3, weight_decay=0.1)
train(model, opt, 100, regression(16, inputs=4), clip=1.0)
