"""gradwatch never changes training: bit-identical parameters, losses and RNG states."""

from __future__ import annotations

import random
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import gradwatch

STEPS = 50


def train(with_gradwatch: bool) -> dict[str, Any]:
    torch.manual_seed(1234)
    random.seed(1234)
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = TensorDataset(torch.randn(400, 10), torch.randint(0, 2, (400,)))
    loader = DataLoader(
        data,
        batch_size=8,
        shuffle=True,
        num_workers=2,
        multiprocessing_context="fork",
        persistent_workers=False,
    )
    run = gradwatch.watch(model, opt, config={"seed": 1234}) if with_gradwatch else None
    losses = []
    step = 0
    while step < STEPS:
        for x, y in loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.detach().clone())
            step += 1
            if step == STEPS:
                break
    if run is not None:
        run.close()
        assert run.context.internal_errors == 0
    return {
        "params": [p.detach().clone() for p in model.parameters()],
        "state": opt.state_dict(),
        "losses": torch.stack(losses),
        "torch_rng": torch.get_rng_state(),
        "py_rng": random.getstate(),
    }


def test_training_is_bit_identical_with_and_without_gradwatch() -> None:
    plain = train(with_gradwatch=False)
    watched = train(with_gradwatch=True)
    assert torch.equal(plain["losses"], watched["losses"])
    for a, b in zip(plain["params"], watched["params"], strict=True):
        assert torch.equal(a, b)
    for key, state in plain["state"]["state"].items():
        for name, value in state.items():
            assert torch.equal(value, watched["state"]["state"][key][name]), name
    assert torch.equal(plain["torch_rng"], watched["torch_rng"])
    assert plain["py_rng"] == watched["py_rng"]
