"""Follows one optimizer through its lifecycle: backward passes, gradient clearing, steps.

What it attaches (all removed by ``detach``):

* a listener of the backward tap: after each backward pass it compares every gradient's
  identity and version with what it saw before, which tells whether the pass reached this
  optimizer, and whether gradients were cleared by hand (``p.grad = None``, ``zero_()``)
  since the previous pass — one cheap scan per pass instead of a hook per tensor;
* a wrapper of the *instance's* ``zero_grad`` (the class is untouched);
* ``register_step_pre_hook`` / ``register_step_post_hook``: statistics around the update.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.hooks import RemovableHandle

from gradwatch.checks.view import Pending
from gradwatch.hooks import backward as backward_tap
from gradwatch.hooks.manual_updates import ManualDriver, ManualUpdates
from gradwatch.hooks.stepcheck import StepChecker
from gradwatch.hooks.structure_probe import StructureProbe, join_autocast
from gradwatch.stats.batch_checksum import Deferred, combine
from gradwatch.stats.rows import LEADING, HostStep, assemble, write_row
from gradwatch.stats.tensors import PreStep, StepStats, StepValues, grads_untouched_by_step
from gradwatch.stats.transfer import Reader, Transfer
from gradwatch.transport.record_builder import StepMeta

if TYPE_CHECKING:
    from gradwatch.hooks.context import HookContext

#: forwards per step whose input checksums are kept apart (repeated-batch)
MAX_INPUTS = 8


def has_closure(args: Any, kwargs: Any) -> bool:
    """Whether ``step()`` was given a closure (it then computes gradients of its own)."""
    return any(callable(a) for a in (*args, *kwargs.values()))


def _closure(args: Any, kwargs: Any) -> Callable[[], Any] | None:
    """The closure passed to ``step()``, if any (``args`` starts with the optimizer)."""
    found = kwargs.get("closure", args[1] if len(args) > 1 else None)
    return found if callable(found) else None


class OptimizerWatch:
    """Everything gradwatch attaches to one optimizer."""

    def __init__(
        self,
        run: HookContext[OptimizerWatch],
        index: int,
        optimizer: torch.optim.Optimizer,
        device: torch.device,
    ) -> None:
        self.run = run
        self.index = index
        self.optimizer = optimizer
        self.params: list[torch.Tensor] = [p for g in optimizer.param_groups for p in g["params"]]
        self.names = [run.names[id(p)] for p in self.params]
        self.numel = [p.numel() for p in self.params]
        self.shapes = [list(p.shape) for p in self.params]
        self.group_of = [j for j, g in enumerate(optimizer.param_groups) for _ in g["params"]]
        self.model_keys: list[str] = []  # the watched models that own these parameters
        self.since_clear = 0  # backward passes since the gradients were last cleared
        self.forward_order: list[int] | None = None  # set by gradwatch.hooks.connectivity
        # backward passes (run-wide numbers) counted since gradients were last cleared or
        # applied: a clear finds there the passes it discards (accumulation-wiped)
        self.unapplied: list[int] = []
        self.discarded = 0  # of those, cleared without a step: a wipe once backward follows
        #: a training forward since the last backward pass asked for its input's gradient
        #: (gradwatch.hooks.inputgrad); the passes that followed one: made for that input
        self.for_input = False
        self.input_passes: set[int] = set()
        self.versions_at_backward: tuple[int, int] = (-1, -1)  # see parameter_versions()
        self.stepped_at = 0  # the run's pass count at this optimizer's last step
        self.in_step = False  # inside step(): a closure's clears are the optimizer's own
        #: tensors looked at right before each backward pass (``_looked``: whether each held
        #: a gradient, and its version), where what a pass did cannot be told after it:
        #: a sparse gradient (nn.Embedding(sparse=True)), which a pass adds to by replacing
        #: it (``grad = grad + new``); and a gradient one pass adds to several times (the
        #: adjoint method of a neural ODE: once per time interval), whose version then jumps
        #: by more than the one add that a clear in place (``zero_()``) would leave
        self._followed: list[int] = []
        self._looked: dict[int, tuple[bool, int]] = {}
        self._before_pass: Callable[[], None] | None = None
        #: after a step that left its gradients uncleared (as far as versions tell), a look
        #: right before the next pass at whether they are all zero: cleared through ``.data``
        #: (``p.grad.data.zero_()``, torch 0.3's idiom), which moves no version counter
        #: (see _look_for_silent_clear); installed at the first such step
        self._silent_look: Callable[[], None] | None = None
        self._silently_cleared = False
        #: the other watched optimizers that hold some of these tensors, with their indices
        #: here (see stepped_by_others; found at the first look)
        self._shared: list[tuple[OptimizerWatch, list[int]]] | None = None
        self._grads_untouched = grads_untouched_by_step(optimizer)
        self._grads_stale = False  # gradients edited by hand since the last look
        self.stats = StepStats(
            self.params,
            device,
            grads_after=self._grads_untouched,
            grads_only=run.options.stats == "grad-norms",
        )
        n = len(self.params)
        self.transfer: Transfer[StepMeta] = Transfer(
            LEADING + 4 * n,
            device,
            run.transfer_every,
            run.transfer_max_age,
            (lambda steps: assemble(steps, n)) if self.stats.on_host else None,
        )
        self.step = 0
        self.pending = Pending()
        self.handles: list[RemovableHandle] = []
        # per parameter: (weak reference to its gradient, the gradient's version) as seen
        # by the last backward pass; tells clearing by hand and in-place edits apart
        self._grads: list[tuple[weakref.ref[torch.Tensor], int] | None] = [None] * len(self.params)
        self._pre: PreStep | None = None
        self._t_step_start = 0.0
        #: the run's step counter a batch drawn for this step is stamped with (the first
        #: optimizer's completed steps + 1, see gradwatch.hooks.loaders), read as it begins
        self._clock = 1
        self._t_last = time.perf_counter()
        self._zero_grad: Callable[..., Any] | None = None
        self.checker = StepChecker(self, run.checks)
        #: a loop that updates the parameters by hand (gradwatch.hooks.manual_updates), else None
        self.manual = (
            ManualDriver(self, run.checks) if isinstance(optimizer, ManualUpdates) else None
        )
        # on the CPU the NaN screen (gradwatch.nan.origin) looks at the gradient norms before
        # the update, so they are measured then
        self.screened = run.options.nan_origin and self.stats.on_host
        #: the structure facts no other hook sees, recorded on change (structure_probe)
        self.probe = StructureProbe(self)

    # -- attach / detach -------------------------------------------------------------------
    def attach(self) -> None:
        """Register every hook; the caller removes them with :meth:`detach`."""
        guard = self.run.guard
        self.see_grads()
        self.handles.append(
            self.optimizer.register_step_pre_hook(guard(self._before_step, "step pre-hook"))
        )
        self.handles.append(
            self.optimizer.register_step_post_hook(guard(self._after_step, "step post-hook"))
        )
        original = self.optimizer.zero_grad
        note = guard(lambda: self.note_zero_grad("optimizer"), "zero_grad wrapper")
        # torch's own zero_grad(set_to_none=True) leaves every gradient None: nothing to scan
        stock = getattr(type(self.optimizer), "zero_grad", None) is torch.optim.Optimizer.zero_grad
        n = len(self.params)

        def zero_grad(*args: Any, **kwargs: Any) -> Any:
            note()
            result = original(*args, **kwargs)
            if stock and not args and kwargs.get("set_to_none", True) is True:
                self._grads = [None] * n
                self._grads_stale = False
            else:
                self.see_grads()
            return result

        self._zero_grad = zero_grad
        self.optimizer.zero_grad = zero_grad  # type: ignore[method-assign]

    def _follow_changes(self) -> None:
        """Say once that parameters added to the optimizer after ``watch()`` are not
        followed."""
        held = sum(len(g["params"]) for g in self.optimizer.param_groups)
        if held != len(self.params):
            self.run.report_once(
                f"groups{self.index}",
                f"optimizer {self.index} now holds {held} tensors, {len(self.params)} when "
                "watch() was called (add_param_group?); tensors added later are not followed: "
                "call watch() after building the optimizer completely",
            )

    def detach(self) -> None:
        """Remove every hook and restore ``zero_grad``; free the parameter snapshot."""
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        for look in (self._before_pass, self._silent_look):
            if look is not None:
                backward_tap.unwatch_before(look)
        self._before_pass = self._silent_look = None
        if self.optimizer.__dict__.get("zero_grad") is self._zero_grad:
            del self.optimizer.__dict__["zero_grad"]
        self.stats.release()

    # -- events -----------------------------------------------------------------------------
    def _now(self) -> float:
        return time.perf_counter() - self._t_last

    def note_zero_grad(self, source: str) -> None:
        """Record a gradient clearing by ``zero_grad`` (``source``: optimizer or model)."""
        if self.manual is not None:
            self.manual.check()  # an update by hand before this clear was a step
        self.pending.add(("zero_grad", self._now(), source))
        self.note_wipe()
        self.since_clear = 0
        self.pending.loss = None  # the recorded loss is the one whose gradient gets applied

    def note_forward(
        self,
        checksum: torch.Tensor | Deferred | None,
        sig: list[str],
        took: float,
        autocast: str | None = None,
    ) -> None:
        """Record one forward pass of a watched model that owns these parameters
        (``autocast``: the autocast state it ran under, see :func:`autocast_state`)."""
        pending = self.pending
        pending.forward_time += took
        if autocast is not None and pending.autocast != autocast:
            pending.autocast = join_autocast(pending.autocast, autocast)
        if checksum is not None:
            pending.batch = checksum if pending.batch is None else combine(pending.batch, checksum)
            if len(pending.inputs) < MAX_INPUTS:
                pending.inputs.append(checksum)
        if len(pending.batch_sig) < 64:
            pending.batch_sig.extend(sig)

    def see_grads(self) -> None:
        """Remember every gradient as it is now (identity and version)."""
        self._grads_stale = False
        self._grads = [
            None if p.grad is None else (weakref.ref(p.grad), p.grad._version) for p in self.params
        ]

    def note_wipe(self) -> None:
        """Gradients were just cleared: the backward passes since the last clear that no
        step applied (not even another optimizer's) are discarded. When another backward
        pass follows before a step, that is a ``wiped`` event (accumulation-wiped); when a
        step follows, grad-zeroed-before-step says it."""
        unapplied, self.unapplied = self.unapplied, []
        for_input, self.input_passes = self.input_passes, set()
        if self.parameter_versions() != self.versions_at_backward:
            return  # the parameters were changed by hand since: the gradients were used
        if unapplied and not self.in_step:
            # a pass made for its input's gradient (an adversarial perturbation) discards
            # nothing the program meant to apply
            self.discarded += sum(
                1
                for n in unapplied
                if n not in for_input and not self.run.applied_elsewhere(n, self)
            )

    def parameter_versions(self) -> tuple[int, int]:
        """In-place version counters of the first and last parameter: when they moved between
        a backward pass and a clear with no step, the gradients were applied by hand (a
        sharpness-aware first pass perturbs the weights with them, a manual update steps)."""
        return (self.params[0]._version, self.params[-1]._version) if self.params else (0, 0)

    def _look_for_silent_clear(self) -> None:
        """Right before a backward pass, while every gradient held was applied by a step
        and no clear was seen since (``since_clear`` > 0, no pass since the step): whether
        they are all exactly zero. Then they were cleared where versions cannot tell —
        through ``.data`` (``p.grad.data.zero_()``, ``.fill_(0)``) — and the pass starts a
        fresh sum, not a stale one. Nothing to do in a run that clears as torch counts
        (``zero_grad``, ``p.grad = None``, ``zero_()``) or accumulates before its step; in
        one that forgot to clear, the first non-zero gradient ends the look. On an
        accelerator the answer is one transfer (a check about to act before ``step``)."""
        self._silently_cleared = False
        if not self.since_clear or self.unapplied:
            return
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads or any(g.is_sparse for g in grads):
            return
        device = grads[0].device
        if device.type != "cpu" and all(g.device == device for g in grads):
            self._silently_cleared = not bool(torch.stack([g.any() for g in grads]).any())
        else:
            self._silently_cleared = not any(bool(g.any()) for g in grads)

    def _follow(self, i: int) -> None:
        """From now on, look at tensor ``i``'s gradient right before each pass (a few
        attribute reads per followed tensor; nothing while none is followed)."""
        if i in self._looked:
            return
        self._followed.append(i)
        self._looked[i] = (False, -1)  # not looked at yet: the next pass is judged as before
        if self._before_pass is None:
            params, followed, pre = self.params, self._followed, self._looked

            def look() -> None:
                for j in followed:
                    g = params[j].grad
                    pre[j] = (False, -1) if g is None else (True, g._version)

            self._before_pass = self.run.guard(look, "gradient look before a pass")
            backward_tap.watch_before(self._before_pass)

    def stepped_by_others(self) -> set[int]:
        """Indices of this optimizer's tensors that another watched optimizer also holds
        and has stepped since this one's last step: their change is that step's."""
        if self._shared is None:
            mine = {id(p): i for i, p in enumerate(self.params)}
            self._shared = [
                (w, [mine[id(p)] for p in w.params if id(p) in mine])
                for w in self.run.watches
                if w is not self
            ]
            self._shared = [(w, idx) for w, idx in self._shared if idx]
        out: set[int] = set()
        for other, idx in self._shared:
            if other.stepped_at >= self.stepped_at and other.step > 0:
                out.update(idx)
        return out

    def note_applied(self) -> None:
        """The gradients were used (a step, or a GradScaler's decision to skip one)."""
        self.unapplied = []
        self.input_passes = set()
        self.discarded = 0
        self.stepped_at = self.run.passes

    def forget_grads(self) -> None:
        """Take every gradient present as new (attached in the middle of a backward pass)."""
        self._grads = [None] * len(self.params)

    def after_backward(self, root: torch.Tensor | None, took: float) -> int:
        """Called by the run after every backward pass, reached or not; returns how many of
        this optimizer's tensors the pass reached."""
        reached, by_hand = 0, ""
        if self._silently_cleared:
            self._silently_cleared = False
            by_hand = "by hand (in place, through .data)"
        grads, ref = self._grads, weakref.ref
        for i, p in enumerate(self.params):
            g = p.grad
            if g is None:
                continue
            version = g._version
            seen = grads[i]
            if seen is not None:
                held, before = self._looked.get(i, (False, -1))
                if seen[0]() is not g:
                    if g.is_sparse and held:
                        pass  # a sparse gradient added to (replaced by grad + new): no clear
                    else:
                        by_hand = "by hand"  # replaced since the previous pass: p.grad = None
                elif version == seen[1]:
                    continue  # untouched by this pass
                elif version > seen[1] + 1:
                    if not (held and before == seen[1]):  # unless nothing touched it between
                        by_hand = by_hand or "by hand (in place)"  # zero_() before this +=
                    self._follow(i)
            reached += 1
            grads[i] = (ref(g), version)
            if g.is_sparse:
                self._follow(i)
        if reached:
            # a clear found only now (by hand, or by another optimizer over the same
            # tensors: a SAM wrapper's zero_grad) is judged against the parameters as the
            # previous pass left them, so this pass's versions are taken after it
            self._count_backward(root, took, by_hand)
            self.versions_at_backward = self.parameter_versions()
            self.run.model_hooks.reached(self.index)
        self.for_input = False
        return reached

    def _count_backward(self, root: torch.Tensor | None, took: float, by_hand: str) -> None:
        pending = self.pending
        if by_hand:
            pending.add(("zero_grad", self._now(), by_hand))
            self.note_wipe()
            self.since_clear = 0
            pending.loss = None
        self.unapplied.append(self.run.passes)
        if self.for_input:
            self.input_passes.add(self.run.passes)
        if self.discarded:
            pending.add(("wiped", self._now(), str(self.discarded)))
            self.discarded = 0
        pending.n_backward += 1
        self.since_clear += 1
        pending.backward_time += took
        pending.add(("backward", self._now(), ""))
        if root is not None:
            loss = self._unscaled(root)
            pending.loss = loss if pending.loss is None else pending.loss + loss

    def _unscaled(self, root: torch.Tensor) -> torch.Tensor:
        """The loss itself: with a GradScaler the backward root is ``loss × scale``."""
        scaler = self.run.options.scaler
        scale = getattr(scaler, "_scale", None)
        if isinstance(scale, torch.Tensor):
            return root.to(torch.float64) / scale.to(root.device, torch.float64)
        # float32/float64 as they are (one op less per backward); half types widened
        return root if root.dtype in (torch.float32, torch.float64) else root.float()

    def _manual_clearing(self) -> None:
        """Between the last backward and ``step``: gradients set to None by hand (the update
        then applies nothing), replaced by other tensors (``p.grad = g``: gradients the
        program composed itself, as gradient surgery such as PCGrad merges the per-task
        gradients it harvested), or edited in place (clipping, ``zero_()``)."""
        cleared = written = modified = 0
        for p, seen in zip(self.params, self._grads, strict=True):
            if seen is None:
                continue
            grad = p.grad
            if grad is None:
                cleared += 1
            elif seen[0]() is not grad:
                written += 1
            elif grad._version != seen[1]:
                modified += 1
        if cleared:
            self.since_clear = 0
            self.pending.add(("zero_grad", self._now(), f"by hand: {cleared} tensors"))
        if written:
            self.pending.add(("grad_written", self._now(), f"{written} tensors"))
        if modified:
            self.pending.add(("grad_modified", self._now(), f"{modified} tensors"))
        if cleared or written or modified:
            self._grads_stale = True

    # -- the step ---------------------------------------------------------------------------
    def _refresh_grads(self) -> None:
        # the optimizer may legitimately touch gradients during step, and gradients edited
        # by hand before it are the new reference: start the next window from what is left
        # (an optimizer of torch.optim that leaves gradients alone needs no new look unless
        # they were edited before the step)
        if self._grads_stale or not self._grads_untouched:
            self.see_grads()

    def collecting(self) -> bool:
        """Whether the step about to happen is one whose statistics are collected."""
        return self.step % self.run.options.every == 0

    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> Any:
        self._t_step_start = time.perf_counter()
        self._clock = self.run.step + 1
        self.in_step = True
        closure = _closure(args, kwargs)
        if closure is None:
            self._pre_step(args, kwargs)
            return None
        # step(closure) (Lightning, LBFGS): the closure computes this step's gradients
        # inside step(), so the pre-step statistics and checks wait until it has returned
        pre_step = self.run.guard(self._pre_step, "step pre-hook")
        pending = [True]

        def after_closure() -> Any:
            result = closure()
            if pending:
                pending.clear()
                pre_step(args, kwargs)
            return result

        if kwargs.get("closure") is closure:
            return args, {**kwargs, "closure": after_closure}
        return tuple(after_closure if a is closure else a for a in args), kwargs

    def _pre_step(self, args: Any, kwargs: Any) -> None:
        self._follow_changes()
        self._manual_clearing()
        closure = has_closure(args, kwargs)  # step(closure) computes new gradients
        now = closure or self.screened or self.checker.engine.needs_values_now()
        collecting = self.collecting()
        self._pre = self.stats.before_step(now=now) if collecting else None
        if collecting:
            self.probe.sample(self.pending)
        if self.checker.pre_step(self.pending, self._pre, closure) == "skip":
            self._drop_update()
        if self.screened:
            self.run.nan_origin.screen(self)
        self.run.saver.keep(self.index, self.step + 1)  # policy checkpoint: the state before

    def manual_step(self, pre: PreStep, cleared: bool) -> None:
        """An update by hand was found (:mod:`gradwatch.hooks.manual_updates`): the step's
        checks with the state before it (``pre``), then its statistics, as around
        ``optimizer.step()``; ``cleared``: the gradients were cleared by hand after the update."""
        self._t_step_start = time.perf_counter()
        self._clock = self.run.step + 1
        self._pre = pre if self.collecting() else None
        if self._pre is not None:
            self.probe.sample(self.pending)
        self.checker.pre_step(self.pending, self._pre, False)
        self._after_step(self.optimizer, (), {})
        if cleared:
            self.pending.add(("zero_grad", self._now(), "by hand"))
            self.since_clear = 0

    def _drop_update(self) -> None:
        """Policy ``skip``: with every gradient gone the optimizer leaves the parameters
        (and its state) untouched for this step."""
        for p in self.params:
            p.grad = None
        self.since_clear = 0
        self.pending.add(("skipped", self._now(), "by a gradwatch policy"))

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        end = time.perf_counter()
        pending, pre = self.pending, self._pre
        self.step += 1
        self.in_step = False
        self.note_applied()
        if pending.dropped_events:
            pending.events.append(("dropped", end - self._t_last, f"{pending.dropped_events}"))
        pending.events.append(("step", end - self._t_last, ""))
        values = None
        if pre is not None:
            self._pre = None
            values = self._collect(pre, pending, end)
        self.checker.post_step(values)
        self.pending = Pending()
        self._refresh_grads()
        if self.since_clear and self._silent_look is None:
            self._silent_look = self.run.guard(
                self._look_for_silent_clear, "gradient look before a pass"
            )
            backward_tap.watch_before(self._silent_look)
        self._t_last = end
        self.run.after_step(self)
        if self.run.nan_origin.on:
            self.run.nan_origin.stepped()

    def _collect(self, pre: PreStep, pending: Pending, end: float) -> StepValues:
        """Hand this step's values (loss, batch checksum, statistics) to the transfer."""
        values = self.stats.after_step(pre)
        loss, batch = pending.loss, pending.batch
        meta = StepMeta(
            step=self.step,
            n_backward=pending.n_backward,
            lr=self.checker.lr() or self.learning_rates(),
            wall_time=end - self._t_last,
            phases=(pending.forward_time, pending.backward_time, end - self._t_step_start),
            events=pending.events,
            has_grad=pre.has_grad,
            has_loss=loss is not None,
            batch=pending.batch_sig,
            requires_grad=self.checker.requires_grad(),
            inputs=pending.inputs if len(pending.inputs) >= 2 else None,
            clock=self._clock,
        )
        if self.stats.on_host:
            reader = self.transfer.add_host(HostStep(values, loss, batch), meta)
        else:
            row, zeroed = self.transfer.slot()
            assert not isinstance(batch, Deferred)  # deferred only when every watch is on the host
            write_row(row, values, loss, batch, zeroed)
            reader = self.transfer.commit(meta)
        if reader is not None:
            self.run.pipeline.emit(self, reader)
        return values

    def learning_rates(self) -> list[float]:
        """The learning rate of every param group (NaN where it is not a plain number)."""
        out: list[float] = []
        for group in self.optimizer.param_groups:
            lr = group.get("lr", float("nan"))
            if isinstance(lr, torch.Tensor):
                lr = float(lr) if lr.device.type == "cpu" else float("nan")
            out.append(float(lr) if isinstance(lr, int | float) else float("nan"))
        return out

    def drain(self) -> Reader[StepMeta] | None:
        """Hand over the rows still waiting for a transfer (flush and close)."""
        return self.transfer.drain()
