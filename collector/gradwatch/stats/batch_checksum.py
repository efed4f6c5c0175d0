"""A cheap, position-sensitive checksum of the batch the model received (data-order diagnosis).

Per input tensor ``x`` with batch size ``n`` (first dimension): the per-sample sums
``r_i`` (accumulated in float32 for floating inputs, float64 for integer ones such as token
ids: no widened copy of the batch), then the pair ``(Σ r_i, Σ (i+1)·r_i)`` as one small
matrix-vector product in that dtype (two device ops per input tensor). A third value is the
batch's scale for the outlier check (:mod:`gradwatch.checks.batchscale`): ``Σ |x|`` over the
floating-point inputs (two more device ops per floating input; integer inputs add none), whose
element count the host knows from the signature (:func:`float_elements`). Swapping two
samples, replacing one, or a different augmentation changes the pair; the same samples in
the same order give bit-identical values on the same device. Shapes and dtypes are kept
on the host and hashed with the values later. On the CPU the sums are taken on the I/O
thread (:class:`Deferred`), so the training thread does not read the batch an extra time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

_MAX_TENSORS = 32
_MAX_DEPTH = 4
#: values per checksum: the pair, then Σ|x| over the floating-point inputs
WIDTH = 3


def _tensors(obj: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth < _MAX_DEPTH and isinstance(obj, tuple | list):
        for item in obj:
            yield from _tensors(item, depth + 1)
    elif depth < _MAX_DEPTH and isinstance(obj, dict):
        for key in sorted(obj, key=str):
            yield from _tensors(obj[key], depth + 1)


class Deferred:
    """The checksum of CPU inputs, computed later on the I/O thread instead of in the
    forward pre-hook (the tensors are kept until then, as the NaN-origin capture keeps them
    anyway). An input edited in place in the meantime (its version counter moved: a reused
    buffer) yields NaN — unknown — rather than the checksum of other data. Forwards of one
    step add up, as device checksums do. One forward's checksum can be read several times
    (a model two optimizers own is in both their steps): the first read computes it and
    lets the inputs go, later ones get the same value."""

    __slots__ = ("_done", "_held", "parts")

    def __init__(self, parts: list[tuple[list[torch.Tensor], list[int]]], held: int = 0) -> None:
        self.parts = parts
        self._done: tuple[torch.Tensor, torch.Tensor | None] | None = None  # once read
        self._held = held  # bytes of inputs this object keeps alive (see HOLD_BYTES)

    @classmethod
    def of(cls, tensors: list[torch.Tensor]) -> Deferred | None:
        """A deferred checksum, or ``None`` when the inputs already kept alive by deferred
        checksums exceed ``HOLD_BYTES`` (an I/O thread that fell behind): then the caller
        computes it at once, so memory stays bounded."""
        global _held_bytes
        size = sum(t.nbytes for t in tensors)
        if _held_bytes + size > HOLD_BYTES:
            return None
        _held_bytes += size
        return cls([(tensors, [t._version for t in tensors])], size)

    def __add__(self, other: Deferred) -> Deferred:
        mine, theirs = self.parts, other.parts  # read before _done: the I/O thread sets it first
        if (not mine and self._done is not None) or (not theirs and other._done is not None):
            return self._read_sum(other)  # one was read already: its inputs are let go
        held, self._held, other._held = self._held + other._held, 0, 0
        return Deferred(mine + theirs, held)

    def _read_sum(self, other: Deferred) -> Deferred:
        """``self + other`` read now (forwards that add up: float64)."""
        (a, a_scale), (b, b_scale) = self.split(), other.split()
        scales = [s.to(torch.float64) for s in (a_scale, b_scale) if s is not None]
        out = Deferred([])
        out._done = (
            a.to(torch.float64) + b.to(torch.float64),
            sum(scales[1:], scales[0]) if scales else None,
        )
        return out

    def resolve(self) -> torch.Tensor:
        """The ``(WIDTH,)`` float64 checksum (NaN when an input changed since its forward)."""
        return self.value().to(torch.float64)

    def value(self) -> torch.Tensor:
        """:meth:`resolve` in the accumulation dtype of a single forward (float32 for
        floating inputs: exactly the float64 value, before the widening), float64 when
        forwards add up."""
        pair, scale = self.split()
        if scale is not None:  # in place: ``pair`` is a fresh tensor, ``scale`` no wider
            pair[2:].add_(scale)
        return pair

    def split(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`value` in two parts, for a window's rows to be put together in a few ops
        (:func:`gradwatch.stats.rows.checksums`): the checksum without ``Σ|x|`` (its third
        value 0, or NaN where an input holds ±Inf or NaN) and ``Σ|x|`` (``None`` without a
        floating-point input); their sum is :meth:`value`, bit for bit. Fresh tensors on
        every call (callers add in place); the inputs are let go after the first."""
        if self._done is None:
            try:
                self._done = self._split()
            finally:
                self._release()
        pair, scale = self._done
        return pair.clone(), None if scale is None else scale.clone()

    def _split(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        parts = self.parts
        if len(parts) == 1:
            tensors, versions = parts[0]
            if _moved(tensors, versions):
                return torch.full((WIDTH,), float("nan"), dtype=torch.float64), None
            return _parts_of(tensors)
        if not parts:
            return torch.zeros(WIDTH, dtype=torch.float64), None
        total: torch.Tensor | None = None
        scale: torch.Tensor | None = None
        for tensors, versions in parts:
            if _moved(tensors, versions):
                return torch.full((WIDTH,), float("nan"), dtype=torch.float64), None
            pair, part = _parts_of(tensors)
            pair = pair.to(torch.float64)
            total = pair if total is None else total + pair
            if part is not None:
                part = part.to(torch.float64)
                scale = part if scale is None else scale + part
        assert total is not None
        return total, scale

    def _release(self) -> None:
        global _held_bytes
        if self._held:
            _held_bytes -= self._held
            self._held = 0
        self.parts = []

    def __del__(self) -> None:  # a window dropped unread still gives its budget back
        self._release()


#: inputs kept alive by deferred checksums, at most (beyond it checksums are taken at once)
HOLD_BYTES = 64 << 20
_held_bytes = 0  # updated under the GIL; an approximate count is enough for a budget


def _moved(tensors: list[torch.Tensor], versions: list[int]) -> bool:
    """Whether an input was edited in place since its forward."""
    if len(tensors) == 1:
        return tensors[0]._version != versions[0]
    return any(t._version != v for t, v in zip(tensors, versions, strict=True))


def combine(a: torch.Tensor | Deferred, b: torch.Tensor | Deferred) -> torch.Tensor | Deferred:
    """The checksum of two forwards of one step. A deferred one meets an immediate one when
    the hold budget ran out between them: the deferred part is then resolved now."""
    if isinstance(a, Deferred) and isinstance(b, Deferred):
        return a + b
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a + b
    return resolve(a) + resolve(b)


def resolve(value: torch.Tensor | Deferred) -> torch.Tensor:
    """A step's batch checksum as a float64 tensor, deferred or not."""
    return value.resolve() if isinstance(value, Deferred) else value.to(torch.float64)


def inspect(
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    defer: bool = False,
    leaves_only: bool = False,
) -> tuple[torch.Tensor | Deferred | None, list[str]]:
    """The checksum of the inputs (``None`` without a tensor; with ``defer``, a
    :class:`Deferred` to compute later) and their host-side description
    (``"float32[64,3,32,32]"`` per tensor), in one walk over the inputs. With
    ``leaves_only``, tensors that autograd made (a ``grad_fn``: another module's output)
    are left out, so that a submodule's checksum covers only what enters from outside."""
    if not kwargs and len(args) == 1 and isinstance(args[0], torch.Tensor):
        found = [args[0]]  # model(x): the common case, without the walk
    else:
        found = list(_tensors((args, kwargs)))[:_MAX_TENSORS]
    if leaves_only:
        found = [t for t in found if t.grad_fn is None]
    sig = [_describe(t) for t in found]
    if not found:
        return None, sig
    deferred = Deferred.of(found) if defer else None
    return (deferred if deferred is not None else checksum_of(found)), sig


def signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    """Host-side description of the inputs: ``"float32[64,3,32,32]"`` per tensor."""
    return inspect(args, kwargs)[1]


def checksum(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """The ``(WIDTH,)`` checksum of every tensor in the inputs, on their device (``None`` when
    the inputs hold no tensor). Computed with device ops only."""
    value = inspect(args, kwargs)[0]
    assert not isinstance(value, Deferred)
    return value


_DESCRIBED: dict[tuple[torch.dtype, torch.Size], str] = {}


def _describe(t: torch.Tensor) -> str:
    key = (t.dtype, t.shape)
    found = _DESCRIBED.get(key)
    if found is None:
        if len(_DESCRIBED) > 1024:
            _DESCRIBED.clear()
        found = _DESCRIBED[key] = f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"
    return found


def checksum_of(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Per tensor: per-sample sums, then the pair ``(Σ r_i, Σ (i+1)·r_i)`` as one small
    matrix-vector product in the accumulation dtype (float32 for floating inputs, float64
    for integer ones). Tensor ``j`` is weighted by ``j+1`` so that swapped inputs differ."""
    total: torch.Tensor | None = None
    for j, t in enumerate(tensors):
        x, acc = _prepared(t)
        pair = _pair_of(x, acc, j)
        if x.is_floating_point():  # the third row of the weights is zero: add Σ|x| there
            pair[2:].add_(_abs_sum(x, acc))
        total = pair if total is None else total + pair.to(total.device, torch.float64)
    assert total is not None
    return total


def _parts_of(tensors: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`checksum_of` with ``Σ|x|`` apart (see :meth:`Deferred.split`)."""
    if len(tensors) == 1:  # model(x): the common case
        x, acc = _prepared(tensors[0])
        return _pair_of(x, acc, 0), _abs_sum(x, acc) if x.is_floating_point() else None
    total: torch.Tensor | None = None
    scale: torch.Tensor | None = None
    for j, t in enumerate(tensors):
        x, acc = _prepared(t)
        pair = _pair_of(x, acc, j)
        total = pair if total is None else total + pair.to(total.device, torch.float64)
        if x.is_floating_point():
            part = _abs_sum(x, acc)
            scale = part if scale is None else scale + part.to(scale.device, torch.float64)
    assert total is not None
    return total, scale


def _prepared(t: torch.Tensor) -> tuple[torch.Tensor, torch.dtype]:
    """An input as the checksum reads it (no graph, complex as real pairs, bool as bytes)
    and its accumulation dtype (float32 for floating inputs but float64, float64 for the
    rest)."""
    x = t.detach() if t.requires_grad else t  # no graph is recorded either way
    if x.is_complex():
        x = torch.view_as_real(x)
    if x.dtype == torch.bool:
        x = x.to(torch.uint8)
    floating = x.is_floating_point()
    acc = torch.float32 if floating and x.dtype != torch.float64 else torch.float64
    return x, acc


def _pair_of(x: torch.Tensor, acc: torch.dtype, j: int) -> torch.Tensor:
    """``(Σ r_i, Σ (i+1)·r_i, 0)`` of input ``j``, scaled by ``j+1``, in ``acc``."""
    rows = x.reshape(x.shape[0], -1) if x.dim() > 0 else x.reshape(1, 1)
    per_sample = rows.sum(dim=1, dtype=acc)
    return torch.mv(_weights(per_sample.numel(), x.device, j + 1, acc), per_sample)


#: inputs up to this many elements take Σ|x| as ``abs().sum()`` (a third of the time of
#: ``vector_norm(x, 1)`` on a small batch); larger ones with ``vector_norm``, which makes no
#: copy of the batch. Either way the value depends only on the input's shape and contents.
ABS_COPY_ELEMENTS = 1 << 20


def _abs_sum(x: torch.Tensor, acc: torch.dtype) -> torch.Tensor:
    """``Σ |x|`` accumulated in ``acc``."""
    total: torch.Tensor
    if x.numel() <= ABS_COPY_ELEMENTS:
        total = torch.sum(torch.abs(x), dtype=acc)
    else:
        total = torch.linalg.vector_norm(x, 1, dtype=acc)
    return total


_WEIGHTS: dict[tuple[int, torch.device, int, torch.dtype], torch.Tensor] = {}


def _weights(n: int, device: torch.device, scale: int, dtype: torch.dtype) -> torch.Tensor:
    """The cached ``(3, n)`` matrix ``scale·[1…1; 1…n; 0…0]`` (built on the device once)."""
    key = (n, device, scale, dtype)
    found = _WEIGHTS.get(key)
    if found is None:
        if len(_WEIGHTS) > 64:
            _WEIGHTS.clear()
        ramp = torch.arange(1, n + 1, dtype=dtype, device=device)
        found = _WEIGHTS[key] = (
            torch.stack([torch.ones_like(ramp), ramp, torch.zeros_like(ramp)]) * scale
        )
    return found


_FLOAT_ELEMENTS: dict[str, int] = {}


def float_elements(signature: list[str]) -> int:
    """Floating-point elements (complex: two each) of the inputs a signature describes
    (``"float32[64,3,32,32]"`` per tensor): the count ``Σ |x|`` of a checksum is over."""
    total = 0
    for sig in signature:
        found = _FLOAT_ELEMENTS.get(sig)
        if found is None:
            dtype, _, shape = sig.partition("[")
            count = 0
            if dtype.startswith(("float", "bfloat", "complex")):
                count = 2 if dtype.startswith("complex") else 1
                for dim in filter(None, shape.rstrip("]").split(",")):
                    count *= int(dim)
            if len(_FLOAT_ELEMENTS) > 1024:
                _FLOAT_ELEMENTS.clear()
            found = _FLOAT_ELEMENTS[sig] = count
        total += found
    return total
