"""benchmarks/real_projects.py: its data stand-in, its injections and its verdicts, and one
real case end to end (the figures come from the full run under benchmarks/results/)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import real_projects as rp  # noqa: E402
import real_projects_cases as rc  # noqa: E402


def test_the_char_dataset_has_nanogpts_layout(tmp_path: Path) -> None:
    rc.write_char_dataset(tmp_path)
    meta = pickle.loads((tmp_path / "meta.pkl").read_bytes())
    train = np.fromfile(tmp_path / "train.bin", dtype=np.uint16)
    val = np.fromfile(tmp_path / "val.bin", dtype=np.uint16)
    assert 50 < meta["vocab_size"] < 128 and len(train) >= 9 * len(val) > 0
    assert int(train.max()) < meta["vocab_size"] and meta["itos"][meta["stoi"]["a"]] == "a"


def test_an_injection_that_no_longer_matches_stops_the_benchmark(tmp_path: Path) -> None:
    bug = rc.Bug("x", (("hf_trainer.py", "no such line\n", ""),), ("stale-grad",), step=1)
    case = rc.Case("hf-trainer", "c", ".", rc.HF_ARGV, "0", 400, bug=bug)
    with pytest.raises(SystemExit, match=r"no longer matches hf_trainer\.py"):
        rp.prepare(case, rc.SCRIPTS, tmp_path / "copy")


def test_each_scripted_injection_changes_its_copy(tmp_path: Path) -> None:
    for n, case in enumerate(
        c for c in rc.cases() if c.bug and c.project in ("hf-trainer", "lightning")
    ):
        copy = rp.prepare(case, rc.SCRIPTS, tmp_path / str(n))
        assert case.bug is not None
        for file, _, new in case.bug.patches:
            assert new in (copy / file).read_text()


def _finding(check: str, step: int | None, severity: str = "warning") -> dict[str, object]:
    return {"check": check, "step": step, "severity": severity, "source": "runtime", "message": "m"}


def test_verdicts() -> None:
    clean = rc.Case("lightning", "c", ".", rc.PL_ARGV, "0", 400)
    assert rp.judge(clean, [_finding("nondeterminism-risk", 0, "info")])["verdict"] == "quiet"
    assert rp.judge(clean, [_finding("exploding-grad", 57)])["verdict"] == "false alarm"
    lint = {**_finding("stale-grad", None, "error"), "source": "lint"}
    assert rp.judge(clean, [lint])["lint_alarms"] == ["stale-grad"]
    buggy = rc.Case("lightning", "c", ".", rc.PL_ARGV, "0", 400, bug=rc.PL_NAN_BATCH)
    assert rp.judge(buggy, [_finding("nonfinite-loss", 201, "error")])["verdict"] == "caught"
    assert rp.judge(buggy, [_finding("nonfinite-loss", 260, "error")])["verdict"] == "late"
    assert rp.judge(buggy, [_finding("loss-diverging", 201)])["verdict"] == "wrong check"
    assert rp.judge(buggy, [])["verdict"] == "missed"
    assert rp.judge(buggy, [], 1)["verdict"] == "script failed (1); missed"


def test_the_report_names_the_machine_and_its_load() -> None:
    import real_projects_report as report

    meta = {
        "command": "python benchmarks/real_projects.py",
        "commits": {"gradwatch": "0123456789abcdef"},
        "python": "3.11",
        "packages": {},
        "machine": "x86_64, 2 cores, load average (1 min) 3.5 at the start",
    }
    run = {"bug": None, "verdict": "quiet", "load_1min": 7.5, "label": "p/c/s/clean"}
    lines = report._machine(meta, [run, {**run, "load_1min": 12.0}])
    assert lines == [
        "Machine: x86_64, 2 cores, load average (1 min) 3.5 at the start; "
        "load average (1 min) as the runs ended: 7.5–12.",
        "",
    ]
    assert report._machine({}, [{"bug": None}]) == []


def test_one_lightning_case_runs_under_gradwatch_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    only = "lightning/mlp-steplr/seed=0/nan-in-batch-200"
    script = str(BENCHMARKS / "real_projects.py")
    cmd = [sys.executable, script, "--only", only, "--threads", "1", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (run,) = json.loads(out.read_text())["runs"]
    assert run["exit"] == 0 and run["steps"] == 400 and run["bug"] == "nan-in-batch-200"
    assert run["threads"] == 1
    assert run["verdict"] in ("caught", "late", "wrong check", "missed")
    assert (
        "| lightning | mlp-steplr | 0 | 400 | 400 | nan-in-batch-200 |"
        in out.with_suffix(".md").read_text()
    )
