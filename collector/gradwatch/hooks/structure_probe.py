"""Records the parts of a step's structure that no other hook sees, stored on change only.

Read in the step pre-hook of every collected step (:mod:`gradwatch.hooks.optimizer`), from
attributes the training loop already keeps — no hook of its own, no device work:

* ``scheduler`` — an LR scheduler of this optimizer stepped since the previous collected
  step (its ``last_epoch`` moved): an *action* event of the step, like ``clip``;
* ``sched`` — which param groups each scheduler drives (``CosineAnnealingLR:0-1``);
* ``modes`` — the dropout/normalisation modules (those the ``eval-mode-training`` check
  follows) and the model itself that are in ``eval()`` mode as the step is taken;
* ``hparams`` — each param group's hyperparameters other than the scheduled learning rate
  (``g0.weight_decay=0.05``); a key that changed on more than ``SCHEDULED`` steps is a
  schedule's (OneCycleLR cycles momentum) and is followed no more;
* ``dtype`` — the parameters' and gradients' dtypes (looked at every ``DTYPE_EVERY`` steps);
* ``autocast`` — whether the step's training forwards ran under ``torch.autocast`` and to
  which dtype (``cpu bfloat16``, ``cuda float16``, ``off``): read once per training forward
  in the watched model's forward hook (:mod:`gradwatch.hooks.model`, the outermost call
  only: one ``torch.is_autocast_enabled`` call), for the device type of the model's first
  parameter; the step's value (two or more joined by `` + ``) is recorded here on change;
* ``scaler`` — with a GradScaler (passed to ``watch()`` or found by
  :mod:`gradwatch.session.ampdetect`): whether the gradients reaching
  ``step()`` were unscaled by it (``unscaled``), still scaled (``scaled``) or the scaler is
  disabled (``off``).

The state events are put first among the step's events, only when a value differs from
the last recorded one (the first collected step records them all); the readers
(:mod:`gradwatch.core.structure.signature`) carry a value forward until it changes. Schedulers
are found once, at the first collected step (and again when the group count changes),
among the objects that refer to the optimizer.
"""

from __future__ import annotations

import gc
import json
import operator
from typing import Any, Final, Protocol

import torch

from gradwatch.checks.view import Event, Pending


class _Watch(Protocol):
    """What the probe reads of its :class:`gradwatch.hooks.optimizer.OptimizerWatch`."""

    optimizer: torch.optim.Optimizer
    params: list[torch.Tensor]
    model_keys: list[str]
    run: Any  # .options.scaler
    checker: Any  # .engine.models, .engine.modes


#: param-group keys that are not structure: the tensors, the scheduled rate and its bounds
#: (``initial_lr``, the base rate a scheduler was built for, is kept: it tells a warm-up
#: that ended from a schedule cut short)
SKIP_KEYS: Final = frozenset({"params", "lr", "max_lr", "min_lr", "base_lr", "name"})
#: a hyperparameter that changed on more collected steps than this is driven by a schedule
SCHEDULED: Final = 20
#: collected steps between looks at every tensor's dtype (the first tensor's is looked at
#: on every step: ``model.to(dtype)`` changes it too)
DTYPE_EVERY: Final = 100


def _plain(value: Any) -> Any:
    """A hyperparameter as a JSON value (a one-element CPU tensor as its number)."""
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, torch.Tensor):
        return float(value) if value.numel() == 1 and value.device.type == "cpu" else "tensor"
    return type(value).__name__


def _ranges(indices: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``0-2,5``."""
    out: list[str] = []
    for i in indices:
        if out and int(out[-1].rsplit("-", 1)[-1]) == i - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ",".join(out)


def _driven(schedulers: list[Any], n_groups: int) -> str:
    """``CosineAnnealingLR:0-1``: the groups each scheduler sets (a scheduler sets the
    first ``len(base_lrs)`` groups; "" without any)."""
    parts = []
    for s in schedulers:
        width = len(getattr(s, "base_lrs", ()) or ()) or n_groups
        parts.append(f"{type(s).__name__}:{_ranges(list(range(min(width, n_groups))))}")
    return " ".join(parts)


def _find_schedulers(optimizer: object) -> list[Any]:
    """The LR schedulers whose ``optimizer`` is ``optimizer`` (anything with ``step`` and
    an integer ``last_epoch``), from the objects that refer to it (two heap scans: the
    referrers, then the owners of the referring ``__dict__``s)."""
    refs = gc.get_referrers(optimizer)
    dicts = [r for r in refs if isinstance(r, dict)]
    owners = [r for r in refs if not isinstance(r, dict)]
    if dicts:
        owners += gc.get_referrers(*dicts)
    found: list[Any] = []
    for owner in owners:
        if owner is optimizer or getattr(owner, "optimizer", None) is not optimizer:
            continue
        stepping = callable(getattr(owner, "step", None))
        new = all(owner is not f for f in found)
        if stepping and new and isinstance(getattr(owner, "last_epoch", None), int):
            found.append(owner)
    return found


class _GroupKeys:
    """One param group's followed hyperparameters, read in one C call (``itemgetter``) and
    compared as a tuple: the common step's whole look at a group."""

    __slots__ = ("get", "group", "size", "values")

    def __init__(self, group: dict[str, Any], keys: list[str]) -> None:
        self.group = group
        self.size = len(group)
        self.get = operator.itemgetter(*keys, "params")  # params: a tuple even for one key
        self.values = self.get(group)

    def same(self, group: dict[str, Any]) -> bool:
        if group is not self.group or len(group) != self.size:
            return False
        try:
            return bool(self.get(group) == self.values)
        except Exception:  # a key gone, a tensor compared elementwise: the full look
            return False


class StructureProbe:
    """One optimizer's structure facts, written as events when they change. The common
    step costs a few attribute reads and one tuple comparison per param group."""

    def __init__(self, watch: _Watch) -> None:
        self.w = watch
        self._last: dict[str, str] = {}  # state kind -> last recorded value
        self._schedulers: list[Any] = []
        self._epochs: list[int] = []
        self._driven = ""
        self._n_groups = -1
        self._hp: dict[str, Any] = {}  # "g0.weight_decay" -> last value
        self._hp_changes: dict[str, int] = {}
        self._fast: list[_GroupKeys] = []
        self._followed: list[tuple[str, Any]] | None = None  # (label, module) for modes
        self._dtype_of: tuple[Any, Any] = (None, None)  # the first tensor's and its grad's
        self._samples = 0

    def sample(self, pending: Pending) -> None:
        """Put this step's changed structure facts first among ``pending``'s events."""
        groups = self.w.optimizer.param_groups
        if len(groups) != self._n_groups:
            self._n_groups = len(groups)
            self._schedulers = _find_schedulers(self.w.optimizer)
            self._epochs = [s.last_epoch for s in self._schedulers]
            self._driven = _driven(self._schedulers, len(groups))
        events: list[Event] = []
        if self._schedulers:
            stepped = self._stepped()
            if stepped:
                events.append(("scheduler", 0.0, stepped))
        self._state(events, "sched", self._driven)
        self._state(events, "modes", self._modes())
        fast = self._fast
        if len(fast) != len(groups) or not all(
            k.same(g) for k, g in zip(fast, groups, strict=True)
        ):
            hp = self._hparams(groups)
            if hp:
                events.append(("hparams", 0.0, hp))
        if self._dtype_moved() or self._samples % DTYPE_EVERY == 0:
            self._state(events, "dtype", self._dtypes())
        if pending.autocast is not None:  # None: no training forward of a watched model seen
            self._state(events, "autocast", pending.autocast)
        scaler = self.w.run.options.scaler  # adopted later when found (session.ampdetect)
        if scaler is not None:
            self._state(events, "scaler", _scaler_state(scaler, self.w.optimizer))
        self._samples += 1
        if events:  # at most one per kind: bounded without MAX_EVENTS
            pending.events[0:0] = events

    def _state(self, events: list[Event], kind: str, value: str) -> None:
        if self._last.get(kind) != value:
            self._last[kind] = value
            events.append((kind, 0.0, value))

    def _stepped(self) -> str:
        """The class names of the schedulers whose ``last_epoch`` moved since the last look."""
        names: list[str] = []
        for k, s in enumerate(self._schedulers or ()):
            epoch = s.last_epoch
            if epoch != self._epochs[k]:
                self._epochs[k] = epoch
                names.append(type(s).__name__)
        return ",".join(names)

    def _modes(self) -> str:
        """The followed dropout/normalisation modules in eval() (``name:Class``, sorted),
        and ``<model>`` for a watched model itself in eval()."""
        followed = self._followed
        if followed is None:
            followed = self._followed = self._follow()
        off = [label for label, m in followed if not m.training]
        return ",".join(sorted(off)) if off else ""

    def _follow(self) -> list[tuple[str, Any]]:
        """(label, module) of every watched model and of its followed modules."""
        engine = self.w.checker.engine
        out: list[tuple[str, Any]] = []
        for key in self.w.model_keys:
            prefix = f"{key}." if key else ""
            root = engine.models.get(key)
            if root is not None:
                out.append((f"{prefix}<model>", root))
            out += [(f"{prefix}{n}:{type(m).__name__}", m) for n, m in engine.modes.get(key, ())]
        return out

    def _hparams(self, groups: list[dict[str, Any]]) -> str:
        """The changed non-LR hyperparameters as JSON (``{"g0.weight_decay": 0.0}``), ""
        when none changed; a key that changed on more than SCHEDULED steps is dropped."""
        changed: dict[str, Any] = {}
        seen: set[str] = set()
        for g, group in enumerate(groups):
            for key, value in group.items():
                if key in SKIP_KEYS:
                    continue
                name = f"g{g}.{key}"
                seen.add(name)
                count = self._hp_changes.get(name, 0)
                if count > SCHEDULED:
                    continue
                plain = _plain(value)
                if name in self._hp and self._hp[name] == plain:
                    continue
                if name in self._hp:
                    self._hp_changes[name] = count + 1
                    if count + 1 > SCHEDULED:
                        plain = "scheduled"
                self._hp[name] = plain
                changed[name] = plain
        for name in [n for n in self._hp if n not in seen]:  # a group removed
            del self._hp[name]
            changed[name] = None
        self._fast = [
            _GroupKeys(
                group,
                [
                    k
                    for k in group
                    if k not in SKIP_KEYS and self._hp_changes.get(f"g{g}.{k}", 0) <= SCHEDULED
                ],
            )
            for g, group in enumerate(groups)
        ]
        return json.dumps(changed, sort_keys=True) if changed else ""

    def _dtype_moved(self) -> bool:
        """Whether the first tensor's dtype or its gradient's differs from the last look
        (``model.to(dtype)`` converts every tensor: the others are looked at then)."""
        params = self.w.params
        if not params:
            return False
        grad = params[0].grad
        now = (params[0].dtype, None if grad is None else grad.dtype)
        if now == self._dtype_of:
            return False
        self._dtype_of = now
        return True

    def _dtypes(self) -> str:
        """``params float32; grads float32`` (each the sorted set of dtypes present)."""
        params = self.w.params
        p = sorted({str(t.dtype).removeprefix("torch.") for t in params})
        g = sorted({str(t.grad.dtype).removeprefix("torch.") for t in params if t.grad is not None})
        return f"params {','.join(p)}; grads {','.join(g) or '-'}"


def _scaler_state(scaler: Any, optimizer: object) -> str:
    """``off`` (scaler disabled), ``unscaled`` (its unscale_ ran for this optimizer, as
    ``scaler.step`` does) or ``scaled`` (``optimizer.step()`` called on scaled gradients)."""
    if not scaler.is_enabled():
        return "off"
    state = scaler._per_optimizer_states.get(id(optimizer))
    stage = None if state is None else state.get("stage")
    return "unscaled" if getattr(stage, "value", 0) >= 1 else "scaled"


#: torch ≥ 2.4 asks about any device type in one call
_BY_DEVICE: Final = hasattr(torch, "get_autocast_dtype")
#: training forwards between two looks at the first parameter's device type (reading it
#: costs more than the autocast call; a model moved mid-run is seen this many forwards late)
DEVICE_EVERY: Final = 32


def _autocast_on(device: str) -> tuple[bool, Any]:
    """Whether autocast is on for ``device`` (a device type) and its dtype (torch ≥ 2.4: one
    call for any device type; torch 2.3: the CUDA and CPU calls)."""
    if _BY_DEVICE:
        if not torch.is_autocast_enabled(device):
            return False, None
        return True, torch.get_autocast_dtype(device)
    if device == "cpu":  # pragma: no cover - torch 2.3
        return torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype()
    return torch.is_autocast_enabled(), torch.get_autocast_gpu_dtype()  # pragma: no cover


_AUTOCAST_TEXT: dict[tuple[str, Any], str] = {}


def autocast_state(device: str) -> str:
    """``off``, or the device type and dtype autocast runs ``device``'s operations in
    (``cuda float16``): what a forward that runs now runs under."""
    on, dtype = _autocast_on(device)
    if not on:
        return "off"
    key = (device, dtype)
    text = _AUTOCAST_TEXT.get(key)
    if text is None:
        text = _AUTOCAST_TEXT[key] = f"{device} {str(dtype).removeprefix('torch.')}"
    return text


def join_autocast(seen: str | None, state: str) -> str:
    """The autocast state of a step whose forwards so far ran under ``seen`` (None: none
    yet), after one more under ``state``: the distinct states, sorted, joined by `` + ``."""
    if seen is None:
        return state
    parts = set(seen.split(" + "))
    parts.add(state)
    return " + ".join(sorted(parts))
