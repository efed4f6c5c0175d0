"""A run's structure, kept by the collector as it runs: the within-run structure findings
(``structure-change``, ``structure-safeguard``) become ordinary stored findings.

Each optimizer's steps are fed to a :class:`Recorder` on the I/O thread, where the step
rows are already turned into records (nothing runs on the training thread). It keeps the
sequence of step signatures run-length encoded: one entry per run of steps whose
lifecycle, gradients and state are alike and whose step numbers advance by one stride, the
signatures interned; a run that keeps one structure is one entry however long it is. The
learning rates are kept only around the last scheduler step (``WINDOW + 2`` steps), all
that the rule that tells a finished schedule from a dropped one reads.

At close the sequence is expanded and judged by :func:`gradwatch.core.structure.timeline.changes`
— the rules and sentences of the read-time derivation — over the tensors whose gradient
varied only (the others cannot change). A dropped safeguard needs ``max(2G, WINDOW)`` steps
after its last call and "for the rest of the run" is known only at the end, so the findings
are stored when the run closes; the END record then says so (``structure: "stored"``) and
readers use the stored findings instead of deriving them again.
"""

from __future__ import annotations

import sys
import threading
from array import array
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any, Final, Protocol

from gradwatch.core.structure.signature import (
    SCHEDULER,
    STATE_KINDS,
    StepShape,
    apply_state,
    lifecycle,
    words,
)
from gradwatch.core.structure.timeline import WINDOW, changes

#: the END record's key and value that say a run's structure findings are stored
MARKER: Final = "structure"
STORED: Final = "stored"

#: the most a close judges (more: nothing is stored, the readers derive the findings with
#: their own bounds, as for a run recorded before): steps, and runs of alike steps times
#: the tensors whose gradient varied
MAX_STEPS: Final = 200_000
MAX_CELLS: Final = 2_000_000
#: distinct step signatures kept; a run with more (gradients that come on random steps,
#: as a mixture's experts get tokens) stops recording, and the readers derive its findings
MAX_SIGNATURES: Final = 20_000
#: distinct event sequences whose lifecycle is kept (cleared when more)
MAX_LIFECYCLES: Final = 1024

_State = tuple[tuple[str, str], ...]
_Key = tuple[str, bytes, _State]  # lifecycle, has_grad (a byte a tensor), state


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
        self._interned: dict[_Key, int] = {}  # signature -> its index in _keys
        self._keys: list[_Key] = []
        self._states: dict[_State, _State] = {}  # each state once, however many keys share it
        self._state_key: _State | None = None  # the state carried to the next step
        #: a step's (kind, detail) events -> its lifecycle, whether it has state events,
        #: whether a scheduler stepped (most steps repeat one of a few)
        self._lives: dict[tuple[tuple[str, str], ...], tuple[str, bool, bool]] = {}
        # the runs of alike steps, column by column (20 bytes a run): the signature's
        # index, how many steps, the first step, the stride between their step numbers
        self._key = array("I")
        self._count = array("I")
        self._first = array("q")
        self._stride = array("q")
        self._n = 0
        self._recent: deque[tuple[int, tuple[float, ...]]] = deque(maxlen=WINDOW + 2)
        self._sched_lr: list[tuple[int, tuple[float, ...]]] = []
        self._sched_before = False
        self._lock = threading.Lock()
        self.given_up = False  # more than MAX_SIGNATURES: nothing kept

    @property
    def steps(self) -> int:
        """Steps recorded."""
        return self._n

    @property
    def entries(self) -> int:
        """Entries kept (runs of alike steps)."""
        return len(self._key)

    def observe(self, metas: Iterable[_Meta]) -> None:
        """Add a window of steps (in order)."""
        with self._lock:
            self._observe(metas)

    def _observe(self, metas: Iterable[_Meta]) -> None:
        if self.given_up:
            return
        for m in metas:
            kinds = tuple((str(e[0]), str(e[2]) if len(e) > 2 else "") for e in m.events)
            life = self._lives.get(kinds)
            if life is None:
                if len(self._lives) >= MAX_LIFECYCLES:
                    self._lives.clear()  # events whose details vary: kept bounded
                text = sys.intern(lifecycle([(k, 0.0, d) for k, d in kinds]))
                life = self._lives[kinds] = (
                    text,
                    any(k in STATE_KINDS for k, _ in kinds),
                    SCHEDULER in words(text),
                )
            text, has_state, scheduled = life
            if has_state or self._state_key is None:
                apply_state(self._state, m.events)
                state = tuple(sorted(self._state.items()))
                self._state_key = self._states.setdefault(state, state)
            key: _Key = (text, bytes(m.has_grad), self._state_key)
            k = self._interned.get(key)
            if k is None:
                if len(self._keys) >= MAX_SIGNATURES:
                    self._give_up()
                    return
                k = self._interned[key] = len(self._keys)
                self._keys.append(key)
            self._add(k, m.step)
            self._recent.append((self._n, tuple(m.lr)))
            if self._sched_before:
                self._sched_lr = list(self._recent)
            self._sched_before = scheduled
            self._n += 1

    def _give_up(self) -> None:
        """More than MAX_SIGNATURES: free what was kept, keep nothing more."""
        self.given_up = True
        self._interned, self._keys, self._states, self._lives = {}, [], {}, {}
        self._key, self._count = array("I"), array("I")
        self._first, self._stride = array("q"), array("q")
        self._recent.clear()
        self._sched_lr = []

    def _add(self, k: int, step: int) -> None:
        """One step of signature ``k``: the last run grows when it has that signature and
        ``step`` keeps its stride, else a run starts."""
        if self._key and self._key[-1] == k:
            count = self._count[-1]
            stride = step - self._first[-1] if count == 1 else self._stride[-1]
            if self._first[-1] + count * stride == step:
                self._count[-1] = count + 1
                self._stride[-1] = stride
                return
        self._key.append(k)
        self._count.append(1)
        self._first.append(step)
        self._stride.append(1)

    def shapes(self) -> tuple[list[StepShape], list[int]]:
        """The recorded steps as shapes (only the tensors whose gradient varied, whose
        indices come second), with the learning rates kept."""
        keys = self._keys
        width = max((len(k[1]) for k in keys), default=0)
        varying = [
            j for j in range(width) if len({k[1][j] if j < len(k[1]) else False for k in keys}) > 1
        ]
        slim = [tuple(bool(k[1][j]) if j < len(k[1]) else False for j in varying) for k in keys]
        out: list[StepShape] = []
        for k, count, first, stride in zip(
            self._key, self._count, self._first, self._stride, strict=True
        ):
            life, grads, state = keys[k][0], slim[k], keys[k][2]
            out += [StepShape(first + i * stride, life, grads, state) for i in range(count)]
        for index, lr in self._sched_lr:
            s = out[index]
            out[index] = StepShape(s.step, s.lifecycle, s.has_grad, s.state, lr)
        return out, varying

    def within_bounds(self) -> bool:
        """Whether a close may judge these steps (MAX_STEPS, MAX_CELLS)."""
        if self.given_up:
            return False
        keys = self._keys
        width = max((len(k[1]) for k in keys), default=0)
        varied = sum(1 for j in range(width) if len({k[1][j : j + 1] for k in keys}) > 1)
        return self._n <= MAX_STEPS and len(self._key) * (1 + varied) <= MAX_CELLS

    def findings(self, label: str = "") -> list[dict[str, Any]]:
        """The structure findings of these steps (as :func:`timeline.changes` gives them)."""
        with self._lock:
            if self._n == 0 or self.given_up:
                return []
            shapes, varying = self.shapes()
        names = [self.names[j] for j in varying if j < len(self.names)]
        return changes(shapes, names, label)
