"""DDP: one collector per rank, every rank in one run, and the cross-rank checks.

When ``torch.distributed`` is initialised with more than one rank, ``watch()`` (or
``gradwatch run -- torchrun ...``) on each rank *joins* the others: the ranks agree on one
run id through the process group's key-value store (``compare_set``: the first rank to
arrive names the run). Rank 0's stream is the run itself and owns the cross-rank
findings; rank ``r``'s stream is ``<run>.rank<r>``. Every RUN_START carries ``ddp``
(group, rank, world size, local rank, host), so the server files every rank under the run.

The cross-rank checks exchange small summaries through that same store, never through
collectives: no rank ever waits for another in the training thread, nothing is added to
the process group's order of collectives, and a rank that stops publishing (crashed, or
not watched) only ends the comparison. Each rank publishes, from its I/O thread:

* at step 1 and every ``ddp_every`` steps, bit-exact checksums of its parameters after
  the update (computed on the device by the training thread, read back with the batched
  transfer's pinned-memory-and-event scheme, so no host synchronisation);
* per window of ``ddp_every`` steps, its mean loss and mean total gradient norm, and the
  first step at which its loss, a gradient or a parameter went non-finite (from the rows
  the collector transfers anyway);
* its fingerprint's shared fields and parameter layout, once.

Rank 0 compares on a thread of its own (:mod:`gradwatch.ddp.rank0_comparer`).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.hooks import RemovableHandle

from gradwatch.checks.ddp import fingerprint_subset
from gradwatch.core import paths
from gradwatch.ddp.rank0_comparer import Comparer
from gradwatch.fingerprint.take import _device_sums
from gradwatch.stats.tensors import GRAD, NONFINITE, PARAM

if TYPE_CHECKING:
    from gradwatch.hooks.context import HookContext
    from gradwatch.hooks.optimizer import OptimizerWatch
    from gradwatch.transport.record_builder import StepMeta

_joins = itertools.count()
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class RankInfo:
    """Where this process sits in the distributed job, and the run all ranks share."""

    rank: int
    world_size: int
    local_rank: int
    host: str
    group: str  # rank 0's run id: the run every rank belongs to
    prefix: str  # store key prefix of this run's exchange
    store: Any  # a torch.distributed Store (its stubs lack clone())

    @property
    def run_id(self) -> str:
        """This rank's stream: the run itself on rank 0, ``<run>.rank<r>`` elsewhere."""
        return self.group if self.rank == 0 else f"{self.group}.rank{self.rank}"

    def meta(self) -> dict[str, Any]:
        """The ``ddp`` entry of RUN_START."""
        return {k: getattr(self, k) for k in ("group", "rank", "world_size", "local_rank", "host")}


def join() -> tuple[RankInfo | None, str | None]:
    """This rank's place in the job (``None`` outside a multi-rank job), and why the
    cross-rank checks are off when they are."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None, None
    try:
        store: Any = dist.distributed_c10d._get_default_store()
        prefix = f"gradwatch/{next(_joins)}/"
        group = store.compare_set(prefix + "run", "", paths.new_run_id()).decode()
        clone = store.clone()
    except Exception as exc:  # private store API or an unreachable store
        return None, f"cannot reach the process group's store ({type(exc).__name__}: {exc})"
    rank = dist.get_rank()
    local = os.environ.get("LOCAL_RANK", "")
    return (
        RankInfo(
            rank=rank,
            world_size=dist.get_world_size(),
            local_rank=int(local) if local.isdigit() else rank,
            host=socket.gethostname(),
            group=group,
            prefix=prefix,
            store=clone,
        ),
        None,
    )


def _later(t: torch.Tensor) -> Callable[[], list[Any]]:
    """Start moving ``t`` to the host; the returned reader (I/O thread) finishes it."""
    if t.device.type == "cpu":
        values = t.tolist()
        return lambda: values
    if t.device.type == "cuda":
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        host.copy_(t, non_blocking=True)
        event = torch.cuda.Event()  # type: ignore[no-untyped-call]
        event.record()

        def read() -> list[Any]:
            event.synchronize()
            return host.tolist()

        return read
    return lambda: t.cpu().tolist()  # other accelerators: the copy happens on the I/O thread


def _checksums(params: Sequence[torch.Tensor]) -> list[tuple[list[int], Callable[[], list[Any]]]]:
    """Per device: the indices of its tensors and a reader of their ``(sum, weighted)``."""
    by_device: dict[torch.device, list[tuple[int, torch.Tensor]]] = {}
    with torch.no_grad():
        for i, p in enumerate(params):
            sums = _device_sums(p)
            if sums is not None:
                by_device.setdefault(sums.device, []).append((i, sums))
        return [
            ([i for i, _ in entries], _later(torch.stack([s for _, s in entries])))
            for entries in by_device.values()
        ]


class RankSync:
    """Publishes this rank's summaries; on rank 0 also runs the comparer."""

    def __init__(
        self,
        run: HookContext[OptimizerWatch],
        info: RankInfo,
        every: int,
        fingerprint: dict[str, Any],
    ) -> None:
        self.run = run
        self.info = info
        self.every = every
        self.params = [p for w in run.watches for p in w.params]
        self.names = [n for w in run.watches for n in w.names]
        self._fp = fingerprint_subset(fingerprint)
        self._handle: RemovableHandle | None = None
        self._window: int | None = None
        self._acc: dict[str, Any] = {}
        self._nonfinite_sent = False
        self._failed = False
        self.comparer: Comparer | None = None

    # -- store -----------------------------------------------------------------------------
    def key(self, *parts: object) -> str:
        """A key of this run's exchange."""
        return self.info.prefix + "/".join(str(p) for p in parts)

    def publish(self, kind: str, index: object, value: dict[str, Any]) -> None:
        """Set ``<kind>/<index>/<rank>`` (I/O thread); rank 0 queues it for comparison."""
        if self._failed:
            return
        value = {"rank": self.info.rank, "host": self.info.host, **value}
        try:
            self.info.store.set(self.key(kind, index, self.info.rank), json.dumps(value))
            if kind == "nf":
                self.info.store.add(self.key("nf_count"), 1)
        except Exception as exc:  # the store went away (a rank exited): stop exchanging
            self._failed = True
            self.run.report_once(
                "ddp store", f"cross-rank checks stopped: the store is unreachable ({exc})"
            )
            return
        if self.comparer is not None and kind != "nf":
            self.comparer.expect(kind, index)

    # -- attach / close ---------------------------------------------------------------------
    def attach(self) -> None:
        """Publish the fingerprint and layout, hook the first optimizer's steps."""

        if self.info.rank == 0:
            self.comparer = Comparer(
                self.run, self.info.store, self.info.world_size, self.key, self.names
            )
            self.comparer.start()
        layout = [
            [n, list(p.shape), str(p.dtype)] for n, p in zip(self.names, self.params, strict=True)
        ]
        fields = {"fields": self._fp, "layout": layout}
        self.run.io.submit(lambda: self.publish("fp", 0, fields))
        hook = self.run.guard(self._after_step, "cross-rank checksum")
        self._handle = self.run.watches[0].optimizer.register_step_post_hook(hook)

    def _internal(self, where: str, exc: Exception) -> None:
        self.run.internal_errors += 1
        self.run.report_once(
            f"ddp {where}", f"internal error in the cross-rank {where} ({exc}); training goes on"
        )

    def close(self, timeout: float) -> None:
        """Publish the last window and the final checksums; rank 0 compares what it can
        within ``timeout`` seconds. Never raises."""
        try:
            if self._handle is not None:
                self._handle.remove()
                self._handle = None
            step, sums = self.run.step, _checksums(self.params)
            self.run.io.submit(lambda: self._end(step, sums))
            self.run.io.flush(timeout)
            if self.comparer is not None:
                self.comparer.finish(timeout)
        except Exception as exc:
            self._internal("close", exc)

    def _end(self, step: int, sums: list[tuple[list[int], Callable[[], list[Any]]]]) -> None:
        self._close_window()
        self.publish("end", 0, {"step": step, "sums": self._read(sums)})

    # -- training thread -------------------------------------------------------------------
    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        step = self.run.step
        if step == 1 or step % self.every == 0:
            sums = _checksums(self.params)
            self.run.io.submit(lambda: self.publish("c", step, {"sums": self._read(sums)}))

    def _read(self, sums: list[tuple[list[int], Callable[[], list[Any]]]]) -> list[str | None]:
        out: list[str | None] = [None] * len(self.params)
        for indices, read in sums:
            for i, (total, weighted) in zip(indices, read(), strict=True):
                out[i] = f"{total & _MASK64:016x}{weighted & _MASK64:016x}"
        return out

    # -- I/O thread: the transferred rows ----------------------------------------------------
    def observe(self, watch: OptimizerWatch, data: torch.Tensor, metas: list[StepMeta]) -> None:
        """Window means and the first non-finite value, from one window of rows (I/O
        thread). Never raises."""
        try:
            self._observe(watch, data, metas)
        except Exception as exc:
            self._internal("summaries", exc)

    def _observe(self, watch: OptimizerWatch, data: torch.Tensor, metas: list[StepMeta]) -> None:
        from gradwatch.stats.rows import LEADING

        n_tensors = len(watch.params)
        order = watch.forward_order or list(range(n_tensors))
        for row, meta in zip(data, metas, strict=True):
            stats = row[LEADING:].reshape(4, n_tensors).T  # rows are stat-major
            loss = float(row[0]) if meta.has_loss else None
            if not self._nonfinite_sent:
                self._nonfinite(meta.step, loss, stats, watch, order)
            if watch.index == 0:
                window = (meta.step - 1) // self.every
                if self._window is not None and window != self._window:
                    self._close_window()
                self._window = window
                self._add(meta.step, loss, stats, meta.has_grad)

    def _nonfinite(
        self,
        step: int,
        loss: float | None,
        stats: torch.Tensor,
        watch: OptimizerWatch,
        order: list[int],
    ) -> None:
        kind, tensor = None, None
        bad_grad = (stats[:, NONFINITE] > 0) | ~torch.isfinite(stats[:, GRAD])
        bad_param = ~torch.isfinite(stats[:, PARAM])
        if loss is not None and not math.isfinite(loss):
            kind = "loss"
        elif bool(bad_grad.any()):
            kind, tensor = "grad", next(watch.names[i] for i in order if bad_grad[i])
        elif bool(bad_param.any()):
            kind, tensor = "param", next(watch.names[i] for i in order if bad_param[i])
        if kind is not None:
            self._nonfinite_sent = True
            self.publish("nf", 0, {"step": step, "kind": kind, "tensor": tensor})

    def _add(
        self, step: int, loss: float | None, stats: torch.Tensor, has_grad: list[bool]
    ) -> None:
        acc = self._acc
        acc.setdefault("first_step", step)
        acc["last_step"] = step
        if loss is not None and math.isfinite(loss):
            acc["loss"] = acc.get("loss", 0.0) + loss
            acc["n_loss"] = acc.get("n_loss", 0) + 1
        if any(has_grad):
            norm = float(stats[:, GRAD].square().sum().sqrt())
            if math.isfinite(norm):
                acc["grad"] = acc.get("grad", 0.0) + norm
                acc["n_grad"] = acc.get("n_grad", 0) + 1

    def _close_window(self) -> None:
        acc, self._acc = self._acc, {}
        if self._window is None or not acc:
            return
        self.publish(
            "w",
            self._window,
            {
                "first_step": acc["first_step"],
                "last_step": acc["last_step"],
                "loss": acc["loss"] / acc["n_loss"] if acc.get("n_loss") else None,
                "grad_norm": acc["grad"] / acc["n_grad"] if acc.get("n_grad") else None,
            },
        )
        self._window = None
