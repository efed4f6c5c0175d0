"""Thread settings of the benchmarks (torch's default first) and the per-thread profile."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.benchmarks.quick import quick_run

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
import thread_settings


def test_settings_keep_their_order_and_run_each_count_once() -> None:
    cores = os.cpu_count() or 1
    counts = thread_settings.parse("default,1,all,1")
    assert counts[0] == thread_settings.DEFAULT
    assert set(counts) == {thread_settings.DEFAULT, 1, cores}
    assert len(counts) == len(set(counts))
    assert thread_settings.parse("3") == [3]
    assert "torch's default" in thread_settings.label(thread_settings.DEFAULT)


@pytest.mark.parametrize("bad", ["0", "two", "", "default,-1"])
def test_a_bad_setting_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="is not 'default', 'all' or a count"):
        thread_settings.parse(bad)


def test_thread_profile_reports_each_thread_group_per_setting(tmp_path: Path) -> None:
    out = tmp_path / "threads.json"
    quick_run("thread_profile.py", out)
    runs = json.loads(out.read_text())["runs"]
    counts = [r["machine"]["torch_num_threads"] for r in runs]
    assert counts[0] == thread_settings.DEFAULT and 1 in counts
    gradwatch = runs[-1]["models"]["mlp"]["gradwatch"]
    assert gradwatch["cpu_ms"]["training"] > 0
    assert "gradwatch-writer" in gradwatch["cpu_ms"]
    assert "gradwatch-writer" not in runs[-1]["models"]["mlp"]["plain"]["cpu_ms"]
    assert out.with_suffix(".md").read_text().count("# Per-thread CPU per step at") == len(runs)
