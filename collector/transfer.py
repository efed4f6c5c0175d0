"""Moves per-step rows from the device to the host in one transfer every ``k`` steps.

Each collected step produces one float64 row on the device. Rows are written into a
preallocated ``(k, width)`` device buffer; when it is full (or on flush) one
``non_blocking`` copy into pinned host memory is queued with a CUDA event, and the
returned *reader* — run later on the I/O thread — waits on that event, never the
training thread. On the CPU rows are already on the host and are handed over as they are.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from typing import Generic, TypeVar

import torch

Meta = TypeVar("Meta")
Reader = Callable[[], tuple[torch.Tensor, list[Meta]]]

_PINNED_POOL = 4  # host buffers in flight per optimizer before a new one is allocated


class Transfer(Generic[Meta]):
    """Batches device rows and their host-side metadata into periodic host transfers."""

    def __init__(
        self, width: int, device: torch.device, every: int, max_age: float | None = None
    ) -> None:
        self.width = width
        self.device = device
        self.every = every
        self.max_age = max_age  # CPU: hand rows over at least this often (seconds)
        self._first = 0.0
        self._meta: list[Meta] = []
        self._rows: list[torch.Tensor] = []
        self._buffer: torch.Tensor | None = None
        self._pinned: queue.SimpleQueue[torch.Tensor] = queue.SimpleQueue()
        self._cuda = device.type == "cuda"

    def __len__(self) -> int:
        return len(self._meta)

    def add(self, row: torch.Tensor, meta: Meta) -> Reader[Meta] | None:
        """Store one row; returns a reader when ``k`` rows are waiting (else ``None``)."""
        if self._cuda:
            if self._buffer is None:
                self._buffer = torch.empty(
                    (self.every, self.width), dtype=torch.float64, device=self.device
                )
            self._buffer[len(self._meta)].copy_(row, non_blocking=True)
        else:
            self._rows.append(row)
        if not self._meta:
            self._first = time.monotonic()
        self._meta.append(meta)
        old = self.max_age is not None and time.monotonic() - self._first >= self.max_age
        return self.drain() if len(self._meta) >= self.every or old else None

    def drain(self) -> Reader[Meta] | None:
        """Queue the transfer of every waiting row and return the reader that collects it
        (called once, on the I/O thread)."""
        if not self._meta:
            return None
        meta, self._meta = self._meta, []
        if not self._cuda:
            rows, self._rows = self._rows, []
            if self.device.type == "cpu":
                data = torch.stack(rows)
                return lambda: (data, meta)
            return lambda: (torch.stack(rows).cpu(), meta)  # other accelerators: I/O thread
        return self._cuda_reader(meta)

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
