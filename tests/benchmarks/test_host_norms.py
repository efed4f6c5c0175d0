"""The host-norms benchmark runs end to end on the three models (the figures come from the
full run, committed under benchmarks/results/)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.benchmarks.quick import quick_run


def test_quick_run_times_both_variants_on_every_model(tmp_path: Path) -> None:
    out = tmp_path / "host.json"
    quick_run("host_norms.py", out)
    result = json.loads(out.read_text())
    assert set(result["models"]) == {"mlp", "cnn", "transformer"}
    assert result["kernel"].startswith("fused C kernel")
    for model in result["models"].values():
        for variant in ("kernel", "stock_ops"):
            times = model[variant]
            assert 0 < times["snapshot"] < times["both"] and 0 < times["norms"] < times["both"]
    assert out.with_suffix(".md").read_text().startswith("# Step statistics on the CPU")
