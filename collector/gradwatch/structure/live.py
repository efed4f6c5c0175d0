"""A run's structure, kept by the collector as it runs: the within-run structure findings
(``structure-change``, ``structure-safeguard``) become ordinary stored findings.

Each optimizer's steps are fed to a :class:`Recorder` on the I/O thread, where the step
rows are already turned into records (nothing runs on the training thread). It keeps the
sequence of step signatures run-length encoded: one entry per run of steps whose
lifecycle, gradients and state are alike and whose step numbers advance by one stride, the
signatures interned; a run that keeps one structure is one entry however long it is. The
learning rates are kept only around the last scheduler step (``WINDOW + 2`` steps), all
that the rule that tells a finished schedule from a dropped one reads.

At close the sequence is expanded and judged by :func:`gradwatch.structure.timeline.changes`
— the rules and sentences of the read-time derivation — over the tensors whose gradient
varied only (the others cannot change). A dropped safeguard needs ``max(2G, WINDOW)`` steps
after its last call and "for the rest of the run" is known only at the end, so the findings
are stored when the run closes; the END record then says so (``structure: "stored"``) and
readers use the stored findings instead of deriving them again.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any, Final, Protocol

from gradwatch.structure.signature import SCHEDULER, StepShape, shape, words
from gradwatch.structure.timeline import WINDOW, changes

#: the END record's key and value that say a run's structure findings are stored
MARKER: Final = "structure"
STORED: Final = "stored"

_Key = tuple[str, tuple[bool, ...], tuple[tuple[str, str], ...]]


class _Meta(Protocol):
    step: int
    events: list[tuple[str, float, str]]
    has_grad: list[bool]
    lr: list[float]


class Recorder:
    """One optimizer's step signatures, run-length encoded (fed on the I/O thread)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self._state: dict[str, str] = {}
        self._interned: dict[_Key, _Key] = {}
        #: [signature, count, first step, stride]
        self._runs: list[list[Any]] = []
        self._n = 0
        self._recent: deque[tuple[int, tuple[float, ...]]] = deque(maxlen=WINDOW + 2)
        self._sched_lr: list[tuple[int, tuple[float, ...]]] = []
        self._sched_before = False
        self._lock = threading.Lock()

    @property
    def steps(self) -> int:
        """Steps recorded."""
        return self._n

    @property
    def entries(self) -> int:
        """Entries kept (runs of alike steps)."""
        return len(self._runs)

    def observe(self, metas: Iterable[_Meta]) -> None:
        """Add a window of steps (in order)."""
        with self._lock:
            self._observe(metas)

    def _observe(self, metas: Iterable[_Meta]) -> None:
        for m in metas:
            s = shape(m.step, m.events, m.has_grad, self._state)
            key: _Key = (s.lifecycle, s.has_grad, s.state)
            key = self._interned.setdefault(key, key)
            last = self._runs[-1] if self._runs else None
            if last is not None and last[0] is key:
                stride = m.step - (last[2] + (last[1] - 1) * last[3])
                if last[1] == 1 or stride == last[3]:
                    last[3] = stride if last[1] == 1 else last[3]
                    last[1] += 1
                else:
                    self._runs.append([key, 1, m.step, 1])
            else:
                self._runs.append([key, 1, m.step, 1])
            lr = tuple(float(x) for x in m.lr)
            self._recent.append((self._n, lr))
            if self._sched_before:
                self._sched_lr = list(self._recent)
            self._sched_before = SCHEDULER in words(s.lifecycle)
            self._n += 1

    def shapes(self) -> tuple[list[StepShape], list[int]]:
        """The recorded steps as shapes (only the tensors whose gradient varied, whose
        indices come second), with the learning rates kept."""
        keys = list(self._interned)
        width = max((len(k[1]) for k in keys), default=0)
        varying = [
            j for j in range(width) if len({k[1][j] if j < len(k[1]) else False for k in keys}) > 1
        ]
        slim: dict[_Key, tuple[bool, ...]] = {
            k: tuple(k[1][j] if j < len(k[1]) else False for j in varying) for k in keys
        }
        out: list[StepShape] = []
        for key, count, first, stride in self._runs:
            grads = slim[key]
            out += [StepShape(first + i * stride, key[0], grads, key[2]) for i in range(count)]
        for index, lr in self._sched_lr:
            s = out[index]
            out[index] = StepShape(s.step, s.lifecycle, s.has_grad, s.state, lr)
        return out, varying

    def findings(self, label: str = "") -> list[dict[str, Any]]:
        """The structure findings of these steps (as :func:`timeline.changes` gives them)."""
        with self._lock:
            if self._n == 0:
                return []
            shapes, varying = self.shapes()
        names = [self.names[j] for j in varying if j < len(self.names)]
        return changes(shapes, names, label)
