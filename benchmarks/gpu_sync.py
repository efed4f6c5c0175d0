"""GPU proof: gradwatch adds no host synchronisation per step, and what it costs on CUDA.

Needs a CUDA GPU (exits with status 2 without one; ``--device cpu`` runs the same code
paths for a smoke test, without the synchronisation check, which is CUDA-only).

1. **No per-step sync.** For each model, a few warm-up steps run first (one-time set-up
   such as uploading cached index tensors is a blocking copy by design), then the
   measured steps run under ``torch.cuda.set_sync_debug_mode("error")``: any operation
   that synchronises the host with the device (``.item()``, ``.cpu()``, a blocking copy,
   ``nonzero``…) raises. Plain training runs under it first, to show the loop itself is
   sync-free. The collector's own every-``k`` flush (``Transfer.drain``: a
   ``non_blocking`` copy into pinned memory plus a CUDA event, waited for on the I/O
   thread) is the one place allowed to synchronise: it runs with the debug mode relaxed
   and is counted. ``--strict`` runs without that exception too.
2. **Overhead.** Per-step time of plain training, of training with ``gradwatch.watch``
   (every=1, all default checks, bf16 autocast, no GradScaler — its own ``found_inf``
   read is a sync inside torch), and of ``wandb.watch(model, log="gradients",
   log_freq=1)`` in offline mode if ``wandb`` is installed; blocks of ``--steps`` steps,
   rotated over ``--reps`` repetitions, median per variant.

Models: a ResNet-18-style CNN (batch 64, 3×64×64) and a transformer encoder
(6 layers, d=512, 8 heads, sequence 256, batch 32).

Usage::

    python benchmarks/gpu_sync.py                       # writes benchmarks/results/gpu_sync.*
    python benchmarks/gpu_sync.py --device cpu --steps 3 --reps 1 --models cnn --out /tmp/x
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

import gradwatch
from gradwatch.stats.transfer import Transfer

RESULTS = Path(__file__).parent / "results"


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.skip(x))


def resnet18(classes: int = 100) -> nn.Module:
    layers: list[nn.Module] = [nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU()]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


class Encoder(nn.Module):
    def __init__(self, vocab: int = 8000, d: int = 512, layers: int = 6) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, 8, 4 * d, batch_first=True, dropout=0.1)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.encoder(self.embed(x)))
        return out.flatten(0, 1)


def make(name: str, device: torch.device) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """The model and one batch, both on ``device`` (no host-to-device copies per step)."""
    g = torch.Generator(device=device).manual_seed(0)
    if name == "cnn":
        x = torch.randn(64, 3, 64, 64, device=device, generator=g)
        return resnet18().to(device), x, torch.randint(0, 100, (64,), device=device, generator=g)
    x = torch.randint(0, 8000, (32, 256), device=device, generator=g)
    y = torch.randint(0, 8000, (32 * 256,), device=device, generator=g)
    return Encoder().to(device), x, y


@contextlib.contextmanager
def sync_mode(mode: str | int, device: torch.device) -> Iterator[None]:
    if device.type != "cuda":
        yield
        return
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode(mode)
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(before)


class FlushException:
    """Relaxes the sync debug mode inside the collector's own flush, and counts flushes."""

    def __init__(self, device: torch.device, strict: bool) -> None:
        self.flushes = 0
        self.original = Transfer.drain
        outer = self

        def drain(transfer: Transfer[Any]) -> Any:
            outer.flushes += 1
            if strict:
                return outer.original(transfer)
            with sync_mode(0, device):
                return outer.original(transfer)

        Transfer.drain = drain  # type: ignore[method-assign]

    def restore(self) -> None:
        Transfer.drain = self.original  # type: ignore[method-assign]


def train_steps(model: nn.Module, opt: torch.optim.Optimizer, x: Any, y: Any, n: int) -> None:
    for _ in range(n):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()


def timed(device: torch.device, fn: Callable[[], None]) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t


def variant(
    kind: str, name: str, device: torch.device, steps: int, data_dir: str, strict: bool
) -> dict[str, Any]:
    """One block: build, warm up (sync allowed), then ``steps`` steps under the check."""
    torch.manual_seed(0)
    model, x, y = make(name, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    run: gradwatch.Run | None = None
    flush: FlushException | None = None
    if kind == "gradwatch":
        run = gradwatch.watch(model, opt, data_dir=data_dir, project="gpu-sync", name=name)
        flush = FlushException(device, strict)
    elif kind == "wandb":
        import wandb  # type: ignore[import-not-found]

        wandb.init(project="gpu-sync", mode="offline", dir=data_dir, reinit=True)
        wandb.watch(model, log="gradients", log_freq=1)
    train_steps(model, opt, x, y, 5)  # warm-up: kernels, allocator, one-time uploads
    error = None
    try:
        check = "error" if kind != "wandb" else 0  # wandb.watch syncs by design (.cpu())
        with sync_mode(check, device):
            seconds = timed(device, lambda: train_steps(model, opt, x, y, steps))
    except RuntimeError as exc:
        error, seconds = f"{type(exc).__name__}: {exc}"[:500], float("nan")
    finally:
        if flush is not None:
            flush.restore()
        if run is not None:
            run.close()
        if kind == "wandb":
            wandb.finish()
    if run is not None and error is None:
        # the I/O thread's work (waiting on the transfer's event, building records) ran
        # concurrently under the same process-wide mode: a sync there is an internal error
        stats = run.context.io.stats
        if run.context.internal_errors or stats.internal_errors:
            error = f"internal errors during the measured steps: {stats.last_error}"
    return {
        "ms_per_step": 1000 * seconds / steps,
        "sync_error": error,
        "flushes": None if flush is None else flush.flushes,
        "findings": None if run is None else [f.check for f in run.findings],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", default="cnn,transformer")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--strict", action="store_true", help="no exception for the flush either")
    ap.add_argument("--out", type=Path, default=RESULTS / "gpu_sync")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_sync: no CUDA GPU here; nothing measured", file=sys.stderr)
        return 2
    try:
        import wandb  # noqa: F401

        kinds = ["plain", "gradwatch", "wandb"]
    except ImportError:
        kinds = ["plain", "gradwatch"]
    os.environ.setdefault("WANDB_SILENT", "true")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            blocks: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
            for rep in range(args.reps):
                for kind in kinds[rep % len(kinds) :] + kinds[: rep % len(kinds)]:
                    blocks[kind].append(variant(kind, name, device, args.steps, tmp, args.strict))
            results[name] = {
                kind: {
                    "median_ms_per_step": statistics.median(b["ms_per_step"] for b in bs),
                    "sync_errors": sorted({b["sync_error"] for b in bs if b["sync_error"]}),
                    "flushes": bs[0]["flushes"],
                    "findings": bs[0]["findings"],
                }
                for kind, bs in blocks.items()
            }
    report = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else platform.processor(),
        "torch": torch.__version__,
        "gradwatch": gradwatch.__version__,
        "steps": args.steps,
        "reps": args.reps,
        "strict": args.strict,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    failed = any(r["sync_errors"] for m in results.values() for k, r in m.items() if k != "wandb")
    return 1 if failed else 0


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# GPU sync proof and overhead ({report['device']}, torch {report['torch']})",
        "",
        f"{report['steps']} steps per block, {report['reps']} blocks per variant, median; "
        f"sync debug mode 'error' on the measured steps (strict: {report['strict']}).",
        "",
        "| model | variant | ms/step | added | host syncs | flushes |",
        "|---|---|---:|---:|---|---:|",
    ]
    for name, kinds in report["results"].items():
        base = kinds["plain"]["median_ms_per_step"]
        for kind, r in kinds.items():
            ms = r["median_ms_per_step"]
            added = f"{(ms - base) / base:+.1%}" if kind != "plain" else ""
            syncs = "not checked" if kind == "wandb" else ("; ".join(r["sync_errors"]) or "none")
            flushes = r["flushes"] or ""
            lines.append(f"| {name} | {kind} | {ms:.2f} | {added} | {syncs} | {flushes} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
