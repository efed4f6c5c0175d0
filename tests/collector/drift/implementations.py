"""TEMPORARY: the comparison core's two implementations behind one interface, so the drift
tests run against the numpy port and the torch original (deleted with the original).

``IMPLEMENTATIONS[name].compare(a, b, **kw)`` and ``.leaving(losses, **kw)`` take the
package's numpy :class:`RunData` and ``(steps, loss)`` arrays; the torch one converts them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gradwatch.drift import envelope, verdict
from tests.collector.drift import torch_envelope, torch_verdict


@dataclass(frozen=True)
class Implementation:
    compare: Any
    leaving: Any


def as_torch(run: verdict.RunData) -> torch_verdict.RunData:
    """The same run with torch tensors (what the torch original reads)."""
    tracks = {
        opt: torch_verdict.Track(
            tensors=list(t.tensors),
            steps=torch.from_numpy(np.array(t.steps, dtype=np.int64)),
            loss=torch.from_numpy(np.array(t.loss, dtype=np.float64)),
            has_loss=torch.from_numpy(np.array(t.has_loss, dtype=np.bool_)),
            stats={k: torch.from_numpy(np.array(v, dtype=np.float64)) for k, v in t.stats.items()},
            batch=list(t.batch),
        )
        for opt, t in run.tracks.items()
    }
    return torch_verdict.RunData(run.id, run.fingerprint, tracks)


def _torch_compare(a: verdict.RunData, b: verdict.RunData, **kw: Any) -> dict[str, Any]:
    return torch_verdict.compare(as_torch(a), as_torch(b), **kw)


def _torch_leaving(losses: dict[str, tuple[Any, Any]], **kw: Any) -> dict[str, int | None]:
    converted = {
        name: (
            torch.from_numpy(np.array(steps, dtype=np.int64)),
            torch.from_numpy(np.array(loss, dtype=np.float64)),
        )
        for name, (steps, loss) in losses.items()
    }
    return torch_envelope.leaving(converted, **kw)


IMPLEMENTATIONS = {
    "numpy": Implementation(verdict.compare, envelope.leaving),
    "torch": Implementation(_torch_compare, _torch_leaving),
}
