"""TEMPORARY: the numpy comparison core gives the torch original's answers, to the bit, on
random hand-built runs (NaN, ±Inf, ties, gaps, tolerances) and on real spooled runs.
Deleted with the torch original."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gradwatch.drift.envelope import envelope
from gradwatch.drift.verdict import RunData, Track, from_local
from gradwatch.paths import runs_dir
from gradwatch.transport.local_reader import load_run
from tests.collector.drift import torch_envelope, torch_verdict
from tests.collector.drift.implementations import IMPLEMENTATIONS, as_torch

NUMPY, TORCH = IMPLEMENTATIONS["numpy"], IMPLEMENTATIONS["torch"]
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-310, 1.7e308, -1.7e308]
FP: dict[str, Any] = {
    "seeds": {"torch_initial_seed": 0, "torch_seed_user_set": True},
    "device": {"types": ["cpu"], "num_threads": 1},
    "config_hash": "c",
    "code_hash": "k",
}


def exact(value: Any) -> str:
    """Bit-exact text of a result (repr of floats round-trips; NaN and ±Inf spelled out)."""
    return json.dumps(value, sort_keys=True, allow_nan=True)


def random_track(rng: np.random.Generator, tensors: int, steps: int) -> Track:
    values = rng.choice([1.0, 1.5, 2.0], size=(4, tensors, steps)) * rng.integers(1, 3)
    values = values + rng.normal(0, 1e-7, size=values.shape) * (rng.random() < 0.5)
    for _ in range(int(rng.integers(0, 4)) if values.size else 0):
        values[tuple(int(rng.integers(0, d)) for d in values.shape)] = rng.choice(SPECIAL)
    loss = rng.choice([0.5, 1.0, np.nan, np.inf], size=steps, p=[0.45, 0.45, 0.05, 0.05])
    kept = np.sort(rng.choice(np.arange(1, steps + 4), size=steps, replace=False))
    names = ("grad_norm", "param_norm", "update_norm", "nonfinite_grad")
    return Track(
        tensors=[f"t{i}" for i in range(tensors)],
        steps=kept.astype(np.int64),
        loss=loss.astype(np.float64),
        has_loss=rng.random(steps) < 0.9,
        stats={name: values[k].copy() for k, name in enumerate(names)},
        batch=[rng.choice(["x", "y", None]) for _ in range(steps)],
    )


def varied(rng: np.random.Generator, track: Track) -> Track:
    """A copy, sometimes with one value nudged (a split somewhere)."""
    out = Track(
        list(track.tensors),
        track.steps.copy(),
        track.loss.copy(),
        track.has_loss.copy(),
        {k: v.copy() for k, v in track.stats.items()},
        list(track.batch),
    )
    if rng.random() < 0.7 and out.steps.size:
        name = str(rng.choice(list(out.stats)))
        row, col = int(rng.integers(0, len(out.tensors))), int(rng.integers(0, out.steps.size))
        out.stats[name][row, col] = out.stats[name][row, col] * (1 + 10.0 ** -rng.integers(3, 17))
    if rng.random() < 0.2 and out.steps.size:
        out.loss[int(rng.integers(0, out.steps.size))] = rng.choice(SPECIAL)
    return out


def test_random_runs_get_the_same_comparison_to_the_bit() -> None:
    rng = np.random.default_rng(21)
    for _ in range(400):
        tensors, steps = int(rng.integers(1, 4)), int(rng.integers(0, 12))
        tracks = {o: random_track(rng, tensors, steps) for o in range(int(rng.integers(1, 3)))}
        a = RunData("a", FP, tracks)
        b = RunData("b", FP, {o: varied(rng, t) for o, t in tracks.items()})
        kw = [{}, {"rtol": 0.0}, {"rtol": 1e-6, "atol": 1e-9}][int(rng.integers(0, 3))]
        assert exact(NUMPY.compare(a, b, **kw)) == exact(TORCH.compare(a, b, **kw))


def test_random_sweeps_get_the_same_envelope_to_the_bit() -> None:
    rng = np.random.default_rng(4)
    for _ in range(300):
        losses: dict[str, tuple[Any, Any]] = {}
        for r in range(int(rng.integers(1, 8))):
            steps = np.sort(
                rng.choice(np.arange(1, 60), size=int(rng.integers(0, 40)), replace=False)
            )
            loss = np.round(rng.normal(1.0, 0.05, size=steps.size), int(rng.integers(1, 4)))
            for _ in range(int(rng.integers(0, 3))):
                if steps.size:
                    loss[int(rng.integers(0, steps.size))] = rng.choice(SPECIAL)
            losses[f"r{r}"] = (steps.astype(np.int64), loss)
        new = envelope(losses)
        old = torch_envelope.envelope(
            {k: (torch.from_numpy(s), torch.from_numpy(v)) for k, (s, v) in losses.items()}
        )
        for field in ("steps", "median", "scale", "values", "present"):
            assert np.array_equal(getattr(new, field), getattr(old, field).numpy(), equal_nan=True)
        for z, steps_out in ((4.0, 20), (1.0, 2)):
            kw = {"z": z, "steps": steps_out}
            assert NUMPY.leaving(losses, **kw) == TORCH.leaving(losses, **kw)


@pytest.mark.slow
def test_spooled_runs_read_the_same(drift_runs: tuple[Path, dict[str, str]]) -> None:
    root, ids = drift_runs
    for run_id in ids.values():
        local = load_run(runs_dir(root) / run_id)
        new, old = as_torch(from_local(local)), torch_verdict.from_local(local)
        assert new.tracks.keys() == old.tracks.keys()
        for opt, track in old.tracks.items():
            mine = new.tracks[opt]
            assert (mine.tensors, mine.batch) == (track.tensors, track.batch)
            for name in ("steps", "loss", "has_loss"):
                assert np.array_equal(
                    getattr(mine, name).numpy(),
                    getattr(track, name).numpy(),
                    equal_nan=name == "loss",
                )
            for stat, values in track.stats.items():
                assert np.array_equal(mine.stats[stat].numpy(), values.numpy(), equal_nan=True)
