"""Per-tensor statistics of one optimizer step, computed on the device with fused ops.

*What* is computed lives here; *when* is decided by :mod:`gradwatch.hooks.optimizer` and *where
it is stored* by :mod:`gradwatch.stats.transfer`. Nothing here reads a value back to the host
for a tensor on an accelerator: results stay on the device until the batched transfer.

A step's statistics are ``4·T`` float64 values of the step's row, *stat-major* (all
gradient norms, then all parameter norms, …), one value per parameter tensor:

* ``grad_norm``      ‖g‖₂ (0 where the tensor has no gradient; see ``has_grad``)
* ``param_norm``     ‖θ‖₂ after the step
* ``update_norm``    ‖θ_after − θ_before‖₂, exact (from a snapshot taken before the step)
* ``nonfinite_grad`` number of NaN/±Inf elements of g

The common case — one device, one accumulation dtype, every tensor with a gradient, an
optimizer of ``torch.optim`` that leaves gradients alone during ``step()`` — costs one
snapshot copy before the update and, after it, one subtraction, one fused norm of
gradients, parameters and differences together and one ``stack`` (on the CPU also one
scalar read to see that every norm is finite; exact counts are taken only if one is not).
Everything else (a raise/skip policy that needs the gradients before the update, a
closure, frozen tensors, mixed dtypes or devices) takes the general path.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from gradwatch.core.contract import STAT_NAMES as STAT_NAMES  # the wire contract; re-exported
from gradwatch.stats import hostnorms

GRAD, PARAM, UPDATE, NONFINITE = range(4)
_CHUNK_BYTES = 256 << 20  # bounds the temporary memory of the on-device non-finite count

#: optimizers whose ``step()`` never edits ``p.grad`` in place (gradients read after the
#: update are the ones it applied); any other class is measured before the update
_GRADS_UNTOUCHED = frozenset(
    {"SGD", "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad", "Adadelta"}
)


def _acc_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


# grad mode switched with two C calls: ``torch.no_grad()`` costs several Python calls per use,
# which the hot path of every step pays
_grad_enabled = torch.is_grad_enabled
_set_grad_enabled = torch._C._set_grad_enabled


_INDEX_CACHE: dict[tuple[torch.device, tuple[int, ...]], torch.Tensor] = {}


def index_tensor(idx: Sequence[int], device: torch.device) -> torch.Tensor:
    """A cached index tensor on ``device``: creating one from a list is a blocking
    host-to-device copy, so each distinct index set is uploaded once."""
    key = (device, tuple(idx))
    found = _INDEX_CACHE.get(key)
    if found is None:
        if len(_INDEX_CACHE) > 256:
            _INDEX_CACHE.clear()
        found = _INDEX_CACHE[key] = torch.tensor(key[1], dtype=torch.long, device=device)
    return found


def uniform_dtype(tensors: Sequence[torch.Tensor]) -> torch.dtype | None:
    """The accumulation dtype when every tensor shares one device and one accumulation
    dtype (the common case, which then needs no grouping), else ``None``."""
    kinds = {(t.device, _acc_dtype(t)) for t in tensors}
    return next(iter(kinds))[1] if len(kinds) == 1 else None


def grads_untouched_by_step(optimizer: torch.optim.Optimizer) -> bool:
    """Whether gradients read after ``optimizer.step()`` are still those it applied."""
    cls = type(optimizer)
    return (
        cls.__module__.startswith("torch.optim")
        and cls.__name__ in _GRADS_UNTOUCHED
        and not any(g.get("differentiable", False) for g in optimizer.param_groups)
    )


def fused_norms(
    tensors: Sequence[torch.Tensor],
    out_device: torch.device,
    order: float = 2.0,
    uniform: torch.dtype | None = None,
) -> torch.Tensor:
    """Norms of ``tensors`` as one float64 vector on ``out_device``, with ``_foreach_norm``.

    Tensors are grouped by (device, accumulation dtype) because the fused kernel and
    ``stack`` need one of each; low-precision tensors accumulate in float32. ``uniform``
    (from :func:`uniform_dtype`, computed once) skips the grouping.
    """
    if not tensors:
        return torch.zeros(0, dtype=torch.float64, device=out_device)
    if uniform is not None:
        norms = torch._foreach_norm(list(tensors), order, dtype=uniform)
        return torch.stack(norms).to(device=out_device, dtype=torch.float64)
    groups: dict[tuple[torch.device, torch.dtype], list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault((t.device, _acc_dtype(t)), []).append(i)
    if len(groups) == 1:
        ((_device, dtype),) = groups
        norms = torch._foreach_norm(list(tensors), order, dtype=dtype)
        return torch.stack(norms).to(device=out_device, dtype=torch.float64)
    out = torch.empty(len(tensors), dtype=torch.float64, device=out_device)
    for (_device, dtype), idx in groups.items():
        norms = torch._foreach_norm([tensors[i] for i in idx], order, dtype=dtype)
        vals = torch.stack(norms).to(device=out_device, dtype=torch.float64)
        out.index_copy_(0, index_tensor(idx, out_device), vals)
    return out


def nonfinite_counts(tensors: Sequence[torch.Tensor], out_device: torch.device) -> torch.Tensor:
    """Count NaN/±Inf elements per tensor on the device: ``x*0`` is 0 exactly where ``x`` is
    finite, so its L0 "norm" counts the non-finite elements. Chunked to bound the temporary."""
    parts: list[torch.Tensor] = []
    chunk: list[torch.Tensor] = []
    size = 0
    for t in tensors:
        chunk.append(t)
        size += t.numel() * t.element_size()
        if size >= _CHUNK_BYTES:
            parts.append(fused_norms(torch._foreach_mul(chunk, 0.0), out_device, 0.0))
            chunk, size = [], 0
    if chunk or not parts:
        parts.append(fused_norms(torch._foreach_mul(chunk, 0.0), out_device, 0.0))
    return torch.cat(parts) if len(parts) > 1 else parts[0]


def host_nonfinite_counts(tensors: Sequence[torch.Tensor], norms: torch.Tensor) -> torch.Tensor:
    """CPU path: the values are already on the host, so count exactly, but only in the
    tensors whose norm is not finite (the count is 0 wherever the norm is finite)."""
    counts = torch.zeros(len(tensors), dtype=torch.float64)
    if all_finite(norms):
        return counts
    for i in torch.nonzero(~torch.isfinite(norms)).flatten().tolist():
        counts[i] = float((~torch.isfinite(tensors[i])).sum())
    return counts


@dataclass
class PreStep:
    """What ``before_step`` measured, waiting for the parameters to change. The gradient
    norms and counts are ``None`` when they are read after the update instead."""

    has_grad: list[bool]
    grad_norm: torch.Tensor | None = None
    nonfinite: torch.Tensor | None = None  # None with ``grad_norm`` set: all counts zero
    finite: bool | None = None  # on the host: whether every gradient norm is finite


@dataclass
class StepValues:
    """The statistics of one step as computed, not yet laid out in a row.

    ``norms`` holds, stat-major, the norms from statistic ``first`` on (``GRAD`` or
    ``PARAM``) through ``UPDATE``, in the accumulation dtype; ``grad_norm`` (float64, or the
    accumulation dtype on the host) is set when the gradients were measured before the
    update, ``nonfinite`` (float64) when some count may be non-zero (``None``: all zero).
    """

    n: int
    norms: torch.Tensor
    first: int
    grad_norm: torch.Tensor | None = None
    nonfinite: torch.Tensor | None = None

    @property
    def param_norm(self) -> torch.Tensor:
        """‖θ‖ after the step, a view of ``norms``."""
        start = (PARAM - self.first) * self.n
        return self.norms[start : start + self.n]

    def write(self, out: torch.Tensor, zeroed: bool) -> None:
        """Lay the values out in ``out`` (``4·T`` float64; ``zeroed``: it holds zeros)."""
        n = self.n
        out[self.first * n : 3 * n].copy_(self.norms)
        if self.grad_norm is not None:
            out[:n].copy_(self.grad_norm)
        if self.nonfinite is not None:
            out[3 * n :].copy_(self.nonfinite)
        elif not zeroed:
            out[3 * n :].zero_()


def all_finite(values: torch.Tensor) -> bool:
    """Whether every value of a CPU tensor is finite: read as Python floats, which costs
    less than two more tensor ops (and a sum, unlike this, can overflow)."""
    return all(map(math.isfinite, values.tolist()))


class StepStats:
    """Computes the per-tensor statistics of one optimizer's parameters around ``step()``."""

    def __init__(
        self,
        params: Sequence[torch.Tensor],
        device: torch.device,
        *,
        grads_after: bool = False,
        grads_only: bool = False,
    ) -> None:
        self.params = list(params)
        self.n = len(self.params)
        self.device = device
        self._sparse_seen = False  # a sparse gradient was met: see _grads
        self._uniform = uniform_dtype(self.params)
        self.on_host = device.type == "cpu" and all(p.device.type == "cpu" for p in self.params)
        self._snapshot: list[torch.Tensor] | None = None
        self._snapshot_at: hostnorms.Layout | None = None  # ours: it never moves
        self._params_at: hostnorms.Layout | None = None  # the parameters' last full layout
        # the fused path: one device (the run's), one accumulation dtype
        self._fused = (
            self._uniform is not None and bool(self.params) and self.params[0].device == device
        )
        self._norm_dtype = (
            self._uniform if any(p.dtype != self._uniform for p in self.params) else None
        )  # low precision accumulates in float32; float32/float64 need no dtype argument
        self.grads_after = grads_after and self._fused
        # stats="grad-norms": no snapshot; parameter and update norms are NaN (not measured)
        self.grads_only = grads_only
        self._unmeasured = torch.full(
            (2 * self.n,), float("nan"), dtype=self._uniform or torch.float64, device=device
        )
        # on the host: the fused C kernel (gradwatch.stats.hostnorms) where it can read the
        # parameters; its thread count is fixed here so that the same parameters always
        # give the same bits (the mutation check compares norms taken at different times)
        self._kernel: hostnorms.Kernel | None = None
        self._kernel_threads = max(1, torch.get_num_threads())
        if self.on_host and self._fused and self._norm_dtype is None and self._uniform:
            kernel, _why = hostnorms.load()
            if kernel is not None and kernel.fits(self.params, self._uniform):
                self._kernel = kernel

    def before_step(self, *, now: bool = False) -> PreStep:
        """Snapshot θ for the exact update; the gradient statistics too when ``now`` (a
        policy acts before the update) or when they cannot wait until after it."""
        enabled = _grad_enabled()
        _set_grad_enabled(False)
        try:
            # each gradient read once (an attribute read per tensor is a C call)
            grads = self._grads()
            has_grad = [g is not None for g in grads]
            pre = PreStep(has_grad=has_grad)
            if now or not self.grads_after or not all(has_grad):
                pre.grad_norm, pre.nonfinite, pre.finite = self._grad_stats(has_grad, grads)
            if not self.grads_only:
                self._take_snapshot()
            return pre
        finally:
            _set_grad_enabled(enabled)

    def _grad_stats(
        self, has_grad: list[bool], now: list[torch.Tensor | None]
    ) -> tuple[torch.Tensor, torch.Tensor | None, bool | None]:
        """Gradient norms, non-finite counts (``None``: all zero) and, on the host, whether
        every norm is finite (``now``: each parameter's gradient, read just before)."""
        if self.on_host and self._fused and all(has_grad):
            # the common CPU step: norms in the accumulation dtype (the I/O thread widens
            # them), counts only when a norm is not finite — four ops in all
            grads: list[torch.Tensor] = now  # type: ignore[assignment]
            at = self._layout(grads)
            if at is not None:
                norms, bad = self._kernel_norms(at)
                counts = host_nonfinite_counts(grads, norms) if bad else None
                return norms, counts, not bad
            norms = self._norms(grads)
            counts = self._post_counts(grads, norms)  # None exactly when every norm is finite
            return norms, counts, counts is None
        present = [i for i, ok in enumerate(has_grad) if ok]
        grads = [g for g in (now[i] for i in present) if g is not None]
        uniform = self._uniform if len(grads) == self.n else None
        norms = fused_norms(grads, self.device, uniform=uniform)
        finite: bool | None = None
        if self.on_host:
            finite = all_finite(norms)
            counts = torch.zeros(len(grads), dtype=torch.float64)
            if not finite:
                counts = host_nonfinite_counts(grads, norms)
        else:
            counts = nonfinite_counts(grads, self.device)
        if len(present) == self.n:
            return norms, counts, finite
        idx = index_tensor(present, self.device)
        grad_norm = torch.zeros(self.n, dtype=torch.float64, device=self.device)
        nonfinite = torch.zeros_like(grad_norm)
        grad_norm.index_copy_(0, idx, norms)
        nonfinite.index_copy_(0, idx, counts)
        return grad_norm, nonfinite, finite

    def after_step(self, pre: PreStep) -> StepValues:
        """The statistics of the step just taken (device tensors; no host sync on an
        accelerator, one scalar read on the CPU)."""
        enabled = _grad_enabled()
        _set_grad_enabled(False)
        try:
            return self._after_step(pre)
        finally:
            _set_grad_enabled(enabled)

    def _after_step(self, pre: PreStep) -> StepValues:
        if self.grads_only:
            values = StepValues(self.n, self._unmeasured, PARAM)
            if pre.grad_norm is None:  # every tensor has a gradient (before_step saw to it)
                now: list[torch.Tensor] = self._grads()  # type: ignore[assignment]
                norms = self._norms(now)
                values.grad_norm, values.nonfinite = norms, self._post_counts(now, norms)
            else:
                values.grad_norm, values.nonfinite = pre.grad_norm, pre.nonfinite
            return values
        snapshot = self._snapshot
        if snapshot is not None and self._snapshot_at is not None:
            at = self._params_layout()
            if at is not None and at.sizes == self._snapshot_at.sizes:
                return self._after_step_kernel(pre, at, self._snapshot_at)
        if snapshot is not None:
            torch._foreach_sub_(snapshot, self.params)  # θ_before − θ_after
        if not self._fused:
            parts = [fused_norms(self.params, self.device)]
            parts.append(
                fused_norms(snapshot, self.device)
                if snapshot is not None
                else torch.full_like(parts[0], float("nan"))
            )
            values = StepValues(self.n, torch.cat(parts), PARAM)
        else:
            tensors = self.params + snapshot if snapshot is not None else list(self.params)
            grads: list[torch.Tensor] = []
            if pre.grad_norm is None:
                grads = self._grads()  # type: ignore[assignment]
                tensors = grads + tensors
            norms = self._norms(tensors)
            if snapshot is None:
                norms = torch.cat([norms, torch.full((self.n,), float("nan"), device=self.device)])
            values = StepValues(self.n, norms, GRAD if grads else PARAM)
            if grads:
                values.nonfinite = self._post_counts(grads, norms)
        if pre.grad_norm is not None:
            values.grad_norm, values.nonfinite = pre.grad_norm, pre.nonfinite
        return values

    def _after_step_kernel(
        self, pre: PreStep, at: hostnorms.Layout, snapshot: hostnorms.Layout
    ) -> StepValues:
        """The host path with the fused kernel: ‖θ‖ and ‖θ_before − θ‖ in one read of the
        parameters and the snapshot (which is left as it is: the next step overwrites it),
        the gradients in a second call; everything float64."""
        kernel = self._kernel
        assert kernel is not None
        after = kernel.norms_at(at, snapshot, self._kernel_threads)[0]
        if pre.grad_norm is not None:
            values = StepValues(self.n, after, PARAM)
            values.grad_norm, values.nonfinite = pre.grad_norm, pre.nonfinite
            return values
        grads: list[torch.Tensor] = self._grads()  # type: ignore[assignment]
        norms = torch.cat([self._norms(grads).to(torch.float64), after])
        values = StepValues(self.n, norms, GRAD)
        values.nonfinite = self._post_counts(grads, norms)
        return values

    def _grads(self) -> list[torch.Tensor | None]:
        """Each parameter's gradient, a sparse one (``nn.Embedding(sparse=True)``) as the
        values of its coalesced form: a dense tensor with the same L2 norm and the same
        non-finite elements (its duplicate indices summed, as the update sums them)."""
        grads = [p.grad for p in self.params]
        if self._sparse_seen or any(g is not None and g.is_sparse for g in grads):
            self._sparse_seen = True
            grads = [g.coalesce().values() if g is not None and g.is_sparse else g for g in grads]
        return grads

    def _layout(self, tensors: list[torch.Tensor]) -> hostnorms.Layout | None:
        """Where ``tensors`` lie, when the kernel is on and can read them now (taken every
        step: a ``.data`` assignment can change a parameter's layout, dtype or device)."""
        kernel = self._kernel
        return kernel.layout(tensors, self._uniform or torch.float32) if kernel else None

    def _params_layout(self) -> hostnorms.Layout | None:
        """:meth:`_layout` of the parameters, taken in full only when their addresses or
        element counts changed since the last full look (two attribute reads per tensor
        instead of five). A ``.data`` assignment that moves a parameter, changes its dtype
        or device, or resizes it gives it other storage, hence another address or count; a
        new view of the same storage with the same address and count (``p.data =
        p.data.t()``) holds the same elements, which is all the kernel reads: sums of
        squares and copies in storage order."""
        kernel = self._kernel
        if kernel is None:
            return None
        params = self.params
        known = self._params_at
        if (
            known is not None
            and [p.data_ptr() for p in params] == known.ptrs
            and tuple([p.numel() for p in params]) == known.sizes
        ):
            return known
        self._params_at = found = self._layout(params)
        return found

    def _norms(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        """The L2 norm of each tensor, in one fused op (the accumulation dtype) or, on the
        host where it can, with the kernel (float64) (fused path: one device, one dtype)."""
        at = self._layout(tensors)
        if at is not None:
            return self._kernel_norms(at)[0]
        return torch.stack(torch._foreach_norm(tensors, 2.0, dtype=self._norm_dtype))

    def _kernel_norms(self, at: hostnorms.Layout) -> tuple[torch.Tensor, int]:
        """The kernel's norms (float64) of the tensors laid out at ``at`` (a layout just
        taken) and how many of them are not finite."""
        assert self._kernel is not None
        return self._kernel.norms_at(at, None, self._kernel_threads)

    def _post_counts(self, grads: list[torch.Tensor], norms: torch.Tensor) -> torch.Tensor | None:
        """Counts of the gradients measured after the update: on the host only when some
        norm is not finite."""
        if not self.on_host:
            return nonfinite_counts(grads, self.device)
        if all_finite(norms[: self.n]):
            return None
        return host_nonfinite_counts(grads, norms[: self.n])

    @torch.no_grad()
    def param_norms(self) -> torch.Tensor:
        """‖θ‖ now, computed exactly as :meth:`after_step` does (comparable bit for bit)."""
        if not self._fused:
            return fused_norms(self.params, self.device)
        at = self._params_layout()
        return self._norms(self.params) if at is None else self._kernel_norms(at)[0]

    def release(self) -> None:
        """Free the snapshot (the only memory proportional to the model that is kept)."""
        self._snapshot = None
        self._snapshot_at = None
        self._params_at = None

    def _take_snapshot(self) -> None:
        snapshot = self._snapshot
        if snapshot is None:
            self._snapshot = [p.detach().clone() for p in self.params]
            self._snapshot_at = self._layout(self._snapshot)
            return
        kernel, ours = self._kernel, self._snapshot_at
        at = self._params_layout() if ours is not None else None
        if kernel is not None and ours is not None and at is not None and at.sizes == ours.sizes:
            kernel.copy_at(ours, at, self._kernel_threads)
        else:
            torch._foreach_copy_(snapshot, self.params)
