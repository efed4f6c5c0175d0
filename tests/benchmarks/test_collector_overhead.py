"""The collector overhead benchmark runs end to end (a smoke run; the figures themselves
come from the full run, committed under benchmarks/results/)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.benchmarks.quick import quick_run

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))


def test_quick_run_writes_results_for_every_model(tmp_path: Path) -> None:
    out = tmp_path / "overhead.json"
    quick_run("collector_overhead.py", out)
    text = out.read_text()
    assert {"mlp", "cnn", "transformer"} <= set(text.split('"'))
    runs = json.loads(text)["runs"]  # torch's default thread count first, then 1 thread
    counts = [r["machine"]["torch_num_threads"] for r in runs]
    assert 1 in counts and len(counts) == len(set(counts))
    md = out.with_suffix(".md").read_text()
    assert md.startswith("# gradwatch collector overhead at")
    assert md.count("# gradwatch collector overhead at") == len(runs)
    assert "nonfinite_from_norms" in md and "nonfinite_fused_l0" not in md
    for run in runs:  # one gradwatch run through all blocks, flushed after each of its blocks
        for model in run["models"].values():
            assert model["steady"] is True
            assert model["catchup_ms"]["min"] >= 0.0
    assert "flushed after each of its blocks" in md


def test_variants_without_gradwatch_bypass_its_process_wide_wrappers(tmp_path: Path) -> None:
    """With one run attached through every block, gradwatch's backward tap and loss
    wrappers are installed process-wide: the plain variant and the lower bound must still
    run torch's own backward and loss (they stand for training without gradwatch)."""
    import collector_overhead as core
    import torch

    import gradwatch
    from gradwatch.hooks import backward as backward_tap

    work = core.make_workload("mlp", 4)
    states = core.make_variants(work, 4)
    gw = states["gradwatch"]
    seen: list[int] = []

    def count(root: torch.Tensor | None, took: float, tensor: torch.Tensor | None) -> None:
        seen.append(1)

    run = gradwatch.watch(gw.model, gw.optimizer, every=1, data_dir=tmp_path)
    backward_tap.install(count)
    try:
        x, y = work.batches[0]
        states["plain"].step_fn(0, x, y)
        states["lower_bound"].step_fn(0, x, y)
        assert seen == []  # neither went through the tap
        gw.step_fn(0, x, y)
        assert seen == [1]  # gradwatch's own variant does
    finally:
        backward_tap.uninstall(count)
        run.close()
