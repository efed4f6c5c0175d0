"""Unmodified nanoGPT on the CPU, with and without ``gradwatch run``: added time per iteration.

nanoGPT is not vendored: pass a checkout (``--nanogpt DIR``, e.g. ``git clone
https://github.com/karpathy/nanoGPT``). Its ``train.py`` runs unchanged; the data set is
made locally (the text of the Python standard library's modules as characters, written as
``data/gradwatch_local/{train,val}.bin`` + ``meta.pkl`` inside the checkout), so nothing
is downloaded. Runs alternate ``plain`` / ``gradwatch`` (``python -m gradwatch run --
python train.py …``) in rotating order, each a fresh process at torch's default thread
count (``--threads`` to pin one). Per run: the median of nanoGPT's own per-iteration
``time`` lines after ``--skip`` iterations (iteration 0 holds an evaluation and start-up).

Usage::

    python benchmarks/nanogpt_overhead.py --nanogpt /tmp/nanoGPT          # ~5 min, quiet box
    python benchmarks/nanogpt_overhead.py --nanogpt /tmp/nanoGPT --runs 2 --iters 30
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).parent / "results"
DATASET = "gradwatch_local"
ITER_LINE = re.compile(r"^iter (\d+): loss [\d.naninf]+, time ([\d.]+)ms", re.MULTILINE)
MODEL = [
    "--device=cpu", "--compile=False", "--block_size=64", "--batch_size=12", "--n_layer=4",
    "--n_head=4", "--n_embd=128", "--dropout=0.0", "--eval_iters=2", "--log_interval=1",
    "--eval_interval=1000000", "--always_save_checkpoint=False",
]  # fmt: skip


def prepare(nanogpt: Path) -> Path:
    """Write the local character-level data set into the checkout; its folder."""
    out = nanogpt / "data" / DATASET
    out.mkdir(parents=True, exist_ok=True)
    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:120]
    text = "".join(f.read_text(encoding="utf-8", errors="ignore") for f in files)
    text = "".join(c for c in text if ord(c) < 128)
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    ids = np.array([stoi[c] for c in text], dtype=np.uint16)
    cut = int(0.9 * len(ids))
    ids[:cut].tofile(out / "train.bin")
    ids[cut:].tofile(out / "val.bin")
    meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}
    (out / "meta.pkl").write_bytes(pickle.dumps(meta))
    return out


def iteration_ms(log: str, skip: int) -> list[float]:
    """nanoGPT's per-iteration times (ms) from its output, the first ``skip`` left out."""
    return [float(ms) for it, ms in ITER_LINE.findall(log) if int(it) >= skip]


def one_run(kind: str, args: argparse.Namespace, data_dir: str) -> float:
    """One training process; the median iteration time in ms."""
    train = [sys.executable, "train.py", "config/train_shakespeare_char.py", *MODEL]
    train += [f"--dataset={DATASET}", f"--max_iters={args.iters}", f"--lr_decay_iters={args.iters}"]
    gw = [sys.executable, "-m", "gradwatch", "run", "--data-dir", data_dir, "--"]
    cmd = gw + train if kind == "gradwatch" else train
    env = {**os.environ, "WANDB_MODE": "disabled"}
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    done = subprocess.run(cmd, cwd=args.nanogpt, env=env, capture_output=True, text=True)
    times = iteration_ms(done.stdout, args.skip)
    if done.returncode != 0 or not times:
        raise SystemExit(f"{kind} run failed ({done.returncode}): {done.stderr[-1500:]}")
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nanogpt", type=Path, required=True, help="a nanoGPT checkout")
    p.add_argument("--runs", type=int, default=3, help="runs per variant (default 3)")
    p.add_argument("--iters", type=int, default=60, help="iterations per run (default 60)")
    p.add_argument("--skip", type=int, default=10, help="first iterations left out (10)")
    p.add_argument("--threads", type=int, default=0, help="OMP_NUM_THREADS (0: torch default)")
    p.add_argument("--out", type=Path, default=RESULTS / "nanogpt_overhead.json")
    args = p.parse_args(argv)
    if not (args.nanogpt / "train.py").is_file():
        p.error(f"{args.nanogpt} is not a nanoGPT checkout (no train.py)")
    if args.runs < 1 or args.iters <= args.skip:
        p.error("need --runs >= 1 and --iters > --skip")
    prepare(args.nanogpt)
    runs: dict[str, list[float]] = {"plain": [], "gradwatch": []}
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="gradwatch-nanogpt-") as tmp:
        for i in range(args.runs):
            for kind in ("plain", "gradwatch") if i % 2 == 0 else ("gradwatch", "plain"):
                runs[kind].append(one_run(kind, args, tmp))
                loads.append(os.getloadavg()[0])
                print(f"run {i + 1}/{args.runs} {kind}: {runs[kind][-1]:.1f} ms/iter", flush=True)
    report = summary(args, runs, loads)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    return 0


def summary(args: argparse.Namespace, runs: dict[str, list[float]], loads: list[float]) -> Any:
    """The report: per-run medians, the median of each variant, the added percentage."""
    plain, gw = statistics.median(runs["plain"]), statistics.median(runs["gradwatch"])
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(["python", "benchmarks/nanogpt_overhead.py", *sys.argv[1:]]),
        "threads": args.threads or "torch default",
        "load": [min(loads), max(loads)],
        "runs_ms_per_iter": runs,
        "plain_ms": plain,
        "gradwatch_ms": gw,
        "added_pct": (gw - plain) / plain * 100,
    }


def _runs(r: dict[str, Any], kind: str) -> str:
    return ", ".join(f"{x:.1f}" for x in r["runs_ms_per_iter"][kind])


def markdown(r: dict[str, Any]) -> str:
    """The report as a short Markdown table."""
    return (
        "# nanoGPT (unmodified, CPU) with and without gradwatch\n\n"
        f"{r['date']} · `{r['command']}` · threads: {r['threads']} · 1-min load average"
        f" {r['load'][0]:.2f}–{r['load'][1]:.2f}\n\n"
        "| variant | median ms/iteration (median of runs) | runs |\n|---|---:|---|\n"
        f"| plain | {r['plain_ms']:.1f} | {_runs(r, 'plain')} |\n"
        f"| gradwatch run | {r['gradwatch_ms']:.1f} | {_runs(r, 'gradwatch')} |\n\n"
        f"Added per iteration: {r['added_pct']:+.1f}% (goal ≤ +10%).\n"
    )


if __name__ == "__main__":
    sys.exit(main())
