"""``benchmarks/nanogpt_overhead.py`` without nanoGPT itself (never vendored): its data set
is real and readable as nanoGPT reads it, its log parser reads nanoGPT's iteration lines,
and a folder that is not a checkout is refused before anything runs."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
import nanogpt_overhead as ng


def test_local_dataset_is_what_nanogpt_reads(tmp_path: Path) -> None:
    out = ng.prepare(tmp_path)
    meta = pickle.loads((out / "meta.pkl").read_bytes())
    train = np.memmap(out / "train.bin", dtype=np.uint16, mode="r")
    val = np.memmap(out / "val.bin", dtype=np.uint16, mode="r")
    assert len(train) > 100_000 and len(val) > 10_000
    assert int(train.max()) < meta["vocab_size"] == len(meta["itos"])
    text = "".join(meta["itos"][int(i)] for i in train[:200])
    assert "import" in text or "def " in text or '"""' in text


def test_iteration_times_skip_the_first_iterations() -> None:
    log = (
        "step 0: train loss 4.6, val loss 4.6\n"
        "iter 0: loss 4.6012, time 812.55ms, mfu -100.00%\n"
        "iter 1: loss 4.1000, time 31.20ms, mfu -100.00%\n"
        "iter 2: loss nan, time 29.80ms, mfu 0.01%\n"
    )
    assert ng.iteration_ms(log, skip=1) == [31.2, 29.8]
    assert ng.iteration_ms(log, skip=0)[0] == 812.55


def test_a_folder_without_train_py_is_refused(tmp_path: Path) -> None:
    script = Path(ng.__file__)
    done = subprocess.run(
        [sys.executable, str(script), "--nanogpt", str(tmp_path), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "is not a nanoGPT checkout" in done.stderr
    assert not (tmp_path / "data").exists() and not (tmp_path / "o.json").exists()
