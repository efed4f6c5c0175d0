"""The NaN-provenance overhead benchmark runs end to end (a smoke run; the figures come
from the full run, committed under benchmarks/results/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmarks.quick import quick_run


@pytest.mark.slow
def test_quick_run_writes_paired_differences(tmp_path: Path) -> None:
    out = tmp_path / "nan.json"
    quick_run("nan_origin_overhead.py", out)
    mlp = json.loads(out.read_text())["models"]["mlp"]
    assert mlp["rounds"] == 10 and isinstance(mlp["within_noise"], bool)
    low, high = mlp["on_minus_off_ci_ms"]
    assert low <= mlp["on_minus_off_ms"] <= high
    assert out.with_suffix(".md").read_text().startswith("# NaN provenance")
