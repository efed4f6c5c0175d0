"""Moves per-step rows from the device to the host in one transfer every ``k`` steps.

On an accelerator each collected step writes one float64 row in place (see
:meth:`Transfer.slot`). On CUDA the rows live in a preallocated ``(k, width)`` device
buffer; when it is full (or on flush) one ``non_blocking`` copy into pinned host memory is
queued with a CUDA event, and the returned *reader* — run later on the I/O thread — waits
on that event, never the training thread. Other accelerators write into zero-filled
blocks that the reader joins and copies on the I/O thread. On the CPU the steps hand over
what they computed (:meth:`Transfer.add_host`) and the reader lays it out as rows.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import torch

Meta = TypeVar("Meta")
Reader = Callable[[], tuple[torch.Tensor, list[Meta]]]

_PINNED_POOL = 4  # host buffers in flight per optimizer before a new one is allocated
_BLOCK_ROWS = 32  # rows per zero-filled block (CPU and accelerators other than CUDA)


class Transfer(Generic[Meta]):
    """Batches device rows and their host-side metadata into periodic host transfers."""

    def __init__(
        self,
        width: int,
        device: torch.device,
        every: int,
        max_age: float | None = None,
        assemble: Callable[[list[Any]], torch.Tensor] | None = None,
    ) -> None:
        self.width = width
        self.device = device
        self.every = every
        self.max_age = max_age  # CPU: hand rows over at least this often (seconds)
        self._first = 0.0
        self._meta: list[Meta] = []
        self._blocks: list[torch.Tensor] = []
        self._block_rows = min(every, _BLOCK_ROWS)
        self._handed = -1  # the index of the last slot handed out
        self._buffer: torch.Tensor | None = None
        self._pinned: queue.SimpleQueue[torch.Tensor] = queue.SimpleQueue()
        self._cuda = device.type == "cuda"
        self._assemble = assemble  # host mode: items are laid out as rows by the reader
        self._items: list[Any] = []

    def __len__(self) -> int:
        return len(self._meta)

    def slot(self) -> tuple[torch.Tensor, bool]:
        """The row the next step writes in place, and whether it holds zeros already."""
        i = len(self._meta)
        if self._cuda:
            if self._buffer is None:
                self._buffer = torch.empty(
                    (self.every, self.width), dtype=torch.float64, device=self.device
                )
            return self._buffer[i], False
        j = i % self._block_rows
        if j == 0 and len(self._blocks) * self._block_rows <= i:
            self._blocks.append(
                torch.zeros((self._block_rows, self.width), dtype=torch.float64, device=self.device)
            )
        row = self._blocks[-1][j]
        if self._handed == i:  # handed out before but never committed (a failed step)
            row.zero_()
        self._handed = i
        return row, True

    def commit(self, meta: Meta) -> Reader[Meta] | None:
        """Count the row written into :meth:`slot`; returns a reader when ``k`` rows are
        waiting or the oldest is ``max_age`` old (else ``None``)."""
        if not self._meta:
            self._first = time.monotonic()
        self._meta.append(meta)
        old = self.max_age is not None and time.monotonic() - self._first >= self.max_age
        return self.drain() if len(self._meta) >= self.every or old else None

    def add_host(self, item: Any, meta: Meta) -> Reader[Meta] | None:
        """Host mode: keep what a step computed; the reader makes it a row."""
        self._items.append(item)
        return self.commit(meta)

    def add(self, row: torch.Tensor, meta: Meta) -> Reader[Meta] | None:
        """Copy a finished row into the next slot and commit it."""
        self.slot()[0].copy_(row, non_blocking=self._cuda)
        return self.commit(meta)

    def drain(self) -> Reader[Meta] | None:
        """Queue the transfer of every waiting row and return the reader that collects it
        (called once, on the I/O thread)."""
        if not self._meta:
            return None
        meta, self._meta = self._meta, []
        self._handed = -1
        if self._cuda:
            return self._cuda_reader(meta)
        if self._assemble is not None:
            items, self._items, assemble = self._items, [], self._assemble
            return lambda: (assemble(items), meta)
        blocks, self._blocks = self._blocks, []
        n, host = len(meta), self.device.type == "cpu"

        def read() -> tuple[torch.Tensor, list[Meta]]:
            data = (blocks[0] if len(blocks) == 1 else torch.cat(blocks))[:n]
            return (data if host else data.cpu()), meta

        return read

    def _cuda_reader(self, meta: list[Meta]) -> Reader[Meta]:
        assert self._buffer is not None
        n = len(meta)
        try:
            host = self._pinned.get_nowait()
        except queue.Empty:
            host = torch.empty((self.every, self.width), dtype=torch.float64, pin_memory=True)
        host[:n].copy_(self._buffer[:n], non_blocking=True)
        event = torch.cuda.Event()  # type: ignore[no-untyped-call]
        event.record()
        pool = self._pinned

        def read() -> tuple[torch.Tensor, list[Meta]]:
            event.synchronize()
            data = host[:n].clone()
            if pool.qsize() < _PINNED_POOL:
                pool.put(host)
            return data, meta

        return read
