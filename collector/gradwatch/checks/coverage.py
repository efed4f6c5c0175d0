"""Parameter coverage checks: ``param-no-grad``, ``param-not-in-optimizer``,
``frozen-param-in-optimizer``, ``param-not-updated``, ``frozen-param-changed``,
``param-mutated-outside-step``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from fnmatch import fnmatch
from typing import Protocol

import torch

from gradwatch.checks.findings import Action, FindingSink, finding, listing
from gradwatch.checks.fmt import counted
from gradwatch.checks.twins import Copy
from gradwatch.checks.view import StepView, held_for
from gradwatch.core import checkids
from gradwatch.core.contract import Severity

PERSIST_STEPS = 3  # param-no-grad and param-not-updated must hold this many steps in a row
#: optimizer steps a never-used parameter (its module did not run in a training forward)
#: waits before ``param-no-grad`` says so, as info
UNUSED_STEPS = 20
FROZEN_HORIZON = 1000  # steps a tensor may stay frozen in an optimizer before a warning
#: steps in a row with no tensor in the condition before an episode of ``param-no-grad`` or
#: ``param-not-updated`` ends (tensors that flicker in and out of it are one episode)
EPISODE_CALM = 20


class ModuleRuns(Protocol):
    """Whether the module that owns a parameter ran in a training forward, followed only
    for the parameters a check asks about (:class:`gradwatch.hooks.module_runs.ModuleRuns`)."""

    def ran(self, optimizer: int, index: int, step: int) -> bool | None:
        """Whether the module of tensor ``index`` ran in a training forward of ``step``;
        ``None`` when there is no such evidence."""
        ...


class CoverageChecks:
    """Coverage checks of one run; per-tensor streaks are kept per optimizer."""

    def __init__(self, sink: FindingSink, allow_mutation: Iterable[str] = ()) -> None:
        self.sink = sink
        self.allow_mutation = tuple(allow_mutation)
        self._no_grad: dict[int, torch.Tensor] = {}
        #: per optimizer: tensors that have had a non-zero gradient at least once (until all
        #: have: then the optimizer is in ``_all_trained``); a tensor that has is conditional
        #: computation when it misses one
        self._ever: dict[int, torch.Tensor] = {}
        self._all_trained: set[int] = set()
        #: per optimizer: steps in a row each never-trained tensor's module ran in forward
        self._ran: dict[int, torch.Tensor] = {}
        self._unused: dict[int, set[int]] = {}  # tensors reported unused (info), per optimizer
        self._all_zero: dict[int, int] = {}  # steps in a row with every gradient exactly zero
        #: optimizers whose all-zero gradients were said: once per run (a learning rate that
        #: saturates the model makes them come and go, and each return is the same problem)
        self._all_zero_said: set[int] = set()
        self._all_zero_open: set[int] = set()  # in the episode that was said
        #: optimizers whose all-zero streak has had a loss of exactly 0 at every step
        self._all_zero_flat: set[int] = set()
        #: (optimizer, tensor): the loss does not depend on it (reported once, as info)
        self._invariant_of: set[tuple[int, int]] = set()
        self._sibling_cache: dict[int, tuple[list[str], list[list[int]]]] = {}
        #: which modules ran in forward (set by the run; None: no such evidence, as in a
        #: replay of rows, and a never-trained tensor is then only ever called unused)
        self.runs: ModuleRuns | None = None
        self._not_updated: dict[int, torch.Tensor] = {}
        #: per optimizer: the latest non-zero update norm of each tensor and the learning
        #: rate it had then (the latest step's own values while every tensor moves)
        self._last_move: dict[int, tuple[torch.Tensor, torch.Tensor | list[float]]] = {}
        self._frozen_since: dict[tuple[int, int], int] = {}
        self._trained: set[tuple[int, int]] = set()
        self._not_in_optimizer: str | None = None  # the open episode's key
        self._calm: dict[tuple[str, int], int] = {}  # open episodes: calm steps so far
        #: told which tensors stopped moving before ``param-not-updated`` reports them, so
        #: a learning rate that collapsed to ~0 is reported first, as their cause (set by
        #: the check engine: :meth:`gradwatch.checks.lr.LrChecks.stalled`)
        self.stalled: Callable[[StepView, list[int]], bool] | None = None

    # -- host facts -----------------------------------------------------------------------
    def not_in_optimizer(self, names: list[str], step: int) -> None:
        """Trainable tensors of the watched models that no watched optimizer holds: one
        finding listing them."""
        # its own episode key: the connectivity check reports unregistered tensors under
        # this id too (gradwatch.hooks.connectivity), which this must neither join nor end
        key = self._not_in_optimizer
        if not names:
            if key is not None:
                self.sink.clear(checkids.PARAM_NOT_IN_OPTIMIZER, key)
            self._not_in_optimizer = None
            return
        key = self._not_in_optimizer = key or names[0]
        self.sink.report(
            finding(
                checkids.PARAM_NOT_IN_OPTIMIZER,
                step,
                f"{_these(names, verb='is')} in no optimizer, so "
                f"{'it never trains' if len(names) == 1 else 'they never train'} (a layer "
                "replaced after the optimizer was built, or submodules kept in a plain list?).",
                "build the optimizer after the model is final, register submodules with "
                "nn.ModuleList/ModuleDict, or set requires_grad=False if it is meant to be "
                "frozen.",
                param=key,
                details={"param": key, "count": len(names), "tensors": names},
            )
        )

    def frozen_base(self, names: list[str], adapters: int, step: int) -> None:
        """Info: the optimizers hold exactly a model's ``adapters`` parametrization tensors,
        and ``names`` (the rest, still ``requires_grad=True``) are the base they fine-tune,
        frozen by design (:func:`gradwatch.checks.twins.adapters_only`)."""
        self.sink.report(
            finding(
                checkids.PARAM_NOT_IN_OPTIMIZER,
                step,
                f"{_these(names, verb='is')} in no optimizer while the optimizer holds "
                f"exactly the {counted(adapters, 'tensor')} of the registered "
                "parametrizations (adapters such as LoRA): the base they fine-tune, frozen "
                "by design, though it still requires a gradient.",
                "call requires_grad_(False) on the base tensors: backward then skips their "
                "gradients, which nothing uses.",
                severity="info",
                param=f"base: {names[0]}",
                details={"count": len(names), "tensors": names, "adapter_tensors": adapters},
            )
        )

    def copies_kept(self, copies: Sequence[Copy], step: int) -> None:
        """Info, per module: a copy of a trained module that no optimizer holds and the
        loss does not reach, kept in step by hand (:func:`gradwatch.checks.twins.copies`)."""
        for copy in copies:
            name = type(copy.module).__name__
            what = (
                "a module run frozen for its outputs (a teacher, a fixed encoder): its layers "
                "are like trained ones, but it copies none of them"
                if copy.original is None
                else f"a copy of `{copy.original}`, which trains — a target network or an EMA "
                "copy, updated by hand"
            )
            self.sink.report(
                finding(
                    checkids.PARAM_NOT_IN_OPTIMIZER,
                    step,
                    f"`{copy.path}` ({name}) is in no optimizer, and the loss does not reach "
                    f"it: {what}.",
                    "nothing to fix; call requires_grad_(False) on it to say so (its "
                    "forward then records no graph).",
                    severity="info",
                    param=f"copy: {copy.path}",
                    details={"held_by": copy.path, "copy_of": copy.original, "class": name},
                )
            )

    def frozen(self, v: StepView, *, final: bool = False) -> None:
        """``frozen-param-in-optimizer``: info while frozen, warning past the horizon; one
        finding per severity listing the tensors."""
        info: list[int] = []
        late: list[int] = []
        for i in v.order:
            key = (v.optimizer, i)
            if v.requires_grad[i]:
                self._trained.add(key)
                self._frozen_since.pop(key, None)
                continue
            since = self._frozen_since.setdefault(key, v.step)
            frozen_for = v.step - since
            is_late = key not in self._trained and (final or frozen_for >= FROZEN_HORIZON)
            (late if is_late else info).append(i)
        for held, is_late in ((info, False), (late, True)):
            if not held:
                continue
            names = [v.names[i] for i in held]
            since = min(self._frozen_since[(v.optimizer, i)] for i in held)
            frozen_for = v.step - since
            self.sink.report(
                finding(
                    checkids.FROZEN_PARAM_IN_OPTIMIZER,
                    v.step,
                    f"{_these(names, verb='has')} requires_grad=False but "
                    f"{'sits' if len(names) == 1 else 'sit'} in optimizer {v.optimizer}"
                    + (
                        f" and {'has' if len(names) == 1 else 'have'} not trained for "
                        f"{frozen_for} steps."
                        if is_late
                        else " (fine while meant to stay frozen for now)."
                    ),
                    "if it should train, set requires_grad=True before training; if it should "
                    "stay frozen, leave it out of the optimizer.",
                    severity="warning" if is_late else "info",
                    param=names[0],
                    optimizer=v.optimizer,
                    details={
                        "frozen_since_step": since,
                        "frozen_for_steps": frozen_for,
                        "count": len(names),
                        "tensors": names,
                    },
                )
            )

    def no_grad_streak(self, optimizer: int) -> bool:
        """Whether a ``param-no-grad`` streak or episode of ``optimizer`` is running."""
        return (
            optimizer in self._no_grad
            or optimizer in self._all_zero
            or optimizer in self._ever
            or (checkids.PARAM_NO_GRAD, optimizer) in self._calm
        )

    def all_had_grad(self, optimizer: int) -> None:
        """Rows taken at once (every tensor had a non-zero gradient on each): nothing to
        check, only the history of which tensors ever had a gradient to keep."""
        self._all_trained.add(optimizer)
        self._ever.pop(optimizer, None)
        self._all_zero_ends(optimizer)

    def not_updated_streak(self, optimizer: int) -> bool:
        """Whether a ``param-not-updated`` streak or episode of ``optimizer`` is running."""
        return (
            optimizer in self._not_updated or (checkids.PARAM_NOT_UPDATED, optimizer) in self._calm
        )

    def _episode(self, check: str, optimizer: int, names: list[str]) -> str | None:
        """:meth:`FindingSink.episode` with hysteresis: an open episode ends only after
        ``EPISODE_CALM`` steps in a row with no tensor in the condition."""
        key = (check, optimizer)
        if names:
            self._calm[key] = 0
            return self.sink.episode(check, optimizer, names)
        calm = self._calm.get(key)
        if calm is None:
            self.sink.settle(check, optimizer, set())
        elif calm + 1 >= EPISODE_CALM:
            del self._calm[key]
            self.sink.settle(check, optimizer, set())
        else:
            self._calm[key] = calm + 1
        return None

    # -- values ---------------------------------------------------------------------------
    def no_grad(self, v: StepView) -> list[Action]:
        """``param-no-grad``. Invariant: a trainable tensor whose module runs in the
        training forward gets a gradient. Evidence, per tensor: it has never had a non-zero
        gradient, and its module ran in a training forward on ``PERSIST_STEPS`` steps in a
        row (a tensor that had a gradient before and misses some is conditional
        computation: routed experts, task heads used in turn — quiet; one whose module never
        ran is unused: info after ``UNUSED_STEPS``). Per optimizer: every gradient present
        but exactly zero ``PERSIST_STEPS`` steps in a row is an error (nothing trains)."""
        assert v.grad_norm is not None
        o = v.optimizer
        streak = self._no_grad.get(o)
        if streak is None and all(v.has_grad) and bool((v.grad_norm != 0).all()):
            self.all_had_grad(o)
            self._episode(checkids.PARAM_NO_GRAD, o, [])
            return []  # the common case: every tensor got a gradient
        if self._all_zero_now(v):
            return self._all_zero_report(v)
        self._all_zero_ends(o)
        nonzero = v.grad_norm != 0
        invariant = self._invariant_now(v, nonzero)
        has = v.has_grad_t & (nonzero | invariant)
        ever = self._ever.get(o)
        if o in self._all_trained:
            ever = torch.ones_like(has)
        elif ever is None or ever.shape != has.shape:
            ever = has
        else:
            ever = ever | has
        if bool((ever | ~v.trainable_t).all()):
            self.all_had_grad(o)
        else:
            self._ever[o] = ever
        never = v.trainable_t & ~ever & bool(has.any())
        streak = held_for(streak, never)
        # a gradient tensor (even all zero) says the backward pass reached it: it was used
        ran = held_for(self._ran.get(o), never & (v.has_grad_t | self._ran_now(v, never)))
        for held, store in ((streak, self._no_grad), (ran, self._ran)):
            if bool(held.any()):
                store[o] = held
            else:
                store.pop(o, None)
        self._unused_report(v, streak, ran)
        bad = _in_order(torch.nonzero(ran >= PERSIST_STEPS).flatten().tolist(), v.order)
        key = self._episode(checkids.PARAM_NO_GRAD, o, [v.names[i] for i in bad])
        if key is None:
            return []
        zero = [i for i in bad if v.has_grad[i]]
        return [
            self.sink.report(
                finding(
                    checkids.PARAM_NO_GRAD,
                    v.step,
                    *_no_grad_text(
                        [v.names[i] for i in bad], int(ran[bad[0]]), len(zero), len(bad)
                    ),
                    param=key,
                    optimizer=o,
                    details={
                        "steps_without_grad": int(ran[bad[0]]),
                        "has_grad": v.has_grad[bad[0]],
                        "count": len(bad),
                        "tensors": [v.names[i] for i in bad],
                        "zero_grad": [v.names[i] for i in zero],
                    },
                )
            )
        ]

    def _invariant_now(self, v: StepView, nonzero: torch.Tensor) -> torch.Tensor:
        """Per tensor: it is a module's additive shift (its ``bias``), its gradient exists
        and is exactly zero, while another tensor of the same module has a non-zero one.
        The backward pass reached the module's output with a signal, so the bias is not cut
        off; its gradient is the sum of that signal over the batch, which is zero when the
        loss does not change under a constant shift of the output (a difference of means,
        as a Wasserstein or relativistic critic's last bias, or a normalisation after it).
        Said once, as info; it counts as trained."""
        zero = v.has_grad_t & ~nonzero & v.trainable_t
        if not bool(zero.any()):
            return zero
        found = torch.zeros_like(zero)
        siblings = self._siblings(v.names)
        for i in torch.nonzero(zero).flatten().tolist():
            # only a shift: a weight's zero gradient beside a live bias means its inputs
            # are all zero (dead units before it, an empty batch), which is worth a warning
            shift = v.names[i].rpartition(".")[2] == "bias"
            found[i] = shift and any(bool(nonzero[j]) for j in siblings[i])
        o = v.optimizer
        new = [
            i for i in torch.nonzero(found).flatten().tolist() if (o, i) not in self._invariant_of
        ]
        if new:
            self._invariant_of.update((o, i) for i in new)
            self._invariant_report(v, _in_order(new, v.order))
        return found

    def _siblings(self, names: list[str]) -> list[list[int]]:
        """Per tensor: the other tensors of its module (same name up to the last dot)."""
        cached = self._sibling_cache.get(id(names))
        if cached is not None and cached[0] is names:
            return cached[1]
        by_module: dict[str, list[int]] = {}
        for i, name in enumerate(names):
            by_module.setdefault(name.rpartition(".")[0], []).append(i)
        module = [name.rpartition(".")[0] for name in names]
        found = [[j for j in by_module[m] if j != i] for i, m in enumerate(module)]
        self._sibling_cache[id(names)] = (names, found)
        return found

    def _invariant_report(self, v: StepView, new: list[int]) -> None:
        """Info, once per tensor: the loss is invariant to it (:meth:`_invariant_now`)."""
        names = [v.names[i] for i in new]
        one = len(names) == 1
        self.sink.report(
            finding(
                checkids.PARAM_NO_GRAD,
                v.step,
                f"{_these(names)} an exactly zero gradient while the rest of "
                f"{'its' if one else 'their'} module trains: the loss does not depend on "
                f"{'it' if one else 'them'} (a bias under a difference of means, or one a "
                "normalisation after it removes), so nothing is cut off.",
                "nothing to fix; the layer could be built with bias=False, since training "
                "never changes this tensor.",
                severity="info",
                param=names[0],
                optimizer=v.optimizer,
                details={"count": len(names), "tensors": names, "invariant": True},
            )
        )

    def invariant(self, optimizer: int, size: int) -> torch.Tensor:
        """Per tensor of ``optimizer``: whether an exactly zero gradient of it is expected
        (the loss does not depend on it, :meth:`_invariant_now`), for the row checks."""
        quiet = torch.zeros(size, dtype=torch.bool)
        for o, i in self._invariant_of:
            if o == optimizer and i < size:
                quiet[i] = True
        return quiet

    def _ran_now(self, v: StepView, never: torch.Tensor) -> torch.Tensor:
        """Per tensor: whether its module ran in a training forward of this step (asked
        only for the never-trained tensors)."""
        ran = torch.zeros_like(never)
        if self.runs is None or not bool(never.any()):
            return ran
        for i in torch.nonzero(never).flatten().tolist():
            ran[i] = bool(self.runs.ran(v.optimizer, i, v.step))
        return ran

    def _unused_report(self, v: StepView, streak: torch.Tensor, ran: torch.Tensor) -> None:
        """Info, once per tensor: no gradient for ``UNUSED_STEPS`` steps while its module
        did not run in a training forward ``PERSIST_STEPS`` steps in a row."""
        done = self._unused.setdefault(v.optimizer, set())
        late = (streak >= UNUSED_STEPS) & (ran < PERSIST_STEPS)
        new = [i for i in torch.nonzero(late).flatten().tolist() if i not in done]
        if not new:
            return
        done.update(new)
        new = _in_order(new, v.order)
        names = [v.names[i] for i in new]
        one = len(names) == 1
        who = "this trainable parameter" if one else f"{len(names)} trainable parameters"
        self.sink.report(
            finding(
                checkids.PARAM_NO_GRAD,
                v.step,
                f"{who}{'' if one else f' ({listing(names)})'} "
                f"{'has' if one else 'have'} had no gradient for {UNUSED_STEPS} steps and "
                f"{'its' if one else 'their'} module did not run in the training forward: "
                "unused (fine if meant to be).",
                "if it should train, call its module in forward(); otherwise leave it out of "
                "the model or the optimizer.",
                severity="info",
                param=names[0],
                optimizer=v.optimizer,
                details={
                    "steps_without_grad": int(streak[new[0]]),
                    "count": len(names),
                    "tensors": names,
                },
            )
        )

    def _all_zero_now(self, v: StepView) -> bool:
        """Every trainable tensor has a gradient and each is exactly zero, after a backward
        pass (a clear between the backward and the step is ``grad-zeroed-before-step``)."""
        assert v.grad_norm is not None
        trainable = v.trainable_t
        if v.n_backward == 0 or not bool(trainable.any()):
            return False
        if not bool(v.has_grad_t[trainable].all()) or bool((v.grad_norm[trainable] != 0).any()):
            return False
        after = [e[0] for e in v.events if e[0] in ("backward", "zero_grad")]
        return not after or after[-1] == "backward"

    def _all_zero_ends(self, o: int) -> None:
        """A step of ``o`` with some non-zero gradient: an all-zero streak ends (the episode
        that was said, for good)."""
        self._all_zero.pop(o, None)
        self._all_zero_flat.discard(o)
        if o in self._all_zero_open:
            self._all_zero_open.discard(o)
            self._all_zero_said.add(o)

    def _all_zero_report(self, v: StepView) -> list[Action]:
        o = v.optimizer
        held = self._all_zero[o] = self._all_zero.get(o, 0) + 1
        # a loss of exactly 0 (a hinge or margin loss with every sample past its margin) has
        # a zero gradient itself: the gradients are right, nothing edits or cuts them
        if v.loss == 0.0 and (held == 1 or o in self._all_zero_flat):
            self._all_zero_flat.add(o)
        else:
            self._all_zero_flat.discard(o)
        if held < PERSIST_STEPS or o in self._all_zero_said:
            return []  # not yet; or its first episode ended: a return of the same problem
        self._all_zero_open.add(o)
        names = [v.names[i] for i in v.order if v.requires_grad[i]]
        details = {"steps_all_zero": held, "count": len(names), "tensors": names}
        severity: Severity
        if o in self._all_zero_flat:
            message = (
                f"every gradient of optimizer {o} has been exactly zero for {held} steps "
                "because the loss itself has been exactly 0 (a hinge or margin loss with every "
                "sample past its margin, or a loss clamped at 0): the parameters do not change."
            )
            hint = (
                "nothing cuts the gradients; the model has saturated its loss (a "
                "discriminator far ahead of its generator, a margin the data clears at once): "
                "if it lasts, weaken the model, widen the margin or use larger batches."
            )
            severity = "warning"
            details["loss"] = 0.0
        else:
            message = (
                f"every gradient of optimizer {o} has been exactly zero for {held} "
                "steps; the parameters do not change — a clip value of 0 or a mask that "
                "zeroes everything?"
            )
            hint = (
                "look at what edits the gradients between backward() and step() "
                "(clip_grad_value_ with clip_value=0, a gradient mask, a loss multiplied "
                "by 0)."
            )
            severity = "error"
        return [
            self.sink.report(
                finding(
                    checkids.PARAM_NO_GRAD,
                    v.step,
                    message,
                    hint,
                    severity=severity,
                    param=names[0],
                    optimizer=o,
                    details=details,
                )
            )
        ]

    def after_update(self, v: StepView) -> None:
        """``param-not-updated`` and ``frozen-param-changed`` from the update norms."""
        assert v.update_norm is not None and v.grad_norm is not None
        g = v.grad_norm
        frozen = not all(v.requires_grad)
        if (
            v.optimizer not in self._not_updated
            and (checkids.PARAM_NOT_UPDATED, v.optimizer) not in self._calm
            and not frozen
            and not bool((v.update_norm == 0).any())
        ):
            self.moved(v.optimizer, v.update_norm, v.lr)
            return  # the common case: every tensor moved, none is frozen
        finite = torch.isfinite(g)
        top = float(g[finite].max()) if bool(finite.any()) else 0.0
        # an update of a gradient ~1e-4× the largest one can round to zero: not "stuck"
        stuck = (g > 1e-4 * top) & finite & (v.update_norm == 0)
        below = self._below_resolution(v) if bool(stuck.any()) else None
        self._remember_moves(v)
        streak = self._not_updated.get(v.optimizer)
        streak = held_for(streak, stuck)
        if bool(streak.any()):
            self._not_updated[v.optimizer] = streak
        else:
            self._not_updated.pop(v.optimizer, None)
        if self.sink.enabled(checkids.PARAM_NOT_UPDATED):
            self._not_updated_report(v, streak, below)
        changed = ~v.trainable_t & (v.update_norm > 0)
        if frozen and self.sink.enabled(checkids.FROZEN_PARAM_CHANGED) and bool(changed.any()):
            moved = _in_order(torch.nonzero(changed).flatten().tolist(), v.order)
            names = [v.names[i] for i in moved]
            key = self.sink.episode(checkids.FROZEN_PARAM_CHANGED, v.optimizer, names)
            self.sink.report(
                finding(
                    checkids.FROZEN_PARAM_CHANGED,
                    v.step,
                    f"{_these(names)} requires_grad=False but the optimizer changed "
                    f"{'it' if len(names) == 1 else 'them'} (weight decay or momentum acting "
                    "on a frozen tensor).",
                    "leave frozen tensors out of the optimizer, or set weight_decay=0 for them.",
                    param=key,
                    optimizer=v.optimizer,
                    details={
                        "update_norm": float(v.update_norm[moved[0]]),
                        "count": len(names),
                        "tensors": {v.names[i]: float(v.update_norm[i]) for i in moved},
                    },
                )
            )

    def moved(self, optimizer: int, update: torch.Tensor, lr: list[float]) -> None:
        """A step (or a row taken at once) on which every tensor of ``optimizer`` moved:
        its update norms and learning rates are the latest moves of all (kept as they are,
        no copy; made per tensor only when some tensor stops moving)."""
        self._last_move[optimizer] = (update, lr)

    def _moves(self, v: StepView) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Per tensor of ``v.optimizer``: the norm of its latest non-zero update and the
        learning rate of its group at that step (0 where it never moved); None before any."""
        last = self._last_move.get(v.optimizer)
        if last is None or v.update_norm is None or last[0].shape != v.update_norm.shape:
            return None
        update, lr = last
        if isinstance(lr, list):
            lr = _per_tensor(lr, v.group_of, len(v.names))
            self._last_move[v.optimizer] = (update, lr)
        return update, lr

    def _remember_moves(self, v: StepView) -> None:
        """Keep, per tensor, its latest non-zero update and the learning rate it had."""
        assert v.update_norm is not None
        moved = v.update_norm > 0
        lr = _per_tensor(v.lr, v.group_of, len(v.names))
        last = self._moves(v)
        if last is None:
            self._last_move[v.optimizer] = (
                torch.where(moved, v.update_norm, 0.0),
                torch.where(moved, lr, 0.0),
            )
            return
        self._last_move[v.optimizer] = (
            torch.where(moved, v.update_norm, last[0]),
            torch.where(moved, lr, last[1]),
        )

    def _below_resolution(self, v: StepView) -> torch.Tensor:
        """Per tensor: an update of it now would be below its float resolution, so it
        rounds away and the tensor does not change — not stuck. The optimizer's latest
        non-zero update of the tensor, scaled by how much its learning rate has fallen
        since (a schedule ending near zero), is at most ``eps(dtype) · ‖θ‖``: steps of
        about one unit in the last place, which round to nothing once smaller. A rate of
        exactly 0, and a tensor that never moved, are no such evidence."""
        assert v.update_norm is not None and v.param_norm is not None
        last = self._moves(v)
        if last is None or not v.group_of:
            return torch.zeros_like(v.update_norm, dtype=torch.bool)
        update, then = last
        now = _per_tensor(v.lr, v.group_of, len(v.names))
        eps = torch.tensor(v.eps, dtype=torch.float64) if len(v.eps) == len(v.names) else _F32
        expected = update * now / then.clamp_min(torch.finfo(torch.float64).tiny)
        known = (then > 0) & (now > 0) & (update > 0)
        return known & (expected <= eps * v.param_norm)

    def _not_updated_report(
        self, v: StepView, streak: torch.Tensor, below: torch.Tensor | None
    ) -> None:
        """``param-not-updated``: one finding per episode, listing the stuck tensors
        (``below``: per tensor, whether its update is below its float resolution because
        its learning rate fell, :meth:`_below_resolution`)."""
        assert v.grad_norm is not None
        stuck = _in_order(torch.nonzero(streak >= PERSIST_STEPS).flatten().tolist(), v.order)
        # a collapsed learning rate is the cause: named first; a rate at its floor for too
        # few steps to be a collapse (a schedule ending with the run) explains them
        if stuck and self.stalled is not None and self.stalled(v, stuck):
            return
        if below is not None and not self.sink.active(checkids.LR_COLLAPSE, v.optimizer):
            # no collapse: a rate that fell until the updates round away (the last steps of
            # a schedule sized to the run) is no stuck tensor; under a collapse they are
            # its consequence, and said so
            stuck = [i for i in stuck if not bool(below[i])]
        names = [v.names[i] for i in stuck]
        key = self._episode(checkids.PARAM_NOT_UPDATED, v.optimizer, names)
        if key is None:
            return
        i = stuck[0]
        lr = v.lr[v.group_of[i]] if v.group_of else None
        self.sink.report(
            finding(
                checkids.PARAM_NOT_UPDATED,
                v.step,
                f"{_these(names, verb='had')} a non-zero gradient but did not change for "
                f"{int(streak[i])} steps.",
                "check its param group's learning rate (0?) and that the optimizer holds "
                "this exact tensor.",
                param=key,
                optimizer=v.optimizer,
                details={
                    "grad_norm": float(v.grad_norm[i]),
                    "lr": lr,
                    "count": len(names),
                    "tensors": names,
                },
            )
        )

    def mutated(
        self,
        v: StepView,
        previous: torch.Tensor | None,
        now: torch.Tensor,
        stepped: set[int] = frozenset(),  # type: ignore[assignment]
    ) -> None:
        """``param-mutated-outside-step``: the norm of θ changed between two steps
        (``stepped``: tensors another optimizer holding them stepped since: not edits)."""
        if previous is None or previous.shape != now.shape or torch.equal(previous, now):
            return  # torch.equal: one op and no copy in the common case (nothing changed)
        changed = (previous != now) & torch.isfinite(previous) & torch.isfinite(now)
        edited = [
            i
            for i in _in_order(torch.nonzero(changed).flatten().tolist(), v.order)
            if i not in stepped
            and not any(fnmatch(v.names[i], pattern) for pattern in self.allow_mutation)
        ]
        if not edited:
            return
        names = [v.names[i] for i in edited]
        key = self.sink.episode(checkids.PARAM_MUTATED_OUTSIDE_STEP, v.optimizer, names)
        first = edited[0]
        self.sink.report(
            finding(
                checkids.PARAM_MUTATED_OUTSIDE_STEP,
                v.step,
                f"{_these(names, verb='changed')} between two optimizer steps without a step "
                "(a write through .data, or an in-place op under no_grad?).",
                "if intended (EMA, manual clipping), add the name to "
                "watch(allow_mutation=[...]);"
                " otherwise find the in-place edit.",
                param=key,
                optimizer=v.optimizer,
                details={
                    "norm_after_previous_step": float(previous[first]),
                    "norm_before_this_step": float(now[first]),
                    "count": len(names),
                    "tensors": names,
                },
            )
        )


_F32 = torch.finfo(torch.float32).eps


def _per_tensor(lr: list[float], group_of: list[int], size: int) -> torch.Tensor:
    """Each tensor's learning rate (that of its param group), float64; 0 without groups."""
    if len(group_of) != size:
        return torch.zeros(size, dtype=torch.float64)
    return torch.tensor(lr, dtype=torch.float64)[torch.tensor(group_of, dtype=torch.long)]


def _in_order(indices: list[int], order: Sequence[int]) -> list[int]:
    """``indices`` in forward order (``order``: every tensor's index, first layer first)."""
    if len(indices) < 2:
        return indices
    wanted = set(indices)
    return [i for i in order if i in wanted] or sorted(indices)


def _these(names: Sequence[str], verb: str = "has") -> str:
    """The subject of a finding about ``names``: ``this parameter has`` for one,
    ``12 parameters (a, b, c, d and 8 more) have`` for several."""
    if len(names) == 1:
        return f"this parameter {verb}"
    plural = {"has": "have", "is": "are"}.get(verb, verb)
    return f"{len(names)} parameters ({listing(names)}) {plural}"


def _no_grad_text(names: Sequence[str], steps: int, zero: int, total: int) -> tuple[str, str]:
    """Message and hint of ``param-no-grad`` over ``names`` (``zero`` of the ``total``
    have a gradient tensor that is exactly zero): no gradient at all means the tensors are
    cut off from the loss; an all-zero one may also mean that nothing flows back to them
    (the gradient tensor exists, but every path to the loss multiplies to zero)."""
    one = total == 1
    who = "this trainable parameter" if one else f"{total} trainable parameters ({listing(names)})"
    it = "it is" if one else "they are"
    if zero == 0:
        return (
            f"{who} received no gradient for {steps} steps: {it} cut off from the loss.",
            "look for .detach(), .item(), torch.tensor(t), a no_grad block or an unused branch "
            "between this layer and the loss.",
        )
    got = (
        f"{'has' if one else 'have'} had an exactly zero gradient"
        if zero == total
        else f"received no gradient, or an exactly zero one ({zero} of them),"
    )
    return (
        f"{who} {got} for {steps} steps: {it} cut off from the loss, or nothing flows back "
        f"to {'it' if one else 'them'} (dead activations, a zero layer after "
        f"{'it' if one else 'them'}, or a gradient that underflowed through a deep stack).",
        "look for .detach()/.item()/torch.tensor(t) between this layer and the loss; if it "
        "is connected, look for saturated or dead activations and the initialisation (a "
        "normalisation layer or residual connection keeps gradients alive in deep stacks).",
    )
