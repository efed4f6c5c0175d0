"""Step-time overhead of the gradwatch collector against plain training and a lower bound.

Three variants of the same training step are timed, interleaved in one process:

* ``plain``       zero_grad, forward, cross-entropy, backward, Adam step;
* ``lower_bound`` the plain step plus the least work that yields the same per-step
  quantities as gradwatch: gradient norms (fused ``torch._foreach_norm``) and non-finite
  gradient counts taken from them (elements counted only where a norm is not finite), a
  pre-step parameter snapshot (``torch._foreach_copy_``),
  parameter norms and exact update norms after the step, written with ``torch.stack`` +
  ``copy_`` into a preallocated ``(steps, T, 4)`` float64 buffer, and perf_counter phase
  timings (forward, backward, step). No I/O, no hooks, no Python bookkeeping;
* ``gradwatch``   the plain step with ``gradwatch.watch(model, optimizer, every=1)``
  attached: one run through all blocks, flushed after each of its blocks (``--fresh-per-block``:
  a fresh run per block, in a temporary data directory, closed after the block).

Every block starts with ``--settle`` untimed steps, for every variant alike: a fresh
gradwatch run's first steps carry one-time work (the first backward's graph walk, the
first snapshot, the first full check pass), which is reported apart, with ``watch()`` and
``close()``, as what each run costs once; the timed steps that follow are the per-step cost
of a run in progress.

Per repetition, each variant runs one block of ``--steps`` steps; the order of the three
blocks rotates from one repetition to the next, so drifts of the machine hit every
variant alike. Each variant trains its own copy of the model (same seed, same synthetic
batches, generated up front), so all three follow the same trajectory.

Usage::

    python benchmarks/collector_overhead.py                       # full run (a few minutes)
    python benchmarks/collector_overhead.py --quick --out /tmp/x.json   # smoke run (< 30 s)
    python benchmarks/collector_overhead.py --models cnn --reps 5 --steps 20
    python benchmarks/collector_overhead.py --profile transformer  # cProfile of gradwatch

See benchmarks/README.md for what the numbers mean.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import cProfile
import datetime as dt
import hashlib
import io
import itertools
import math
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import thread_settings
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

import gradwatch
from gradwatch.session.handle import CPU_GROUP_SECONDS
from gradwatch.stats.batch_checksum import checksum as batch_checksum
from gradwatch.stats.tensors import StepStats

VARIANTS: tuple[str, ...] = ("plain", "lower_bound", "gradwatch")
MODELS: tuple[str, ...] = ("mlp", "cnn", "transformer")
GOAL = 1.5  # gradwatch's added time must be at most GOAL x the lower bound's added time
SEED = 1234
N_BATCHES = 8  # distinct synthetic batches per model, cycled through
SEQ_LEN = 32  # tokens per sequence of the transformer
# default batch per model: a one-thread step of ~5-90 ms keeps blocks short (interleaving).
# The CNN runs batches of 8: what a collector adds per step does not depend on the batch
# (gradwatch's batch checksum aside), but the step's noise grows with it, and at 64 samples
# (a ~45 ms step) the step varies by ±2-5 ms from block to block on a 2-core VM, ten times
# what either collector adds, so no comparison resolved (results of 2026-11-30, 09:59).
# The transformer likewise runs 8 sequences of 32 tokens: at 32 sequences (a ~55 ms step)
# its block medians varied by ±8-14 ms under load while both collectors add 1-3 ms, and
# three runs of one code gave 1.27x, 2.03x and 0.64x (2026-12-01).
BATCH_SIZE = {"mlp": 64, "cnn": 8, "transformer": 8}
# repetitions per model, as a multiple of --reps: the CNN's step is short and what either
# collector adds is a few tenths of a millisecond, so it takes 5× the repetitions (still
# the shortest model to run) for the median added times to settle; with 40, two full runs
# on one code gave 1.32× and 1.57×
REPS_SCALE = {"mlp": 1, "cnn": 5, "transformer": 3}
# On the CPU a run hands the rows of up to CPU_GROUP_SECONDS (0.5 s) of steps to its writer
# thread at once, which checks and writes them together. A timed block shorter than that,
# flushed at its end, would cut those windows short and pay each window's fixed work several
# times as often as training does: the blocks of one run through all blocks last at least
# this long by default.
BLOCK_SECONDS = CPU_GROUP_SECONDS
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "collector_overhead.json"

Batch = tuple[torch.Tensor, torch.Tensor]
StepFn = Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor | None]


# -- workloads ------------------------------------------------------------------------------


class MLP(nn.Module):
    """784 -> 1024 -> 256 -> 10, ReLU: about 1.07 M parameters in 6 tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 256), nn.ReLU(), nn.Linear(256, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class SmallCNN(nn.Module):
    """Three conv(3x3)+BatchNorm+ReLU+maxpool stages (16, 32, 64 channels) on 3x32x32,
    then a linear classifier: about 34 k parameters in 14 tensors."""

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = [3, 16, 32, 64]
        for c_in, c_out in itertools.pairwise(channels):
            layers += [
                nn.Conv2d(c_in, c_out, 3, padding=1),
                nn.BatchNorm2d(c_out),
                nn.ReLU(),
                nn.MaxPool2d(2),
            ]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(64 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class Encoder(nn.Module):
    """Token embedding + 2-layer ``nn.TransformerEncoder`` (d=128, 4 heads, ff=512,
    batch_first, dropout 0.1) + mean pooling + linear classifier: about 526 k parameters
    in 27 tensors."""

    def __init__(self, vocab: int = 1000, d: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(
            d, nhead=4, dim_feedforward=512, dropout=0.1, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(d, 10)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)).mean(dim=1))


@dataclass
class Workload:
    """One model, its synthetic batches and a description for the report."""

    name: str
    model: nn.Module
    batches: list[Batch]
    description: str

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def n_tensors(self) -> int:
        return sum(1 for _ in self.model.parameters())


def make_workload(name: str, batch_size: int) -> Workload:
    """The model (seeded) and ``N_BATCHES`` synthetic batches generated up front."""
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED + 1)
    model: nn.Module
    if name == "mlp":
        model = MLP()
        xs = [torch.randn(batch_size, 784, generator=gen) for _ in range(N_BATCHES)]
        desc = f"MLP 784-1024-256-10, batch {batch_size}x784"
    elif name == "cnn":
        model = SmallCNN()
        xs = [torch.randn(batch_size, 3, 32, 32, generator=gen) for _ in range(N_BATCHES)]
        desc = f"3x(conv3x3+BN+ReLU+pool) 16-32-64 + linear, batch {batch_size}x3x32x32"
    elif name == "transformer":
        model = Encoder()
        shape = (batch_size, SEQ_LEN)
        xs = [torch.randint(0, 1000, shape, generator=gen) for _ in range(N_BATCHES)]
        desc = (
            f"embedding + TransformerEncoder 2 layers d=128 h=4 ff=512 + linear, "
            f"batch {batch_size}x{SEQ_LEN} tokens"
        )
    else:
        raise SystemExit(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    ys = [torch.randint(0, 10, (batch_size,), generator=gen) for _ in range(N_BATCHES)]
    return Workload(name, model, list(zip(xs, ys, strict=True)), desc)


# -- the three variants -----------------------------------------------------------------------


# torch's own backward and loss, taken before any run is attached: while a gradwatch run is
# open it wraps both process-wide (gradwatch.hooks.backward, gradwatch.hooks.lossguard), and
# the variants without gradwatch must not pay for that when one run stays attached through
# every block (the default) or while the variants alternate step by step
_TORCH_BACKWARD = torch.autograd.backward
_TORCH_CROSS_ENTROPY = F.cross_entropy


def plain_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, unwatched: bool = False
) -> StepFn:
    """The training step every variant runs (gradwatch sees it through its hooks); it
    returns the loss (for trackers that log it, as benchmarks/peers.py does). ``unwatched``:
    torch's own backward and loss even while a gradwatch run is open (plain training)."""
    if unwatched:

        def bare(i: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            optimizer.zero_grad(set_to_none=True)
            loss = _TORCH_CROSS_ENTROPY(model(x), y)
            _TORCH_BACKWARD(loss)
            optimizer.step()
            return loss

        return bare

    def step(i: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return step


class LowerBound:
    """The plain step plus the per-step quantities computed as cheaply as we know how.

    Rows of ``buffer[i]`` (one per parameter tensor): grad norm, param norm (after the
    step), update norm ‖θ_after − θ_before‖ (exact, from the snapshot), non-finite count
    of the gradient. ``phases[i]`` holds the forward, backward and step seconds.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> None:
        self.model = model
        self.optimizer = optimizer
        self.params = [p for g in optimizer.param_groups for p in g["params"]]
        self.snapshot = [p.detach().clone() for p in self.params]
        self.buffer = torch.zeros((steps, len(self.params), 4), dtype=torch.float64)
        self.phases: list[tuple[float, float, float]] = [(0.0, 0.0, 0.0)] * steps

    def step(self, i: int, x: torch.Tensor, y: torch.Tensor) -> None:
        """One training step with collection; ``i`` indexes the preallocated buffer."""
        t0 = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        loss = _TORCH_CROSS_ENTROPY(self.model(x), y)  # never through gradwatch's wrappers
        t1 = time.perf_counter()
        _TORCH_BACKWARD(loss)
        t2 = time.perf_counter()
        with torch.no_grad():
            params = [p.detach() for p in self.params]
            grads = [p.grad for p in self.params if p.grad is not None]
            grad_norm = torch._foreach_norm(grads)
            nonfinite = nonfinite_counts(grads, torch.stack(grad_norm))
            torch._foreach_copy_(self.snapshot, params)
            self.optimizer.step()
            param_norm = torch._foreach_norm(params)
            torch._foreach_sub_(self.snapshot, params)
            update_norm = torch._foreach_norm(self.snapshot)
            row = torch.stack(
                [
                    torch.stack(grad_norm),
                    torch.stack(param_norm),
                    torch.stack(update_norm),
                    nonfinite,
                ],
                dim=1,
            )
            self.buffer[i % len(self.phases)].copy_(row)
        t3 = time.perf_counter()
        self.phases[i % len(self.phases)] = (t1 - t0, t2 - t1, t3 - t2)


def nonfinite_counts(grads: Sequence[torch.Tensor], norms: torch.Tensor) -> torch.Tensor:
    """Non-finite elements per gradient, taken from the norms already at hand: a finite
    norm means none, so elements are counted only where a norm is not finite (the tight
    way; a fused L0 pass over every gradient would cost a second full read)."""
    bad = ~torch.isfinite(norms)
    counts = torch.zeros_like(norms)
    if bool(bad.any()):
        for i in bad.nonzero().flatten().tolist():
            counts[i] = (~torch.isfinite(grads[i])).sum()
    return counts


METRICS: tuple[str, ...] = ("wall", "thread_cpu", "process_cpu")
METRIC_DOC = {
    "wall": "wall time of the step (perf_counter), median of the block",
    "thread_cpu": "CPU time of the training thread (thread_time), median of the block",
    "process_cpu": "CPU time of the whole process (all threads, gradwatch's writer included;"
    " for gradwatch the block includes close(), which writes what is still queued) / steps",
}


@dataclass
class VariantState:
    """One variant's own copy of the model and optimizer, and what was measured on it."""

    name: str
    model: nn.Module
    optimizer: torch.optim.Optimizer
    step_fn: StepFn
    steps_done: int = 0
    #: per metric, one value (seconds per step) per repetition
    blocks: dict[str, list[float]] = field(default_factory=lambda: {m: [] for m in METRICS})
    block_means: list[float] = field(default_factory=list)  # wall, seconds
    peak_rss_kib: list[int] = field(default_factory=list)
    settle_s: list[float] = field(default_factory=list)  # wall of each block's lead-in
    watch_s: list[float] = field(default_factory=list)  # gradwatch only
    fingerprint_s: list[float] = field(default_factory=list)
    close_s: list[float] = field(default_factory=list)
    #: --steady: the gradwatch run attached for every block, and each block's catch-up
    #: (``run.flush()`` after the timed steps: what the writer still had to do)
    run: Any = None
    catchup_s: list[float] = field(default_factory=list)


def make_variants(work: Workload, steps: int) -> dict[str, VariantState]:
    """Three identical copies of the seeded model, each with its own Adam."""
    out: dict[str, VariantState] = {}
    for name in VARIANTS:
        model = copy.deepcopy(work.model).train()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        if name == "lower_bound":
            step_fn: StepFn = LowerBound(model, optimizer, steps).step
        else:
            step_fn = plain_step(model, optimizer, unwatched=name == "plain")
        out[name] = VariantState(name, model, optimizer, step_fn)
    return out


def collection_parts(work: Workload, n: int = 50) -> dict[str, float]:
    """Training-thread CPU ms (median of ``n``) of the collection work alone, without the
    training step, on a copy of the model's parameters with random gradients: each part of
    the lower bound and its whole, the cheaper non-finite check gradwatch does on the CPU
    (``isfinite`` of the norms it has; exact counts only where one is not finite), and
    gradwatch's own statistics (``StepStats.before_step`` + ``after_step``, an internal
    API, as the hooks call it) and batch checksum."""
    model = copy.deepcopy(work.model)
    params = [p.detach() for p in model.parameters()]
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    snap = [p.clone() for p in params]
    norms = torch._foreach_norm
    grad_norms = torch.stack(norms(grads))
    buffer = torch.zeros((len(params), 4), dtype=torch.float64)
    stepstats = StepStats(list(model.parameters()), torch.device("cpu"), grads_after=True)
    x = work.batches[0][0]

    def lower_bound() -> None:
        gn = torch.stack(norms(grads))
        nf = nonfinite_counts(grads, gn)
        torch._foreach_copy_(snap, params)
        pn = norms(params)
        torch._foreach_sub_(snap, params)
        un = norms(snap)
        stacked = [gn, torch.stack(pn), torch.stack(un), nf]
        buffer.copy_(torch.stack(stacked, dim=1))

    parts: dict[str, Callable[[], object]] = {
        "grad_norms": lambda: torch.stack(norms(grads)),
        "nonfinite_from_norms": lambda: nonfinite_counts(grads, grad_norms),
        "snapshot_copy": lambda: torch._foreach_copy_(snap, params),
        "param_norms": lambda: torch.stack(norms(params)),
        "update_sub_and_norms": lambda: (torch._foreach_sub_(snap, params), norms(snap)),
        "lower_bound_total": lower_bound,
        "gradwatch_stepstats": lambda: stepstats.after_step(stepstats.before_step()),
        "gradwatch_batch_checksum": lambda: batch_checksum((x,), {}),
    }
    out: dict[str, float] = {}
    with torch.no_grad():
        for key, fn in parts.items():
            fn()
            times = []
            for _ in range(n):
                c0 = time.thread_time()
                fn()
                times.append(time.thread_time() - c0)
            out[key] = statistics.median(times) * 1e3
    return out


# -- measurement ----------------------------------------------------------------------------


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS counter (VmHWM) of this process; False if not allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _peak_rss_kib() -> int:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return -1


def timed_steps(
    state: VariantState, batches: Sequence[Batch], n: int
) -> tuple[list[float], list[float]]:
    """Run ``n`` steps of one variant; the wall and training-thread CPU seconds of each."""
    wall: list[float] = []
    cpu: list[float] = []
    perf, thread_time = time.perf_counter, time.thread_time
    for j in range(n):
        x, y = batches[(state.steps_done + j) % len(batches)]
        c0 = thread_time()
        t0 = perf()
        state.step_fn(j, x, y)
        t1 = perf()
        c1 = thread_time()
        wall.append(t1 - t0)
        cpu.append(c1 - c0)
    state.steps_done += n
    return wall, cpu


@contextlib.contextmanager
def attached(state: VariantState, data_dir: Path) -> Iterator[None]:
    """A fresh gradwatch run around one block; its setup and teardown are timed apart."""
    t0 = time.perf_counter()
    run = gradwatch.watch(state.model, state.optimizer, every=1, data_dir=data_dir)
    t1 = time.perf_counter()
    # the slow half of the fingerprint (git, installed packages) runs once per run on a
    # helper thread: let it finish so that it does not count as per-step cost
    for thread in run.context.background:
        thread.join()
    t2 = time.perf_counter()
    try:
        yield
    finally:
        t3 = time.perf_counter()
        run.close()
        t4 = time.perf_counter()
        state.watch_s.append(t1 - t0)
        state.fingerprint_s.append(t2 - t1)
        state.close_s.append(t4 - t3)
        if run.context.internal_errors:
            raise RuntimeError(f"gradwatch reported {run.context.internal_errors} internal errors")


def run_block(
    state: VariantState,
    work: Workload,
    steps: int,
    data_dir: Path,
    record: bool,
    settle: int = 0,
) -> None:
    """One block of one variant: ``settle`` untimed lead-in steps, then ``steps`` timed
    ones. gradwatch is either attached for exactly this block (a fresh run), or, with a
    run attached throughout (``state.run``, --steady), flushed after the timed steps: the
    flush waits until the writer has handled every row of the block, and its wall time,
    spread over the block's steps, is added to the block's step time (so the writer's
    work never lands on another variant's block, and is never left out)."""
    rss_ok = _reset_peak_rss()
    fresh = state.name == "gradwatch" and state.run is None
    ctx = attached(state, data_dir) if fresh else contextlib.nullcontext()
    catchup = 0.0
    with ctx:
        lead = timed_steps(state, work.batches, settle)[0] if settle else []
        p0 = time.process_time()
        wall, cpu = timed_steps(state, work.batches, steps)
        if state.run is not None:
            t0 = time.perf_counter()
            state.run.flush()
            catchup = time.perf_counter() - t0
    process_cpu = (time.process_time() - p0) / steps
    if record:
        state.blocks["wall"].append(statistics.median(wall) + catchup / steps)
        state.blocks["thread_cpu"].append(statistics.median(cpu))
        state.blocks["process_cpu"].append(process_cpu)
        state.block_means.append(statistics.fmean(wall) + catchup / steps)
        state.settle_s.append(sum(lead))
        state.peak_rss_kib.append(_peak_rss_kib() if rss_ok else -1)
        if state.run is not None:
            state.catchup_s.append(catchup)
    else:  # warm-up: forget the setup timings too
        state.watch_s.clear()
        state.fingerprint_s.clear()
        state.close_s.clear()


def one_time_costs(
    states: dict[str, VariantState], work: Workload, data_dir: Path, settle: int, n: int
) -> None:
    """--steady: ``n`` fresh gradwatch runs, each paired with a plain block of the same
    length, for the one-time costs (``watch()``, the fingerprint thread, the first
    ``settle`` steps over plain's, ``close()``); the step times are not recorded."""
    gw, plain = states["gradwatch"], states["plain"]
    for _ in range(n):
        plain.settle_s.append(sum(timed_steps(plain, work.batches, settle)[0]))
        with attached(gw, data_dir):
            gw.settle_s.append(sum(timed_steps(gw, work.batches, settle)[0]))


def bench_model(
    name: str,
    reps: int,
    steps: int,
    warmup: int,
    batch_size: int,
    data_dir: Path,
    triples: int,
    parts_n: int = 50,
    settle: int = 0,
    turn: int = 2,
    steady: bool = True,
    fresh_runs: int = 3,
    block_seconds: float = 0.0,
) -> dict[str, Any]:
    """All repetitions of one model; returns its JSON section."""
    work = make_workload(name, batch_size)
    states = make_variants(work, steps)
    print(
        f"[{name}] {work.description}: {work.n_params:,} parameters in {work.n_tensors} tensors",
        flush=True,
    )
    t_start = time.perf_counter()
    gw = states["gradwatch"]
    if steady:  # one run through every block, as in a training run
        gw.run = gradwatch.watch(gw.model, gw.optimizer, every=1, data_dir=data_dir)
        for thread in gw.run.context.background:
            thread.join()
    for state in states.values():  # warm-up: allocator, Adam state, first hooks
        run_block(state, work, warmup, data_dir, record=False)
    if steady and block_seconds > 0:  # blocks as long as the windows gradwatch forms
        plain_s = statistics.median(timed_steps(states["plain"], work.batches, 10)[0])
        steps = max(steps, math.ceil(block_seconds / plain_s))
        print(f"[{name}] {steps} timed steps per block ({plain_s * 1e3:.2f} ms plain)", flush=True)
    load: list[float] = []
    for rep in range(reps):
        order = VARIANTS[rep % 3 :] + VARIANTS[: rep % 3]
        for v in order:
            run_block(states[v], work, steps, data_dir, record=True, settle=settle)
        load.append(os.getloadavg()[0])
        line = "  ".join(f"{v} {states[v].blocks['wall'][-1] * 1e3:7.3f}" for v in VARIANTS)
        print(
            f"[{name}] rep {rep + 1}/{reps}  wall median ms: {line}  (load {load[-1]:.2f})",
            flush=True,
        )
    if steady:
        gw.run.close()
        if gw.run.context.internal_errors:
            raise RuntimeError(
                f"gradwatch reported {gw.run.context.internal_errors} internal errors"
            )
        gw.run = None
        for v in VARIANTS:  # the lead-ins of the timed blocks are not one-time costs here
            states[v].settle_s.clear()
        if settle:
            one_time_costs(states, work, data_dir, settle, fresh_runs)
    result = summarize(work, states, time.perf_counter() - t_start, settle)
    result["steady"] = steady
    result["steps_per_block"] = steps
    if steady:
        result["catchup_ms"] = _stats([t * 1e3 for t in gw.catchup_s])
    result["batch_size"] = batch_size
    result["collection_parts_cpu_ms"] = collection_parts(work, parts_n)
    if triples:
        print(f"[{name}] alternating every step: {triples} triples", flush=True)
        result["alternating"] = alternating(work, triples, data_dir, turn)
    result["loadavg_1min_per_rep"] = load
    return result


def alternating(work: Workload, triples: int, data_dir: Path, turn: int = 2) -> dict[str, Any]:
    """A finer-grained check: one gradwatch run attached for the whole measurement, and the
    three variants take turns (rotating order), so each step of a variant is compared with
    the plain step right next to it. Each turn is ``turn`` steps, the last one timed: with
    two, a timed step follows a step of its own variant, as in a training loop. (Timing the first
    step of a turn charged each variant for re-reading its code and data after the other
    two, which weighs most on the variant with the most Python state: gradwatch.) Per
    metric: the median over triples of (variant − plain) in ms."""
    states = make_variants(work, 1)
    gw = states["gradwatch"]
    run = gradwatch.watch(gw.model, gw.optimizer, every=1, data_dir=data_dir)
    for thread in run.context.background:
        thread.join()
    samples: dict[str, dict[str, list[float]]] = {v: {"wall": [], "cpu": []} for v in VARIANTS}
    try:
        for state in states.values():
            timed_steps(state, work.batches, 3)
        for i in range(triples):
            for v in VARIANTS[i % 3 :] + VARIANTS[: i % 3]:
                if turn > 1:  # untimed: the caches as the variant's own step leaves them
                    timed_steps(states[v], work.batches, turn - 1)
                wall, cpu = timed_steps(states[v], work.batches, 1)
                samples[v]["wall"].append(wall[0])
                samples[v]["cpu"].append(cpu[0])
    finally:
        run.close()
    out: dict[str, Any] = {"triples": triples, "turn": turn}
    for metric in ("wall", "cpu"):
        plain = samples["plain"][metric]
        entry: dict[str, Any] = {"plain_ms": statistics.median(plain) * 1e3}
        for v in ("lower_bound", "gradwatch"):
            diffs = [a - b for a, b in zip(samples[v][metric], plain, strict=True)]
            entry[f"{v}_added_ms"] = statistics.median(diffs) * 1e3
        lb, g = entry["lower_bound_added_ms"], entry["gradwatch_added_ms"]
        entry["added_factor"] = g / lb if lb > 0 else None
        out[metric] = entry
    return out


def _stats(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _added_factor(variants: dict[str, Any], metric: str) -> float | None:
    """gradwatch's median added time / the lower bound's; None when the lower bound's is not
    above zero (below the noise: the factor means nothing)."""
    lb = variants["lower_bound"][metric]["added_ms"]["median"]
    gw = variants["gradwatch"][metric]["added_ms"]["median"]
    return gw / lb if lb > 0 else None


def summarize(
    work: Workload, states: dict[str, VariantState], seconds: float, settle: int = 0
) -> dict[str, Any]:
    """Per variant and metric: medians over repetitions, and ratios and added times paired
    with the plain block of the same repetition (median, min, max over repetitions)."""
    variants: dict[str, Any] = {}
    for v, s in states.items():
        entry: dict[str, Any] = {}
        for metric in METRICS:
            blocks = s.blocks[metric]
            plain = states["plain"].blocks[metric]
            m: dict[str, Any] = {
                "per_rep_ms": [t * 1e3 for t in blocks],
                "median_ms": statistics.median(blocks) * 1e3,
                "best_ms": min(blocks) * 1e3,
            }
            if v != "plain":
                ratios = [t / p for t, p in zip(blocks, plain, strict=True)]
                added = [(t - p) * 1e3 for t, p in zip(blocks, plain, strict=True)]
                m["ratio_to_plain"] = {**_stats(ratios), "per_rep": ratios}
                m["added_ms"] = {**_stats(added), "per_rep": added}
                m["best_added_ms"] = (min(blocks) - min(plain)) * 1e3
            entry[metric] = m
        entry["wall_block_mean_ms"] = [t * 1e3 for t in s.block_means]
        entry["peak_rss_mib"] = [k / 1024 if k >= 0 else None for k in s.peak_rss_kib]
        if v == "gradwatch":
            entry["watch_ms"] = _stats([t * 1e3 for t in s.watch_s])
            entry["fingerprint_thread_ms"] = _stats([t * 1e3 for t in s.fingerprint_s])
            entry["close_ms"] = _stats([t * 1e3 for t in s.close_s])
            if settle:  # the lead-in steps of each run, in all, over plain's
                lead = zip(s.settle_s, states["plain"].settle_s, strict=True)
                entry["first_steps_added_ms"] = _stats([(g - p) * 1e3 for g, p in lead])
        variants[v] = entry
    factors = {metric: _added_factor(variants, metric) for metric in METRICS}
    best: dict[str, float | None] = {}
    for metric in METRICS:
        lb = variants["lower_bound"][metric]["best_added_ms"]
        gw = variants["gradwatch"][metric]["best_added_ms"]
        best[metric] = gw / lb if lb > 0 else None
    return {
        "description": work.description,
        "params": work.n_params,
        "tensors": work.n_tensors,
        "seconds": seconds,
        "variants": variants,
        "added_factor": factors,
        "best_of_reps_added_factor": best,
        "goal_holds": {metric: None if f is None else f <= GOAL for metric, f in factors.items()},
    }


# -- report ---------------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    """CPU model, core count, versions, threads and date of this run."""
    cpu = platform.processor() or "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    digest = hashlib.sha256()
    source_dir = Path(gradwatch.__file__).resolve().parent
    for path in sorted(source_dir.rglob("*.py")):
        digest.update(str(path.relative_to(source_dir)).encode() + b"\0" + path.read_bytes())
    return {
        "cpu_model": cpu,
        "logical_cpus": os.cpu_count(),
        "torch": torch.__version__,
        "gradwatch": gradwatch.__version__,
        "gradwatch_sources_sha256": digest.hexdigest()[:16],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch_num_threads": torch.get_num_threads(),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }


def _range(entry: dict[str, float], fmt: str = "{:.3f}") -> str:
    return f"{fmt.format(entry['median'])} [{fmt.format(entry['min'])}, {fmt.format(entry['max'])}]"


def _verdict(holds: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "n/a (LB added ≤ 0)"}[holds]


def _factor(f: float | None) -> str:
    return "n/a" if f is None else f"{f:.2f}×"


def _run_text(cfg: dict[str, Any], models: dict[str, Any]) -> str:
    """How gradwatch was attached, and the writer's catch-up where it was flushed."""
    if cfg.get("gradwatch_run") == "fresh per block":
        return (
            "gradwatch: a fresh run attached to every gradwatch block (its start-up work on"
            " the writer thread falls in the block), closed after it."
        )
    catchup = ", ".join(
        f"{name} {r['catchup_ms']['median']:.2f} ms [{r['catchup_ms']['min']:.2f},"
        f" {r['catchup_ms']['max']:.2f}]"
        for name, r in models.items()
        if "catchup_ms" in r
    )
    return (
        "gradwatch: one run attached through every block, as in a training run, and flushed"
        " after each of its blocks: `run.flush()` waits until the writer thread has handled"
        " every row of the block, and that wait, spread over the block's steps, is added to"
        " gradwatch's step time (so the writer's work is neither left out nor charged to"
        f" another variant). The flush per block, median [min, max]: {catchup}. The one-time"
        " costs come from fresh runs measured apart."
    )


def markdown(result: dict[str, Any]) -> str:
    """The results as a Markdown document: wall-time table, CPU-time table, setup costs."""
    m, cfg = result["machine"], result["config"]
    models = result["models"]
    loads = [x for r in models.values() for x in r["loadavg_1min_per_rep"]]
    lines = [
        f"# gradwatch collector overhead at {result.get('threads_label', '?')} threads",
        "",
        f"{m['date']} · {m['cpu_model']} ({m['logical_cpus']} logical CPUs) · torch {m['torch']}"
        f" · gradwatch {m['gradwatch']} (sources {m['gradwatch_sources_sha256']})"
        f" · `torch.set_num_threads({m['torch_num_threads']})`"
        f" · 1-min load average during the run {min(loads):.2f}–{max(loads):.2f}",
        "",
        f"`{cfg['command']}` — {_reps_text(cfg['reps'])} repetitions × {_steps_text(cfg, models)}"
        f" steps per variant (+{cfg['warmup']} warm-up steps; every block starts with"
        f" {cfg.get('settle_steps', 0)} untimed steps), Adam, every=1, interleaved in"
        " rotating order.",
        "",
        _run_text(cfg, models),
        "",
        "## Wall time per step",
        "",
        "Step times: median over repetitions of each block's median (ms). Ratio and added"
        " time are paired with the plain block of the same repetition: median [min, max]"
        " over repetitions. GW added / LB added is the ratio of the two median added times.",
        "",
        "| model | params / tensors | plain ms | lower bound ms | gradwatch ms "
        "| lower bound / plain | gradwatch / plain | LB added ms | GW added ms "
        f"| GW added / LB added | ≤ {GOAL}× |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in models.items():
        v = {k: e["wall"] for k, e in r["variants"].items()}
        lines.append(
            f"| {name} | {r['params']:,} / {r['tensors']} "
            f"| {v['plain']['median_ms']:.3f} "
            f"| {v['lower_bound']['median_ms']:.3f} "
            f"| {v['gradwatch']['median_ms']:.3f} "
            f"| {_range(v['lower_bound']['ratio_to_plain'])} "
            f"| {_range(v['gradwatch']['ratio_to_plain'])} "
            f"| {_range(v['lower_bound']['added_ms'])} "
            f"| {_range(v['gradwatch']['added_ms'])} "
            f"| {_factor(r['added_factor']['wall'])} "
            f"| {_verdict(r['goal_holds']['wall'])} |"
        )
    lines += [
        "",
        "## CPU time per step",
        "",
        "Less sensitive to other processes on the machine than wall time. Training thread:"
        f" {METRIC_DOC['thread_cpu']}. Process: {METRIC_DOC['process_cpu']}."
        " Added: median [min, max] over repetitions, paired with plain.",
        "",
        "| model | metric | plain ms | lower bound ms | gradwatch ms | LB added ms "
        f"| GW added ms | GW added / LB added | ≤ {GOAL}× |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in models.items():
        for metric, label in (("thread_cpu", "training thread"), ("process_cpu", "process")):
            v = {k: e[metric] for k, e in r["variants"].items()}
            lines.append(
                f"| {name} | {label} "
                f"| {v['plain']['median_ms']:.3f} "
                f"| {v['lower_bound']['median_ms']:.3f} "
                f"| {v['gradwatch']['median_ms']:.3f} "
                f"| {_range(v['lower_bound']['added_ms'])} "
                f"| {_range(v['gradwatch']['added_ms'])} "
                f"| {_factor(r['added_factor'][metric])} "
                f"| {_verdict(r['goal_holds'][metric])} |"
            )
    lines += [
        "",
        "## Best of repetitions",
        "",
        "The least value of each variant over the repetitions (the one least disturbed by"
        " other processes), and the added times between those minima (ms).",
        "",
        "| model | metric | plain ms | lower bound ms | gradwatch ms | LB added ms "
        "| GW added ms | GW added / LB added |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in models.items():
        for metric in METRICS:
            v = {k: e[metric] for k, e in r["variants"].items()}
            lines.append(
                f"| {name} | {metric} | {v['plain']['best_ms']:.3f} "
                f"| {v['lower_bound']['best_ms']:.3f} | {v['gradwatch']['best_ms']:.3f} "
                f"| {v['lower_bound']['best_added_ms']:.3f} "
                f"| {v['gradwatch']['best_added_ms']:.3f} "
                f"| {_factor(r['best_of_reps_added_factor'][metric])} |"
            )
    alt = {name: r["alternating"] for name, r in models.items() if "alternating" in r}
    if alt:
        lines += [
            "",
            "## Alternating every step",
            "",
            f"One gradwatch run attached throughout; plain, lower bound and gradwatch take"
            f" turns of {cfg.get('alternate_turn', 1)} step(s) in rotating order"
            f" ({cfg['alternate_triples']} triples), the last step of each turn timed (with"
            " two, it follows a step of its own variant, as in training), and each variant"
            " step is compared with the plain step next to"
            " it: the median of those differences (ms). The finest pairing, so the least"
            " disturbed by other processes; it leaves out watch()/close() and the first steps"
            " of each run, and gradwatch's writer thread works through every variant's"
            " steps, so part of its cost lands on the other two.",
            "",
            "| model | metric | plain ms | LB added ms | GW added ms | GW added / LB added "
            f"| ≤ {GOAL}× |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, a in alt.items():
            for metric, label in (("wall", "wall"), ("cpu", "training thread CPU")):
                e = a[metric]
                f = e["added_factor"]
                lines.append(
                    f"| {name} | {label} | {e['plain_ms']:.3f} "
                    f"| {e['lower_bound_added_ms']:.3f} | {e['gradwatch_added_ms']:.3f} "
                    f"| {_factor(f)} | {_verdict(None if f is None else f <= GOAL)} |"
                )
    lines += [
        "",
        "## One-time costs of each gradwatch run",
        "",
        "Wall ms, median [min, max] over runs; not in the step times above. First steps:"
        f" the {cfg.get('settle_steps', 0)} untimed steps that start each block, gradwatch's"
        " wall time over plain's, in all (its first backward walks the graph for the forward"
        " order, its first step allocates the snapshot and runs every check).",
        "",
        "| model | watch() | fingerprint helper thread | first steps, added | close() |",
        "|---|---|---|---|---|",
    ]
    for name, r in models.items():
        g = r["variants"]["gradwatch"]
        first = g.get("first_steps_added_ms")
        lines.append(
            f"| {name} | {_range(g['watch_ms'], '{:.1f}')} "
            f"| {_range(g['fingerprint_thread_ms'], '{:.1f}')} "
            f"| {_range(first, '{:.1f}') if first else 'n/a'} "
            f"| {_range(g['close_ms'], '{:.1f}')} |"
        )
    parts = list(next(iter(models.values()))["collection_parts_cpu_ms"])
    lines += [
        "",
        "## Collection work alone",
        "",
        "Training-thread CPU ms of the collection work without the training step, on a copy"
        " of the model's parameters with random gradients, median of 50 (5 with --quick; much"
        " less noisy"
        " than the step times). `nonfinite_from_norms` is the lower bound's non-finite count"
        " (`isfinite` of the gradient norms it already has; elements are counted only where"
        " a norm is not finite). `lower_bound_total` is the"
        " lower bound's whole collection; `gradwatch_stepstats` is gradwatch's"
        " `StepStats.before_step` + `after_step` (norms, counts, snapshot, update) and"
        " `gradwatch_batch_checksum` its checksum of the input batch; gradwatch's hooks,"
        " bookkeeping and writer thread come on top.",
        "",
        "| model | " + " | ".join(parts) + " |",
        "|---|" + "---|" * len(parts),
    ]
    for name, r in models.items():
        cells = " | ".join(f"{r['collection_parts_cpu_ms'][k]:.3f}" for k in parts)
        lines.append(f"| {name} | {cells} |")
    lines += ["", "## Models", ""]
    lines += [
        f"- **{name}**: {r['description']} ({r['params']:,} parameters, {r['tensors']} tensors)"
        for name, r in models.items()
    ]
    lines += [
        "",
        "Peak RSS is not compared: the three variants share one process, so memory freed by"
        " one block stays mapped for the next (the per-block VmHWM is in the JSON for"
        " reference only). The extra memory both collectors hold is one copy of the"
        " parameters (the pre-step snapshot).",
        "",
    ]
    return "\n".join(lines)


# -- profiling ------------------------------------------------------------------------------


def profile(name: str, steps: int, batch_size: int, data_dir: Path, top: int) -> None:
    """cProfile of the training thread over ``steps`` gradwatch steps (after a warm-up)."""
    work = make_workload(name, batch_size)
    state = make_variants(work, steps)["gradwatch"]
    run_block(state, work, 5, data_dir, record=False)
    with attached(state, data_dir):
        prof = cProfile.Profile()
        prof.enable()
        timed_steps(state, work.batches, steps)
        prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out).strip_dirs()
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    print(out.getvalue())


# -- command line ---------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=40, help="repetitions (default 40)")
    p.add_argument("--steps", type=int, default=20, help="steps per block (at least; default 20)")
    p.add_argument(
        "--block-seconds",
        type=float,
        default=BLOCK_SECONDS,
        help="one run through all blocks: make each timed block at least this long (from the"
        f" plain step's time after warm-up; default {BLOCK_SECONDS} s, the span of rows"
        " gradwatch checks and writes together on the CPU); 0: --steps exactly",
    )
    p.add_argument("--warmup", type=int, default=10, help="warm-up steps per variant")
    p.add_argument(
        "--settle",
        type=int,
        default=10,
        help="untimed lead-in steps at the start of every block (default 10); for gradwatch"
        " the first steps of a fresh run, reported with the one-time costs",
    )
    p.add_argument(
        "--batch-size", type=int, default=None, help=f"override the per-model batch {BATCH_SIZE}"
    )
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated subset")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON path (.md beside it)")
    p.add_argument("--threads", default="default,1,all", help=thread_settings.SPEC_HELP)
    p.add_argument(
        "--alternate",
        type=int,
        default=300,
        metavar="K",
        help="also K triples of steps alternating every step under one run (0: skip)",
    )
    p.add_argument(
        "--turn",
        type=int,
        default=2,
        help="steps per turn when alternating, the last one timed (default 2; 1 times a step"
        " that follows another variant's)",
    )
    p.add_argument(
        "--fresh-per-block",
        action="store_true",
        help="attach a fresh gradwatch run to every gradwatch block (each block then also"
        " carries a run's start-up work on the writer thread) instead of one run through"
        " all blocks, flushed after each",
    )
    p.add_argument(
        "--fresh-runs",
        type=int,
        default=3,
        help="one run through all blocks: fresh runs measured apart for the one-time costs",
    )
    p.add_argument("--quick", action="store_true", help="smoke run: 2 reps x 2 steps")
    p.add_argument("--profile", metavar="MODEL", help="cProfile gradwatch on MODEL and exit")
    args = p.parse_args(argv)
    if args.quick:
        args.reps, args.steps, args.warmup, args.alternate, args.settle = 2, 2, 1, 2, 1
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    try:
        args.threads = thread_settings.parse(args.threads)
    except ValueError as e:
        p.error(str(e))
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown or args.reps < 1 or args.steps < 1 or args.turn < 1 or args.settle < 0:
        p.error(
            "need --reps >= 1, --steps >= 1, --turn >= 1, --settle >= 0 and models among"
            f" {MODELS}; got {unknown}"
        )
    return args


def _steps_text(cfg: dict[str, Any], models: dict[str, Any]) -> str:
    """Timed steps per block: ``20``, or per model where blocks were stretched to last
    ``--block-seconds`` (``20 (cnn: 68)``, and why)."""
    per = {m: r.get("steps_per_block", cfg["steps"]) for m, r in models.items()}
    if all(n == cfg["steps"] for n in per.values()):
        return str(cfg["steps"])
    other = ", ".join(f"{m}: {n}" for m, n in per.items() if n != cfg["steps"])
    return (
        f"{cfg['steps']} ({other}: each block lasts at least {cfg.get('block_seconds')} s, the"
        " span of steps a run checks and writes together on the CPU, so that flushing after"
        " a block does not cut its windows short)"
    )


def _reps_text(reps: int | dict[str, int]) -> str:
    """``40`` or ``40 (cnn: 200)``: the repetitions of a run, per model where they differ."""
    if isinstance(reps, int):
        return str(reps)
    common = statistics.mode(reps.values())
    other = ", ".join(f"{m}: {n}" for m, n in reps.items() if n != common)
    return f"{common} ({other})" if other else str(common)


def _reps(args: argparse.Namespace, model: str) -> int:
    """Repetitions of ``model``: ``--reps`` times its scale (not in a smoke run)."""
    return args.reps if args.quick else args.reps * REPS_SCALE[model]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark at each thread setting, print progress, write the JSON and the
    Markdown tables."""
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gradwatch-bench-") as tmp:
        data_dir = Path(tmp)
        if args.profile:
            thread_settings.use(args.threads[0])
            batch = args.batch_size or BATCH_SIZE[args.profile]
            profile(args.profile, max(args.steps, 50), batch, data_dir, top=30)
            return 0
        t0 = time.perf_counter()
        runs = [measure(args, data_dir) for n in args.threads if thread_settings.use(n)]
    md = thread_settings.write(args.out, runs, markdown)
    print(md)
    print(f"wrote {args.out} and its .md in {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


def measure(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    """Every model at the current thread setting: one run's JSON."""
    result: dict[str, Any] = {
        "machine": machine_info(),
        "config": {
            "command": " ".join(["python", "benchmarks/collector_overhead.py", *sys.argv[1:]]),
            "reps": {m: _reps(args, m) for m in args.models},
            "steps": args.steps,
            "block_seconds": args.block_seconds,
            "warmup": args.warmup,
            "batch_size": {m: args.batch_size or BATCH_SIZE[m] for m in args.models},
            "seed": SEED,
            "optimizer": "Adam(lr=1e-3)",
            "gradwatch_options": {"every": 1},
            "alternate_triples": args.alternate,
            "settle_steps": args.settle,
            "alternate_turn": args.turn,
            "gradwatch_run": (
                "fresh per block" if args.fresh_per_block else "one through all blocks"
            ),
            "goal": f"gradwatch added time <= {GOAL} x lower-bound added time",
        },
        "models": {},
    }
    t0 = time.perf_counter()
    for name in args.models:
        result["models"][name] = bench_model(
            name,
            _reps(args, name),
            args.steps,
            args.warmup,
            args.batch_size or BATCH_SIZE[name],
            data_dir,
            args.alternate,
            5 if args.quick else 50,
            args.settle,
            args.turn,
            steady=not args.fresh_per_block,
            fresh_runs=1 if args.quick else args.fresh_runs,
            block_seconds=0.0 if args.quick else args.block_seconds,
        )
    result["seconds"] = time.perf_counter() - t0
    return result


if __name__ == "__main__":
    sys.exit(main())
